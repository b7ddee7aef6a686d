"""Filling a bench log fast, for rows that measure something *at* a log size rather than the
writes that got it there.

* :func:`bulk_history` writes a long session (row 6) exactly as ``EventLog.append`` would —
  the project's codec (``encode``) and hash chain (``event_hash``), gapless seqs — but in bulk:
  ``executemany`` on SQLite, ``COPY`` on PostgreSQL. A million events take seconds instead of
  minutes, and the session still audits clean.
* :func:`history_state` is the folded state of such a session after a seq (``fold``), computed
  once per process and shared by both backends.
"""

from __future__ import annotations

import time
from functools import lru_cache
from typing import Any, Iterator

from duplex_es.domain import fold
from duplex_es.events import encode
from duplex_es.store.chain import GENESIS, event_hash
from duplex_es_tools.bench.databases import BenchDatabase
from duplex_es_tools.bench.workload import history_event

__all__ = ["bulk_history", "history_state"]

_CHUNK = 50_000
_COLS = "(session_id, seq, type, version, data, recorded_at_us, prev_hash, hash)"


def _rows(session_id: str, upto_seq: int) -> Iterator[tuple[Any, ...]]:
    prev = GENESIS
    now = time.time_ns() // 1000
    for seq in range(1, upto_seq + 1):
        type_, version, data = encode(history_event(session_id, seq))
        digest = event_hash(prev, session_id, seq, type_, version, data, now)
        yield (session_id, seq, type_, version, data, now, prev, digest)
        prev = digest


def bulk_history(bdb: BenchDatabase, session_id: str, upto_seq: int) -> None:
    """Write events ``1 .. upto_seq`` of :func:`~duplex_es_tools.bench.workload.history_event` to
    ``session_id`` (a new session) in transactions of 50,000 rows. The database must be
    migrated."""
    rows = _rows(session_id, upto_seq)
    if bdb.is_sqlite:
        conn = bdb.sqlite()
        try:
            while True:
                chunk = [r for _, r in zip(range(_CHUNK), rows)]
                if not chunk:
                    break
                conn.execute("BEGIN IMMEDIATE")
                conn.executemany(f"INSERT INTO events {_COLS} VALUES (?, ?, ?, ?, ?, ?, ?, ?)", chunk)
                conn.execute("COMMIT")
        finally:
            conn.close()
        return
    with bdb.psycopg(autocommit=True) as conn:
        while True:
            chunk = [r for _, r in zip(range(_CHUNK), rows)]
            if not chunk:
                break
            with conn.transaction(), conn.cursor().copy(f"COPY events {_COLS} FROM STDIN") as copy:
                for r in chunk:
                    copy.write_row(r)


@lru_cache(maxsize=16)
def history_state(session_id: str, seq: int) -> Any:
    """The folded state of :func:`bulk_history`'s session after ``seq`` (cached: both backends
    load the same sessions)."""
    return fold((s, history_event(session_id, s)) for s in range(1, seq + 1))
