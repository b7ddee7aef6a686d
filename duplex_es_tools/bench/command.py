"""``duplex-es bench`` (``make bench``): the benchmark suite of issue 6 §3, written to
``bench/results.json`` and ``bench/RESULTS.md``. The suite itself is the rest of
:mod:`duplex_es_tools.bench`; this module is its command line, which imports the suite only when it
runs (``duplex-es`` loads the options of every command to build its parser).

Figures are measured, never asserted: targets live in the report, which says met or short.
"""

from __future__ import annotations

import argparse
import os
import shlex
import sys
from pathlib import Path
from typing import Any, Optional, Sequence

from rich.console import Console
from rich.table import Table

__all__ = ["add_bench_arguments", "bench_command", "run_bench", "parse_rows", "DEFAULT_PG_URL"]

#: The PostgreSQL server measured unless ``--pg`` or ``DUPLEX_ES_BENCH_PG_URL`` says otherwise.
DEFAULT_PG_URL = "postgresql+psycopg://postgres@127.0.0.1:5432/test"

#: ``--log-events`` when ``--quick`` is given without it.
QUICK_LOG_EVENTS = 20_000


def parse_rows(text: str) -> tuple[tuple[int, ...], bool]:
    """``"1,2,12"`` → ``((1, 2, 12), False)``; ``"all"`` → every row and the extras; the word
    ``extras`` in the list selects the figures outside the table.

    Raises:
        argparse.ArgumentTypeError: a row the table does not have, or not a number.
    """
    from duplex_es_tools.bench.targets import ALL_ROWS

    if text.strip() == "all":
        return ALL_ROWS, True
    rows, extras = [], False
    for part in (p.strip() for p in text.split(",") if p.strip()):
        if part == "extras":
            extras = True
            continue
        try:
            n = int(part)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a row number: {part!r}") from None
        if n not in ALL_ROWS:
            raise argparse.ArgumentTypeError(f"rows are {', '.join(map(str, ALL_ROWS))}; got {n}")
        rows.append(n)
    return tuple(sorted(set(rows))), extras


def add_bench_arguments(p: argparse.ArgumentParser) -> None:
    """Add the options of ``duplex-es bench`` to its subparser ``p``."""
    p.add_argument(
        "--pg",
        "--pg-url",
        dest="pg_url",
        default=os.environ.get("DUPLEX_ES_BENCH_PG_URL", DEFAULT_PG_URL),
        help="PostgreSQL server to measure (a fresh schema per measurement, dropped after)",
    )
    p.add_argument("--backend", choices=("sqlite", "postgresql", "both"), default="both", help="backends to measure")
    p.add_argument("--no-postgres", action="store_true", help="same as --backend sqlite")
    p.add_argument("--rows", default="all", help="rows to measure, e.g. 1,2,12 (add 'extras' for the spoken turn and world block); default all")
    p.add_argument("--out", default="bench", help="folder for results.json and RESULTS.md")
    p.add_argument("--quick", action="store_true", help="small n, a smoke run (figures not meaningful)")
    p.add_argument(
        "--log-events",
        type=int,
        default=None,
        help=f"row 12's largest log size in events (default 10,000,000; {QUICK_LOG_EVENTS:,} with --quick)",
    )


def bench_command(args: argparse.Namespace, console: Console) -> int:
    """Run ``duplex-es bench`` with parsed ``args``, printing to ``console``; returns the exit
    code (0; 2 on bad --rows)."""
    try:
        rows, extras = parse_rows(args.rows)
    except argparse.ArgumentTypeError as exc:
        console.print(f"[red]--rows: {exc}[/red]")
        return 2
    backend = "sqlite" if args.no_postgres else args.backend
    backends = ("sqlite", "postgresql") if backend == "both" else (backend,)
    return run_bench(
        console,
        pg_url=args.pg_url,
        out_dir=args.out,
        quick=args.quick,
        backends=backends,
        rows=rows,
        extras=extras,
        log_events=args.log_events,
        argv=shlex.join(sys.argv[2:]) if len(sys.argv) > 2 and sys.argv[1] == "bench" else "",
    )


def run_bench(
    console: Console,
    *,
    pg_url: Optional[str],
    out_dir: str,
    quick: bool = False,
    backends: Sequence[str] = ("sqlite", "postgresql"),
    rows: Optional[Sequence[int]] = None,
    extras: bool = True,
    log_events: Optional[int] = None,
    argv: str = "",
) -> int:
    """Run the suite and write the report; print a summary table. ``pg_url=None`` measures
    SQLite only. Returns 0."""
    from duplex_es_tools.bench.run import DEFAULT_LOG_EVENTS, BenchOptions, run_suite
    from duplex_es_tools.bench.targets import ALL_ROWS

    if pg_url is None:
        backends = tuple(b for b in backends if b != "postgresql")
    opts = BenchOptions(
        out_dir=Path(out_dir),
        backends=tuple(backends),
        pg_url=pg_url,
        rows=tuple(rows) if rows is not None else ALL_ROWS,
        extras=extras,
        quick=quick,
        log_events=log_events or (QUICK_LOG_EVENTS if quick else DEFAULT_LOG_EVENTS),
        argv=argv,
    )
    results = run_suite(opts, say=lambda text: console.print(text, highlight=False))
    _print_summary(console, results)
    console.print(f"written: {opts.out_dir / 'results.json'}, {opts.out_dir / 'RESULTS.md'}")
    return 0


def _print_summary(console: Console, results: dict[str, Any]) -> None:
    table = Table(title="duplex_es bench (ratios: ours / theirs)")
    for col in ("#", "backend", "ours", "target", "", "comparisons"):
        table.add_column(col)
    for r in sorted(results["rows"], key=lambda r: (r["row"], r["backend"])):
        ours = []
        if r.get("events_per_s") is not None:
            ours.append(f"{r['events_per_s']:,.0f} ev/s")
        if r.get("p99_ms") is not None:
            ours.append(f"p50 {r['p50_ms']} / p99 {r['p99_ms']} ms")
        comps = "\n".join(f"{c['name']}: {c.get('ratio')}×" for c in r.get("comparisons", []))
        met = {True: "[green]met[/green]", False: "[red]short[/red]", None: "—"}[r.get("met")]
        table.add_row(str(r["row"]), r["backend"], "; ".join(ours) or r.get("note", "")[:60], r.get("target", ""), met, comps)
    console.print(table)
