"""Full-duplex speech semantics over a real WebSocket against real ``serve`` + ``worker``
processes, on SQLite and on PostgreSQL: the cases of issue 3.

Every scenario ends by checking that ``audit`` passes and that ``replay`` rebuilds exactly the
state the server holds (case 22).
"""

from __future__ import annotations

import base64
from pathlib import Path

import pytest

from duplex_es.audit import audit_session
from duplex_es.domain import Code
from duplex_es.events import TickIssued, to_plain
from duplex_es.replay import replay
from duplex_es.store import Database, EventLog

from conftest import FIXTURES, backend_url
from servers import running
from wsclient import WsClient, pcm_b64


@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
def stack(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory):
    """A server and a worker (250 ms chunks) on a fresh database of each backend."""
    folder = tmp_path_factory.mktemp(request.param)
    with backend_url(request.param, folder) as url:
        with running(url, folder, worker_args=["--chunk-ms", "250"]) as (port, server, workers):
            db = Database(url)
            yield port, EventLog(db)
            db.dispose()


@pytest.fixture
def client(stack):
    port, log = stack
    c = WsClient(port)
    yield c
    c.ws.close()


def consistent(c: WsClient, log: EventLog) -> None:
    """Case 22: audit passes and replay equals the live state."""
    live = c.state()
    assert live["live"] is True
    assert to_plain(replay(log, c.session_id, at=live["seq"]).state) == live["state"]
    report = audit_session(log, c.session_id)
    assert report.ok, report.violations


def item_of(response: dict, index: int = 0) -> dict:
    return response["output"][index]


# --------------------------------------------------------------------------- truncation


