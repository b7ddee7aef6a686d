"""Full-duplex speech end to end (issue 14, "Done when"): real speech streamed in 20 ms chunks
at real time into a ``duplex-es-duplex`` session, with no ``commit`` and no ``response.create``:
the model (the reference full-duplex engine on a real worker) hears it continuously, streams
the user's words as transcript deltas while the user speaks, decides by itself when to answer,
and a second utterance during its reply is handled by the overlap policy, with the decision in
the log. ``audit`` proves every append applied exactly once; ``replay`` shows each unit's
decision."""

from __future__ import annotations

import base64
import threading
import time

import pytest

from duplex_es.audit import audit_session
from duplex_es.events import AudioAppended, OverlapDecided, ResponseDone, UnitOutput
from duplex_es.replay import replay
from duplex_es.store import Database, EventLog

from clients_support import FRAME_BYTES, silence, speech
from servers import running
from wsclient import WsClient

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory):
    tmp = tmp_path_factory.mktemp("duplex")
    url = f"sqlite:///{tmp / 'log.db'}"
    with running(url, tmp, workers=1) as (port, _server, _workers):
        yield port, url


def stream(c: WsClient, pcm: bytes, stop: threading.Event | None = None) -> int:
    """Send ``pcm`` as a microphone would: 20 ms appends at real time. Returns how many."""
    start, n = time.monotonic(), 0
    for at in range(0, len(pcm), FRAME_BYTES):
        if stop is not None and stop.is_set():
            break
        c.send({"type": "input_audio_buffer.append", "audio": base64.b64encode(pcm[at : at + FRAME_BYTES].ljust(FRAME_BYTES, b"\0")).decode()})
        n += 1
        time.sleep(max(0.0, start + n * 0.020 - time.monotonic()))
    return n


def events_of(url: str, session_id: str) -> list:
    log = EventLog(Database(url))
    try:
        return [r.event for r in log.read_session(session_id)]
    finally:
        log.db.dispose()


def test_the_model_answers_by_itself_streams_the_users_words_and_barge_in_cancels_its_turn(stack):
    port, url = stack
    c = WsClient(port, model="duplex-es-duplex")
    created = c.events[0]["session"]
    assert created["duplex"]["mode"] == "full_duplex"
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
    applied = [s for e in events if isinstance(e, UnitOutput) for s in e.applied_event_ids]
    assert len(applied) == len(set(applied)) and applied == sorted(applied)
    # ... and only appends still waiting when the session closed were not.
    assert set(applied) <= {a for a in range(1, len(events) + 1)} and len(applied) > len(appends) // 2
    decisions = [r.summary for r in rows if r.type == "duplex.unit.output"]
    assert any("listen" in d for d in decisions) and any("speak" in d for d in decisions)
