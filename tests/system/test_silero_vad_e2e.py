"""Server VAD with the Silero network through ``serve`` + ``worker`` on each backend: selected per
session over the wire, echoed, refused for an unknown detector; the noisy question streamed in
20 ms appends becomes one answered turn; replay equals the live state and the audit passes."""

from __future__ import annotations

import base64

import pytest

from duplex_es.audit import audit_session
from duplex_es.domain import Code
from duplex_es.events import AudioAppended, to_plain
from duplex_es.replay import replay
from duplex_es.store import Database, EventLog
from duplex_es_tools.conversation import read_wav_pcm16

from conftest import FIXTURES, backend_url
from servers import running
from wsclient import WsClient


@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
def stack(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory):
    folder = tmp_path_factory.mktemp(request.param)
    with backend_url(request.param, folder) as url:
        with running(url, folder, worker_args=["--chunk-ms", "250"]) as (port, server, workers):
            db = Database(url)
            yield port, EventLog(db)
            db.dispose()


def test_a_silero_session_turns_the_noisy_question_into_one_answered_turn(stack):
    port, log = stack
    c = WsClient(port)
    try:
        c.send({"type": "session.update", "event_id": "bad", "session": {"type": "realtime", "audio": {"input": {"turn_detection": {"detector": "neural"}}}}})
        err = c.error()
        assert (err["code"], err["param"], err["event_id"]) == (Code.UNSUPPORTED_TURN_DETECTION, "session.audio.input.turn_detection.detector", "bad")
        td = c.update({"audio": {"input": {"turn_detection": {"type": "server_vad", "detector": "silero"}}}})["audio"]["input"]["turn_detection"]
        assert td["detector"] == "silero" and td["threshold"] == 0.5

        noisy = read_wav_pcm16(FIXTURES / "audio" / "noise_speech_silence_24k.wav")
        for i in range(0, len(noisy), 960):  # 20 ms appends
            c.send({"type": "input_audio_buffer.append", "audio": base64.b64encode(noisy[i : i + 960]).decode()})
        started = c.recv("input_audio_buffer.speech_started")
        stopped = c.recv("input_audio_buffer.speech_stopped")
        # Not in the 2 s of noise: from the question's start (less the 300 ms padding) to 500 ms
        # after its end.
        assert (started["audio_start_ms"], stopped["audio_end_ms"]) == (1748, 7424)
        assert c.recv("input_audio_buffer.committed")["item_id"] == started["item_id"] == stopped["item_id"]
        rid = c.recv("response.created")["response"]["id"]
        assert c.recv("response.done", 60, **{"response.id": rid})["response"]["status"] == "completed"

        live = c.state()
        assert to_plain(replay(log, c.session_id, at=live["seq"]).state) == live["state"]
        assert audit_session(log, c.session_id).ok
        # Every append logged what the network carries on to the next one.
        appended = [r.event for r in log.read_session(c.session_id) if isinstance(r.event, AudioAppended)]
        assert len(appended) == -(-len(noisy) // 960) and all(e.vad is not None and e.vad.model_state for e in appended)
    finally:
        c.ws.close()
