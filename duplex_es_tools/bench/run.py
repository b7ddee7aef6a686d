"""Orchestration of ``make bench``: machine facts first, then every selected row on every selected
backend (each row runs its comparisons itself, back to back), the serving rows 9–15 from
:mod:`duplex_es_tools.bench.serving` (row 13, the bare transport ceiling, once, before the
backends' row 10 that is compared with it), the extra figures, and the report."""

from __future__ import annotations

import contextlib
import logging
import os
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any, Callable, Optional, Sequence

import attrs

from duplex_es_tools.bench.context import FULL, QUICK, BenchContext
from duplex_es_tools.bench.databases import fresh_database, pg_base_url, pg_conninfo
from duplex_es_tools.bench.machine import machine_facts, postgresql_facts
from duplex_es_tools.bench.report import Row, not_measured, write_report
from duplex_es_tools.bench.rows_append import batched_row, concurrent_row, single_event_row
from duplex_es_tools.bench.rows_growth import growth_row
from duplex_es_tools.bench.rows_read import load_row, rebuild_row
from duplex_es_tools.bench.rows_ticks import claim_row, wakeup_row
from duplex_es_tools.bench.targets import ALL_ROWS, BACKENDS, MEASUREMENTS, NO_BACKEND, SERVING_ROWS, target
from duplex_es_tools.bench.workload import SEED

__all__ = ["BenchOptions", "run_suite", "ROW_FUNCTIONS", "DEFAULT_LOG_EVENTS"]

log = logging.getLogger(__name__)

#: Row 12's default log size (events).
DEFAULT_LOG_EVENTS = 10_000_000

#: The function measuring each of our rows on one backend.
ROW_FUNCTIONS: dict[int, Callable[[BenchContext, str], Row]] = {
    1: single_event_row,
    2: single_event_row,
    3: concurrent_row,
    4: batched_row,
    5: rebuild_row,
    6: load_row,
    7: claim_row,
    8: wakeup_row,
    12: growth_row,
}


@attrs.frozen
class BenchOptions:
    """What to run.

    Attributes:
        out_dir: where ``results.json`` and ``RESULTS.md`` go.
        backends: ``("sqlite",)``, ``("postgresql",)`` or both.
        pg_url: the PostgreSQL server (a fresh schema per measurement, dropped after).
        rows: the rows to measure (1–12).
        extras: also measure the figures outside the table (spoken turn, world block, VAD per append).
        quick: small n, for a smoke test (figures not meaningful).
        log_events: row 12's largest log size (events).
        work_dir: the folder under which the temp folder for SQLite files is made (the disk
            whose ``fdatasync`` is reported); default the working directory.
        argv: the command line, for the report.
    """

    out_dir: Path = Path("bench")
    backends: tuple[str, ...] = ("sqlite", "postgresql")
    pg_url: Optional[str] = None
    rows: tuple[int, ...] = ALL_ROWS
    extras: bool = True
    quick: bool = False
    log_events: int = DEFAULT_LOG_EVENTS
    work_dir: Optional[Path] = None
    argv: str = ""


def _sqlite_durability(folder: Path) -> str:
    with fresh_database("sqlite", folder, None, "probe") as bdb:
        db = bdb.duplex()
        try:
            with db.engine.connect() as conn:
                journal = conn.exec_driver_sql("PRAGMA journal_mode").scalar()
                sync = conn.exec_driver_sql("PRAGMA synchronous").scalar()
        finally:
            db.dispose()
    return f"journal_mode={str(journal).upper()}, synchronous={ {0: 'OFF', 1: 'NORMAL', 2: 'FULL', 3: 'EXTRA'}.get(sync, sync) }"


def _safely(say: Callable[[str], Any], row: int, backend: str, fn: Callable[[], Any]) -> Any:
    try:
        return fn()
    except KeyboardInterrupt:
        raise
    except Exception as exc:  # noqa: BLE001 - one failing row must not lose the others
        say(f"row {row} ({backend}) failed: {type(exc).__name__}: {exc}")
        log.debug("row %s (%s) failed", row, backend, exc_info=True)
        traceback.print_exc()
        return not_measured(row, backend, MEASUREMENTS[row], target(row, backend), f"failed with {type(exc).__name__}: {str(exc)[:300]}")


