"""Full-duplex speech end to end (issue 14, "Done when"): real speech streamed in 20 ms chunks
at real time into a ``duplex-es-duplex`` session, with no ``commit`` and no ``response.create``:
the model (the reference full-duplex engine on a real worker) hears it continuously, streams
the user's words as transcript deltas while the user speaks, decides by itself when to answer,
and a second utterance during its reply is handled by the overlap policy, with the decision in
the log. ``audit`` proves every append applied exactly once; ``replay`` shows each unit's
decision."""

from __future__ import annotations

import base64
import re
import threading

import pytest

from duplex_es.audit import audit_session
from duplex_es.events import AudioAppended, OverlapDecided, ResponseDone, UnitOutput
from duplex_es.replay import replay
from duplex_es.store import Database, EventLog

from clients_support import events_of, silence, speech, stream
from servers import running
from wsclient import WsClient

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory):
    tmp = tmp_path_factory.mktemp("duplex")
    url = f"sqlite:///{tmp / 'log.db'}"
    with running(url, tmp, workers=1) as (port, _server, _workers):
        yield port, url


def test_the_model_answers_by_itself_streams_the_users_words_and_barge_in_cancels_its_turn(stack):
    port, url = stack
    c = WsClient(port, model="duplex-es-duplex")
    created = c.events[0]["session"]
    assert created["duplex"]["mode"] == "full_duplex"
    c.update({"duplex": {"extension_events": True}})  # vLLM-Omni's events: response.speak, overlap.decision, ...
    # 1. The question, then silence: nobody commits, nobody asks for a response.
    stream(c, speech("weather_question_24k.wav") + silence(1.5))
    c.recv("response.speak", 30)
    done = c.recv("response.done", 30)["response"]
    assert done["status"] == "completed"
    seen = [e["type"] for e in c.events]
    deltas = [i for i, e in enumerate(c.events) if e["type"] == "conversation.item.input_audio_transcription.delta"]
    stopped = seen.index("input_audio_buffer.speech_stopped")
    assert deltas and deltas[0] < stopped  # the words streamed while the user was still speaking
    heard = "".join(c.events[i]["delta"] for i in deltas)
    assert "weather" in heard
    assert seen.index("response.created") < seen.index("response.speak") < seen.index("response.output_audio.delta")
    transcript = next(e for e in c.events if e["type"] == "response.output_audio_transcript.done")["transcript"]
    assert transcript.startswith("You said:") and "weather" in transcript
    # 2. The user talks over the next reply: the overlap policy (barge_in, the default) cancels it.
    stream(c, speech("correction_24k.wav") + silence(1.2))
    c.recv("response.speak", 30)
    stream(c, speech("correction_24k.wav")[: 24000 * 2])  # one second of speech over the reply
    decision = c.recv("overlap.decision", 10)
    assert decision["decision"] == "barge_in"
    cancelled = c.recv("response.done", 10, **{"response.status": "cancelled"})["response"]
    assert cancelled["status_details"]["reason"] == "turn_detected"
    stream(c, silence(2.0))
    session_id = c.session_id
    c.close()

    events = events_of(url, session_id)
    appends = [e for e in events if isinstance(e, AudioAppended)]
    assert [e for e in events if isinstance(e, OverlapDecided)][0].decision == "barge_in"
    assert any(isinstance(e, ResponseDone) and e.status == "completed" for e in events)
    # Every append the model heard was applied by exactly one committed unit, in order.
    log = EventLog(Database(url))
    try:
        audit = audit_session(log, session_id)
        rows = replay(log, session_id).timeline
    finally:
        log.db.dispose()
    assert audit.ok, audit.violations
    # (A cancelled unit's answer is logged too, and discarded: its appends went to a later unit.)
    accepted = {r.seq for r in rows if r.type == "duplex.unit.output" and r.verdict == "accepted"}
    applied = [s for seq, e in enumerate(events, 1) if seq in accepted for s in e.applied_event_ids]
    assert len(applied) == len(set(applied)) and applied == sorted(applied)
    # ... and only appends still waiting when the session closed were not.
    assert set(applied) <= {a for a in range(1, len(events) + 1)} and len(applied) > len(appends) // 2
    decisions = [r.summary for r in rows if r.type == "duplex.unit.output"]
    assert any("listen" in d for d in decisions) and any("speak" in d for d in decisions)


