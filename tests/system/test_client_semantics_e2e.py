"""Issue 10 over a real WebSocket against real ``serve`` + ``worker`` processes, on SQLite and on
PostgreSQL: input transcription run by workers (with no response, and with a response cancelled
before it says anything), a transcription session, items that hold exactly what was streamed,
metadata and usage on the wire, the model map, the idle timeout, and vLLM-Omni's ``input.commit``.
Every scenario ends with a clean audit and replay = live state."""

from __future__ import annotations

import base64
import json
from urllib.parse import urlencode

import pytest
from websockets.sync.client import connect

from duplex_es.domain import Code
from duplex_es.events import TranscriptionCompleted, TranscriptionRequested

from conftest import backend_url
from servers import running
from test_speech_semantics import consistent, item_of
from wsclient import WsClient

from clients_support import silence, speech


@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
def stack(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory):
    """A server (serving two model names of one engine) and a worker, on each backend."""
    from duplex_es.store import Database, EventLog

    folder = tmp_path_factory.mktemp(request.param)
    with backend_url(request.param, folder) as url:
        models = ["--model", "gpt-realtime=duplex-es-echo", "--model", "gpt-realtime-2.1=duplex-es-echo", "--model", "omni=gpu-omni"]
        with running(url, folder, server_args=models, worker_args=["--chunk-ms", "250"]) as (port, _server, _workers):
            db = Database(url)
            yield port, EventLog(db)
            db.dispose()


def client(port: int, **kw) -> WsClient:
    return WsClient(port, model="gpt-realtime", **kw)


def stream(c: WsClient, pcm: bytes, chunk: int = 4800) -> None:
    for i in range(0, len(pcm), chunk):
        c.send({"type": "input_audio_buffer.append", "audio": base64.b64encode(pcm[i : i + chunk]).decode()})


def test_every_committed_turn_is_transcribed_with_no_response_and_with_a_cancelled_one(stack):
    port, log = stack
    c = client(port)
    c.update({"audio": {"input": {"transcription": {"model": "gpt-4o-mini-transcribe", "language": "en"}, "turn_detection": {"type": "server_vad", "create_response": False}}}})
    # A turn that gets no response: server VAD commits it, a worker transcribes it.
    stream(c, speech("weather_question_24k.wav") + silence(1.0))
    item = c.recv("input_audio_buffer.committed")["item_id"]
    delta = c.recv("conversation.item.input_audio_transcription.delta", 60, item_id=item)
    done = c.recv("conversation.item.input_audio_transcription.completed", 60, item_id=item)
    assert delta["content_index"] == done["content_index"] == 0 and delta["delta"] == done["transcript"]
    assert "weather" in done["transcript"] and done["usage"]["type"] == "duration" and done["usage"]["seconds"] > 4
    assert not [e for e in c.events if e["type"] == "response.created"]
    # A turn whose response is cancelled before it says anything still gets its transcript,
    # and the item stays where its commit put it.
    stream(c, speech("correction_24k.wav"))
    c.send({"type": "input_audio_buffer.commit"})
    second = c.recv("input_audio_buffer.committed")["item_id"]
    c.send({"type": "response.create"})
    c.send({"type": "response.cancel"})
    assert c.recv("response.done")["response"]["status"] == "cancelled"
    assert c.recv("conversation.item.input_audio_transcription.completed", 60, item_id=second)["transcript"]
    order = c.state()["state"]["item_order"]
    assert order.index(item) < order.index(second)
    # Each exactly once, answering the request the log issued for it.
    events = [r.event for r in log.read_session(c.session_id)]
    asked = {e.request_id: e.item_id for e in events if isinstance(e, TranscriptionRequested)}
    answered = [(e.request_id, e.item_id) for e in events if isinstance(e, TranscriptionCompleted)]
    assert sorted(answered) == sorted(asked.items()) and set(asked.values()) == {item, second}
    assert len([e for e in c.events if e["type"] == "conversation.item.input_audio_transcription.completed"]) == 2
    consistent(c, log)
    c.close()


def test_a_transcription_session_only_transcribes(stack):
    port, log = stack
    c = client(port)
    c.send({"type": "session.update", "session": {"type": "transcription", "audio": {"input": {"transcription": {"model": "whisper-1"}}}}})
    session = c.recv("session.updated")["session"]
    assert session["type"] == "transcription" and session["audio"]["input"]["transcription"] == {"model": "whisper-1"}
    stream(c, speech("weather_question_24k.wav") + silence(1.0))
    item = c.recv("input_audio_buffer.committed")["item_id"]
    assert "weather" in c.recv("conversation.item.input_audio_transcription.completed", 60, item_id=item)["transcript"]
    c.send({"type": "response.create", "event_id": "r"})
    assert c.error()["code"] == Code.TRANSCRIPTION_SESSION
    assert not [e for e in c.events if e["type"] == "response.created"]
    consistent(c, log)
    c.close()