def _serving_rows(ctx: BenchContext, backends: Sequence[str], wanted: set[int], out_dir: Path) -> list[Row]:
    try:
        from duplex_es_tools.bench.serving import run_serving_rows
    except ImportError as exc:
        reason = f"duplex_es_tools.bench.serving is not available ({exc})"
        return [not_measured(r, b, MEASUREMENTS[r], target(r, b), reason) for r in sorted(wanted) for b in backends]
    rows: list[Row] = []
    ceiling = None
    if 13 in wanted:
        # Once per run, not per backend: it has none. Row 10 of each backend is compared with it.
        from duplex_es_tools.bench.serving import ceiling_row, transport_ceiling

        ctx.say("row 13: bare transport ceiling (duplex_es_tools.bare_transport, row 10's ramp)")
        got = _safely(ctx.say, 13, NO_BACKEND, lambda: transport_ceiling(quick=ctx.quick, out_dir=ctx.folder / "serving-transport"))
        if isinstance(got, dict):  # failed: the not-measured row
            rows.append(got)
        else:
            ceiling = got
    for b in backends:
        here = {r for r in wanted if b in BACKENDS[r]}  # row 15 is measured on SQLite only
        if not here:
            continue
        ctx.say(f"rows {', '.join(map(str, sorted(here)))} ({b}): serving (duplex_es_tools.bench.serving)")

        def call(b: str = b, here: set[int] = here) -> list[Row]:
            with ctx.fresh(b, "serving") as bdb:
                return run_serving_rows(
                    b, bdb.url, quick=ctx.quick, out_dir=ctx.folder / f"serving-{b}", rows=sorted(here), say=ctx.say, ceiling=ceiling
                )

        got = _safely(ctx.say, min(here), b, call)
        if isinstance(got, dict):  # failed: one not-measured row per wanted row
            got = [not_measured(r, b, MEASUREMENTS[r], target(r, b), got["note"].removeprefix("not measured: ")) for r in sorted(here)]
        for r in got:
            if r.get("row") in here:
                r.setdefault("durability", ctx.durability.get(b, ""))
                rows.append(r)
    if ceiling is not None:
        rows.append(ceiling_row(ceiling, [r for r in rows if r.get("row") == 10]))
    return rows


def _extras(ctx: BenchContext, backends: Sequence[str]) -> list[dict[str, Any]]:
    from duplex_es_tools.bench.extras import reply_latency, spoken_turns, vad_appends, world_blocks

    out = []
    for b in backends:
        ctx.say(f"extra ({b}): spoken turns through serve + worker")

        def turns(b: str = b) -> dict[str, Any]:
            with ctx.fresh(b, "turns") as bdb:
                return {**spoken_turns(bdb.url, ctx.folder / f"turns-{b}", 1 if ctx.quick else 3), "backend": b, "durability": ctx.durability[b]}

        try:
            out.append(turns())
        except Exception as exc:  # noqa: BLE001
            out.append({"measurement": "spoken turn", "backend": b, "note": f"failed: {type(exc).__name__}: {exc}"})
    ctx.say("extra (sqlite): end of speech → first reply audio, full duplex beside turn-based")
    try:
        with ctx.fresh("sqlite", "latency") as bdb:
            out.append({**reply_latency(bdb.url, ctx.folder / "latency", 1 if ctx.quick else 5), "backend": "sqlite", "durability": ctx.durability.get("sqlite", "")})
    except Exception as exc:  # noqa: BLE001 - the report says what failed
        out.append({"measurement": "end of user speech → first reply audio", "backend": "sqlite", "note": f"failed: {type(exc).__name__}: {exc}"})
    ctx.say("extra (sqlite): stored size of a sealed spoken turn, beside the same events in the clear")
    try:
        from duplex_es_tools.bench.extras import sealed_turn_size
        from duplex_es_tools.bench.ours import can_seal

        if can_seal():
            out.append({**sealed_turn_size(ctx.folder / "sealed-turn"), "backend": "sqlite"})
    except Exception as exc:  # noqa: BLE001 - the report says what failed
        out.append({"measurement": "stored size of a sealed spoken turn", "backend": "sqlite", "note": f"failed: {type(exc).__name__}: {exc}"})
    ctx.say("extra: world blocks on the CPU")
    out.append(world_blocks(3 if ctx.quick else 10))
    ctx.say("extra: server VAD per append, Silero beside energy")
    try:
        out.append(vad_appends(500 if ctx.quick else 5000))
    except Exception as exc:  # noqa: BLE001 - e.g. the model not installed: the report says so
        out.append({"measurement": "server VAD per 20 ms append", "backend": "cpu", "note": f"failed: {type(exc).__name__}: {exc}"})
    return out