def test_truncate_at_exactly_the_audio_length_and_one_ms_past_it(client: WsClient, stack):
    """Cases 1 and 2: D ms of audio (delta bytes / 48, a partial last ms counting as one);
    truncate at D works, at D+1 fails and changes nothing; the next turn works normally."""
    port, log = stack
    client.say("the weather in Lisbon")
    done = client.respond()
    item_id = item_of(done)["id"]
    audio = client.audio_of(done["id"])
    d = -(-len(audio) // 48)
    assert d > 1000 and done["status"] == "completed"
    before = client.state()
    client.send({"type": "conversation.item.truncate", "event_id": "t1", "item_id": item_id, "content_index": 0, "audio_end_ms": d + 1})
    err = client.error()
    assert (err["code"], err["param"], err["event_id"]) == (Code.TRUNCATE_OUT_OF_RANGE, "audio_end_ms", "t1")
    after = client.state()
    before["state"]["seq"] = after["state"]["seq"]
    assert after["state"] == before["state"]
    client.send({"type": "conversation.item.truncate", "item_id": item_id, "content_index": 0, "audio_end_ms": d})
    assert client.recv("conversation.item.truncated")["audio_end_ms"] == d
    client.say("and in Porto")
    assert client.respond()["status"] == "completed"
    consistent(client, log)


def test_truncate_at_full_length_keeps_the_transcript_or_removes_it_under_openais_rule(stack):
    """Case 3."""
    port, log = stack
    for rule, expect_kept in (("heard_prefix", True), ("remove", False)):
        c = WsClient(port)
        c.update({"duplex": {"transcript_on_truncate": rule}})
        c.say("good evening")
        done = c.respond()
        nbytes = len(c.audio_of(done["id"]))
        item_id, d = item_of(done)["id"], -(-nbytes // 48)
        c.send({"type": "playback.ack", "response_id": done["id"], "played_ms": nbytes // 48})
        c.recv("playback.acknowledged")
        c.send({"type": "conversation.item.truncate", "item_id": item_id, "content_index": 0, "audio_end_ms": d})
        c.recv("conversation.item.truncated")
        c.send({"type": "conversation.item.retrieve", "item_id": item_id})
        transcript = c.recv("conversation.item.retrieved")["item"]["content"][0]["transcript"]
        assert transcript == ("You said: good evening." if expect_kept else "")
        c.send({"type": "conversation.item.truncate", "item_id": item_id, "content_index": 0, "audio_end_ms": d + 1})
        assert c.error()["code"] == Code.TRUNCATE_OUT_OF_RANGE
        consistent(c, log)
        c.close()


def test_truncate_keeps_only_the_heard_prefix_everywhere_after_it(client: WsClient, stack):
    """Case 4 (and 6): after a truncate at 1500 ms no event re-publishes the longer transcript,
    retrieve reflects the cut, and the next tick's history for the engine holds only the prefix."""
    port, log = stack
    client.say("the weather will be like in Lisbon tomorrow afternoon")
    done = client.respond()
    item_id = item_of(done)["id"]
    full = item_of(done)["content"][0]["transcript"]
    mark = client.mark()
    client.send({"type": "conversation.item.truncate", "item_id": item_id, "content_index": 0, "audio_end_ms": 1500})
    client.recv("conversation.item.truncated")
    client.send({"type": "conversation.item.retrieve", "item_id": item_id})
    retrieved = client.recv("conversation.item.retrieved")["item"]
    heard = retrieved["content"][0]["transcript"]
    assert full.startswith(heard) and 0 < len(heard) < len(full)
    assert len(base64.b64decode(retrieved["content"][0]["audio"])) == 1500 * 48
    client.say("thanks")
    client.respond()
    for ev in client.since(mark):
        assert full not in str(ev)  # nothing re-publishes the longer transcript
    ticks = [r.event for r in log.read_session(client.session_id) if isinstance(r.event, TickIssued)]
    history = {h.item_id: h.text for h in ticks[-1].inputs.history}
    assert history[item_id] == heard
    consistent(client, log)


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_cancel_before_audio_then_truncate_to_zero_and_delete(backend: str, tmp_path: Path):
    """Case 5, on a server with no worker (so the cancel surely comes before any audio)."""
    with backend_url(backend, tmp_path) as url, running(url, tmp_path, workers=0) as (port, _, _):
        log = EventLog(Database(url))
        c = WsClient(port)
        c.say("hello")
        c.send({"type": "response.create"})
        c.recv("response.created")
        c.send({"type": "response.cancel"})
        # No output came, so the (empty) item is shown only now, added and done with the response.
        item_id = c.recv("response.output_item.added")["item"]["id"]
        done = c.recv("response.done")["response"]
        assert done["status"] == "cancelled" and [o["id"] for o in done["output"]] == [item_id]
        for _ in range(2):  # idempotent
            c.send({"type": "conversation.item.truncate", "item_id": item_id, "content_index": 0, "audio_end_ms": 0})
            assert c.recv("conversation.item.truncated")["audio_end_ms"] == 0
        c.send({"type": "conversation.item.delete", "item_id": item_id})
        assert c.recv("conversation.item.deleted")["item_id"] == item_id
        c.send({"type": "conversation.item.retrieve", "event_id": "r", "item_id": item_id})
        assert c.error()["code"] == Code.RETRIEVE_INVALID_ITEM
        c.say("still here")
        assert c.state()["state"]["status"] == "open"
        consistent(c, log)
        c.close()


# ---------------------------------------------------------------------------- responses


def test_cancel_after_done_is_not_active_and_the_next_turn_works(client: WsClient, stack):
    """Case 7."""
    port, log = stack
    client.say("one")
    client.respond()
    client.send({"type": "response.cancel", "event_id": "c1"})
    err = client.error()
    assert (err["code"], err["event_id"]) == (Code.CANCEL_NOT_ACTIVE, "c1")
    client.say("two")
    assert client.respond()["status"] == "completed"
    consistent(client, log)


def test_cancel_then_create_never_overlaps_two_default_responses(client: WsClient, stack):
    """Case 8: the first response's response.done (cancelled) comes before anything of the second."""
    port, log = stack
    client.say("a long answer about the weather in Lisbon tomorrow")
    client.send({"type": "response.create"})
    first = client.recv("response.created")["response"]["id"]
    client.send({"type": "response.cancel"})
    client.send({"type": "response.create"})
    second = client.recv("response.created")["response"]["id"]
    client.recv("response.done", **{"response.id": second})
    types = [(e["type"], e.get("response", {}).get("id") or e.get("response_id")) for e in client.events]
    first_done = types.index(("response.done", first))
    second_created = types.index(("response.created", second))
    assert first_done < second_created
    assert all(rid != first for _, rid in types[first_done + 1 :])  # nothing of it after its done
    consistent(client, log)


def test_a_second_default_response_is_refused_but_out_of_band_runs_beside_it(client: WsClient, stack):
    """Case 9."""
    port, log = stack
    client.say("tell me about Porto")
    client.send({"type": "response.create"})
    active = client.recv("response.created")["response"]["id"]
    client.send({"type": "response.create", "event_id": "again"})
    err = client.error()
    assert (err["code"], err["event_id"]) == (Code.ACTIVE_RESPONSE, "again") and active in err["message"]
    client.send({"type": "response.create", "response": {"conversation": "none", "output_modalities": ["text"]}})
    oob = client.recv("response.created", **{"response.conversation_id": None})["response"]["id"]
    oob_done = client.recv("response.done", **{"response.id": oob})["response"]
    main_done = client.recv("response.done", **{"response.id": active})["response"]
    assert main_done["status"] == "completed" and oob_done["status"] == "completed"
    assert oob_done["conversation_id"] is None
    conversation = client.state()["state"]["item_order"]
    assert item_of(oob_done)["id"] not in conversation and item_of(main_done)["id"] in conversation
    consistent(client, log)


def test_two_output_items_are_strictly_nested(client: WsClient, stack):
    """Case 17: output_index 0 then 1, every .done of item 0 before item 1's output_item.added."""
    port, log = stack
    client.say("Good morning. See you later.")
    done = client.respond()
    assert [o["status"] for o in done["output"]] == ["completed", "completed"]
    first, second = (o["id"] for o in done["output"])
    evs = [e for e in client.events if e.get("response_id") == done["id"] or e.get("item", {}).get("id") in (first, second)]
    kinds = [(e["type"], e.get("item_id") or e.get("item", {}).get("id"), e.get("output_index")) for e in evs]
    opened = kinds.index(("response.output_item.added", second, 1))
    assert ("response.output_item.done", first, 0) in kinds[:opened]
    assert all(item != first for _, item, _ in kinds[opened:])
    assert all(index == 1 for _, item, index in kinds if item == second and index is not None)
    consistent(client, log)


def test_cancel_after_the_first_delta_lists_the_incomplete_item(client: WsClient, stack):
    """Case 18: response.done.output lists the assistant item (incomplete) with the streamed id."""
    port, log = stack
    client.say("the weather will be like in Lisbon tomorrow afternoon and evening")
    client.send({"type": "response.create"})
    delta = client.recv("response.output_audio.delta")
    client.send({"type": "response.cancel"})
    done = client.recv("response.done")["response"]
    assert done["status"] == "cancelled" and done["status_details"]["reason"] == "client_cancelled"
    assert item_of(done)["id"] == delta["item_id"] and item_of(done)["status"] == "incomplete" and delta["output_index"] == 0
    consistent(client, log)


# -------------------------------------------------------------------------------- playback


def test_acks_are_monotonic_and_a_hard_truncation_caps_later_acks(client: WsClient, stack):
    """Case 19 over the wire (the exact "hello w" arithmetic is a domain test)."""
    port, log = stack
    client.say("the weather in Lisbon tomorrow")
    done = client.respond()
    rid = done["id"]
    full = item_of(done)["content"][0]["transcript"]

    def ack(**kw) -> dict:
        client.send({"type": "playback.ack", "response_id": rid, **kw})
        return client.recv("playback.acknowledged")

    a1 = ack(played_ms=1200)
    a2 = ack(played_ms=1500)
    a3 = ack(played_ms=1000)
    assert (a3["played_ms"], a3["committed_ms"]) == (1500, 1500)
    assert full.startswith(a2["transcript"]) and len(a1["transcript"]) < len(a2["transcript"]) == len(a3["transcript"])
    cut = ack(played_ms=1500, committed_ms=1200, truncate=True)
    assert cut["committed_ms"] == 1200 and cut["transcript"] == a1["transcript"]
    later = ack(played_ms=2000)
    assert later["committed_ms"] == 1200 and later["transcript"] == a1["transcript"]
    consistent(client, log)


def test_an_ack_for_an_answer_older_than_the_newest_user_turn_is_too_late(client: WsClient, stack):
    """Case 20."""
    port, log = stack
    client.say("first question")
    old = client.respond()["id"]
    client.say("second question")
    client.send({"type": "playback.ack", "event_id": "late", "response_id": old, "played_ms": 100})
    err = client.error()
    assert (err["code"], err["event_id"]) == (Code.PLAYBACK_TOO_LATE, "late")
    # An answer acknowledged before the newer turn keeps being updated in place.
    client.say("third question")
    third = client.respond()["id"]
    client.send({"type": "playback.ack", "response_id": third, "played_ms": 100})
    client.recv("playback.acknowledged")
    client.say("fourth question")
    client.send({"type": "playback.ack", "response_id": third, "played_ms": 900})
    assert client.recv("playback.acknowledged")["played_ms"] == 900
    consistent(client, log)


# --------------------------------------------------------------------------- configuration


def test_turn_detection_defaults_partial_updates_and_refusals(client: WsClient, stack):
    """Cases 11, 12 and 15."""
    port, log = stack
    td = client.update({"audio": {"input": {"turn_detection": {"type": "server_vad"}}}})["audio"]["input"]["turn_detection"]
    assert td == {
        "type": "server_vad",
        "threshold": 0.5,
        "prefix_padding_ms": 300,
        "silence_duration_ms": 500,
        "create_response": True,
        "interrupt_response": True,
        "idle_timeout_ms": None,
        "detector": "energy",
    }
    td = client.update({"audio": {"input": {"turn_detection": {"silence_duration_ms": 700}}}})["audio"]["input"]["turn_detection"]
    assert (td["silence_duration_ms"], td["threshold"], td["prefix_padding_ms"]) == (700, 0.5, 300)
    client.send({"type": "session.update", "event_id": "bad", "session": {"audio": {"input": {"turn_detection": {"threshold": 7}}}}})
    err = client.error()
    assert (err["code"], err["param"], err["event_id"]) == (
        Code.UNSUPPORTED_TURN_DETECTION, "session.audio.input.turn_detection.threshold", "bad"
    )
    client.send({"type": "session.update", "session": {"audio": {"input": {"format": {"type": "audio/pcm", "rate": 44100}}}}})
    err = client.error()
    assert (err["code"], err["param"]) == (Code.UNSUPPORTED_AUDIO_FORMAT, "session.audio.input.format")
    cfg = client.state()["state"]["config"]
    assert cfg["turn_detection"]["silence_duration_ms"] == 700 and cfg["input_format"] == {"type": "audio/pcm", "rate": 24000}
    consistent(client, log)


@pytest.mark.parametrize(
    "audio,why",
    [("AAA$", "non-base64"), ("AAA", "bad padding"), ("data:audio/pcm;base64,AAAA", "data URI"), ("AQID", "odd PCM16"), ("", "empty")],
)
def test_bad_appends_name_the_audio_field_and_leave_the_buffer(client: WsClient, stack, audio: str, why: str):
    """Case 13."""
    port, log = stack
    client.send({"type": "input_audio_buffer.append", "audio": pcm_b64(40)})
    client.send({"type": "input_audio_buffer.append", "event_id": "bad", "audio": audio})
    err = client.error()
    assert err["param"] == "audio" and err["event_id"] == "bad", why
    assert client.state()["state"]["buffer"]["samples"] == 40 * 24
    consistent(client, log)


def test_commit_of_nothing_or_50ms_is_refused_and_keeps_the_buffer(client: WsClient, stack):
    """Case 16."""
    port, log = stack
    client.send({"type": "input_audio_buffer.commit", "event_id": "c0"})
    assert client.error()["code"] == Code.COMMIT_EMPTY
    client.send({"type": "input_audio_buffer.append", "audio": pcm_b64(50)})
    client.send({"type": "input_audio_buffer.commit", "event_id": "c1"})
    err = client.error()
    assert (err["code"], err["event_id"]) == (Code.COMMIT_EMPTY, "c1") and "50.00ms" in err["message"]
    state = client.state()["state"]
    assert state["buffer"]["samples"] == 50 * 24 and state["item_order"] == []
    client.send({"type": "input_audio_buffer.append", "audio": pcm_b64(60)})
    client.send({"type": "input_audio_buffer.commit"})
    client.recv("input_audio_buffer.committed")
    consistent(client, log)


# ------------------------------------------------------------------------------ server VAD


def _stream(c: WsClient, data: bytes, bytes_per_chunk: int) -> None:
    for i in range(0, len(data), bytes_per_chunk):
        c.send({"type": "input_audio_buffer.append", "audio": base64.b64encode(data[i : i + bytes_per_chunk]).decode()})


def test_server_vad_commits_answers_and_is_interrupted_by_new_speech(client: WsClient, stack, weather_pcm: bytes):
    """Case 10: VAD interrupts a response; with no truncate from the client the assistant item
    keeps the audio generated before the cancel and its transcript; a later truncate works."""
    port, log = stack
    from duplex_es_tools.conversation import read_wav_pcm16

    client.update({"audio": {"input": {"turn_detection": {"type": "server_vad"}}}})
    noisy = read_wav_pcm16(FIXTURES / "audio" / "noise_speech_silence_24k.wav")
    _stream(client, noisy, 4800)
    started = client.recv("input_audio_buffer.speech_started")
    stopped = client.recv("input_audio_buffer.speech_stopped")
    assert 1700 <= started["audio_start_ms"] <= 2000  # the speech begins after 2 s of noise
    assert stopped["item_id"] == started["item_id"] and stopped["audio_end_ms"] > started["audio_start_ms"]
    assert client.recv("input_audio_buffer.committed")["item_id"] == started["item_id"]
    rid = client.recv("response.created")["response"]["id"]
    client.recv("response.output_audio.delta")
    correction = read_wav_pcm16(FIXTURES / "audio" / "correction_24k.wav")
    _stream(client, correction[: 24000 * 2], 4800)  # the user starts talking over it
    done = client.recv("response.done", **{"response.id": rid})["response"]
    assert done["status"] == "cancelled" and done["status_details"]["reason"] == "turn_detected"
    item = item_of(done)
    assert item["status"] == "incomplete"
    received = client.audio_of(rid)
    state = client.state()["state"]
    kept = state["items"][item["id"]]
    assert kept["audio_samples"] * 2 == len(received) and kept["transcript"] == kept["full_text"] != ""
    client.send({"type": "conversation.item.truncate", "item_id": item["id"], "content_index": 0, "audio_end_ms": 100})
    client.recv("conversation.item.truncated")
    consistent(client, log)


def test_a_mu_law_session_runs_a_full_turn_on_8_bytes_per_ms(client: WsClient, stack):
    """Case 14: the mu-law fixture drives a full turn; VAD and item durations use 8 bytes/ms."""
    port, log = stack
    ulaw = (FIXTURES / "audio" / "weather_question_8k.ulaw").read_bytes()
    silence = bytes([0xFF]) * 8 * 800  # mu-law silence, 800 ms
    client.update(
        {
            "audio": {
                "input": {"format": {"type": "audio/pcmu"}, "turn_detection": {"type": "server_vad"}},
                "output": {"format": {"type": "audio/pcmu"}},
            }
        }
    )
    _stream(client, ulaw + silence, 8 * 100)
    client.recv("input_audio_buffer.speech_started")
    stopped = client.recv("input_audio_buffer.speech_stopped")
    committed = client.recv("input_audio_buffer.committed")
    rid = client.recv("response.created")["response"]["id"]
    done = client.recv("response.done", 60, **{"response.id": rid})["response"]
    assert done["status"] == "completed"
    heard = [e for e in client.events if e["type"] == "conversation.item.input_audio_transcription.completed"]
    assert heard[0]["item_id"] == committed["item_id"] and "tomorrow afternoon" in heard[0]["transcript"]  # narrowband ASR
    state = client.state()["state"]
    user = state["items"][committed["item_id"]]
    assert user["audio_format"] == {"type": "audio/pcmu", "rate": 8000}
    # Durations on 8 bytes/ms: the committed item runs up to the append in which speech stopped.
    assert stopped["audio_end_ms"] <= user["input_samples"] // 8 <= stopped["audio_end_ms"] + 100
    assert user["input_samples"] <= len(ulaw) + len(silence)
    reply = client.audio_of(rid)
    assert state["items"][item_of(done)["id"]]["audio_samples"] == len(reply)  # one byte per sample
    consistent(client, log)
