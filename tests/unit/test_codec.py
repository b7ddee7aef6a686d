"""The event catalogue and its codec: every type has a stable name and version and round-trips."""

from __future__ import annotations

import base64
import json
import typing

import attrs
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from duplex_es.events import (
    AudioAppended,
    EventDecodeError,
    HeartbeatReceived,
    Mark,
    TextAppended,
    TickOutput,
    UnitOutput,
    decode,
    encode,
    register_upcaster,
    registry,
)
from duplex_es.events import codec
from duplex_es.events.audio import audio_bytes
from duplex_es.events.codec import encode_row

TYPES = sorted(registry().items())


def test_every_type_has_a_unique_wire_name_and_a_version():
    names = [cls.TYPE for _, cls in TYPES]
    assert len(names) == len(set(names)) >= 16
    for name, cls in TYPES:
        assert cls.TYPE == name and cls.VERSION >= 1
        assert attrs.has(cls) and cls.__attrs_attrs__  # frozen attrs classes with fields


# Floats in events are finite: NaN equals nothing, itself included, and the deciders never log
# one (every float field has a range that refuses it). Nested fields too, hence the registration.
st.register_type_strategy(float, st.floats(allow_nan=False, allow_infinity=False))

# Settings kept as the client sent them are JSON values (typed ``Any``): draw JSON.
_JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**53), 2**53) | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
    max_leaves=6,
)


def _strategy(tp):
    """A strategy for ``tp`` that draws JSON wherever the catalogue says ``Any`` (hypothesis
    cannot be taught ``Any`` by registration)."""
    if tp is typing.Any:
        return _JSON
    if attrs.has(tp):
        hints = typing.get_type_hints(tp)
        return st.builds(tp, **{f.name: _strategy(hints[f.name]) for f in attrs.fields(tp) if f.init})
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin is typing.Union:
        return st.one_of(*[_strategy(a) for a in args])
    if origin is tuple:
        if len(args) == 2 and args[1] is Ellipsis:
            return st.lists(_strategy(args[0]), max_size=3).map(tuple)
        return st.tuples(*[_strategy(a) for a in args])
    if origin is dict:
        return st.dictionaries(_strategy(args[0]), _strategy(args[1]), max_size=3)
    return st.from_type(tp)


@pytest.mark.parametrize("name,cls", TYPES, ids=[n for n, _ in TYPES])
@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_every_type_round_trips(name, cls, data):
    event = data.draw(_strategy(cls))
    type_, version, text = encode(event)
    assert (type_, version) == (name, cls.VERSION)
    assert decode(type_, version, text) == event
    # Canonical: the same event always encodes to the same bytes (the hash chain relies on it).
    assert encode(decode(type_, version, text))[2] == text
    assert json.loads(text) == json.loads(json.dumps(json.loads(text), sort_keys=True))


def test_unknown_type_and_future_version_are_errors_naming_the_type():
    with pytest.raises(EventDecodeError) as e1:
        decode("no.such.event", 1, "{}")
    assert e1.value.reason == "unknown_type" and "no.such.event" in str(e1.value)
    good = TickOutput(session_id="s", request_id="r", response_id="x", epoch=0, chunk_index=0)
    type_, version, text = encode(good)
    with pytest.raises(EventDecodeError) as e2:
        decode(type_, version + 1, text)
    assert e2.value.reason == "future_version"
    with pytest.raises(EventDecodeError) as e3:
        decode(type_, version, '{"session_id": 5}')
    assert e3.value.reason == "bad_data"


def test_an_upcaster_turns_an_old_shape_into_the_current_one(monkeypatch):
    # Pretend tick.output is at v2 and v1 lacked "engine"; the registered step fills it in.
    monkeypatch.setattr(TickOutput, "VERSION", 2)
    monkeypatch.setattr(codec, "_UPCASTERS", dict(codec._UPCASTERS))
    register_upcaster("tick.output", 1, lambda d: {**d, "engine": "legacy-v1"})
    old = {"session_id": "s", "request_id": "r", "response_id": "x", "epoch": 0, "chunk_index": 2,
           "marks": [{"text_chars": 1, "audio_ms": 5}]}
    ev = decode("tick.output", 1, json.dumps(old))
    assert ev.engine == "legacy-v1" and ev.chunk_index == 2 and ev.marks == (Mark(text_chars=1, audio_ms=5),)
    with pytest.raises(ValueError):
        register_upcaster("tick.output", 1, lambda d: d)


