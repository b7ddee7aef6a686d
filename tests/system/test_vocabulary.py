"""The rest of the command vocabulary over a real WebSocket (issue 3, item 1): items, input
cancel, barge-in, output clear, turn signals, heartbeats, 16 kHz PCM, and the beta dialect."""

from __future__ import annotations

import pytest
from openai.types.beta.realtime import RealtimeServerEvent as BetaServerEvent
from openai.types.realtime import RealtimeServerEvent
from pydantic import TypeAdapter

from duplex_es.domain import Code
from duplex_es.protocol import EXTENSION_EVENT_TYPES

from test_speech_semantics import consistent, item_of, stack  # noqa: F401 - the shared fixture
from wsclient import WsClient, pcm_b64

GA = TypeAdapter(RealtimeServerEvent)


def _by_type(union) -> dict:
    """The union's member classes by their ``type`` literal (the beta union has no discriminator)."""
    import typing

    members = typing.get_args(typing.get_args(union)[0]) if typing.get_origin(union) is typing.Annotated else typing.get_args(union)
    return {typing.get_args(cls.model_fields["type"].annotation)[0]: cls for cls in members}


BETA = _by_type(BetaServerEvent)


@pytest.fixture
def client(stack):  # noqa: F811
    port, log = stack
    c = WsClient(port)
    yield c
    c.ws.close()


def test_items_are_created_where_asked_retrieved_and_deleted(client: WsClient, stack):  # noqa: F811
    port, log = stack
    client.say("one")
    first = client.state()["state"]["item_order"][0]
    client.send({"type": "conversation.item.create", "item": {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "last"}]}})
    last = client.recv("conversation.item.added", **{"item.content": [{"type": "input_text", "text": "last"}]})
    assert last["previous_item_id"] == first
    client.send({"type": "conversation.item.create", "previous_item_id": "root", "item": {"id": "item_sys", "type": "message", "role": "system", "content": [{"type": "input_text", "text": "Be brief."}]}})
    assert client.recv("conversation.item.added", **{"item.id": "item_sys"})["previous_item_id"] is None
    client.send({"type": "conversation.item.create", "previous_item_id": first, "item": {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "noted"}]}})
    middle = client.recv("conversation.item.added", **{"item.role": "assistant"})
    assert middle["previous_item_id"] == first
    order = client.state()["state"]["item_order"]
    assert order == ["item_sys", first, middle["item"]["id"], last["item"]["id"]]
    for bad, code, param in (
        ({"previous_item_id": "item_nope", "item": {"role": "user", "content": [{"type": "input_text", "text": "x"}]}}, Code.PREVIOUS_ITEM_NOT_FOUND, "previous_item_id"),
        ({"item": {"id": "item_sys", "role": "user", "content": [{"type": "input_text", "text": "x"}]}}, Code.ITEM_CREATE_DUPLICATE, "item.id"),
        ({"item": {"role": "assistant", "content": [{"type": "output_audio", "audio": "AAAA"}]}}, Code.TRUNCATE_UNSUPPORTED_CONTENT, "item.content[0].type"),
        ({"item": {"type": "mcp_call", "role": "user", "content": []}}, Code.INVALID_ITEM, "item.type"),
        ({"item": {"type": "function_call", "role": "user", "content": []}}, Code.INVALID_EVENT, "item.role"),
    ):
        client.send({"type": "conversation.item.create", "event_id": "bad", **bad})
        err = client.error()
        assert (err["code"], err["param"], err["event_id"]) == (code, param, "bad")
    client.send({"type": "conversation.item.retrieve", "item_id": "item_sys"})
    assert client.recv("conversation.item.retrieved")["item"]["content"] == [{"type": "input_text", "text": "Be brief."}]
    client.send({"type": "conversation.item.delete", "item_id": middle["item"]["id"]})
    client.recv("conversation.item.deleted")
    client.send({"type": "conversation.item.delete", "event_id": "gone", "item_id": middle["item"]["id"]})
    assert client.error()["code"] == Code.DELETE_INVALID_ITEM
    # A user item with audio, created directly, is answered like a committed one.
    client.send({"type": "conversation.item.create", "item": {"type": "message", "role": "user", "content": [{"type": "input_audio", "audio": pcm_b64(200)}]}})
    client.recv("conversation.item.added", **{"item.content": [{"type": "input_audio", "transcript": None}]})
    assert client.respond()["status"] == "completed"
    consistent(client, log)


