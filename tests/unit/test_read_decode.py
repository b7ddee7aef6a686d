"""The read path's faster decoding (docs/performance.md, "Read path") reads every stored text to
what the standard library's path read: the same values, the same events, the same errors; and
the collector pause around bulk decoding always gives the collector back."""

from __future__ import annotations

import gc
import json
import random
import threading
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from duplex_es.events import decode, encode, registry, to_plain
from duplex_es.events.codec import EventDecodeError, _typed, converter, decode_data, parse_json
from duplex_es.store.gcpause import collector_paused

from tests.harness import random_session

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
        assert _alike(ours, _standard(row["type"], stored)) and type(ours) is cls
        type_, version, text = encode(ours)  # fields added since the corpus was made included
        assert _alike(decode(type_, version, text), _standard(type_, text)) and ours == _standard(type_, text)
        types.add(row["type"])
    assert len(rows) > 500 and len(types) >= 25, (len(rows), sorted(types))
    # Most of them went the typed path (it is not a path nothing takes).
    typed = {t for t in types if _typed(registry()[t]) is not None}
    assert len(typed) >= len(types) - 3, sorted(types - typed)


def _alike(a: object, b: object) -> bool:
    """Events of one class with the same values of the same types in every field, all the way
    down (a NaN alike with a NaN)."""
    return type(a) is type(b) and same(to_plain(a), to_plain(b))


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 2**32 - 1))
def test_every_event_of_random_sessions_decodes_to_what_the_standard_path_decodes(seed):
    for _, ev in random_session(random.Random(seed), 80):
        type_, version, text = encode(ev)
        ours = decode(type_, version, text)
        assert _alike(ours, _standard(type_, text)) and ours == ev


# What the typed decoder refuses (values of another type that cattrs converts, integers beyond
# 64 bits, non-finite numbers, lone surrogates) or reads on its own terms (an int for a float,
# a repeated key, an unknown key): the decoded event is the one the standard path gives.
@pytest.mark.parametrize(
    "text",
    [
        '{"audio":"AAAA","samples":"480","start_sample":0}',
        '{"audio":"AAAA","samples":true,"start_sample":0}',
        '{"audio":"AAAA","samples":480.0,"start_sample":0}',
        '{"audio":"AAAA","samples":123456789012345678901234567890,"start_sample":0}',
        '{"audio":5,"samples":480,"start_sample":0}',
        '{"audio":"\\ud800","samples":480,"start_sample":0}',
        '{"audio":"AAAA","samples":480,"start_sample":0,"samples":960}',
        '{"audio":"AAAA","samples":480,"start_sample":0,"unknown":[1,2]}',
        '{"audio":"AAAA","samples":480,"start_sample":0,"vad":{"frame_energy":0,"speaking":true}}',
        '{"audio":"AAAA","samples":480,"start_sample":0,"vad":{"frame_energy":NaN}}',
        '{"audio":"AAAA","samples":480,"start_sample":0,"vad":{"frame_energy":1e400}}',
    ],
)
def test_values_the_typed_decoder_refuses_or_converts_decode_as_the_standard_path_decodes_them(text):
    ours = decode("input_audio_buffer.appended", 1, text)
    assert _alike(ours, _standard("input_audio_buffer.appended", text))


def test_data_neither_path_can_read_is_refused_with_the_standard_paths_error():
    text = '{"audio":"AAAA","samples":[1],"start_sample":0}'
    with pytest.raises(EventDecodeError) as ours:
        decode("input_audio_buffer.appended", 1, text)
    with pytest.raises(EventDecodeError) as standard:
        decode_data("input_audio_buffer.appended", 1, json.loads(text))
    assert ours.value.reason == "bad_data" and str(ours.value) == str(standard.value)


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
