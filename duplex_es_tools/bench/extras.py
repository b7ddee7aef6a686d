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

__all__ = ["spoken_turns", "vad_appends", "world_blocks"]


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
