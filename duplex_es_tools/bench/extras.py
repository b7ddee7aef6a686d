"""Figures outside issue 6's table, kept from the first ``make bench``: a spoken turn through
``serve`` + ``worker`` (response.create → first audio delta), the reference world engine's
block render on the CPU, and server VAD's cost per 20 ms append with the Silero network beside
the energy detector."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

from duplex_es_tools.bench.histogram import Latencies

__all__ = ["spoken_turns", "vad_appends", "world_blocks", "reply_latency"]


def spoken_turns(url: str, folder: Path, turns: int) -> dict[str, Any]:
    """``turns`` spoken turns (the 5.2 s fixture question) through a ``serve`` and a ``worker``
    process on the database at ``url``: latencies (ms) from ``response.create`` to the first
    audio delta."""
    from duplex_es_tools.conversation import read_wav_pcm16, speak_and_listen
    from duplex_es_tools.conversation import default_audio
    from duplex_es_tools.processes import free_port, start_server, start_worker, wait_healthy

    pcm = read_wav_pcm16(default_audio())
    folder.mkdir(parents=True, exist_ok=True)
    port = free_port()
    server = start_server(url, port, folder / "serve.log", ["--log-level", "WARNING"])
    worker = start_worker(url, folder / "worker.log", ["--log-level", "WARNING"])
    first, rest = Latencies(), Latencies()
    try:
        wait_healthy(port, server)
        for _ in range(turns):
            turn = asyncio.run(speak_and_listen(f"ws://127.0.0.1:{port}/v1", pcm))
            first.record_s(turn.timings["first_audio_s"])
            rest.record_s(turn.timings["done_s"] - turn.timings["first_audio_s"])
    finally:
        worker.stop()
        server.stop()
    return {
        "measurement": "spoken turn (5.2 s question): response.create → first audio delta",
        "n": turns,
        "events_per_s": None,
        **first.summary_ms(),
        "note": f"then to response.done: p50 {round(rest.percentile_ms(50) or 0, 1)} ms",
    }


def world_blocks(reps: int) -> dict[str, Any]:
    """Render ``reps`` 256×256 blocks of 12 frames (a 750 ms chunk at 16 fps) with the reference
    world engine: latencies (ms) of the render alone; PNG encoding in the note."""
    from duplex_es.events import Control, ControlEvent, WorldConfig, WorldTickIssued
    from duplex_es.worker.world.engine import CAMERA_SCHEMA, WorldContext, WorldEngine

    engine = WorldEngine()
    cfg = WorldConfig(width=256, height=256, fps=16, frames_per_chunk=12, seed=5)
    walk = (ControlEvent(event_id=1, control=Control(track="camera", schema=CAMERA_SCHEMA, data={"keys": ["W", "J"]})),)
    engine.render_chunk(WorldTickIssued(request_id="warm", epoch=0, chunk_index=0, config=cfg, seed=5))  # terrain cache
    render, total = Latencies(), Latencies()
    state = None
    for k in range(reps):
        tick = WorldTickIssued(request_id=f"r{k}", epoch=0, chunk_index=k, config=cfg, seed=5, control_events=walk, engine_state=state)
        t0 = time.perf_counter_ns()
        _, state = engine.render_chunk(tick)
        render.since(t0)
        t0 = time.perf_counter_ns()
        engine.step(WorldContext(session_id="bench", tick=tick))
        total.since(t0)
    return {
        "measurement": "world block 256×256×12 (chunk period 750 ms): render only",
        "backend": "cpu",
        "n": reps,
        "events_per_s": None,
        **render.summary_ms(),
        "note": f"with PNG encoding p50 {round(total.percentile_ms(50) or 0, 1)} ms",
    }


def vad_appends(appends: int) -> dict[str, Any]:
    """``appends`` 20 ms appends of the noisy fixture question (2 s of noise, speech, silence,
    looped) decided and folded by the domain — ``decide`` + ``evolve``, no I/O — in a session
    whose server VAD uses the Silero network, and in one with the energy detector, measured in
    the same run: latencies (ms) per append with Silero; energy's in the note."""
    import base64

    from duplex_es.domain import AppendAudio, OpenSession, SessionPatch, SessionState, UpdateSession, VadIds, decide, evolve
    from duplex_es_tools.conversation import default_audio, read_wav_pcm16

    pcm = read_wav_pcm16(default_audio().with_name("noise_speech_silence_24k.wav"))
    chunks = [base64.b64encode(pcm[i : i + 960]).decode() for i in range(0, len(pcm) - 959, 960)]

    def run(detector: str) -> Latencies:
        state = SessionState()
        # Turns are committed as user items; no responses (no worker here to answer them).
        td = {"type": "server_vad", "detector": detector, "create_response": False}
        for cmd in (OpenSession(session_id="bench_vad", model="m"), UpdateSession(patch=SessionPatch(turn_detection=td))):
            for ev in decide(state, cmd):
                state = evolve(state, state.seq + 1, ev)
        lat = Latencies()
        for k in range(appends):
            ids = VadIds(item_id=f"i{k}", response_id=f"r{k}", response_item_id=f"j{k}", request_id=f"q{k}")
            command = AppendAudio(audio=chunks[k % len(chunks)], nbytes=960, vad_ids=ids)
            t0 = time.perf_counter_ns()
            for ev in decide(state, command):
                state = evolve(state, state.seq + 1, ev)
            lat.since(t0)
        return lat

    run("silero")  # loads the model
    silero, energy = run("silero"), run("energy")
    return {
        "measurement": "server VAD per 20 ms append (decide + evolve): Silero network",
        "backend": "cpu",
        "n": appends,
        "events_per_s": None,
        **silero.summary_ms(),
        "note": f"energy detector in the same run: p50 {energy.percentile_ms(50)} ms, p99 {energy.percentile_ms(99)} ms",
    }


