"""Realtime frames → commands, and committed events → GA server events the SDK's types accept."""

from __future__ import annotations

import base64
import itertools
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from openai.types.realtime import RealtimeServerEvent
from pydantic import TypeAdapter

from duplex_es.domain import AckPlayback, AppendAudio, CancelResponse, Code, CreateResponse, Invalid, TruncateItem, UpdateSession
from duplex_es.events import AudioFormat
from duplex_es.protocol import EXTENSION_EVENT_TYPES, parse_frame, split_server_event_seq
from duplex_es.protocol import project

from harness import Harness

SERVER_EVENT = TypeAdapter(RealtimeServerEvent)
_n = itertools.count()


def new_id(prefix: str) -> str:
    return f"{prefix}_{next(_n)}"


def parse(obj) -> object:
    return parse_frame(obj if isinstance(obj, (str, bytes)) else json.dumps(obj), new_id)


@pytest.mark.parametrize(
    "frame,code,param",
    [
        ("not json {", Code.INVALID_JSON, None),
        (b"\x00\x01binary", Code.BINARY_FRAME, None),
        ("[1, 2]", Code.INVALID_EVENT, None),
        ({"event_id": "e1"}, Code.MISSING_TYPE, "type"),
        ({"type": 5, "event_id": "e1"}, Code.MISSING_TYPE, "type"),
        ({"type": "no.such.thing", "event_id": "e1"}, Code.UNKNOWN_TYPE, "type"),
        ({"type": "input_audio_buffer.append", "event_id": "e1", "audio": "not base64!"}, Code.INVALID_AUDIO_BASE64, "audio"),
        ({"type": "input_audio_buffer.append", "event_id": "e1", "audio": "AAA"}, Code.INVALID_AUDIO_BASE64, "audio"),
        ({"type": "input_audio_buffer.append", "event_id": "e1", "audio": "AA=="[:3] + "B"}, Code.INVALID_AUDIO_BASE64, "audio"),
        ({"type": "input_audio_buffer.append", "event_id": "e1", "audio": "data:audio/pcm;base64,AAAA"}, Code.INVALID_AUDIO_BASE64, "audio"),
        ({"type": "input_audio_buffer.append", "event_id": "e1", "audio": "AAAA\nAAAA"}, Code.INVALID_AUDIO_BASE64, "audio"),
        ({"type": "input_audio_buffer.append", "event_id": "e1"}, Code.INVALID_EVENT, "audio"),
        ({"type": "input_audio_buffer.append", "event_id": "e1", "audio": 12}, Code.INVALID_EVENT, "audio"),
        ({"type": "session.update", "event_id": "e1", "session": {"type": "realtime", "bogus": 1}}, Code.INVALID_EVENT, "session.bogus"),
        ({"type": "session.update", "event_id": "e1", "session": {"type": "translation"}}, Code.INVALID_EVENT, "session.type"),
        ({"type": "session.update", "event_id": "e1", "session": {"instructions": 3}}, Code.INVALID_EVENT, "session.instructions"),
        ({"type": "conversation.item.truncate", "event_id": "e1", "item_id": "i", "audio_end_ms": "x"}, Code.INVALID_EVENT, "audio_end_ms"),
        ({"type": "conversation.item.truncate", "event_id": "e1", "audio_end_ms": 5}, Code.INVALID_EVENT, "item_id"),
        ({"type": "playback.ack", "event_id": "e1"}, Code.INVALID_EVENT, "played_ms"),
        ({"type": "playback.ack", "event_id": "e1", "played_ms": 1.5}, Code.INVALID_EVENT, "played_ms"),
        ({"type": "response.create", "event_id": "e1", "response": {"input": {"x": 1}}}, Code.INVALID_EVENT, "response.input"),
    ],
)
def test_malformed_frames_become_invalid_commands_with_specific_codes(frame, code, param):
    cmd = parse(frame)
    assert isinstance(cmd, Invalid), cmd
    assert cmd.code == code and cmd.param == param
    if isinstance(frame, dict) and isinstance(frame.get("event_id"), str):
        assert cmd.event_id == "e1"


def test_an_unparseable_frame_keeps_an_excerpt_for_debugging():
    cmd = parse('{"type": "input_audio_buffer.commit", oops}')
    assert cmd.code == Code.INVALID_JSON and cmd.excerpt.startswith('{"type"')