def test_a_config_stored_before_acknowledge_appends_existed_decodes_with_it_off():
    """Adding a field with a default to a logged value class needs no version bump: rows
    written before it lack the key and decode with the default (and their stored bytes, which
    the hash chain covers, are never re-encoded)."""
    from duplex_es.events import SessionOpened, SessionUpdated

    config = {"input_format": {"rate": 24000, "type": "audio/pcm"}, "instructions": "", "model": "m",
              "output_format": {"rate": 24000, "type": "audio/pcm"}, "output_modalities": ["audio"],
              "transcript_on_truncate": "heard_prefix", "turn_detection": None, "voice": "alloy"}
    opened = decode("session.opened", 1, json.dumps({"session_id": "s", "config": config, "resume_token_hash": None}))
    updated = decode("session.updated", 1, json.dumps({"client_event_id": "e", "config": config, "model_relevant": False}))
    assert isinstance(opened, SessionOpened) and isinstance(updated, SessionUpdated)
    assert opened.config.acknowledge_appends is False and updated.config.acknowledge_appends is False
    assert (SessionOpened.VERSION, SessionUpdated.VERSION) == (1, 1)


# ------------------------------------------------------------------------ audio as bytes (row)

_AUDIO_TEXT = st.one_of(
    st.binary(max_size=64).map(lambda b: base64.b64encode(b).decode()),  # canonical
    st.binary(min_size=1, max_size=64).map(lambda b: base64.b64encode(b).decode().rstrip("=")),  # unpadded
    st.binary(min_size=1, max_size=64).map(lambda b: base64.encodebytes(b).decode()),  # with line breaks
    st.text(max_size=40),  # anything at all
)


@settings(max_examples=300, deadline=None)
@given(audio=_AUDIO_TEXT, cls=st.sampled_from(["append", "tick_output", "unit_output"]))
def test_an_event_with_audio_round_trips_through_the_stored_row_whatever_its_audio_text(audio, cls):
    """``encode_row`` moves canonical base64 into the payload as bytes and leaves any other text
    in the JSON; ``decode`` of the row gives back the event exactly."""
    ev = {
        "append": lambda: AudioAppended(audio=audio, samples=3, start_sample=7),
        "tick_output": lambda: TickOutput(session_id="s", request_id="r", response_id="p", epoch=0, chunk_index=1, audio=audio),
        "unit_output": lambda: UnitOutput(session_id="s", request_id="r", epoch=0, chunk_index=2, audio=audio),
    }[cls]()
    type_, version, data, payload = encode_row(ev)
    assert decode(type_, version, data, payload) == ev
    if payload is not None:
        assert base64.b64encode(payload).decode() == audio and json.loads(data)["audio"] == ""
    else:
        assert (type_, version, data) == encode(ev)


def test_events_without_audio_in_a_payload_are_stored_as_before():
    for ev in (TextAppended(text="hi"), HeartbeatReceived()):
        assert encode_row(ev) == (*encode(ev), None)


def test_a_payload_on_an_event_that_keeps_none_or_beside_audio_in_the_json_is_bad_data():
    with pytest.raises(EventDecodeError) as err:
        decode("input.text.appended", 1, encode(TextAppended(text="hi"))[2], b"\x00")
    assert err.value.reason == "bad_data"
    with pytest.raises(EventDecodeError) as err:
        decode(*encode(AudioAppended(audio="AAAA", samples=2, start_sample=0)), b"\x00\x00\x00")
    assert err.value.reason == "bad_data"


@settings(max_examples=300, deadline=None)
@given(text=_AUDIO_TEXT | st.text(alphabet="AQIDBw=+/\n ", max_size=24))
def test_logged_audio_reads_as_the_standard_library_reads_it_whatever_its_text(text):
    """``audio_bytes`` (replay, export, the inspector) takes canonical base64 the fast way and
    anything else — padding in the middle, line breaks — as ``base64.b64decode`` always did
    (found by a break-it run: ``AQI=BQYHCAkK`` made an old log's overview fail)."""
    ev = AudioAppended(audio=text, samples=1, start_sample=0)
    try:
        expected = base64.b64decode(text)
    except ValueError:  # binascii.Error: the standard library refuses it too
        with pytest.raises(ValueError):
            audio_bytes(ev)
        return
    assert audio_bytes(ev) == expected
