"""Row 12: append latency as the log grows. One log is filled in steps (10k, 100k, 1M, 10M events
by default); at each size, single-event appends through ``EventLog.append`` are timed, alternated
with a raw single-row insert loop on the same log.

The log is filled with a bulk SQL insert — a recursive CTE on SQLite, ``generate_series`` on
PostgreSQL — of filler sessions of 10,000 ``input.text.appended`` events each: well-formed rows
(type, version, JSON data, seqs 1..10,000 per session, fresh positions) whose hashes are not a
chain but 64 hex digits of a counter (the bench log is never audited, and is dropped afterwards).
During the fill SQLite gets a 1 GiB page cache and PostgreSQL's autovacuum is off for the table
(back on, after a ``VACUUM ANALYZE``, before anything is timed). What is measured is our append
at that log size, not the fill.
"""

from __future__ import annotations

import time
from typing import Any

from duplex_es_tools.bench.context import BenchContext
from duplex_es_tools.bench.databases import BenchDatabase
from duplex_es_tools.bench.ours import OursAppend
from duplex_es_tools.bench.peer_raw import RawAppend
from duplex_es_tools.bench.report import Row, build_row, comparison
from duplex_es_tools.bench.targets import MEASUREMENTS, target
from duplex_es_tools.bench.timing import run_back_to_back

__all__ = ["growth_row", "growth_sizes", "fill_log", "FILLER_SESSION_EVENTS"]

#: Events per filler session.
FILLER_SESSION_EVENTS = 10_000

_FILL_CHUNK = 1_000_000

_SQLITE_FILL = """
WITH RECURSIVE c(i) AS (SELECT ? UNION ALL SELECT i + 1 FROM c WHERE i < ?)
INSERT INTO events (session_id, seq, type, version, data, recorded_at_us, prev_hash, hash)
SELECT printf('fill-%07d', i / {per}), i % {per} + 1, 'input.text.appended', 1,
       '{{"client_event_id":null,"text":"filler text ' || i || '"}}', ?,
       printf('%064x', 2 * i), printf('%064x', 2 * i + 1)
FROM c
""".format(per=FILLER_SESSION_EVENTS)

_PG_FILL = """
INSERT INTO events (session_id, seq, type, version, data, recorded_at_us, prev_hash, hash)
SELECT 'fill-' || lpad((i / {per})::text, 7, '0'), mod(i, {per}) + 1, 'input.text.appended', 1,
       '{{"client_event_id":null,"text":"filler text ' || i || '"}}', %s,
       lpad(to_hex(2 * i), 64, '0'), lpad(to_hex(2 * i + 1), 64, '0')
FROM generate_series(%s::bigint, %s::bigint) AS i
""".format(per=FILLER_SESSION_EVENTS)


def growth_sizes(log_events: int) -> list[int]:
    """The log sizes measured: 10k, 100k, 1M, 10M below ``log_events``, then ``log_events``."""
    return [s for s in (10_000, 100_000, 1_000_000, 10_000_000) if s < log_events] + [log_events]


def fill_log(bdb: BenchDatabase, start: int, stop: int) -> None:
    """Insert filler events ``start .. stop-1`` (their global filler index) in transactions of
    at most 1M rows, then checkpoint (and on PostgreSQL ``VACUUM ANALYZE``), so the appends
    timed next do not pay for the fill."""
    now = time.time_ns() // 1000
    if bdb.is_sqlite:
        conn = bdb.sqlite()
        conn.execute("PRAGMA cache_size=-1048576")
        try:
            for lo in range(start, stop, _FILL_CHUNK):
                hi = min(lo + _FILL_CHUNK, stop) - 1
                conn.execute("BEGIN IMMEDIATE")
                conn.execute(_SQLITE_FILL, (lo, hi, now))
                conn.execute("COMMIT")
            conn.execute("ANALYZE")
            conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        finally:
            conn.close()
        return
    with bdb.psycopg(autocommit=True) as conn:
        conn.execute("ALTER TABLE events SET (autovacuum_enabled = false)")
        for lo in range(start, stop, _FILL_CHUNK):
            hi = min(lo + _FILL_CHUNK, stop) - 1
            with conn.transaction():
                conn.execute(_PG_FILL, (now, lo, hi))
        conn.execute("ALTER TABLE events RESET (autovacuum_enabled)")
        conn.execute("VACUUM ANALYZE events")
        conn.execute("CHECKPOINT")