def test_well_formed_frames_become_commands():
    audio = base64.b64encode(b"\x01\x02" * 10).decode()
    app = parse({"type": "input_audio_buffer.append", "audio": audio, "event_id": "a", "expected_epoch": 0})
    assert isinstance(app, AppendAudio) and (app.event_id, app.audio, app.nbytes, app.expected_epoch) == ("a", audio, 20, 0)
    assert len({app.vad_ids.item_id, app.vad_ids.response_id, app.vad_ids.response_item_id, app.vad_ids.request_id}) == 4
    assert parse({"type": "response.cancel"}) == CancelResponse()
    assert parse({"type": "playback.ack", "played_ms": 300, "response_id": "r"}) == AckPlayback(response_id="r", played_ms=300)
    assert parse({"type": "conversation.item.truncate", "item_id": "i", "content_index": 0, "audio_end_ms": 40}) == TruncateItem(
        item_id="i", audio_end_ms=40
    )
    upd = parse(
        {
            "type": "session.update",
            "session": {
                "type": "realtime",
                "instructions": "hi",
                "output_modalities": ["text"],
                "tools": [],
                "audio": {"input": {"format": {"type": "audio/pcm", "rate": 24000}, "turn_detection": None}, "output": {"voice": "echo"}},
            },
        }
    )
    assert isinstance(upd, UpdateSession)
    p = upd.patch
    assert (p.instructions, p.output_modalities, p.voice, p.input_format, p.turn_detection) == (
        "hi", ("text",), "echo", AudioFormat(type="audio/pcm", rate=24000), None
    )
    cr = parse({"type": "response.create", "response": {"output_modalities": ["audio"], "metadata": {"a": "b"}}})
    assert isinstance(cr, CreateResponse) and cr.options.output_modalities == ("audio",)
    assert len({cr.response_id, cr.item_id, cr.request_id}) == 3


def test_every_projected_event_is_a_valid_sdk_server_event_with_log_derived_ids():
    """Drive a whole turn through the domain and check each wire event against the SDK's
    pydantic types (strict validation, not the SDK's lenient construct)."""
    h = Harness.open()
    from duplex_es.domain import AckPlayback as Ack, CancelResponse as Cancel, CloseSession, TruncateItem as Trunc, SessionPatch, UpdateSession as Upd
    from duplex_es.events import InputTranscript

    h.run(Upd(patch=SessionPatch(instructions="x")))
    rid = h.spoken_turn()
    h.output(text="You ", input_transcripts=(InputTranscript(item_id=h.state.last_user_item().id, transcript="hello"),))
    h.pump()
    h.output(text="said.", final=True)
    h.pump()
    item_id = h.state.responses[rid].item_id
    h.run(Ack(response_id=rid, played_ms=300))
    h.run(Trunc(item_id=item_id, audio_end_ms=400))
    h.run(Cancel(event_id="nothing-active"))
    h.spoken_turn()
    h.run(Cancel())
    h.run(CloseSession())
    from duplex_es.domain import SessionState, evolve

    state = SessionState()
    seen_types = set()
    for seq, ev in h.log:
        after = evolve(state, seq, ev)
        for k, wire in enumerate(project(state, seq, ev, after)):
            assert split_server_event_seq(wire["server_event_seq"]) == (seq, k)
            assert wire["event_id"] == f"event_{seq}_{k}"
            seen_types.add(wire["type"])
            if wire["type"] in EXTENSION_EVENT_TYPES:
                continue
            parsed = SERVER_EVENT.validate_python(wire)
            assert parsed.type == wire["type"]
        state = after
    assert {
        "session.created", "session.updated", "input_audio_buffer.committed", "conversation.item.added", "conversation.item.done",
        "response.created", "response.output_item.added", "response.content_part.added", "response.output_audio.delta",
        "response.output_audio_transcript.delta", "conversation.item.input_audio_transcription.completed",
        "response.output_audio.done", "response.output_audio_transcript.done", "response.content_part.done",
        "response.output_item.done", "response.done", "error", "conversation.item.truncated", "playback.acknowledged", "session.closed",
    } <= seen_types


