"""Raw driver loops — stdlib ``sqlite3`` and ``psycopg`` 3, no library code — on the same migrated
tables as duplex_es, under the same durability: the ceiling of what the drivers and the schema
allow. They skip what duplex_es does per command (the session head read, the expected-seq check,
event encoding, the hash chain), so the ratio ours/raw is the cost of all of that.

* SQLite: WAL, ``synchronous=FULL``, ``BEGIN IMMEDIATE``, the inserts, ``COMMIT``.
* PostgreSQL: ``BEGIN``, ``pg_advisory_xact_lock`` (the global-order lock duplex_es holds),
  the inserts, ``COMMIT``.
"""

from __future__ import annotations

import json
import secrets
import threading
import time
from typing import Any, Callable, Optional

import psycopg

from duplex_es.store.database import APPEND_LOCK_KEY
from duplex_es_tools.bench.databases import BenchDatabase
from duplex_es_tools.bench.timing import SerialContender, ThreadedContender
from duplex_es_tools.bench.workload import payload

__all__ = ["RawAppend", "RawConcurrent", "raw_replay", "RawClaim", "RawWakeup"]

_HASH = "0" * 64
_COLS = "(session_id, seq, type, version, data, recorded_at_us, prev_hash, hash)"
_SQLITE_INSERT = f"INSERT INTO events {_COLS} VALUES (?, ?, ?, ?, ?, ?, ?, ?)"
_PG_INSERT = f"INSERT INTO events {_COLS} VALUES (%s, %s, %s, %s, %s, %s, %s, %s)"


