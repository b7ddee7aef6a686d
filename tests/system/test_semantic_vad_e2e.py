"""``semantic_vad`` taking the engine's end-of-turn judgement, end to end (issue 14): real speech
streamed at real time into turn-based sessions, a real server and a real worker.

On the full-duplex engine (``duplex-es-duplex`` in ``duplex.mode: "turn_based"``) the engine
judges the end of the turn from the words and the pauses: "I would like to go to the station
and", a one-second pause, "the museum" is one turn (the pause after "and" leaves the sentence
open), while plain ``semantic_vad`` on the echo engine splits the same audio at the pause; a
closed sentence ends the turn after the normal pause. The audio ends 2.5 s after the last word,
before ``semantic_vad``'s 4 s max wait: every commit seen here is the engine's judgement."""

from __future__ import annotations

import pytest

from duplex_es.audit import audit_session
from duplex_es.events import UnitIssued
from duplex_es.store import Database, EventLog
from duplex_es.worker.speech.tts import Synthesizer

from clients_support import RATE, events_of, silence, stream
from servers import running
from wsclient import WsClient

pytestmark = pytest.mark.slow

#: The espeak-ng voice and speed pocketsphinx hears these sentences best in (the last word of
#: the first part, "and", is recognised).
VOICE, SPEED = "cedar", 0.85


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory):
    tmp = tmp_path_factory.mktemp("semvad")
    url = f"sqlite:///{tmp / 'log.db'}"
    with running(url, tmp, workers=1) as (port, _server, _workers):
        yield port, url


@pytest.fixture(scope="module")
def say():
    tts = Synthesizer()
    return lambda text: tts.synthesize(text, RATE, VOICE, SPEED).pcm


def turns(port: int, pcm: bytes, *, engine_judges: bool) -> tuple[WsClient, list[dict], list[str]]:
    """Stream ``pcm`` into a turn-based ``semantic_vad`` session on the full-duplex engine
    (``engine_judges``) or the echo engine; the client, its ``speech_stopped`` events and the
    transcript of each committed item, once the model answered."""
    c = WsClient(port, model="duplex-es-duplex" if engine_judges else "duplex-es-echo")
    session = {"audio": {"input": {"transcription": {"model": "gpt-4o-mini-transcribe"}, "turn_detection": {"type": "semantic_vad"}}}}
    if engine_judges:
        session["duplex"] = {"mode": "turn_based"}
    assert c.update(session)["audio"]["input"]["turn_detection"]["type"] == "semantic_vad"
    stream(c, pcm)
    c.recv("response.created", 60)  # the engine's judgement may come after the audio: wait for it
    c.update({})  # every event the appends caused comes before this one's session.updated
    committed = [e["item_id"] for e in c.events if e["type"] == "input_audio_buffer.committed"]
    stopped = [e for e in c.events if e["type"] == "input_audio_buffer.speech_stopped"]
    heard = [c.recv("conversation.item.input_audio_transcription.completed", 60, item_id=i)["transcript"] for i in committed]
    return c, stopped, heard


def test_an_open_word_and_a_pause_stay_one_turn_where_the_engine_judges(stack, say):
    port, url = stack
    first = silence(0.3) + say("I would like to go to the station and")
    spoken = first + silence(1.0) + say("the museum")
    pcm = spoken + silence(2.5)
    # The echo engine: semantic_vad's 800 ms pause ends the turn in the middle.
    c, stopped, heard = turns(port, pcm, engine_judges=False)
    c.close()
    assert len(heard) == 2 and "station" in heard[0] and "museum" in heard[1], heard
    # The full-duplex engine hears "and" before the pause: one turn, answered whole.
    c, stopped, heard = turns(port, pcm, engine_judges=True)
    assert len(heard) == 1 and "station" in heard[0] and "museum" in heard[0], heard
    assert len(stopped) == 1 and stopped[0]["audio_end_ms"] >= len(spoken) * 1000 // (2 * RATE) + 800  # after the last word's pause
    done = c.recv("response.done", 60)["response"]
    reply = next(e for e in c.events if e["type"] == "response.output_audio_transcript.done")["transcript"]
    assert done["status"] == "completed" and "museum" in reply
    session_id = c.session_id
    c.close()
    # The judge units applied no appends, and the log audits clean.
    units = [e for e in events_of(url, session_id) if isinstance(e, UnitIssued)]
    assert units and all(u.purpose == "judge" and not u.applied_event_ids for u in units)
    log = EventLog(Database(url))
    try:
        audit = audit_session(log, session_id)
    finally:
        log.db.dispose()
    assert audit.ok, audit.violations


def test_a_closed_sentence_ends_the_turn_after_the_normal_pause(stack, say):
    port, _url = stack
    sentence = say("I would like to go to the station.")
    c, stopped, heard = turns(port, silence(0.3) + sentence + silence(2.5), engine_judges=True)
    c.close()
    spoken_ms = 300 + len(sentence) * 1000 // (2 * RATE)
    assert len(heard) == 1 and "station" in heard[0], heard
    # Ended by the engine after its 800 ms pause (medium eagerness): the audio stops before the
    # 4 s max wait, so no other rule could end it.
    assert len(stopped) == 1 and spoken_ms + 800 <= stopped[0]["audio_end_ms"]
