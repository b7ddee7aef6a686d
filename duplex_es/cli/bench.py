"""``duplex-es bench``: a first set of figures for the log and for a spoken turn, on SQLite and
PostgreSQL, written to ``bench/results.json`` and ``bench/RESULTS.md``.

Figures are measured, never asserted: machines here are noisy, so targets live in this report.
"""

from __future__ import annotations

import asyncio
import json
import os
import platform
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

import numpy as np
import sqlalchemy as sa
from rich.console import Console
from rich.table import Table

from duplex_es.domain import fold
from duplex_es.events import SessionConfig, SessionOpened, TextAppended
from duplex_es.store import Database, EventLog, upgrade

__all__ = ["run_bench"]


def _percentiles(samples_s: list[float]) -> dict[str, float]:
    ms = np.asarray(samples_s) * 1000
    return {f"p{p}_ms": round(float(np.percentile(ms, p)), 3) for p in (50, 95, 99)}


def _durability(db: Database) -> str:
    with db.engine.connect() as conn:
        if db.is_sqlite:
            value = conn.exec_driver_sql("PRAGMA synchronous").scalar()
            return f"sqlite synchronous={ {0: 'OFF', 1: 'NORMAL', 2: 'FULL', 3: 'EXTRA'}.get(value, value) }, WAL"
        return f"postgresql synchronous_commit={conn.exec_driver_sql('SHOW synchronous_commit').scalar()}"


def _bench_log(db: Database, n_single: int, n_batches: int) -> list[dict[str, Any]]:
    log = EventLog(db)
    rows = []
    sid = f"bench_single_{time.time_ns()}"
    log.append(sid, [SessionOpened(session_id=sid, config=SessionConfig(model="bench"))], expected_seq=0)
    lat = []
    t0 = time.perf_counter()
    for i in range(n_single):
        s = time.perf_counter()
        log.append(sid, [TextAppended(text=f"t{i}")], expected_seq=i + 1)
        lat.append(time.perf_counter() - s)
    total = time.perf_counter() - t0
    rows.append({"measurement": "durable append, 1 event per transaction", "events": n_single,
                 "events_per_s": round(n_single / total), **_percentiles(lat)})

    sid = f"bench_batch_{time.time_ns()}"
    log.append(sid, [SessionOpened(session_id=sid, config=SessionConfig(model="bench"))], expected_seq=0)
    lat = []
    t0 = time.perf_counter()
    for b in range(n_batches):
        s = time.perf_counter()
        log.append(sid, [TextAppended(text=f"b{b}.{i}") for i in range(100)], expected_seq=1 + b * 100)
        lat.append(time.perf_counter() - s)
    total = time.perf_counter() - t0
    rows.append({"measurement": "durable append, 100 events per transaction", "events": n_batches * 100,
                 "events_per_s": round(n_batches * 100 / total), **_percentiles(lat)})

    t0 = time.perf_counter()
    records = log.read_session(sid)
    state = fold((r.seq, r.event) for r in records)
    total = time.perf_counter() - t0
    assert state.seq == len(records)
    rows.append({"measurement": "rebuild: read + decode + reducer", "events": len(records),
                 "events_per_s": round(len(records) / total)})
    return rows


def _bench_turns(url: str, tmp: Path, turns: int, pcm: bytes) -> dict[str, Any]:
    from duplex_es.cli.conversation import speak_and_listen
    from duplex_es.cli.processes import free_port, start_server, start_worker, wait_healthy

    port = free_port()
    server = start_server(url, port, tmp / "serve.log", ["--log-level", "WARNING"])
    worker = start_worker(url, tmp / "worker.log", ["--log-level", "WARNING"])
    first_audio, done = [], []
    try:
        wait_healthy(port, server)
        for _ in range(turns):
            turn = asyncio.run(speak_and_listen(f"ws://127.0.0.1:{port}/v1", pcm))
            first_audio.append(turn.timings["first_audio_s"])
            done.append(turn.timings["done_s"])
    finally:
        worker.stop()
        server.stop()
    return {
        "measurement": "spoken turn (5.2 s question): response.create → first audio delta",
        "turns": turns,
        **_percentiles(first_audio),
        "then_to_response_done_p50_ms": round(float(np.median(np.asarray(done) - np.asarray(first_audio)) * 1000), 1),
    }


def _bench_world(reps: int) -> dict[str, Any]:
    """Render one 256x256 block of 12 frames (a 750 ms chunk at 16 fps) with the reference world
    engine, PNG encoding included."""
    from duplex_es.events import ControlEvent, Control, WorldConfig, WorldTickIssued
    from duplex_es.worker.world.engine import CAMERA_SCHEMA, WorldContext, WorldEngine

    engine = WorldEngine()
    cfg = WorldConfig(width=256, height=256, fps=16, frames_per_chunk=12, seed=5)
    walk = (ControlEvent(event_id=1, control=Control(track="camera", schema=CAMERA_SCHEMA, data={"keys": ["W", "J"]})),)
    engine.render_chunk(WorldTickIssued(request_id="warm", epoch=0, chunk_index=0, config=cfg, seed=5))  # terrain cache
    render_s, total_s = [], []
    state = None
    for k in range(reps):
        tick = WorldTickIssued(request_id=f"r{k}", epoch=0, chunk_index=k, config=cfg, seed=5, control_events=walk, engine_state=state)
        t0 = time.perf_counter()
        _, state = engine.render_chunk(tick)
        render_s.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        engine.step(WorldContext(session_id="bench", tick=tick))
        total_s.append(time.perf_counter() - t0)
    return {
        "measurement": "world block 256x256x12 (chunk period 750 ms): render only",
        "events": reps,
        **_percentiles(render_s),
        "with_png_p50_ms": round(float(np.median(total_s)) * 1000, 1),
    }


