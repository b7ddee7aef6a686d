"""The ``eventsourcing`` 9.5.6 side of the comparisons: an ``Application`` with one ``Aggregate``
whose command triggers one event (the library's own ``test__put_performance`` shape), saved with
``app.save``; and ``app.repository.get`` for replay. Default settings: its SQLite recorder on a
WAL file, its PostgreSQL recorder (``LOCK TABLE … IN EXCLUSIVE MODE`` per insert) in a fresh
schema."""

from __future__ import annotations

import contextlib
from typing import Any, Callable

from eventsourcing.application import Application
from eventsourcing.domain import Aggregate, event

from duplex_es_tools.bench.databases import BenchDatabase
from duplex_es_tools.bench.machine import sqlite_durability
from duplex_es_tools.bench.timing import SerialContender, ThreadedContender
from duplex_es_tools.bench.workload import payload

__all__ = ["VERSION", "Transcript", "Transcripts", "EsSave", "EsConcurrent", "es_replay", "es_durability"]

#: The version the comparisons are pinned to (``pip install .[tools]``).
VERSION = "9.5.6"


class Transcript(Aggregate):
    """A session-like aggregate: every command appends one text."""

    @event("Opened")
    def __init__(self, name: str) -> None:
        self.name = name
        self.texts = 0

    @event("TextAppended")
    def append_text(self, text: str) -> None:
        """One event: ``TextAppended(text)``."""
        self.texts += 1


class Transcripts(Application):
    """The application the comparisons save through."""

    def open(self, name: str) -> Transcript:
        """A new saved aggregate."""
        agg = Transcript(name)
        self.save(agg)
        return agg


def _app(bdb: BenchDatabase) -> Transcripts:
    return Transcripts(env=bdb.eventsourcing_env())


def es_durability(app: Application, bdb: BenchDatabase) -> str:
    """The recorder's durability settings as read from one of its connections (SQLite), or
    the server's (PostgreSQL: stated by the caller)."""
    if not bdb.is_sqlite:
        return ""
    with app.recorder.datastore.get_connection(commit=False) as conn:  # type: ignore[attr-defined]
        return sqlite_durability(conn._sqlite_conn)


class EsSave(SerialContender):
    """``batch`` aggregate events per command, then ``app.save(aggregate)``."""

    def __init__(self, bdb: BenchDatabase, *, batch: int = 1) -> None:
        self.app = _app(bdb)
        self.agg = self.app.open("bench")
        self.events_per_op = batch
        self.name = f"eventsourcing {VERSION} app.save"
        self.durability = es_durability(self.app, bdb)

    def op(self, i: int) -> None:
        """Command ``i``."""
        b = self.events_per_op
        for k in range(b):
            self.agg.append_text(payload(i * b + k))
        self.app.save(self.agg)

    def close(self) -> None:
        """Close the recorder's pool."""
        self.app.close()


class EsConcurrent(ThreadedContender):
    """``threads`` writers, each saving one event per command on its own aggregate through one
    shared application (its recorder's pool)."""

    def __init__(self, bdb: BenchDatabase, *, threads: int = 4) -> None:
        super().__init__()
        self.threads = threads
        self.app = _app(bdb)
        self.name = f"eventsourcing {VERSION} app.save, {threads} writers"

    def make_worker(self, index: int) -> Callable[[int], None]:
        """Thread ``index`` saves its own aggregate."""
        agg = self.app.open(f"w{index}")

        def op(i: int) -> None:
            agg.append_text(payload(i))
            self.app.save(agg)

        return op

    def close(self) -> None:
        """Close the recorder's pool."""
        self.app.close()


@contextlib.contextmanager
def es_replay(bdb: BenchDatabase, events: int, *, save_every: int = 5000) -> Any:
    """An aggregate with ``events`` events (its creation included), saved ``save_every`` at a
    time; yields a call that replays it with ``app.repository.get`` and returns how many events
    it folded."""
    app = _app(bdb)
    try:
        agg = app.open("replay")
        pending = 0
        for i in range(events - 1):
            agg.append_text(payload(i))
            pending += 1
            if pending == save_every:
                app.save(agg)
                pending = 0
        app.save(agg)

        def call() -> int:
            got = app.repository.get(agg.id)
            assert got.version == events
            return events

        yield call
    finally:
        app.close()
