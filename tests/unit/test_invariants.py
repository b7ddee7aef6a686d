"""The invariant table of docs/architecture.md and the tests agree: every invariant the docs
state has tests marked with it (``@pytest.mark.invariant("I<n>")``, runnable alone with
``pytest --invariant I<n>``), and no test claims an invariant the docs do not state."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def documented() -> set[str]:
    text = (ROOT / "docs" / "architecture.md").read_text()
    return set(re.findall(r"^- \*\*(I\d+) ", text, re.M))


def marked() -> dict[str, set[str]]:
    """invariant → the test files that mark a test with it."""
    found: dict[str, set[str]] = {}
    for path in (ROOT / "tests").rglob("*.py"):
        for args in re.findall(r"@pytest\.mark\.invariant\(([^)]*)\)", path.read_text()):
            for name in re.findall(r'"(I\d+)"', args):
                found.setdefault(name, set()).add(path.relative_to(ROOT).as_posix())
    return found


def test_every_documented_invariant_has_marked_tests_and_every_mark_is_documented():
    docs, marks = documented(), marked()
    assert docs == {f"I{n}" for n in range(1, 14)}, "the docs state I1..I13"
    assert sorted(docs - set(marks), key=lambda s: int(s[1:])) == [], "invariants no test is marked with"
    assert sorted(set(marks) - docs) == [], "marks naming no documented invariant"


def test_the_docs_table_names_files_that_hold_marked_tests_of_each_invariant():
    text = (ROOT / "docs" / "architecture.md").read_text()
    table = text[text.index("## Invariants and their tests") :]
    marks = marked()
    for row in re.findall(r"^\| (I\d+(?:, I\d+)*) [^|]*\| ([^\n]*)\|$", table, re.M):
        names, cells = row[0].split(", "), row[1]
        cited = set(re.findall(r"`(tests/[\w/]+\.py)", cells))
        assert cited, f"the row of {names} cites no test file by path"
        for name in names:
            assert cited & marks.get(name, set()), f"{name}: the docs cite {sorted(cited)}, the marked tests are in {sorted(marks.get(name, set()))}"