def _count(bdb: BenchDatabase) -> int:
    if bdb.is_sqlite:
        conn = bdb.sqlite()
        try:
            return conn.execute("SELECT count(*) FROM events").fetchone()[0]
        finally:
            conn.close()
    with bdb.psycopg(autocommit=True) as conn:
        return conn.execute("SELECT count(*) FROM events").fetchone()[0]


def growth_row(ctx: BenchContext, backend: str) -> Row:
    """Row 12: the p50 of ``growth_appends`` single-event appends at each log size; ours is the
    largest size, the comparisons are the smaller sizes (ratio = p50 at the largest / p50 at
    that size: the target is ≤ 1.5 against 10k) and the raw insert at the largest size."""
    row = 12
    sizes = growth_sizes(ctx.log_events)
    m = ctx.sizes.growth_appends
    ctx.say(f"row 12 ({backend}): {m} appends at log sizes {', '.join(f'{s:,}' for s in sizes)}")
    per_size: list[dict[str, Any]] = []
    raw_at: list[dict[str, Any]] = []
    fill_s = 0.0
    with ctx.fresh(backend, "ours-growth") as bdb:
        ours = OursAppend(bdb, session_id="bench-growth")
        raw = RawAppend(bdb)
        try:
            filled = 0
            for size in sizes:
                missing = size - _count(bdb)
                if missing > 0:
                    t0 = time.perf_counter()
                    fill_log(bdb, filled, filled + missing)
                    fill_s += time.perf_counter() - t0
                    filled += missing
                actual = _count(bdb)
                f_ours, f_raw = run_back_to_back([ours, raw], m, rounds=2, warmup=ctx.sizes.warmup // 2)
                per_size.append({"size": size, "actual": actual, **f_ours.as_dict(throughput=False)})
                raw_at.append({"size": size, **f_raw.as_dict(throughput=False)})
                ctx.say(f"    {actual:,} events in the log: ours p50 {per_size[-1]['p50_ms']} ms, raw p50 {raw_at[-1]['p50_ms']} ms")
        finally:
            ours.close()
            raw.close()
    top = per_size[-1]
    figures = {"events_per_s": None, "p50_ms": top["p50_ms"], "p95_ms": top["p95_ms"], "p99_ms": top["p99_ms"]}
    comps = [comparison(f"ours at {s['actual']:,} events", s, figures, "p50_ms") for s in per_size[:-1]]
    comps += [comparison(f"raw single-row insert at {raw_at[-1]['size']:,} events", raw_at[-1], figures, "p50_ms")]
    comps += [comparison(f"raw single-row insert at {raw_at[0]['size']:,} events", raw_at[0], figures, "p50_ms")]
    growth = comps[0]["ratio"] if len(per_size) > 1 else None
    met = growth is not None and growth <= 1.5 and top["size"] >= 10_000_000
    note = (
        f"log grown to {top['actual']:,} events; {fill_s:.0f} s of bulk SQL fill "
        f"({'recursive CTE' if backend == 'sqlite' else 'generate_series'}, filler sessions of {FILLER_SESSION_EVENTS:,} "
        f"well-formed input.text.appended rows, hashes not chained). p50 at the largest / p50 at 10k = {growth}×."
        + ("" if top["size"] >= 10_000_000 else f" The log only reached {top['size']:,} events (--log-events), so the target is not decided.")
    )
    return build_row(
        row, backend, MEASUREMENTS[row], figures, n=m, target=target(row, backend),
        met=met if top["size"] >= 10_000_000 else None, durability=ctx.durability[backend], ratio_of="p50_ms",
        comparisons=comps, note=note,
    )