def _streamed_turn(port: int, model: str, pcm: bytes, speech_ms: int, tail_s: float) -> float:
    """Stream ``pcm`` then ``tail_s`` of silence as a microphone does (20 ms appends at real
    time) into a new session of ``model``; seconds from the end of the speech (its
    ``speech_ms``-th ms sent) to the first reply audio delta."""
    import base64
    import json
    import threading

    from websockets.sync.client import connect

    frame = 960  # 20 ms of PCM16 at 24 kHz
    audio = pcm + bytes(int(24000 * tail_s) * 2)
    first: list[float] = []
    done = threading.Event()
    with connect(f"ws://127.0.0.1:{port}/v1/realtime?model={model}", max_size=None) as ws:

        def read() -> None:
            for raw in ws:
                kind = json.loads(raw)["type"]
                if kind == "response.output_audio.delta" and not first:
                    first.append(time.monotonic())
                if kind == "response.done":
                    done.set()
                    return

        reader = threading.Thread(target=read, daemon=True)
        reader.start()
        start, ended_at = time.monotonic(), None
        for i, at in enumerate(range(0, len(audio), frame)):
            if done.is_set():
                break
            ws.send(json.dumps({"type": "input_audio_buffer.append", "audio": base64.b64encode(audio[at : at + frame].ljust(frame, b"\0")).decode()}))
            if ended_at is None and (i + 1) * 20 >= speech_ms:
                ended_at = time.monotonic()
            time.sleep(max(0.0, start + (i + 1) * 0.020 - time.monotonic()))
        done.wait(30)
    if not first or ended_at is None:
        raise RuntimeError(f"{model}: no reply audio")
    return first[0] - ended_at


def reply_latency(url: str, folder: Path, turns: int) -> dict[str, Any]:
    """From the end of the user's speech to the first reply audio (ms), streamed at real time
    through ``serve`` + ``worker``: a full-duplex session (the model judges the end of the turn,
    docs/duplex.md) beside a turn-based one with server VAD (it commits after 500 ms of
    silence and starts the response), the same fixture question, ``turns`` turns each."""
    from duplex_es_tools.conversation import default_audio, read_wav_pcm16
    from duplex_es_tools.processes import free_port, start_server, start_worker, wait_healthy

    pcm = read_wav_pcm16(default_audio())
    speech_ms = len(pcm) // 48
    folder.mkdir(parents=True, exist_ok=True)
    port = free_port()
    server = start_server(url, port, folder / "serve.log", ["--log-level", "WARNING"])
    worker = start_worker(url, folder / "worker.log", ["--log-level", "WARNING"])
    duplex, turn_based = Latencies(), Latencies()
    try:
        wait_healthy(port, server)
        for _ in range(turns):
            duplex.record_s(_streamed_turn(port, "duplex-es-duplex", pcm, speech_ms, 6.0))
            turn_based.record_s(_streamed_turn(port, "gpt-realtime", pcm, speech_ms, 6.0))
    finally:
        worker.stop()
        server.stop()
    tb = turn_based.summary_ms()
    return {
        "measurement": "end of user speech → first reply audio, full duplex (streamed at real time)",
        "n": turns,
        "events_per_s": None,
        **duplex.summary_ms(),
        "note": f"turn-based with server VAD, same run: p50 {tb.get('p50_ms')} ms, p99 {tb.get('p99_ms')} ms",
    }


