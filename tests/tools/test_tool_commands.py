"""The tooling (``duplex_es_tools``) is outside the runtime, and ``duplex-es`` still runs it:
``demo``, ``chaos``, ``bench`` and ``loadgen`` are found through the entry-point group
``duplex_es.commands``, and without the tooling or the modules of its extra ``tools`` each fails
at once with one line naming the extra (exit 2, no traceback) while the runtime's commands work.

A missing module is simulated honestly, in a fresh interpreter: ``sys.modules[name] = None``
makes both ``import name`` and ``importlib.util.find_spec(name)`` fail as if it were not
installed.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from importlib.metadata import EntryPoint
from pathlib import Path
from typing import Any

import pytest

from duplex_es.cli import discovery
from duplex_es.cli.discovery import ENTRY_POINT_GROUP, ToolCommand
from duplex_es.cli.main import build_parser, main

HINT = "pip install 'duplex-es[tools]'"


def _run_without(modules: list[str], argv: list[str], cwd: Path) -> subprocess.CompletedProcess:
    """``duplex-es ARGV`` in a new interpreter in which ``modules`` cannot be imported."""
    code = (
        "import sys\n"
        f"for name in {modules!r}: sys.modules[name] = None\n"
        "from duplex_es.cli.main import main\n"
        f"sys.exit(main({argv!r}))\n"
    )
    return subprocess.run([sys.executable, "-c", code], cwd=cwd, capture_output=True, text=True, timeout=120)


def test_the_tool_commands_come_from_the_entry_points():
    parser = build_parser()
    args = parser.parse_args(["loadgen", "--sessions", "3", "--json"])
    assert (args.command, args.sessions, args.json) == ("loadgen", 3, True)
    assert not getattr(args, "unavailable", False)
    args = parser.parse_args(["bench", "--quick", "--rows", "1,extras"])
    assert (args.quick, args.rows) == (True, "1,extras")


@pytest.mark.parametrize(
    "missing, argv",
    [
        (["eventsourcing"], ["bench", "--quick", "--backend", "sqlite", "--out", "out"]),
        (["hdrh"], ["bench", "--quick", "--backend", "sqlite", "--out", "out"]),
        (["openai"], ["demo", "--out", "out"]),
        (["openai"], ["chaos", "--kills", "1", "--out", "out"]),
    ],
)
def test_a_tool_without_its_extra_says_which_to_install(tmp_path: Path, missing: list[str], argv: list[str]):
    done = _run_without(missing, argv, tmp_path)
    output = done.stdout + done.stderr
    assert done.returncode == 2, output
    assert f"duplex-es {argv[0]}: needs the module {missing[0]}, not installed" in output and HINT in output, output
    assert "Traceback" not in output
    assert not (tmp_path / "out").exists(), "it stopped before doing anything"


def test_without_the_tooling_its_commands_say_what_to_install_and_the_runtime_still_works(tmp_path: Path):
    for argv in (["bench", "--quick"], ["chaos", "--kills", "3", "--seed", "2"], ["demo"], ["loadgen", "--ramp"]):
        done = _run_without(["duplex_es_tools"], argv, tmp_path)
        output = done.stdout + done.stderr
        assert done.returncode == 2 and HINT in output and "Traceback" not in output, output
        assert f"duplex-es {argv[0]}: could not be loaded" in output, output
    done = _run_without(["duplex_es_tools"], ["db", "upgrade", "--db", f"sqlite:///{tmp_path / 'runtime.db'}"], tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr


def test_without_entry_points_the_tool_commands_still_exist_and_say_what_to_install(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture):
    # The install predates the entry-point group, or the tooling is not in it.
    monkeypatch.setattr(discovery, "entry_points", lambda group: [])
    assert main(["chaos", "--kills", "3"]) == 2
    out = capsys.readouterr().err  # errors go to stderr
    assert "duplex-es chaos: comes with duplex_es's tooling" in out and HINT in out
    with pytest.raises(SystemExit) as exc:  # a runtime command still refuses what it does not know
        main(["sessions", "--kills", "3"])
    assert exc.value.code == 2


# A command of another package, whose run stops on a module its ``requires`` did not list.
def _unlisted(args: argparse.Namespace, console: Any) -> int:
    import a_module_nobody_installed  # noqa: F401

    return 0


def _broken(args: argparse.Namespace, console: Any) -> int:
    import duplex_es.a_module_that_does_not_exist  # noqa: F401

    return 0


UNLISTED = ToolCommand(help="needs a module it does not declare", add_arguments=lambda p: None, run=_unlisted, extra="extras-of-it")
BROKEN = ToolCommand(help="imports a module of the project that is not there", add_arguments=lambda p: None, run=_broken)


def test_a_module_missing_mid_run_names_the_extra_but_a_bug_of_the_project_is_not_hidden(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture):
    entries = [EntryPoint(name, f"{__name__}:{attr}", ENTRY_POINT_GROUP) for name, attr in (("unlisted", "UNLISTED"), ("broken", "BROKEN"))]
    monkeypatch.setattr(discovery, "entry_points", lambda group: entries if group == ENTRY_POINT_GROUP else [])
    assert main(["unlisted"]) == 2
    out = capsys.readouterr().err  # errors go to stderr
    assert "duplex-es unlisted: needs the module a_module_nobody_installed, not installed" in out
    assert "pip install 'duplex-es[extras-of-it]'" in out
    with pytest.raises(ModuleNotFoundError, match="duplex_es.a_module_that_does_not_exist"):
        main(["broken"])