def run_bench(console: Console, *, pg_url: str | None, out_dir: str, quick: bool = False) -> int:
    """Run the benchmarks and write the report; returns 0."""
    from duplex_es.cli.conversation import read_wav_pcm16
    from duplex_es.cli.demo import default_audio

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    n_single, n_batches, turns = (300, 20, 1) if quick else (2000, 200, 3)
    pcm = read_wav_pcm16(default_audio())
    results: dict[str, Any] = {
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform(), "python": platform.python_version()},
        "started_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "backends": {},
    }
    with tempfile.TemporaryDirectory() as tmpdir:
        tmp = Path(tmpdir)
        backends: list[tuple[str, str, Callable[[], None]]] = [("sqlite", f"sqlite:///{tmp / 'bench.db'}", lambda: None)]
        if pg_url:
            schema = f"dxes_bench_{os.getpid()}"
            admin = sa.create_engine(pg_url, isolation_level="AUTOCOMMIT")
            with admin.connect() as conn:
                conn.exec_driver_sql(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
                conn.exec_driver_sql(f'CREATE SCHEMA "{schema}"')

            def drop() -> None:
                with admin.connect() as conn:
                    conn.exec_driver_sql(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')

            sep = "&" if "?" in pg_url else "?"
            backends.append(("postgresql", f"{pg_url}{sep}options=-csearch_path%3D{schema}", drop))
        for name, url, cleanup in backends:
            try:
                db = Database(url)
                upgrade(db)
                with console.status(f"{name}: log benchmarks"):
                    rows = _bench_log(db, n_single, n_batches)
                with console.status(f"{name}: spoken turns through serve + worker"):
                    rows.append(_bench_turns(url, tmp / name, turns, pcm))
                results["backends"][name] = {"durability": _durability(db), "rows": rows}
                db.dispose()
            finally:
                cleanup()
    with console.status("world engine: rendering blocks"):
        results["world"] = _bench_world(3 if quick else 10)
    (out / "results.json").write_text(json.dumps(results, indent=2) + "\n")
    (out / "RESULTS.md").write_text(_markdown(results))
    for name, b in results["backends"].items():
        table = Table(title=f"{name} ({b['durability']})")
        for col in ("measurement", "events/turns", "ev/s", "p50 ms", "p95 ms", "p99 ms"):
            table.add_column(col)
        for r in b["rows"]:
            table.add_row(
                r["measurement"], str(r.get("events", r.get("turns", ""))), str(r.get("events_per_s", "")),
                str(r.get("p50_ms", "")), str(r.get("p95_ms", "")), str(r.get("p99_ms", "")),
            )
        console.print(table)
    w = results["world"]
    console.print(f"{w['measurement']}: p50 {w['p50_ms']} ms, p95 {w['p95_ms']} ms; with PNG encoding p50 {w['with_png_p50_ms']} ms")
    console.print(f"written: {out / 'results.json'}, {out / 'RESULTS.md'}")
    return 0


def _markdown(results: dict[str, Any]) -> str:
    m = results["machine"]
    lines = [
        "# Benchmark results",
        "",
        f"Measured {results['started_at']} on {m['cpus']} CPUs, {m['platform']}, Python {m['python']}, "
        "by `make bench` (`duplex-es bench`). Figures, not assertions: these machines are noisy.",
        "",
    ]
    for name, b in results["backends"].items():
        lines += [f"## {name} — {b['durability']}", "", "| measurement | n | events/s | p50 ms | p95 ms | p99 ms |", "|---|---|---|---|---|---|"]
        for r in b["rows"]:
            lines.append(
                f"| {r['measurement']} | {r.get('events', r.get('turns', ''))} | {r.get('events_per_s', '')} | "
                f"{r.get('p50_ms', '')} | {r.get('p95_ms', '')} | {r.get('p99_ms', '')} |"
            )
        lines.append("")
    if "world" in results:
        w = results["world"]
        lines += [
            "## world engine (CPU, one process)",
            "",
            "| measurement | n | p50 ms | p95 ms | p99 ms | with PNG p50 ms |",
            "|---|---|---|---|---|---|",
            f"| {w['measurement']} | {w['events']} | {w['p50_ms']} | {w['p95_ms']} | {w['p99_ms']} | {w['with_png_p50_ms']} |",
            "",
        ]
    return "\n".join(lines)