@pytest.mark.parametrize(
    "frame,param,echo",
    [
        ('{"type":"input.text.append","event_id":"x1","text":"\\udc00"}', None, "x1"),
        ('{"type":"\\ud800","event_id":"x2"}', None, "x2"),
        ('{"type":"input_audio_buffer.clear","event_id":"n\\u0000"}', None, None),
        ('{"type":"input.text.append","event_id":"x3","text":"a\\u0000b"}', None, "x3"),
        ('{"type":"playback.ack","event_id":"x4","played_ms":1e300}', "played_ms", "x4"),
        ('{"type":"session.update","event_id":"x5","session":{"id":"sess_other"}}', "session.id", "x5"),
        ('{"type":"session.update","event_id":"x6","session":{"tools":"junk"}}', "session.tools", "x6"),
        ('{"type":"session.update","event_id":"x7","session":{"temperature":"hot"}}', "session.temperature", "x7"),
        ('{"type":"session.update","event_id":"x8","session":{"audio":{"output":{"speed":-5}}}}', "session.audio.output.speed", "x8"),
        ('{"type":"session.update","event_id":"x9","session":{"audio":{"input":{"transcription":5}}}}', "session.audio.input.transcription", "x9"),
        ('{"type":"response.create","event_id":"x10","response":{"metadata":"junk"}}', "response.metadata", "x10"),
    ],
)
def test_values_that_cannot_be_stored_or_have_the_wrong_type_are_refused(frame, param, echo):
    cmd = parse(frame)
    assert isinstance(cmd, Invalid) and cmd.code == Code.INVALID_EVENT, cmd
    assert cmd.param == param and cmd.event_id == echo
    # Whatever is logged about the refusal is storable text.
    for text in (cmd.message, cmd.excerpt or "", cmd.command_type or "", cmd.param or ""):
        assert "\x00" not in text
        text.encode("utf-8")


def test_unparseable_numbers_and_deep_nesting_are_invalid_json_with_a_clear_message():
    huge = parse('{"type":"playback.ack","event_id":"x","played_ms":' + "9" * 5000 + "}")
    assert huge.code == Code.INVALID_JSON and "cannot be parsed" in huge.message
    deep = parse('{"type":"input.text.append","text":' + "[" * 100_000 + "]" * 100_000 + "}")
    assert deep.code == Code.INVALID_JSON and "too deeply" in deep.message
    nul = parse("\x00garbage")
    assert nul.code == Code.INVALID_JSON and "\x00" not in nul.excerpt