def _audit_and_timeline(url: str, session_id: str) -> tuple:
    log = EventLog(Database(url))
    try:
        return audit_session(log, session_id), replay(log, session_id)
    finally:
        log.db.dispose()


def _responses(c: WsClient) -> list[tuple[str, str]]:
    """Each response the client saw end: ``(status, spoken transcript)``, in order."""
    said = {e["response_id"]: e["transcript"] for e in c.events if e["type"] == "response.output_audio_transcript.done"}
    return [(e["response"]["status"], said.get(e["response"]["id"], "")) for e in c.events if e["type"] == "response.done"]


def test_the_model_acknowledges_a_long_turn_without_taking_it_then_answers_all_of_it(stack):
    """``duplex.backchannels``: a long utterance (two questions, 7.6 s of speech, a 0.45 s pause
    between) streamed at real time. At the pause after 4 s of speech the model says "Mm-hm."
    as a response of its own, and the user's utterance goes on: its words keep streaming under
    the same item, which is committed, whole, when the model answers once the user is done."""
    port, url = stack
    c = WsClient(port, model="duplex-es-duplex")
    c.update({"duplex": {"backchannels": True, "extension_events": True}})
    question = speech("weather_question_24k.wav")
    stream(c, question + silence(0.1) + question[: 24000 * 2 * 44 // 10] + silence(1.5))
    c.recv("response.done", 30)
    c.recv("response.done", 30)
    session_id = c.session_id
    c.close()

    (ack, ack_said), (answer, said) = _responses(c)
    assert (ack, ack_said) == ("completed", "Mm-hm.") and answer == "completed"
    seen = [e["type"] for e in c.events]
    speaks = [e for e in c.events if e["type"] == "response.speak"]
    assert [s.get("backchannel", False) for s in speaks] == [True, False]
    ack_done = next(i for i, e in enumerate(c.events) if e["type"] == "response.done")
    assert "response.output_audio.delta" in seen[: ack_done]  # a GA client plays it
    # The user item is committed after the backchannel, holding the words said before and after it.
    user_at = next(i for i, e in enumerate(c.events) if e["type"] == "conversation.item.done" and e["item"]["role"] == "user")
    user = c.events[user_at]["item"]
    deltas = [i for i, e in enumerate(c.events) if e["type"] == "conversation.item.input_audio_transcription.delta"]
    assert {c.events[i]["item_id"] for i in deltas} == {user["id"]}
    assert deltas[0] < seen.index("response.created") < ack_done < deltas[-1] < user_at
    heard = next(e for e in c.events if e["type"] == "conversation.item.input_audio_transcription.completed")["transcript"]
    assert said == f"You said: {heard}."
    assert heard.count("will be like") == 2  # "... what the weather will be like ...", twice: the whole utterance
    assert "overlap.decision" not in seen  # the user talking on is not speech over the model

    audit, replayed = _audit_and_timeline(url, session_id)
    assert audit.ok, audit.violations
    decisions = [r.summary for r in replayed.timeline if r.type == "duplex.unit.output"]
    assert sum("backchannel" in d for d in decisions) == 1
    users = [i for i in replayed.state.item_order if replayed.state.items[i].role == "user"]
    assert len(users) == 1 and replayed.state.items[users[0]].input_samples >= len(question) // 2 + 24000 * 44 // 10


def test_with_overlap_listen_speech_over_the_reply_is_answered_after_it(stack):
    """``duplex.overlap: "listen"``: the user asks again while the model answers the first
    question; the model talks on, hears them all the same, and answers once its turn is over."""
    port, url = stack
    c = WsClient(port, model="duplex-es-duplex")
    c.update({"duplex": {"overlap": "listen", "extension_events": True}})
    stream(c, speech("weather_question_24k.wav") + silence(0.3))
    first = c.recv("response.speak", 30)["response_id"]
    stream(c, speech("correction_24k.wav") + silence(1.5))  # over the reply
    decision = c.recv("overlap.decision", 10)
    assert (decision["decision"], decision["response_id"]) == ("listen", first)
    c.recv("response.done", 30)
    c.recv("response.done", 30)
    session_id = c.session_id
    c.close()

    (status1, said1), (status2, said2) = _responses(c)
    assert status1 == status2 == "completed"  # the first reply was not cut
    heard = [e["transcript"] for e in c.events if e["type"] == "conversation.item.input_audio_transcription.completed"]
    assert len(heard) == 2 and "weather" in heard[0] and "weather" not in heard[1]
    # "Actually, wait. Stop. ...": its first words, said while the model spoke, were heard too.
    assert "wait" in heard[1].split()[:2] and said2 == f"You said: {heard[1]}."
    # The second question began during the first reply, and was answered after it ended.
    seen = [(e["type"], e.get("response", {}).get("id") or e.get("response_id")) for e in c.events]
    assert seen.index(("overlap.decision", first)) < seen.index(("response.done", first))
    audit, replayed = _audit_and_timeline(url, session_id)
    assert audit.ok, audit.violations
    users = [replayed.state.items[i] for i in replayed.state.item_order if replayed.state.items[i].role == "user"]
    assert users[1].input_samples >= len(speech("correction_24k.wav")) // 2  # all of it, in the item


def _one_turn(url: str, tmp, worker_envs: list[dict]) -> dict:
    """The fixture question streamed at real time into a full-duplex session served by workers
    with ``worker_envs``; what the model heard and said, from the log."""
    from duplex_es_tools.processes import free_port, start_server, start_worker, wait_healthy
    from duplex_es.store import upgrade

    db = Database(url)
    upgrade(db)
    db.dispose()
    port = free_port()
    server = start_server(url, port, tmp / "serve.log", [])
    workers = [start_worker(url, tmp / f"worker{i}.log", ["--claim-ttl-ms", "1000"], env) for i, env in enumerate(worker_envs)]
    try:
        wait_healthy(port, server)
        c = WsClient(port, model="duplex-es-duplex")
        stop = threading.Event()
        mic = threading.Thread(target=stream, args=(c, speech("weather_question_24k.wav") + silence(12.0), stop))
        mic.start()
        done = c.recv("response.done", 40)["response"]
        stop.set()
        mic.join()
        session_id = c.session_id
        c.close()
    finally:
        for w in workers:
            w.stop()
        server.stop()
    events = events_of(url, session_id)
    outputs = [e for e in events if isinstance(e, UnitOutput)]
    log = EventLog(Database(url))
    try:
        state = replay(log, session_id).state
        audit = audit_session(log, session_id)
    finally:
        log.db.dispose()
    user = next(state.items[i] for i in state.item_order if state.items[i].role == "user")
    return {
        "status": done["status"],
        "heard": user.transcript,
        "said": "".join(o.text_delta for o in outputs),
        "audio": b"".join(base64.b64decode(o.audio) for o in outputs if o.audio),
        "audit": audit.ok,
        "first_speak": next(o.chunk_index for o in outputs if o.audio),
    }


def test_a_worker_killed_mid_utterance_is_taken_over_and_the_conversation_is_the_same(tmp_path):
    """A worker SIGKILLed while the user speaks (its 8th unit, after the engine stepped and
    before the commit): another worker takes the session over from the log and the model hears
    and says exactly what it does in a run without the kill."""
    (tmp_path / "calm").mkdir()
    (tmp_path / "kill").mkdir()
    calm = _one_turn(f"sqlite:///{tmp_path / 'calm' / 'log.db'}", tmp_path / "calm", [{}])
    killed = _one_turn(
        f"sqlite:///{tmp_path / 'kill' / 'log.db'}", tmp_path / "kill", [{"DUPLEX_ES_CRASH_AT": "after_step:8"}, {}]
    )
    # Worker 0 died holding a claim (its last line), on a unit before the model spoke.
    last = (tmp_path / "kill" / "worker0.log").read_text().strip().splitlines()[-1]
    assert "claimed duplex" in last, last
    died_at = int(re.search(r"chunk (\d+)", last).group(1))
    assert died_at < killed["first_speak"]
    assert calm["status"] == killed["status"] == "completed" and calm["audit"] and killed["audit"]
    assert "weather" in calm["heard"]
    assert (killed["heard"], killed["said"]) == (calm["heard"], calm["said"])
    assert killed["audio"] == calm["audio"]
