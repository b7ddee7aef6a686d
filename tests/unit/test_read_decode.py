"""The read path's faster decoding (docs/performance.md, "Read path") reads every stored text to
what the standard library's path read: the same values, the same events, the same errors; and
the collector pause around bulk decoding always gives the collector back."""

from __future__ import annotations

import gc
import json
import threading
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from duplex_es.events import decode, encode, registry
from duplex_es.events.codec import EventDecodeError, converter, parse_json
from duplex_es.store.gcpause import collector_paused

CORPUS = Path(__file__).resolve().parents[1] / "corpus"


def same(a: object, b: object) -> bool:
    """Equal with the same types all the way down (``1 == 1.0`` and ``0.0 == -0.0`` are not
    the same value for an event), dict keys in the same order."""
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return list(a) == list(b) and all(same(a[k], b[k]) for k in a)  # type: ignore[index]
    if isinstance(a, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))  # type: ignore[arg-type]
    if isinstance(a, float):
        return repr(a) == repr(b)
    return a == b


_JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()  # beyond 64 bits too: a 64-bit parser would turn them into floats
    | st.floats()  # NaN and infinities too: the standard library writes and reads them
    | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12,
)


@settings(max_examples=400, deadline=None)
@given(value=_JSON, ascii_only=st.booleans())
def test_any_json_text_parses_to_what_json_loads_gives(value, ascii_only):
    text = json.dumps(value, ensure_ascii=ascii_only)
    assert same(parse_json(text), json.loads(text))


@pytest.mark.parametrize(
    "text",
    [
        "123456789012345678901234567890",
        "-9223372036854775809",
        "18446744073709551616",
        "[NaN, Infinity, -Infinity]",
        "1e400",
        "-1e-400",
        '"\\ud800 lone surrogate"',
        '{"a": 1, "a": 2}',
        '{"b": 1, "a": {"d": [1.5, -0.0, 2e-308]}}',
        '"caf\\u00e9 \u00e9"',
    ],
)
def test_texts_a_strict_parser_reads_differently_parse_as_json_loads_parses_them(text):
    assert same(parse_json(text), json.loads(text))


@pytest.mark.parametrize("text", ["", "{not json", '{"a": 1}x', '{"a": }', '["a\tb"]', "\ufeff{}", "[1,]"])
def test_text_that_is_not_json_fails_with_the_standard_librarys_error(text):
    with pytest.raises(json.JSONDecodeError) as ours:
        parse_json(text)
    with pytest.raises(json.JSONDecodeError) as stdlib:
        json.loads(text)
    assert str(ours.value) == str(stdlib.value)


def test_a_stored_event_that_is_not_json_is_refused_with_the_message_it_always_had():
    with pytest.raises(EventDecodeError) as err:
        decode("session.heartbeat", 1, "{not json")
    assert err.value.reason == "bad_data"
    assert str(err.value) == "cannot decode event 'session.heartbeat' v1: bad_data Expecting property name enclosed in double quotes: line 1 column 2 (char 1)"


def _corpus_rows() -> list[dict]:
    return [json.loads(line) for path in sorted(CORPUS.glob("*.jsonl")) for line in path.read_text().splitlines() if line.strip()]


def _standard(type_: str, text: str) -> object:
    """The decoding before docs/performance.md's "Read path": ``json.loads`` and
    ``converter.structure``."""
    return converter.structure(json.loads(text), registry()[type_])


def test_every_recorded_event_decodes_to_what_the_standard_path_decodes():
    """Every event of the recorded corpus (real sessions of every kind), as it was stored and
    as today's encoder writes it: ``decode`` gives the event the standard path gave."""
    rows = _corpus_rows()
    types = set()
    for row in rows:
        stored = json.dumps(row["event"], sort_keys=True, separators=(",", ":"), ensure_ascii=False)
        cls = registry()[row["type"]]
        assert row["version"] == cls.VERSION
        ours = decode(row["type"], row["version"], stored)
        assert ours == _standard(row["type"], stored) and type(ours) is cls
        type_, version, text = encode(ours)  # fields added since the corpus was made included
        assert decode(type_, version, text) == _standard(type_, text) == ours
        types.add(row["type"])
    assert len(rows) > 500 and len(types) >= 25, (len(rows), sorted(types))


def test_the_collector_is_paused_inside_and_back_after_nested_and_failing_pauses():
    assert gc.isenabled()
    with collector_paused():
        assert not gc.isenabled()
        with pytest.raises(RuntimeError):
            with collector_paused():
                raise RuntimeError("a row that does not decode")
        assert not gc.isenabled()  # the outer pause still holds
    assert gc.isenabled()
    with collector_paused(False):
        assert gc.isenabled()


def test_a_collector_the_application_turned_off_stays_off():
    gc.disable()
    try:
        with collector_paused():
            assert not gc.isenabled()
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_overlapping_pauses_in_threads_give_the_collector_back_when_the_last_ends():
    first_in, second_in, first_out = threading.Event(), threading.Event(), threading.Event()
    seen: list[bool] = []

    def first() -> None:
        with collector_paused():
            first_in.set()
            second_in.wait(10)
        first_out.set()

    def second() -> None:
        first_in.wait(10)
        with collector_paused():
            second_in.set()
            first_out.wait(10)
            seen.append(gc.isenabled())  # the first pause ended, this one still holds

    threads = [threading.Thread(target=first), threading.Thread(target=second)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(20)
    assert seen == [False] and gc.isenabled()
