"""What every row needs to know about the run: where bench databases go, the PostgreSQL server,
the sizes (full or ``--quick``), and the durability text stated beside every figure."""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any, Callable, Iterator, Optional

import attrs

from duplex_es_tools.bench.databases import BenchDatabase, fresh_database

__all__ = ["Sizes", "BenchContext", "FULL", "QUICK"]


@attrs.frozen
class Sizes:
    """How much each row measures.

    Attributes:
        single_ops: commands of one event per contender (rows 1 and 2).
        concurrent_ops: commands per contender in row 3 (spread over 4 writers).
        batches: transactions of 100 events per contender (row 4).
        rebuild_events: events of the session rebuilt in row 5.
        rebuild_reps: timed rebuilds per contender (row 5).
        load_lengths: session lengths of row 6 (the last one is the row's figure).
        loads: timed loads per length (row 6).
        claims: timed claims per contender (row 7).
        wakeups: timed wake-ups per contender (row 8).
        growth_appends: timed appends at each log size (row 12).
        warmup: untimed operations per contender before timing.
    """

    single_ops: int
    concurrent_ops: int
    batches: int
    rebuild_events: int
    rebuild_reps: int
    load_lengths: tuple[int, ...]
    loads: int
    claims: int
    wakeups: int
    growth_appends: int
    warmup: int


#: ``make bench``.
FULL = Sizes(
    single_ops=2000,
    concurrent_ops=2000,
    batches=200,
    rebuild_events=50_000,
    rebuild_reps=4,
    load_lengths=(10_000, 100_000, 1_000_000),
    loads=200,
    claims=1000,
    wakeups=200,
    growth_appends=1000,
    warmup=100,
)

#: ``duplex-es bench --quick``: a smoke run (seconds), figures not meaningful.
QUICK = Sizes(
    single_ops=100,
    concurrent_ops=80,
    batches=10,
    rebuild_events=2000,
    rebuild_reps=2,
    load_lengths=(1000, 5000),
    loads=20,
    claims=50,
    wakeups=10,
    growth_appends=50,
    warmup=10,
)


@attrs.define
class BenchContext:
    """The run's settings.

    Attributes:
        folder: a temp folder on the disk being measured, for SQLite files.
        pg_url: the PostgreSQL server (``None``: SQLite only).
        sizes: :data:`FULL` or :data:`QUICK`.
        quick: a smoke run.
        log_events: the log size row 12 grows to (events).
        durability: ``{"sqlite": ..., "postgresql": ...}`` — settings and the disk's
            ``fdatasync`` latency, as stated beside every figure.
        say: progress output (a line of text).
    """

    folder: Path
    pg_url: Optional[str]
    sizes: Sizes
    quick: bool
    log_events: int
    durability: dict[str, str] = attrs.Factory(dict)
    say: Callable[[str], Any] = print

    @contextlib.contextmanager
    def fresh(self, backend: str, label: str) -> Iterator[BenchDatabase]:
        """A fresh database on ``backend`` for one contender, dropped afterwards."""
        with fresh_database(backend, self.folder, self.pg_url, label) as db:
            yield db
