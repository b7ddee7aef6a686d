"""The embedded backend: one SQLite file in WAL mode, through the standard library's ``sqlite3``.

SQLite has one write lock per file and no row locks, so every write transaction (appends,
claims, ownership) starts with ``BEGIN IMMEDIATE``: the writer takes the lock before it reads (a
deferred transaction that reads first can fail with ``SQLITE_BUSY`` at the upgrade without the
busy handler running — docs/sources.md, "SQLite: WAL and the write lock"). That lock alone orders
positions by commit and keeps what an append read unchanged until it commits. Writers inside one
process also queue on a ``threading.Lock`` first, so only one connection per process ever waits
on SQLite's. Readers never block in WAL mode; there is no notification between processes, so
wake-ups are timed polls.
"""

from __future__ import annotations

import sqlite3
import threading
from pathlib import Path
from typing import Any, ContextManager, Optional, Sequence

import sqlalchemy as sa
from sqlalchemy.dialects import sqlite as sqlite_dialect
from sqlalchemy.engine import Engine

from duplex_es.store.backend import Backend, ClaimedRow, DatabaseNotFound, EngineOptions, Transactions, driver_connection, pick_tick_sql

__all__ = ["SqliteBackend"]


class SqliteBackend(Backend):
    """SQLite files (``sqlite:///path/to/file.db``)."""

    name = "sqlite"
    driver_errors = (sqlite3.Error,)
    append_begin = "BEGIN IMMEDIATE"
    write_begin = "BEGIN IMMEDIATE"
    read_begin = "BEGIN"
    # A commit is a local fsync of well under a millisecond: the server commits on its loop
    # (GroupCommitWriter's ``inline``, issue 6 row 10).
    group_commit_inline = True
    # SQLite's ALTER TABLE cannot drop or change columns: Alembic must copy the table instead.
    migration_options = {"render_as_batch": True}

    def __init__(self) -> None:
        self._write_lock = threading.Lock()

    def create_engine(self, url: str, options: EngineOptions) -> Engine:
        """An engine whose connections run in WAL mode with ``PRAGMA synchronous`` from
        ``options`` and a busy timeout, shareable across threads (the writer thread, the loop)."""
        self._check_path(url, options.create)
        engine = sa.create_engine(
            url,
            isolation_level="AUTOCOMMIT",
            connect_args={"timeout": options.busy_timeout_ms / 1000, "check_same_thread": False},
        )

        @sa.event.listens_for(engine, "connect")
        def _pragmas(dbapi_conn, _record):  # noqa: ANN001
            cur = dbapi_conn.cursor()
            cur.execute("PRAGMA journal_mode=WAL")
            cur.execute(f"PRAGMA synchronous={options.synchronous}")
            cur.execute(f"PRAGMA busy_timeout={int(options.busy_timeout_ms)}")
            cur.close()

        return engine

    @staticmethod
    def _check_path(url: str, create: bool) -> None:
        name = sa.engine.make_url(url).database
        if not name or name == ":memory:":
            return
        path = Path(name).expanduser()
        if not create and not path.exists():
            raise DatabaseNotFound(f"no database at {path} (pass --db, or set DUPLEX_ES_DATABASE_URL)")
        if not path.parent.exists():
            raise DatabaseNotFound(f"folder {path.parent} does not exist (for the database {path})")

    def write_guard(self) -> ContextManager[Any]:
        """The process's writer lock for this file."""
        return self._write_lock

    def in_transaction(self, raw: Any) -> bool:
        return raw.in_transaction

    def sql(self, text: str) -> str:
        return text  # sqlite3 takes ``?`` placeholders

    def executemany(self, raw: Any, sql: str, rows: Sequence[tuple]) -> None:
        raw.executemany(sql, rows)

    def insert_or_nothing(self, table: sa.Table, index_elements: Sequence[str], **values: Any) -> Any:
        return sqlite_dialect.insert(table).values(**values).on_conflict_do_nothing(index_elements=list(index_elements))

    def claim_tick(
        self, db: Transactions, *, kinds: Sequence[str], now_us: int, token: str, worker_id: str, until_us: int
    ) -> Optional[ClaimedRow]:
        """``BEGIN IMMEDIATE`` + ``UPDATE … RETURNING``, after a look in a read transaction: an
        idle worker polls often and must not take the write lock to find nothing. SQLite's
        ``RETURNING`` cannot name another table, so the tick's event is a second statement."""
        pick = pick_tick_sql(len(kinds))
        with db.read() as conn:
            if driver_connection(conn).execute(pick, (now_us, *kinds)).fetchone() is None:
                return None
        with db.write() as conn:
            raw = driver_connection(conn)
            claimed = raw.execute(
                f"""UPDATE ticks SET status = 'claimed', claim_token = ?, claimed_by = ?, claimed_until_us = ?,
                        attempts = attempts + 1
                    WHERE request_id = ({pick})
                    RETURNING request_id, session_id, seq, kind, attempts""",
                (token, worker_id, until_us, now_us, *kinds),
            ).fetchone()
            if claimed is None:  # another process took it between the look and the lock
                return None
            ev = raw.execute(
                "SELECT type, version, data FROM events WHERE session_id = ? AND seq = ?", (claimed[1], claimed[2])
            ).fetchone()
            return (*claimed, *ev)
