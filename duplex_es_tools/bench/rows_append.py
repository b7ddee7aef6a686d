"""Rows 1–4: durable appends — one event per command from one client (rows 1 and 2), four
concurrent writers on PostgreSQL (row 3), and 100-event transactions (row 4) — each against
``eventsourcing`` 9.5.6 and a raw driver loop, run back to back on fresh databases."""

from __future__ import annotations

import contextlib
from typing import Any, Optional

from duplex_es.store import EventLog
from duplex_es_tools.bench.context import BenchContext
from duplex_es_tools.bench.histogram import Latencies
from duplex_es_tools.bench.order_check import TailWatcher, static_order
from duplex_es_tools.bench.ours import OursAppend, OursConcurrent, can_seal, writer_class
from duplex_es_tools.bench.peer_eventsourcing import EsConcurrent, EsSave
from duplex_es_tools.bench.peer_raw import RawAppend, RawConcurrent
from duplex_es_tools.bench.report import Comparison, Row, build_row, comparison, not_measured
from duplex_es_tools.bench.targets import MEASUREMENTS, target
from duplex_es_tools.bench.timing import Contender, Figures, run_back_to_back

__all__ = ["single_event_row", "concurrent_row", "batched_row"]


def _run(ctx: BenchContext, backend: str, makers: list[tuple[str, Any]], ops: int, warmup: int) -> list[tuple[Contender, Figures]]:
    """Open every contender on a fresh database of its own, run them back to back, close them."""
    with contextlib.ExitStack() as stack:
        contenders: list[Contender] = []
        for label, make in makers:
            bdb = stack.enter_context(ctx.fresh(backend, label))
            c = make(bdb)
            stack.callback(c.close)
            contenders.append(c)
        figures = run_back_to_back(contenders, ops, rounds=4, warmup=warmup)
    return list(zip(contenders, figures))


def _peer(name: str, f: Figures, ours: dict[str, Any], **extra: Any) -> Comparison:
    return comparison(name, f.as_dict(), ours, "events_per_s", **extra)


def single_event_row(ctx: BenchContext, backend: str) -> Row:
    """Row 1 (SQLite) or 2 (PostgreSQL): one client, one event per command. Ours is the
    ``GroupCommitWriter`` path when the tree has it (what a server uses), with plain
    ``EventLog.append`` as a comparison; the peers are ``app.save`` and the raw loop."""
    row = 1 if backend == "sqlite" else 2
    has_writer = writer_class() is not None
    makers: list[tuple[str, Any]] = [("ours-plain", lambda b: OursAppend(b))]
    if has_writer:
        makers.append(("ours-writer", lambda b: OursAppend(b, via_writer=True)))
    sealing = can_seal()
    if sealing:  # issue 17: the cost of sealing, beside the same path in the clear
        makers.append(("ours-sealed", lambda b: OursAppend(b, via_writer=has_writer, sealed=True)))
    makers += [("es", lambda b: EsSave(b)), ("raw", lambda b: RawAppend(b))]
    ctx.say(f"row {row} ({backend}): {', '.join(l for l, _ in makers)} × {ctx.sizes.single_ops} commands")
    results = _run(ctx, backend, makers, ctx.sizes.single_ops, ctx.sizes.warmup)
    named = {label: cf for (label, _), cf in zip(makers, results)}
    head_c, head_f = named["ours-writer"] if has_writer else named["ours-plain"]
    es_c, es_f = named["es"]
    raw_c, raw_f = named["raw"]
    ours = head_f.as_dict()
    comps = []
    if has_writer:
        comps.append(_peer("duplex_es EventLog.append (no writer)", named["ours-plain"][1], ours))
    if sealing:
        comps.append(_peer(named["ours-sealed"][0].name + " (issue 17: ours / this = the cost of sealing)", named["ours-sealed"][1], ours))
    es_extra = {"durability": f"its recorder: {es_c.durability}"} if getattr(es_c, "durability", "") else {}
    comps.append(_peer(es_c.name, es_f, ours, **es_extra))
    comps.append(_peer(raw_c.name, raw_f, ours))
    es_ratio = comps[-2]["ratio"]
    eps, p99 = ours["events_per_s"] or 0, ours["p99_ms"] or 1e9
    if row == 1:
        met = eps >= 2500 and p99 <= 2 and (es_ratio or 0) >= 1.5
    else:
        met = eps >= 800 and p99 <= 4 and (es_ratio or 0) >= 1.45
    note = (
        f"ours = {head_c.name}, one session, expected seq checked on every command; "
        + ("" if has_writer else "duplex_es.store.writer is not in this tree yet, so ours is EventLog.append; ")
        + "each contender on its own fresh database, 4 alternating rounds after a warm-up."
    )
    return build_row(
        row, backend, MEASUREMENTS[row], ours, n=head_f.events, target=target(row, backend), met=met,
        durability=ctx.durability[backend], ratio_of="events_per_s", comparisons=comps, note=note,
    )


