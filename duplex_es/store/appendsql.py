"""The append path's statements (and the log follower's poll) as plain SQL for the driver
(``sqlite3``, psycopg 3, or whatever the backend's is).

An append runs the same four or five fixed statements every time, and the profile of issue 6
showed SQLAlchemy's execution machinery costing several times what sqlite3 spends on each of
them (110 µs against 15 µs for the head lookup). So these few run on the driver connection
under SQLAlchemy's pooled connection, inside the transaction :meth:`Database.write` opened;
everything else — schema, reads, claims, snapshots — stays SQLAlchemy Core. The SQL is written
with ``?`` placeholders; the backend (:mod:`duplex_es.store.backend`) turns them into its
driver's and says how the owner rows are locked.
"""

from __future__ import annotations

import functools
from typing import Any, Iterable, Sequence

from duplex_es.store.backend import Backend

__all__ = ["AppendSql"]

#: Rows per multi-row INSERT: SQLite allows 32,766 bound variables in one statement (11 a row).
ROWS_PER_INSERT = 1000

_EVENT_COLUMNS = "session_id, seq, type, version, data, recorded_at_us, prev_hash, hash, key_id, payload, sealed"


class AppendSql:
    """The append statements for one backend, run on a driver connection ``raw``."""

    def __init__(self, backend: Backend) -> None:
        self.backend = backend
        self._sql = backend.sql

    def _rows(self, raw: Any, text: str, params: Sequence[Any]) -> list[tuple]:
        return raw.execute(self._sql(text), tuple(params)).fetchall()

    def heads(self, raw: Any, session_ids: Sequence[str]) -> dict[str, tuple[int, str]]:
        """``{session: (seq, hash)}`` of each session's newest event: one index probe each
        (``ORDER BY seq DESC LIMIT 1``; a ``GROUP BY max`` would read whole sessions)."""
        rows = self._rows(raw, _heads_sql(len(session_ids)), session_ids)
        return {r[0]: (r[1], r[2]) for r in rows}

    def archived_heads(self, raw: Any, session_ids: Sequence[str]) -> dict[str, tuple[int, str]]:
        """``{session: (last_seq, head_hash)}`` of those of ``session_ids`` that were archived
        (their events moved to a file: duplex_es.store.archives). Asked only for sessions
        without events here, so only when a batch starts a session."""
        marks = ", ".join("?" * len(session_ids))
        rows = self._rows(raw, f"SELECT session_id, last_seq, head_hash FROM archived_sessions WHERE session_id IN ({marks})", session_ids)
        return {r[0]: (r[1], r[2]) for r in rows}

    def owners(self, raw: Any, session_ids: Sequence[str]) -> dict[str, tuple[str, int]]:
        """``{session: (owner_id, generation)}``, locked to the commit (the backend's
        ``share_lock``), so a concurrent move of the session waits for this append."""
        marks = ", ".join("?" * len(session_ids))
        lock = self.backend.share_lock
        rows = self._rows(raw, f"SELECT session_id, owner_id, generation FROM session_owners WHERE session_id IN ({marks}){lock}", session_ids)
        return {r[0]: (r[1], r[2]) for r in rows}

    def known_keys(self, raw: Any, session_ids: Sequence[str], keys: Sequence[str]) -> dict[tuple[str, str], tuple[int, int]]:
        """``{(session, key): (first_seq, last_seq)}`` of the idempotency keys already used."""
        s_marks, k_marks = ", ".join("?" * len(session_ids)), ", ".join("?" * len(keys))
        rows = self._rows(
            raw,
            f"SELECT session_id, key, first_seq, last_seq FROM idempotency WHERE session_id IN ({s_marks}) AND key IN ({k_marks})",
            [*session_ids, *keys],
        )
        return {(r[0], r[1]): (r[2], r[3]) for r in rows}

    def insert_events(self, raw: Any, rows: Sequence[tuple]) -> list[int]:
        """Insert event rows (in :data:`_EVENT_COLUMNS` order) and return their positions in
        row order. Appends hold the global append lock, so the positions drawn during one
        insert are exactly the next ones, in row order: sorting what RETURNING gives back
        pairs them with the rows whatever order it emits them in."""
        positions: list[int] = []
        for start in range(0, len(rows), ROWS_PER_INSERT):
            chunk = rows[start : start + ROWS_PER_INSERT]
            values = ", ".join(["(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"] * len(chunk))
            flat = [v for row in chunk for v in row]
            got = self._rows(raw, f"INSERT INTO events ({_EVENT_COLUMNS}) VALUES {values} RETURNING position", flat)
            positions += sorted(r[0] for r in got)
        return positions

    def tail_sessions(self, raw: Any, after_position: int, limit: int) -> list[tuple[int, str, int]]:
        """``(position, session_id, seq)`` after ``after_position``: the log follower's poll,
        which runs every few ms on a busy server, so it is as cheap as an append statement."""
        rows = self._rows(raw, "SELECT position, session_id, seq FROM events WHERE position > ? ORDER BY position LIMIT ?", (after_position, limit))
        return [(r[0], r[1], r[2]) for r in rows]

    def insert_keys(self, raw: Any, rows: Iterable[tuple[str, str, int, int]]) -> None:
        """Record idempotency keys ``(session, key, first_seq, last_seq)``."""
        sql = self._sql("INSERT INTO idempotency (session_id, key, first_seq, last_seq) VALUES (?, ?, ?, ?)")
        self.backend.executemany(raw, sql, list(rows))


@functools.lru_cache(maxsize=1024)
def _heads_sql(n: int) -> str:
    one = "SELECT * FROM (SELECT session_id, seq, hash FROM events WHERE session_id = ? ORDER BY seq DESC LIMIT 1) AS h{}"
    return " UNION ALL ".join(one.format(i) for i in range(n))