def test_items_hold_exactly_what_was_streamed_and_responses_echo_metadata_with_usage(stack):
    port, log = stack
    c = client(port)
    c.update({"audio": {"input": {"turn_detection": None}}})
    c.say("tell me about the weather in Lisbon")
    done = c.respond(metadata={"client_event_id": "gen-1", "topic": "weather"})
    created = next(e for e in c.events if e["type"] == "response.created")["response"]
    assert created["metadata"] == done["metadata"] == {"client_event_id": "gen-1", "topic": "weather"}
    usage = done["usage"]
    assert usage["output_tokens"] > 0 and usage["total_tokens"] == usage["input_tokens"] + usage["output_tokens"]
    item = item_of(done)
    streamed = c.audio_of(done["id"], item["id"])
    assert usage["duplex"]["output_audio_ms"] == len(c.audio_of(done["id"])) // 48
    text = "".join(e["delta"] for e in c.events if e["type"] == "response.output_audio_transcript.delta" and e["item_id"] == item["id"])
    c.send({"type": "conversation.item.retrieve", "item_id": item["id"]})
    got = c.recv("conversation.item.retrieved")["item"]["content"][0]
    # Byte for byte (a last partial millisecond included); the transcript as streamed.
    assert len(streamed) > 48_000 and base64.b64decode(got["audio"]) == streamed
    assert got["transcript"] == text
    consistent(c, log)
    c.close()


def test_model_names_of_one_engine_are_served_and_others_refused(stack):
    port, log = stack
    c = client(port)
    session = c.update({"model": "gpt-realtime-2.1", "instructions": "be brief"})
    assert (session["model"], session["instructions"]) == ("gpt-realtime-2.1", "be brief")
    c.send({"type": "session.update", "event_id": "other", "session": {"type": "realtime", "model": "omni", "instructions": "lost"}})
    err = c.error()
    assert (err["code"], err["param"], err["event_id"]) == (Code.MODEL_UPDATE_UNSUPPORTED, "session.model", "other")
    assert "gpu-omni" in err["message"] and "duplex-es-echo" in err["message"]
    c.send({"type": "session.update", "event_id": "nope", "session": {"type": "realtime", "model": "gpt-9"}})
    assert (c.error()["code"], c.state()["state"]["config"]["instructions"]) == (Code.MODEL_NOT_FOUND, "be brief")
    consistent(c, log)
    c.close()
    # A connection naming no model (the Agents SDK's way) gets the first --model name.
    with connect(f"ws://127.0.0.1:{port}/v1/realtime") as ws:
        created = json.loads(ws.recv(timeout=10))
        assert created["session"]["model"] == "gpt-realtime"
    # A connection naming a model nobody serves is told why, and opens no session.
    with connect(f"ws://127.0.0.1:{port}/v1/realtime?" + urlencode({"model": "gpt-9"})) as ws:
        ev = json.loads(ws.recv(timeout=10))
        assert (ev["type"], ev["error"]["code"], ev["error"]["param"]) == ("error", Code.MODEL_NOT_FOUND, "model")
        assert "gpt-realtime" in ev["error"]["message"]
        with pytest.raises(Exception):
            ws.recv(timeout=10)
    assert ws.close_code == 1008


def test_the_idle_timeout_answers_a_silent_user_and_input_commit_answers_a_turn(stack):
    port, log = stack
    c = client(port)
    c.update({"audio": {"input": {"turn_detection": {"type": "server_vad", "idle_timeout_ms": 1000}}}})
    stream(c, speech("weather_question_24k.wav") + silence(1.0))
    first = c.recv("response.done", 60)["response"]
    assert first["status"] == "completed"
    reply_ms = first["usage"]["duplex"]["output_audio_ms"]
    # Silence, as a microphone streams it: once the reply's audio played out and 1 s passed.
    stream(c, silence(reply_ms / 1000 + 2.0), chunk=960)
    t = c.recv("input_audio_buffer.timeout_triggered", 30)
    assert t["audio_end_ms"] - t["audio_start_ms"] == 1000
    assert c.recv("input_audio_buffer.committed", item_id=t["item_id"])
    assert c.recv("response.done", 60)["response"]["status"] == "completed"
    # vLLM-Omni's input.commit commits and answers in one.
    c.update({"audio": {"input": {"turn_detection": None}}})
    stream(c, speech("correction_24k.wav"))
    mark = c.mark()
    c.send({"type": "input.commit", "final": True})
    item = c.recv("input_audio_buffer.committed")["item_id"]
    assert c.recv("response.done", 60)["response"]["status"] == "completed"
    assert [e["type"] for e in c.since(mark)].index("response.created") > 0 and item
    consistent(c, log)
    c.close()
