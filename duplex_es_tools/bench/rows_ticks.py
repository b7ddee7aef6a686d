"""Rows 7 and 8: the tick queue — how long ``TickQueue.claim`` takes when a tick is ready, and how
long an idle worker takes to claim a tick after the append that issued it commits — against raw
claim and wake-up loops on the same tables."""

from __future__ import annotations

import contextlib
import random
import time
from typing import Any

from duplex_es.store import EventLog, TickQueue
from duplex_es_tools.bench.context import BenchContext
from duplex_es_tools.bench.histogram import Latencies
from duplex_es_tools.bench.ours import TickFeeder, WakeupProbe, claim_loop, wakeup_api
from duplex_es_tools.bench.peer_raw import RawClaim, RawWakeup
from duplex_es_tools.bench.report import Row, build_row, comparison, not_measured
from duplex_es_tools.bench.targets import MEASUREMENTS, target
from duplex_es_tools.bench.timing import Contender, FnContender, run_back_to_back
from duplex_es_tools.bench.workload import SEED

__all__ = ["claim_row", "wakeup_row", "POLL_S"]

#: The idle worker's polling interval in row 8 (s).
POLL_S = 0.010


def _ours_claimer(bdb: Any, ticks: int, synchronous: str) -> FnContender:
    db = bdb.duplex(synchronous=synchronous)
    TickFeeder(EventLog(db)).issue(ticks)
    name = "duplex_es TickQueue.claim" + ("" if synchronous == "FULL" else f", synchronous={synchronous}")
    return FnContender(name, claim_loop(TickQueue(EventLog(db))), close=db.dispose)


def _raw_claimer(bdb: Any, ticks: int, synchronous: str) -> FnContender:
    db = bdb.duplex()
    TickFeeder(EventLog(db)).issue(ticks)
    db.dispose()
    raw = RawClaim(bdb, synchronous=synchronous)
    how = "BEGIN IMMEDIATE + UPDATE … RETURNING" if bdb.is_sqlite else "autocommit UPDATE … FOR UPDATE SKIP LOCKED RETURNING"
    name = f"raw claim ({how})" + ("" if synchronous == "FULL" else f", synchronous={synchronous}")
    return FnContender(name, raw.op, close=raw.close)


def claim_row(ctx: BenchContext, backend: str) -> Row:
    """Row 7: ``claims`` claims of a ready tick, one at a time, from a queue filled beforehand;
    against the raw claim. On SQLite, ours and raw are measured again with
    ``synchronous=NORMAL`` (the calibration's setting), since every claim is a commit."""
    row = 7
    total = ctx.sizes.claims + ctx.sizes.warmup
    variants = [("FULL", _ours_claimer), ("FULL", _raw_claimer)]
    if backend == "sqlite":
        variants += [("NORMAL", _ours_claimer), ("NORMAL", _raw_claimer)]
    ctx.say(f"row 7 ({backend}): {ctx.sizes.claims} claims each: {len(variants)} contenders")
    with contextlib.ExitStack() as stack:
        contenders: list[Contender] = []
        for k, (sync, make) in enumerate(variants):
            bdb = stack.enter_context(ctx.fresh(backend, f"claim{k}"))
            c = make(bdb, total, sync)
            stack.callback(c.close)
            contenders.append(c)
        figures = run_back_to_back(contenders, ctx.sizes.claims, rounds=4, warmup=ctx.sizes.warmup)
    ours = figures[0].as_dict(throughput=False)
    comps = [comparison(c.name, f.as_dict(throughput=False), ours, "p99_ms") for c, f in zip(contenders[1:], figures[1:])]
    p50, p99 = ours["p50_ms"] or 1e9, ours["p99_ms"] or 1e9
    met = (p50 <= 0.1 and p99 <= 1.0) if backend == "sqlite" else (p50 <= 1.0 and p99 <= 3.0)
    note = (
        "a claim = TickQueue.claim of the oldest pending tick ("
        + (
            "a read, then BEGIN IMMEDIATE with one UPDATE … RETURNING and the tick.issued read; under "
            "synchronous=FULL every claim's commit waits for fdatasync"
            if backend == "sqlite"
            else "one autocommit UPDATE … (SELECT … FOR UPDATE SKIP LOCKED) … FROM events RETURNING"
        )
        + "); the queue holds the ticks beforehand."
    )
    return build_row(
        row, backend, MEASUREMENTS[row], ours, n=figures[0].ops, target=target(row, backend), met=met,
        durability=ctx.durability[backend], ratio_of="p99_ms", comparisons=comps, note=note,
    )


def wakeup_row(ctx: BenchContext, backend: str) -> Row:
    """Row 8: an idle worker thread runs the worker's idle loop (claim; else
    ``Wakeup.wait(10 ms)``); the main thread appends one ``TickIssued`` through
    ``EventLog.append``. Latency = the claim returning − the append returning. Alternated with
    the raw loop (NOTIFY + SKIP LOCKED claim on PostgreSQL, a 10 ms sleep poll on SQLite), with
    a seeded random pause of 0–20 ms between ticks so the polling phase varies."""
    row = 8
    if wakeup_api() is None:
        return not_measured(row, backend, MEASUREMENTS[row], target(row, backend), "duplex_es.store.notify (Wakeup) is not in this tree yet")
    n = ctx.sizes.wakeups
    ctx.say(f"row 8 ({backend}): {n} wake-ups each: ours (Wakeup, poll {POLL_S * 1000:.0f} ms), raw")
    rng = random.Random(SEED)
    ours_lat, raw_lat = Latencies(), Latencies()
    early = 0
    with ctx.fresh(backend, "ours-wake") as ob, ctx.fresh(backend, "raw-wake") as rb:
        ours, raw = WakeupProbe(ob, poll_s=POLL_S), RawWakeup(rb, poll_s=POLL_S)
        try:
            for i in range(ctx.sizes.warmup // 10 + 5 + n):
                timed = i >= ctx.sizes.warmup // 10 + 5
                for probe, hist in ((ours, ours_lat), (raw, raw_lat)):
                    time.sleep(rng.uniform(0, 2 * POLL_S))
                    ns = probe.once()
                    if timed:
                        hist.record_ns(ns)
                        early += probe is ours and ns <= 0
        finally:
            ours.close()
            raw.close()
    figures = {"events_per_s": None, **ours_lat.summary_ms()}
    raw_name = "raw psycopg LISTEN/NOTIFY + SKIP LOCKED claim" if backend == "postgresql" else f"raw sqlite3 poll every {POLL_S * 1000:.0f} ms + claim"
    comps = [comparison(raw_name, {"events_per_s": None, **raw_lat.summary_ms()}, figures, "p99_ms")]
    p99 = figures["p99_ms"] or 1e9
    met = p99 <= (2.0 if backend == "postgresql" else 20.0)
    how = "NOTIFY on the ticks channel wakes Wakeup.wait" if backend == "postgresql" else f"Wakeup.wait sleeps the {POLL_S * 1000:.0f} ms poll (no NOTIFY on SQLite)"
    note = (
        f"{how}; the worker has its own Database, as a worker process would. "
        + (f"{early} of {n} claims returned before the append did (recorded as ~0). " if early else "")
    )
    return build_row(
        row, backend, MEASUREMENTS[row], figures, n=n, target=target(row, backend), met=met,
        durability=ctx.durability[backend], ratio_of="p99_ms", comparisons=comps, note=note,
    )