def _row(session_id: str, seq: int, i: int) -> tuple[Any, ...]:
    data = json.dumps({"client_event_id": None, "text": payload(i)}, separators=(",", ":"))
    return (session_id, seq, "input.text.appended", 1, data, time.time_ns() // 1000, _HASH, _HASH)


def _migrated(bdb: BenchDatabase) -> None:
    bdb.duplex().dispose()


class _Writer:
    """One connection that inserts ``rows`` in one transaction."""

    def __init__(self, bdb: BenchDatabase, synchronous: str = "FULL") -> None:
        self.sqlite = bdb.is_sqlite
        self.conn: Any = bdb.sqlite(synchronous=synchronous) if self.sqlite else bdb.psycopg(autocommit=True)

    def insert(self, rows: list[tuple[Any, ...]]) -> None:
        if self.sqlite:
            self.conn.execute("BEGIN IMMEDIATE")
            try:
                self.conn.executemany(_SQLITE_INSERT, rows)
            except BaseException:
                self.conn.execute("ROLLBACK")
                raise
            self.conn.execute("COMMIT")
        else:
            with self.conn.transaction():
                cur = self.conn.cursor()
                cur.execute("SELECT pg_advisory_xact_lock(%s)", (APPEND_LOCK_KEY,))
                if len(rows) == 1:
                    cur.execute(_PG_INSERT, rows[0])
                else:
                    cur.executemany(_PG_INSERT, rows)

    def close(self) -> None:
        self.conn.close()


class RawAppend(SerialContender):
    """One connection, ``batch`` rows per transaction, one session."""

    def __init__(self, bdb: BenchDatabase, *, batch: int = 1, synchronous: str = "FULL") -> None:
        _migrated(bdb)
        self.w = _Writer(bdb, synchronous)
        self.events_per_op = batch
        self.seq = 0
        driver = "sqlite3" if bdb.is_sqlite else "psycopg"
        lock = "" if bdb.is_sqlite else ", advisory lock"
        self.name = f"raw {driver} loop ({batch} per txn{lock})" + ("" if synchronous == "FULL" else f", synchronous={synchronous}")

    def op(self, i: int) -> None:
        """One transaction of ``batch`` rows."""
        b = self.events_per_op
        rows = [_row("raw", self.seq + k + 1, i * b + k) for k in range(b)]
        self.w.insert(rows)
        self.seq += b

    def close(self) -> None:
        """Close the connection."""
        self.w.close()


class RawConcurrent(ThreadedContender):
    """``threads`` connections, one row per transaction each, under the global-order lock."""

    def __init__(self, bdb: BenchDatabase, *, threads: int = 4) -> None:
        super().__init__()
        _migrated(bdb)
        self.bdb = bdb
        self.threads = threads
        self.writers: list[_Writer] = []
        self.name = f"raw psycopg loop, {threads} writers (1 per txn, advisory lock)"

    def make_worker(self, index: int) -> Callable[[int], None]:
        """Thread ``index`` owns a connection and session ``raw-w{index}``."""
        w = _Writer(self.bdb)
        self.writers.append(w)
        state = {"seq": 0}

        def op(i: int) -> None:
            state["seq"] += 1
            w.insert([_row(f"raw-w{index}", state["seq"], i)])

        return op

    def close(self) -> None:
        """Close the connections."""
        for w in self.writers:
            w.close()


def raw_replay(bdb: BenchDatabase, session_id: str) -> Callable[[], int]:
    """The raw ceiling of a rebuild: select a session's rows in seq order, ``json.loads`` each
    and fold a trivial reducer (count and sum of lengths); returns the rows read."""
    if bdb.is_sqlite:
        conn: Any = bdb.sqlite()
        sql = "SELECT seq, type, data FROM events WHERE session_id = ? ORDER BY seq"
    else:
        conn = bdb.psycopg(autocommit=True)
        sql = "SELECT seq, type, data FROM events WHERE session_id = %s ORDER BY seq"

    def call() -> int:
        n = total = 0
        for _seq, _type, data in conn.execute(sql, (session_id,)):
            doc = json.loads(data)
            total += len(doc.get("text", ""))
            n += 1
        return n

    call.close = conn.close  # type: ignore[attr-defined]
    return call


_SQLITE_CLAIM = (
    "UPDATE ticks SET status = 'claimed', claim_token = ?, claimed_by = 'raw', claimed_until_us = ?, "
    "attempts = attempts + 1 WHERE request_id = (SELECT request_id FROM ticks WHERE status = 'pending' "
    "ORDER BY position LIMIT 1) RETURNING request_id"
)
_PG_CLAIM = (
    "UPDATE ticks SET status = 'claimed', claim_token = %s, claimed_by = 'raw', claimed_until_us = %s, "
    "attempts = attempts + 1 WHERE request_id = (SELECT request_id FROM ticks WHERE status = 'pending' "
    "ORDER BY position LIMIT 1 FOR UPDATE SKIP LOCKED) RETURNING request_id"
)


class RawClaim:
    """One raw claim: SQLite ``BEGIN IMMEDIATE`` + ``UPDATE … RETURNING`` + ``COMMIT``;
    PostgreSQL an autocommit ``UPDATE … (SELECT … FOR UPDATE SKIP LOCKED) RETURNING``."""

    def __init__(self, bdb: BenchDatabase, *, synchronous: str = "FULL") -> None:
        self.sqlite = bdb.is_sqlite
        self.conn: Any = bdb.sqlite(synchronous=synchronous) if self.sqlite else bdb.psycopg(autocommit=True)

    def claim(self) -> Optional[str]:
        """The claimed request id, or ``None`` when no tick is pending."""
        until = time.time_ns() // 1000 + 600_000_000
        token = secrets.token_hex(16)
        if self.sqlite:
            self.conn.execute("BEGIN IMMEDIATE")
            try:
                row = self.conn.execute(_SQLITE_CLAIM, (token, until)).fetchone()
            except BaseException:
                self.conn.execute("ROLLBACK")
                raise
            self.conn.execute("COMMIT")
        else:
            row = self.conn.execute(_PG_CLAIM, (token, until)).fetchone()
        return row[0] if row else None

    def op(self, _i: int) -> None:
        """A claim that must find a tick."""
        if self.claim() is None:
            raise RuntimeError("the raw queue ran out of ticks")

    def close(self) -> None:
        """Close the connection."""
        self.conn.close()


class RawWakeup:
    """The raw wake-up loop: an idle thread claims (:class:`RawClaim`); when nothing is pending
    it waits for a ``NOTIFY`` (PostgreSQL, ``LISTEN`` on its own connection) or sleeps
    ``poll_s`` (SQLite). :meth:`once` inserts an event row and its ticks row in one transaction
    (with ``NOTIFY`` on PostgreSQL) and returns the ns from commit returned to claim returned."""

    CHANNEL = "bench_raw_ticks"

    def __init__(self, bdb: BenchDatabase, *, poll_s: float = 0.010) -> None:
        _migrated(bdb)
        self.sqlite = bdb.is_sqlite
        self.w = _Writer(bdb)
        self.claimer = RawClaim(bdb)
        self.poll_s = poll_s
        self.listener: Optional[psycopg.Connection] = None
        if not self.sqlite:
            self.listener = bdb.psycopg(autocommit=True)
            self.listener.execute(f"LISTEN {self.CHANNEL}")
        self.n = 0
        self._claimed = threading.Event()
        self._claimed_at = 0
        self._stop = False
        self._thread = threading.Thread(target=self._idle_loop, name="bench-raw-idle", daemon=True)
        self._thread.start()

    def _idle_loop(self) -> None:
        while not self._stop:
            if self.claimer.claim() is not None:
                self._claimed_at = time.perf_counter_ns()
                self._claimed.set()
            elif self.listener is not None:
                for _ in self.listener.notifies(timeout=self.poll_s, stop_after=1):
                    pass
            else:
                time.sleep(self.poll_s)

    def _issue(self) -> None:
        self.n += 1
        rid = f"raw-tick-{self.n}"
        now = time.time_ns() // 1000
        data = json.dumps({"request_id": rid, "kind": "speech"})
        if self.sqlite:
            c = self.w.conn
            c.execute("BEGIN IMMEDIATE")
            pos = c.execute(_SQLITE_INSERT + " RETURNING position", ("raw-wake", self.n, "tick.issued", 1, data, now, _HASH, _HASH)).fetchone()[0]
            c.execute(
                "INSERT INTO ticks (request_id, session_id, seq, position, kind, status, attempts) VALUES (?, ?, ?, ?, 'speech', 'pending', 0)",
                (rid, "raw-wake", self.n, pos),
            )
            c.execute("COMMIT")
        else:
            c = self.w.conn
            with c.transaction():
                c.execute("SELECT pg_advisory_xact_lock(%s)", (APPEND_LOCK_KEY,))
                pos = c.execute(_PG_INSERT + " RETURNING position", ("raw-wake", self.n, "tick.issued", 1, data, now, _HASH, _HASH)).fetchone()[0]
                c.execute(
                    "INSERT INTO ticks (request_id, session_id, seq, position, kind, status, attempts) VALUES (%s, %s, %s, %s, 'speech', 'pending', 0)",
                    (rid, "raw-wake", self.n, pos),
                )
                c.execute(f"NOTIFY {self.CHANNEL}")

    def once(self) -> int:
        """Issue one tick; the wake-up latency in ns."""
        self._claimed.clear()
        self._issue()
        committed = time.perf_counter_ns()
        if not self._claimed.wait(10.0):
            raise RuntimeError("the raw idle loop did not claim the tick within 10 s")
        return self._claimed_at - committed

    def close(self) -> None:
        """Stop the idle thread; close the connections."""
        self._stop = True
        self._thread.join(timeout=5)
        self.w.close()
        self.claimer.close()
        if self.listener is not None:
            self.listener.close()