def test_frame_size_counts_utf8_bytes():
    from duplex_es.protocol import MAX_FRAME_BYTES

    text = "€" * (MAX_FRAME_BYTES // 3 + 10)  # fewer characters than the limit, more bytes
    cmd = parse(json.dumps({"type": "input.text.append", "text": text}, ensure_ascii=False))
    assert isinstance(cmd, Invalid) and cmd.code == Code.FRAME_TOO_LARGE


def test_turn_signal_is_strict_about_its_envelope_and_unwraps_before_beta_translation():
    from duplex_es.domain import TurnSignal

    bad = parse({"type": "turn.signal", "event": "session.update", "foo": 1, "payload": {"session": {"instructions": "hi"}}})
    assert isinstance(bad, Invalid) and bad.param == "foo"
    for payload in (False, 0, [], 5):
        assert isinstance(parse({"type": "turn.signal", "event": "input.cancel", "payload": payload}), Invalid)
    assert isinstance(parse({"type": "turn.signal", "event": "user_started", "payload": {"x": 1}}), Invalid)
    assert parse({"type": "turn.signal", "event": "user_started"}) == TurnSignal(signal="user_started")
    beta = parse_frame(json.dumps({"type": "turn.signal", "event": "session.update", "payload": {"session": {"voice": "ash"}}}), new_id, dialect="beta")
    assert isinstance(beta, UpdateSession) and beta.patch.voice == "ash"


def test_unknown_audio_formats_are_named_as_sent():
    cmd = parse({"type": "session.update", "session": {"audio": {"input": {"format": {"type": "audio/opus"}}}}})
    assert cmd.code == Code.UNSUPPORTED_AUDIO_FORMAT and cmd.param == "session.audio.input.format.type" and "audio/opus" in cmd.message


def test_command_from_realtime_makes_its_own_ids_when_not_given_any():
    from duplex_es.protocol import command_from_realtime

    cmd = command_from_realtime({"type": "input_audio_buffer.commit"})
    assert cmd.item_id.startswith("item_") and len(cmd.item_id) == 21


def test_items_open_empty_and_done_events_carry_everything_generated():
    """The ``.done`` transcript joins the deltas even after a playback ack of 0 ms (the history
    is what changes); a new output item opens with no content."""
    from duplex_es.domain import AckPlayback as Ack, AppendText, Commit, SessionState, evolve
    from duplex_es.events import Mark

    h = Harness.open()
    h.run(AppendText(text="x"))
    h.run(Commit(item_id="u"))
    rid = h.spoken_turn()
    h.run(Ack(response_id=rid, played_ms=0))
    h.output(text="Alpha one.", marks=(Mark(text_chars=0, audio_ms=0),))
    h.pump()
    h.output(text="Bravo two.", new_item_id="item_second", marks=(Mark(text_chars=0, audio_ms=0),), final=True)
    h.pump()
    state, wires = SessionState(), []
    for seq, ev in h.log:
        after = evolve(state, seq, ev)
        wires += project(state, seq, ev, after)
        state = after
    opened = [w for w in wires if w["type"] in ("response.output_item.added", "conversation.item.added") and w["item"]["role"] == "assistant"]
    assert opened and all(w["item"]["content"] == [] for w in opened)
    done = [w["transcript"] for w in wires if w["type"] == "response.output_audio_transcript.done"]
    assert done == ["Alpha one.", "Bravo two."]
    items = [w["item"]["content"][0]["transcript"] for w in wires if w["type"] == "conversation.item.done" and w["item"]["role"] == "assistant"]
    assert items == ["", ""]  # the history: nothing was heard


def test_acknowledge_appends_is_a_boolean_session_option_and_acks_are_projected_only_when_on():
    from duplex_es.domain import AppendAudio as Append, SessionPatch, SessionState, evolve

    cmd = parse({"type": "session.update", "session": {"duplex": {"acknowledge_appends": True}}})
    assert isinstance(cmd, UpdateSession) and cmd.patch.acknowledge_appends is True
    for value in ("true", 1, None, []):
        bad = parse({"type": "session.update", "event_id": "e", "session": {"duplex": {"acknowledge_appends": value}}})
        assert isinstance(bad, Invalid) and (bad.code, bad.param, bad.event_id) == (Code.INVALID_EVENT, "session.duplex.acknowledge_appends", "e")
    h = Harness.open()
    [rejected] = h.run(UpdateSession(event_id="api", patch=SessionPatch(acknowledge_appends="yes")))  # the Python API
    assert rejected.TYPE == "command.rejected" and rejected.param == "session.duplex.acknowledge_appends"
    raw = base64.b64encode(b"\x01\x00" * 480).decode()  # 20 ms at 24 kHz
    h.run(Append(event_id="off", audio=raw, nbytes=960))
    h.run(UpdateSession(patch=SessionPatch(acknowledge_appends=True)))
    h.run(Append(event_id="on", audio=raw, nbytes=960))
    h.run(Append(audio=raw, nbytes=960))
    state, acks = SessionState(), []
    for seq, ev in h.log:
        after = evolve(state, seq, ev)
        acks += [w for w in project(state, seq, ev, after) if w["type"] == "input_audio_buffer.appended"]
        state = after
    assert [(a["client_event_id"], a["audio_start_ms"], a["audio_end_ms"]) for a in acks] == [("on", 20, 40), (None, 40, 60)]
    assert "input_audio_buffer.appended" in EXTENSION_EVENT_TYPES


_B64 = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/="


def _reference_strict_b64(text: str):
    """The definition: decodable with the alphabet checked, and the canonical encoding of
    its bytes."""
    import binascii

    try:
        raw = base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        return None
    return raw if base64.b64encode(raw).decode("ascii") == text else None


@settings(max_examples=3000, deadline=None)
@given(st.one_of(
    st.text(alphabet=_B64, max_size=16),
    st.text(alphabet=_B64 + " \n\t-_:.\x00é", max_size=12),
    st.binary(max_size=40).map(lambda b: base64.b64encode(b).decode()),
    st.tuples(st.binary(min_size=1, max_size=40), st.integers(0, 200), st.sampled_from(list(_B64 + " \n-_"))).map(
        lambda t: (lambda e: e[: t[1] % len(e)] + t[2] + e[t[1] % len(e) + 1 :])(base64.b64encode(t[0]).decode())
    ),
))
def test_the_fast_strict_base64_check_agrees_with_its_definition(text):
    from duplex_es.protocol.inbound import strict_b64decode

    assert strict_b64decode(text) == _reference_strict_b64(text)


def test_a_response_cut_short_by_expiry_keeps_a_ga_reason_and_carries_the_cause_in_status_details_error():
    """Clients accept only GA's reasons (the Agents SDK hung on another): the cause rides in
    ``status_details.error``, which the SDK's types validate."""
    from duplex_es.domain import Detach, Expire, SessionState, evolve

    h = Harness.open()
    h.spoken_turn()
    h.run(Detach(at_ms=1_000))
    h.run(Expire(reason="disconnect_grace_expired", now_ms=31_000, since_ms=1_000))
    state, done = SessionState(), None
    for seq, ev in h.log:
        after = evolve(state, seq, ev)
        done = next((w for w in project(state, seq, ev, after) if w["type"] == "response.done"), done)
        state = after
    assert done is not None
    details = SERVER_EVENT.validate_python(done).response.status_details
    assert (details.type, details.reason) == ("cancelled", "client_cancelled")
    assert (details.error.type, details.error.code) == ("session_ended", "session_expired")
    assert "disconnect grace" in details.error.message
