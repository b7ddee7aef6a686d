"""Rows 5 and 6: rebuilding a session from the log (``read_session`` + decode + ``fold``) against
``eventsourcing``'s ``repository.get`` and a raw select + ``json.loads`` loop; and loading a
long session from its snapshot plus a tail (``load_state``) at three history lengths."""

from __future__ import annotations

import random

from duplex_es.store import EventLog
from duplex_es_tools.bench.context import BenchContext
from duplex_es_tools.bench.fill import bulk_history
from duplex_es_tools.bench.histogram import Latencies
from duplex_es_tools.bench.ours import Loader, rebuild, sealed_history, sealing_log
from duplex_es_tools.bench.peer_eventsourcing import VERSION, es_replay
from duplex_es_tools.bench.peer_raw import raw_replay
from duplex_es_tools.bench.report import Row, build_row, comparison
from duplex_es_tools.bench.targets import MEASUREMENTS, target
from duplex_es_tools.bench.timing import alternate_calls
from duplex_es_tools.bench.workload import SEED

__all__ = ["rebuild_row", "load_row", "TAIL"]

#: Events after the snapshot in row 6: half the server's default ``--snapshot-every 1000``,
#: i.e. the mean tail a load meets.
TAIL = 500


def rebuild_row(ctx: BenchContext, backend: str) -> Row:
    """Row 5: the full rebuild of one session of ``rebuild_events`` events, alternated with
    ``eventsourcing``'s replay of an aggregate of as many events and the raw ceiling (reading
    the same rows as ours)."""
    row, n = 5, ctx.sizes.rebuild_events
    ctx.say(f"row 5 ({backend}): rebuild of a {n:,}-event session: ours, eventsourcing repository.get, raw")
    with ctx.fresh(backend, "ours-rebuild") as ours_bdb, ctx.fresh(backend, "es-replay") as es_bdb, ctx.fresh(backend, "ours-sealed-rebuild") as sealed_bdb:
        db, sealed_db = ours_bdb.duplex(), sealed_bdb.duplex()
        log = EventLog(db)
        bulk_history(ours_bdb, "bench-rebuild", n)
        raw = raw_replay(ours_bdb, "bench-rebuild")
        calls = [rebuild(log, "bench-rebuild")]
        sealed_log = sealing_log(sealed_db)
        if sealed_log is not None:  # issue 17: the same session written with its content sealed
            sealed_history(sealed_log, "bench-rebuild", n)
        try:
            with es_replay(es_bdb, n) as es_call:
                calls += [es_call, raw] + ([rebuild(sealed_log, "bench-rebuild")] if sealed_log is not None else [])
                figures = alternate_calls(calls, ctx.sizes.rebuild_reps)
        finally:
            raw.close()  # type: ignore[attr-defined]
            db.dispose()
            sealed_db.dispose()
    ours_f, es_f, raw_f = figures[:3]
    ours = ours_f.as_dict()
    comps = [
        comparison(f"eventsourcing {VERSION} repository.get (no snapshot)", es_f.as_dict(), ours, "events_per_s"),
        comparison("raw select + json.loads + trivial fold", raw_f.as_dict(), ours, "events_per_s"),
    ]
    if len(figures) > 3:
        comps.append(comparison("ours, the same session with its content sealed (issue 17: ours / this = the cost of opening)", figures[3].as_dict(), ours, "events_per_s"))
    eps = ours["events_per_s"] or 0
    met = eps >= 150_000 and (comps[1]["ratio"] or 0) >= 0.5
    note = (
        f"a {n:,}-event speech session written in bulk with the project's codec and hash chain (cycles of 8 text appends, a heartbeat, a clear: the state stays bounded); "
        f"latencies are per full rebuild; {ctx.sizes.rebuild_reps} alternating rebuilds each after a warm-up. "
        f"eventsourcing replays a {n:,}-event aggregate of one-text events."
    )
    return build_row(
        row, backend, MEASUREMENTS[row], ours, n=n, target=target(row, backend), met=met,
        durability=ctx.durability[backend], ratio_of="events_per_s", comparisons=comps, note=note,
    )


def load_row(ctx: BenchContext, backend: str) -> Row:
    """Row 6: sessions of each length in ``load_lengths`` in one log, each with a snapshot
    :data:`TAIL` events before its head; ``loads`` timed ``load_state`` calls per length in a
    seeded shuffled order. Ours is the longest; the shorter ones are the comparisons."""
    row = 6
    lengths = ctx.sizes.load_lengths
    ctx.say(f"row 6 ({backend}): sessions of {', '.join(f'{n:,}' for n in lengths)} events with a snapshot {TAIL} events before the head")
    with ctx.fresh(backend, "ours-load") as bdb:
        db = bdb.duplex()
        try:
            loaders = [Loader(bdb, db, n, TAIL, ctx.say) for n in lengths]
            hists = [Latencies() for _ in loaders]
            rng = random.Random(SEED)
            for ld in loaders:  # warm-up
                for _ in range(5):
                    ld.load(Latencies())
            order = [k for k in range(len(loaders)) for _ in range(ctx.sizes.loads)]
            rng.shuffle(order)
            for k in order:
                loaders[k].load(hists[k])
        finally:
            db.dispose()
    ours = {"events_per_s": None, **hists[-1].summary_ms()}
    comps = [
        comparison(f"ours, session of {n:,} events", {"events_per_s": None, **h.summary_ms()}, ours, "p99_ms")
        for n, h in zip(lengths[:-1], hists[:-1])
    ]
    p99 = ours["p99_ms"] or 1e9
    flat = comps[0]["ratio"] if comps else None
    met = p99 <= 5 and flat is not None and flat <= 1.5
    note = (
        f"each session written in bulk (executemany / COPY) with the project's codec and hash chain — the rows "
        f"EventLog.append would write — and its snapshot saved with save_snapshot at seq "
        f"length − {TAIL}; load_state reads the newest snapshot and folds the {TAIL}-event tail. All lengths live in one "
        f"log of {sum(lengths):,} events; p99 at {lengths[-1]:,} / p99 at {lengths[0]:,} = {flat}×."
    )
    return build_row(
        row, backend, MEASUREMENTS[row], ours, n=ctx.sizes.loads, target=target(row, backend), met=met,
        durability=ctx.durability[backend], ratio_of="p99_ms", comparisons=comps, note=note,
    )
