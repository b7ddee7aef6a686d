"""The main job: a spoken question answered through the log, driven by the official openai SDK
against real ``serve`` and ``worker`` processes, on SQLite and on PostgreSQL."""

from __future__ import annotations

import asyncio
import wave
from pathlib import Path

import pytest
from openai.types.realtime import RealtimeServerEvent
from pydantic import TypeAdapter

from duplex_es.audit import audit_session
from duplex_es.events import to_plain
from duplex_es.protocol import EXTENSION_EVENT_TYPES
from duplex_es.replay import replay
from duplex_es.store import Database, EventLog
from duplex_es_tools.conversation import speak_and_listen, write_wav_pcm16

from servers import running, session_state

SERVER_EVENT = TypeAdapter(RealtimeServerEvent)


@pytest.mark.slow
@pytest.mark.invariant("I1", "I5")
def test_a_spoken_question_is_answered_replayed_and_audited(db_url: str, tmp_path: Path, weather_pcm: bytes):
    held: dict = {}
    with running(db_url, tmp_path) as (port, server, _):

        async def snapshot(turn) -> None:
            # The state the server holds, read while the session is still live.
            held.update(await asyncio.to_thread(session_state, port, turn.session_id))

        turn = asyncio.run(speak_and_listen(f"ws://127.0.0.1:{port}/v1", weather_pcm, on_reply=snapshot))

    # What the client saw.
    assert turn.response_status == "completed"
    assert "weather" in turn.user_transcript and "afternoon" in turn.user_transcript
    assert turn.reply_transcript == f"You said: {turn.user_transcript}."
    for event in turn.events:
        if event["type"] in EXTENSION_EVENT_TYPES:
            continue
        parsed = SERVER_EVENT.validate_python(event)  # strict: the SDK's own pydantic types
        assert parsed.type == event["type"]
    types = [e["type"] for e in turn.events]
    assert types[0] == "session.created"
    assert types.index("response.created") < types.index("response.output_audio.delta") < types.index("response.done")
    tail = types[types.index("response.output_audio.done"):]
    assert tail[:6] == [
        "response.output_audio.done", "response.output_audio_transcript.done", "response.content_part.done",
        "response.output_item.done", "conversation.item.done", "response.done",
    ]
    seqs = [e["server_event_seq"] for e in turn.events]
    assert seqs == sorted(seqs) and len({e["event_id"] for e in turn.events}) == len(turn.events)

    # The reply audio: PCM16 at the declared 24 kHz, exactly the bytes of the deltas.
    deltas = [e for e in turn.events if e["type"] == "response.output_audio.delta"]
    import base64

    assert len(turn.reply_audio) == sum(len(base64.b64decode(d["delta"])) for d in deltas) > 48_000
    assert len(turn.reply_audio) % 2 == 0
    wav = tmp_path / "reply.wav"
    write_wav_pcm16(wav, turn.reply_audio)
    with wave.open(str(wav)) as w:
        assert (w.getframerate(), w.getsampwidth(), w.getnchannels()) == (24000, 2, 1)
        assert w.getnframes() * 2 == len(turn.reply_audio)

    # The log: audit passes; replay rebuilds exactly the state the server held.
    db = Database(db_url)
    log = EventLog(db)
    report = audit_session(log, turn.session_id)
    assert report.ok, report.violations
    assert report.committed_ticks == report.ticks == len(deltas)
    assert held["live"] is True
    rebuilt = replay(log, turn.session_id, at=held["seq"]).state
    assert to_plain(rebuilt) == held["state"]
    final = replay(log, turn.session_id).state
    assert final.status == "closed"
    item = final.items[final.responses[next(iter(final.responses))].item_id]
    assert item.audio_samples * 2 == len(turn.reply_audio) and item.transcript == turn.reply_transcript
    db.dispose()


@pytest.mark.slow
def test_the_demo_command_runs_end_to_end(tmp_path: Path):
    """``duplex-es demo`` (what ``make demo`` runs) on a new SQLite file."""
    import subprocess
    import sys

    out = subprocess.run(
        [sys.executable, "-m", "duplex_es.cli.main", "demo", "--out", str(tmp_path)],
        capture_output=True, text=True, timeout=180, env={**__import__("os").environ, "COLUMNS": "160"},
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert "You said:" in out.stdout and "weather" in out.stdout
    wavs = list(tmp_path.glob("reply-*.wav"))
    assert len(wavs) == 1 and wavs[0].stat().st_size > 48_000
    assert out.stdout.count("audit: ok") == 2  # the spoken turn and the world session
    gifs = list(tmp_path.glob("world-*.gif"))
    assert len(gifs) == 1 and gifs[0].read_bytes()[:6] == b"GIF89a"
    assert "all identical to what was sent" in out.stdout