def run_suite(opts: BenchOptions, say: Callable[[str], Any] = print) -> dict[str, Any]:
    """Run the benchmarks ``opts`` selects and write the report; returns the results (the
    content of ``results.json``)."""
    t_start = time.perf_counter()
    started = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    backends = list(opts.backends)
    work = Path(opts.work_dir or Path.cwd())
    with tempfile.TemporaryDirectory(prefix=".bench-", dir=work) as tmp:
        folder = Path(tmp)
        say(f"machine facts (fdatasync in {work})")
        machine = machine_facts(folder)
        machine["load_average_start"] = _load_average()
        machine["disk_fdatasync"]["folder"] = str(work)
        fs = machine["disk_fdatasync"]
        disk = f"disk fdatasync p50 {fs['p50_ms']} ms / p99 {fs['p99_ms']} ms"
        durability: dict[str, str] = {}
        rows: list[Row] = []
        if "sqlite" in backends:
            machine["sqlite_durability"] = _sqlite_durability(folder)
            durability["sqlite"] = f"SQLite {machine['sqlite_durability']}; {disk}"
        if "postgresql" in backends:
            try:
                pg = postgresql_facts(pg_conninfo(pg_base_url(opts.pg_url or "")))
            except Exception as exc:  # noqa: BLE001 - the SQLite rows still run
                say(f"PostgreSQL not reachable ({exc}); its rows are not measured")
                backends.remove("postgresql")
                rows += [
                    not_measured(r, "postgresql", MEASUREMENTS[r], target(r, "postgresql"), f"PostgreSQL not reachable: {exc}")
                    for r in opts.rows
                    if "postgresql" in BACKENDS[r]
                ]
            else:
                machine["postgresql_version"] = pg["version"]
                machine["postgresql_durability"] = pg["durability"]
                durability["postgresql"] = f"PostgreSQL {pg['durability']}; {disk}"
        ctx = BenchContext(
            folder=folder,
            pg_url=opts.pg_url,
            sizes=QUICK if opts.quick else FULL,
            quick=opts.quick,
            log_events=opts.log_events,
            durability=durability,
            say=say,
        )
        for r in sorted(set(opts.rows) - set(SERVING_ROWS)):
            for b in BACKENDS[r]:
                if b in backends:
                    t0 = time.perf_counter()
                    got = _safely(say, r, b, lambda r=r, b=b: ROW_FUNCTIONS[r](ctx, b))
                    got["elapsed_s"] = round(time.perf_counter() - t0, 1)  # of the whole row, set-up included
                    rows.append(got)
        wanted_serving = set(opts.rows) & set(SERVING_ROWS)
        if wanted_serving:
            rows += _serving_rows(ctx, backends, wanted_serving, opts.out_dir)
        extras = _extras(ctx, backends) if opts.extras else []
    machine["load_average_end"] = _load_average()
    results = {
        "started_at": started,
        "duration_s": round(time.perf_counter() - t_start, 1),
        "machine": machine,
        "settings": {
            "seed": SEED,
            "quick": opts.quick,
            "backends": list(opts.backends),
            "rows": list(opts.rows),
            "log_events": opts.log_events,
            "argv": opts.argv,
        },
        "rows": rows,
        "extras": extras,
    }
    with contextlib.suppress(Exception):
        import eventsourcing  # noqa: F401

        results["settings"]["eventsourcing"] = _dist_version("eventsourcing")
        results["settings"]["hdrhistogram"] = _dist_version("hdrhistogram")
    write_report(opts.out_dir, results)
    return results


def _load_average() -> Optional[list[float]]:
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except (AttributeError, OSError):
        return None


def _dist_version(name: str) -> str:
    from importlib.metadata import version

    return version(name)
