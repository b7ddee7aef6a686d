"""Figures outside issue 6's table, kept from the first ``make bench``: a spoken turn through
``serve`` + ``worker`` (response.create → first audio delta), and the reference world engine's
block render on the CPU."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

from duplex_es_tools.bench.histogram import Latencies

__all__ = ["spoken_turns", "world_blocks"]


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