def sealed_turn_size(folder: Path) -> dict[str, Any]:
    """Issue 17: what one spoken turn (the 5.2 s fixture question and its spoken answer) takes in
    the log, stored sealed (``serve`` and ``worker`` with ``--master-key-file``, read back from
    the rows), beside what the same events take in the clear (audio as bytes, migration 0005)
    and with the audio as base64 inside the JSON (before 0005): ``data`` + ``payload`` bytes."""
    import base64 as _b64

    from duplex_es.events import encode
    from duplex_es.events.codec import encode_row
    from duplex_es.store import Database, EventLog
    from duplex_es.store.datakeys import MasterKeys
    from duplex_es_tools.bench.ours import BENCH_MASTER_KEY
    from duplex_es_tools.conversation import default_audio, read_wav_pcm16, speak_and_listen
    from duplex_es_tools.processes import free_port, start_server, start_worker, wait_healthy

    folder.mkdir(parents=True, exist_ok=True)
    key = folder / "master.key"
    key.write_text(BENCH_MASTER_KEY.hex() + "\n")
    key.chmod(0o600)
    url = f"sqlite:///{folder / 'turn.db'}"
    pcm = read_wav_pcm16(default_audio())
    port = free_port()
    keyed = ["--log-level", "WARNING", "--master-key-file", str(key)]
    server = start_server(url, port, folder / "serve.log", keyed)
    worker = start_worker(url, folder / "worker.log", keyed)
    try:
        wait_healthy(port, server)
        turn = asyncio.run(speak_and_listen(f"ws://127.0.0.1:{port}/v1", pcm))
    finally:
        worker.stop()
        server.stop()
    db = Database(url)
    try:
        log = EventLog(db, master_keys=MasterKeys.from_keys([BENCH_MASTER_KEY]))
        raw = log.read_raw(turn.session_id)
        events = [r.event for r in log.read_session(turn.session_id)]
        archived = _archive_figures(log, turn.session_id, events, folder)
    finally:
        db.dispose()
    sealed = sum(len(r.data.encode()) + len(r.payload or b"") for r in raw)
    clear = sum(len(d.encode()) + len(p or b"") for _, _, d, p in map(encode_row, events))
    base64_json = sum(len(encode(e)[2].encode()) for e in events)
    answer_ms = sum(len(_b64.b64decode(e["delta"])) for e in turn.events if e["type"] == "response.output_audio.delta") * 1000 // 48000
    return {
        "measurement": f"stored size of a spoken turn ({len(pcm) * 1000 // 48000} ms question + {answer_ms} ms spoken answer), sealed",
        "n": len(raw),
        "events_per_s": None,
        "note": (
            f"sealed {sealed:,} bytes; in the clear with audio as bytes {clear:,} bytes (sealed / clear = {sealed / clear:.3f}); "
            f"audio as base64 in the JSON (before migration 0005) {base64_json:,} bytes (sealed / that = {sealed / base64_json:.3f}); "
            f"{sum(r.sealed is not None for r in raw)} of {len(raw)} events sealed; data + payload columns. {archived}"
        ),
    }


def _archive_figures(log: Any, session_id: str, events: list, folder: Path) -> str:
    """``duplex-es archive`` of the turn (docs/privacy.md, "Archives"): the file beside the rows
    it replaced, the SQLite file before and after ``--compact``, the time to archive and to
    open the file and replay it beside replaying from the log; and the same events appended in
    the clear to a second log and archived, for what compression does to content in the clear."""
    from duplex_es.archive import archive_session, open_archive
    from duplex_es.replay import replay
    from duplex_es.store import Database, EventLog, upgrade
    from duplex_es.store.archives import compact

    path = Path(log.db.url.split("///", 1)[1])

    def size() -> int:
        return sum(p.stat().st_size for p in (path, path.with_name(path.name + "-wal")) if p.exists())

    target = folder / "archive"
    target.mkdir(exist_ok=True)
    started = time.perf_counter()
    replay(log, session_id)
    from_log = time.perf_counter() - started
    compact(log.db)
    before = size()
    started = time.perf_counter()
    done = archive_session(log, session_id, str(target))
    took = time.perf_counter() - started
    compact(log.db)
    after = size()
    started = time.perf_counter()
    with open_archive(done.path, hot=log, master_keys=log.data_keys.master) as opened:
        replay(opened.log, session_id)
    from_file = time.perf_counter() - started

    clear_db = Database(f"sqlite:///{folder / 'clear.db'}")
    try:
        upgrade(clear_db)
        clear_log = EventLog(clear_db)
        clear_log.append(session_id, events, expected_seq=0)
        # The copy's ticks were answered in the original (its outputs are among the events); the
        # queue rows the append mirrored say pending only because no worker committed them here.
        with clear_db.write() as conn:
            conn.exec_driver_sql("UPDATE ticks SET status = 'done'")
        (folder / "archive-clear").mkdir(exist_ok=True)
        clear = archive_session(clear_log, session_id, str(folder / "archive-clear"))
    finally:
        clear_db.dispose()
    return (
        f"Archived: file {done.file_bytes:,} bytes for {done.stored_bytes:,} bytes of sealed rows ({done.file_bytes / done.stored_bytes:.3f}); "
        f"SQLite file {before:,} -> {after:,} bytes after --compact (shrank {before - after:,}); archiving took {took * 1000:.0f} ms; "
        f"replay from the file {from_file * 1000:.0f} ms beside {from_log * 1000:.0f} ms from the log; "
        f"the same events in the clear: file {clear.file_bytes:,} bytes for {clear.stored_bytes:,} bytes of rows ({clear.file_bytes / clear.stored_bytes:.3f})"
    )