def test_input_cancel_barge_in_and_output_clear(client: WsClient, stack):  # noqa: F811
    port, log = stack
    client.send({"type": "input_audio_buffer.append", "audio": pcm_b64(300)})
    client.send({"type": "input.cancel"})
    client.recv("input_audio_buffer.cleared")
    assert client.state()["state"]["buffer"]["samples"] == 0
    client.send({"type": "barge_in", "event_id": "b0"})
    assert client.error()["code"] == Code.CANCEL_NOT_ACTIVE
    client.say("a long answer about the weather in Lisbon tomorrow afternoon")
    client.send({"type": "response.create"})
    client.recv("response.output_audio.delta")
    client.send({"type": "barge_in"})
    done = client.recv("response.done")["response"]
    assert (done["status"], done["status_details"]["reason"]) == ("cancelled", "turn_detected")
    client.say("again, about Porto and the rain that will fall there")
    client.send({"type": "response.create"})
    # Cleared right behind the request (one connection's commands are decided in order), so the
    # response is still generating: waiting for its first delta first let a loaded machine's
    # engine finish it, and a finished answer's clear is refused once it has played out.
    client.send({"type": "output_audio_buffer.clear"})
    first = done["id"]
    rid = next(r for r in iter(lambda: client.recv("response.created")["response"]["id"], None) if r != first)
    # The barge-in above may have cleared the first response's output too: wait for this one's.
    assert client.recv("output_audio_buffer.cleared", response_id=rid)["response_id"] == rid
    done = client.recv("response.done", **{"response.id": rid})["response"]
    # GA's reason (clients validate the enum); the cause is on the log's epoch.advanced.
    assert (done["status"], done["status_details"]["reason"]) == ("cancelled", "client_cancelled")
    epoch = client.state()["state"]["epoch"]
    assert epoch == 2  # each cancel path raised the epoch
    client.send({"type": "input_audio_buffer.clear", "event_id": "old", "expected_epoch": 0})
    err = client.error()
    assert (err["code"], err["param"], err["event_id"]) == (Code.STALE_FENCE, "expected_epoch", "old")
    client.send({"type": "input_audio_buffer.clear", "expected_epoch": epoch})
    client.recv("input_audio_buffer.cleared")
    consistent(client, log)


def test_turn_signals_and_heartbeats_are_acknowledged_and_logged(client: WsClient, stack):  # noqa: F811
    port, log = stack
    client.send({"type": "turn.signal", "event": "user_started"})
    assert client.recv("turn.event")["event"] == "user_started"
    client.send({"type": "turn.signal", "event": "nonsense", "event_id": "t"})
    err = client.error()
    assert (err["code"], err["event_id"]) == (Code.INVALID_TURN_SIGNAL, "t")
    # A turn.signal that names a command is that command (vLLM-Omni's generic channel).
    client.send({"type": "input_audio_buffer.append", "audio": pcm_b64(200)})
    client.send({"type": "turn.signal", "event": "input.cancel"})
    client.recv("input_audio_buffer.cleared")
    client.send({"type": "session.heartbeat", "event_id": "hb"})
    client.recv("session.heartbeat_ack")
    types = [r.event.TYPE for r in log.read_session(client.session_id)]
    assert "turn.signaled" in types and "session.heartbeat" in types
    consistent(client, log)


def test_a_16khz_pcm_session_answers_at_16khz(client: WsClient, stack):  # noqa: F811
    port, log = stack
    cfg = client.update({"audio": {"input": {"format": {"type": "audio/pcm", "rate": 16000}}, "output": {"format": {"type": "audio/pcm", "rate": 16000}}}})
    assert cfg["audio"]["output"]["format"] == {"type": "audio/pcm", "rate": 16000}
    client.send({"type": "input_audio_buffer.append", "audio": pcm_b64(90)})  # 24 kHz-sized bytes: 135 ms at 16 kHz
    client.send({"type": "input_audio_buffer.commit"})
    committed = client.recv("input_audio_buffer.committed")
    assert client.state()["state"]["items"][committed["item_id"]]["input_samples"] == 90 * 24
    client.say("sixteen")
    done = client.respond()
    audio = client.audio_of(done["id"])
    generated = client.state()["state"]["items"][item_of(done)["id"]]
    assert generated["audio_format"] == {"type": "audio/pcm", "rate": 16000} and generated["audio_samples"] * 2 == len(audio)
    assert 700 < len(audio) // 32 < 3000  # ms at 32 bytes/ms
    consistent(client, log)


def test_every_event_a_session_produces_is_a_valid_sdk_event(client: WsClient, stack):  # noqa: F811
    port, log = stack
    client.say("Good morning. See you later.")
    done = client.respond()
    client.send({"type": "playback.ack", "response_id": done["id"], "played_ms": 100})
    client.recv("playback.acknowledged")
    client.send({"type": "conversation.item.truncate", "item_id": item_of(done)["id"], "content_index": 0, "audio_end_ms": 50})
    client.recv("conversation.item.truncated")
    client.send({"type": "conversation.item.retrieve", "item_id": item_of(done)["id"]})
    client.recv("conversation.item.retrieved")
    client.send({"type": "response.cancel"})
    client.error()
    for ev in client.events:
        if ev["type"] not in EXTENSION_EVENT_TYPES:
            assert GA.validate_python(ev).type == ev["type"]


def test_a_beta_client_gets_beta_event_names_and_shapes(stack):  # noqa: F811
    port, log = stack
    c = WsClient(port, beta=True, model="gpt-4o-realtime-preview")  # the beta types pin model names
    c.send({"type": "session.update", "session": {"modalities": ["text", "audio"], "voice": "alloy", "input_audio_format": "pcm16", "output_audio_format": "pcm16", "turn_detection": None, "instructions": "hi"}})
    session = c.recv("session.updated")["session"]
    assert session["modalities"] == ["text", "audio"] and session["output_audio_format"] == "pcm16"
    c.say("beta")
    c.send({"type": "response.create", "response": {"modalities": ["text", "audio"]}})
    c.recv("response.done")
    types = {e["type"] for e in c.events}
    assert {"response.audio.delta", "response.audio_transcript.delta", "response.audio.done", "conversation.item.created"} <= types
    assert not types & {"response.output_audio.delta", "conversation.item.added", "conversation.item.done"}
    for ev in c.events:
        if ev["type"] not in EXTENSION_EVENT_TYPES:
            assert BETA[ev["type"]].model_validate(ev).type == ev["type"]
    consistent(c, log)
    c.close()