def concurrent_row(ctx: BenchContext, backend: str) -> Row:
    """Row 3 (PostgreSQL): 4 threads, each appending one event per command to its own session
    through ONE shared ``GroupCommitWriter``; against the same without the writer,
    ``eventsourcing`` with 4 threads, and the raw loop with 4 connections under the lock. Then
    the order check: the timed log read back by position, and a second, shorter run with a
    reader tailing by position while the writers run."""
    row = 3
    if writer_class() is None:
        return not_measured(row, backend, MEASUREMENTS[row], target(row, backend), "duplex_es.store.writer.GroupCommitWriter is not in this tree yet")
    ops = ctx.sizes.concurrent_ops
    ctx.say(f"row 3 ({backend}): 4 writers × {ops // 4} commands: writer, no writer, eventsourcing, raw")
    order: dict[str, Any] = {}
    with contextlib.ExitStack() as stack:
        makers = [
            ("ours-writer", lambda b: OursConcurrent(b, via_writer=True)),
            ("ours-plain", lambda b: OursConcurrent(b, via_writer=False)),
            ("es", lambda b: EsConcurrent(b)),
            ("raw", lambda b: RawConcurrent(b)),
        ]
        contenders: list[Contender] = []
        ours_bdb = None
        for label, make in makers:
            bdb = stack.enter_context(ctx.fresh(backend, label))
            ours_bdb = ours_bdb or bdb
            c = make(bdb)
            stack.callback(c.close)
            contenders.append(c)
        figures = run_back_to_back(contenders, ops, rounds=4, warmup=ctx.sizes.warmup)
        check_db = ours_bdb.duplex()
        order["timed"] = static_order(EventLog(check_db))
        check_db.dispose()
    order["tailed"] = _tailed_run(ctx, backend, max(ops // 2, 40))
    ours = figures[0].as_dict()
    comps = [
        comparison(c.name, f.as_dict(), ours, "events_per_s")
        for c, f in zip(contenders[1:], figures[1:])
    ]
    t, tl = order["timed"], order["tailed"]
    ordered = t["gaps"] == 0 and t["seq_breaks"] == 0 and tl["late_fills"] == 0 and tl["gaps"] == 0
    met = (ours["events_per_s"] or 0) >= 2000 and ordered
    note = (
        f"positions {'in commit order' if ordered else 'NOT in commit order'}: the timed log read back by position "
        f"({t['events']} events) has {t['gaps']} gaps and {t['seq_breaks']} per-session seq breaks; a second run of "
        f"{tl['events']} commands with a reader tailing by position during the writes ({tl['polls']} polls) saw "
        f"{tl['late_fills']} late fills and {tl['gaps']} gaps. Ours = one GroupCommitWriter shared by the 4 threads."
    )
    return build_row(
        row, backend, MEASUREMENTS[row], ours, n=figures[0].events, target=target(row, backend), met=met,
        durability=ctx.durability[backend], ratio_of="events_per_s", comparisons=comps, note=note,
    )


def _tailed_run(ctx: BenchContext, backend: str, ops: int) -> dict[str, Any]:
    with ctx.fresh(backend, "ours-tailed") as bdb:
        c = OursConcurrent(bdb, via_writer=True)
        reader_db = bdb.duplex()
        watcher: Optional[TailWatcher] = None
        try:
            watcher = TailWatcher(EventLog(reader_db))
            c.run(0, ops, Latencies())
        finally:
            c.close()
            if watcher is not None:
                watcher.stop()
        static = static_order(EventLog(reader_db))
        late = watcher.late_fills()
        reader_db.dispose()
    return {"events": static["events"], "gaps": static["gaps"] + static["seq_breaks"], "late_fills": late, "polls": watcher.polls}


def batched_row(ctx: BenchContext, backend: str) -> Row:
    """Row 4: one client, 100 events per transaction (an engine's output burst), through
    ``EventLog.append``; against ``app.save`` of 100 aggregate events and the raw loop with
    ``executemany`` of 100 rows."""
    row = 4
    batches = ctx.sizes.batches
    ctx.say(f"row 4 ({backend}): {batches} transactions of 100 events: ours, eventsourcing, raw")
    makers = [
        ("ours-batch", lambda b: OursAppend(b, batch=100)),
        ("es-batch", lambda b: EsSave(b, batch=100)),
        ("raw-batch", lambda b: RawAppend(b, batch=100)),
    ]
    results = _run(ctx, backend, makers, batches, max(ctx.sizes.warmup // 20, 3))
    (_, ours_f), *peers = results
    ours = ours_f.as_dict()
    comps = [_peer(c.name, f, ours) for c, f in peers]
    floor = 80_000 if backend == "sqlite" else 20_000
    raw_ratio = comps[-1]["ratio"]  # the raw driver loop is the last peer
    return build_row(
        row, backend, MEASUREMENTS[row], ours, n=ours_f.events, target=target(row, backend),
        met=(ours["events_per_s"] or 0) >= floor and (raw_ratio or 0) >= 0.8, durability=ctx.durability[backend], ratio_of="events_per_s",
        comparisons=comps, note="latencies are per 100-event transaction; ours = EventLog.append of 100 events with an expected seq.",
    )
