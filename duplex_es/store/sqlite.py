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

import contextlib
import sqlite3
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any, ContextManager, Iterator, Sequence

import sqlalchemy as sa
from sqlalchemy.dialects import sqlite as sqlite_dialect
from sqlalchemy.engine import Engine

from duplex_es.store.backend import (
    Backend,
    ClaimedRow,
    DatabaseNotFound,
    EngineOptions,
    Transactions,
    WriteLockBusy,
    driver_connection,
    pick_ticks,
)

if TYPE_CHECKING:
    from duplex_es.store.checkpointer import Checkpointer

__all__ = ["SqliteBackend", "WAL_SIZE_LIMIT"]

#: A WAL larger than this (bytes) is truncated to it once wholly checkpointed (while a
#: Checkpointer runs; SQLite's default keeps the largest size it ever reached).
WAL_SIZE_LIMIT = 64 * 2**20


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
        self._busy_timeout_ms = 30_000
        #: Whether commits may run SQLite's WAL checkpoint themselves (``wal_autocheckpoint``);
        #: a :class:`~duplex_es.store.checkpointer.Checkpointer` turns it off while it runs.
        self.autocheckpoint = True

    def create_engine(self, url: str, options: EngineOptions) -> Engine:
        """An engine whose connections run in WAL mode with ``PRAGMA synchronous`` from
        ``options`` and a busy timeout, shareable across threads (the writer thread, the loop)."""
        self._check_path(url, options.create)
        busy_ms = options.busy_timeout_ms if options.write_timeout_ms is None else min(options.busy_timeout_ms, options.write_timeout_ms)
        self._busy_timeout_ms = int(busy_ms)
        self.busy_timeout_ms = self._busy_timeout_ms
        engine = sa.create_engine(
            url,
            isolation_level="AUTOCOMMIT",
            connect_args={"timeout": self._busy_timeout_ms / 1000, "check_same_thread": False},
        )

        @sa.event.listens_for(engine, "connect")
        def _pragmas(dbapi_conn, _record):  # noqa: ANN001
            cur = dbapi_conn.cursor()
            cur.execute("PRAGMA journal_mode=WAL")
            cur.execute(f"PRAGMA synchronous={options.synchronous}")
            cur.execute(f"PRAGMA busy_timeout={self._busy_timeout_ms}")
            if not self.autocheckpoint:
                # A checkpoint inside a commit stalls whoever commits (docs/security.md, "No
                # global stalls"): the Checkpointer's thread runs them instead.
                cur.execute("PRAGMA wal_autocheckpoint=0")
                cur.execute(f"PRAGMA journal_size_limit={WAL_SIZE_LIMIT}")
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

    def start_maintenance(self, engine: Engine) -> "Checkpointer":
        """Take WAL checkpoints off the commit path for a server (:class:`Checkpointer`)."""
        from duplex_es.store.checkpointer import Checkpointer

        return Checkpointer(engine, self, wal_limit=WAL_SIZE_LIMIT)

    @contextlib.contextmanager
    def write_guard_nowait(self) -> Iterator[None]:
        if not self._write_lock.acquire(blocking=False):
            raise WriteLockBusy("the SQLite write lock is busy (a writer of this process holds it or waits for it)")
        try:
            yield
        finally:
            self._write_lock.release()

    def begin_nowait(self, raw: Any, begin_sql: str) -> None:
        """``BEGIN IMMEDIATE`` with the busy handler off: SQLite answers ``SQLITE_BUSY`` at once
        when another process holds the write lock, instead of sleeping in the busy handler
        (on an event loop, that sleep would stall every session)."""
        raw.execute("PRAGMA busy_timeout=0")
        try:
            raw.execute(begin_sql)
        except sqlite3.OperationalError as exc:
            if self.is_busy(exc):
                raise WriteLockBusy(f"another process holds the SQLite write lock ({exc})") from exc
            raise
        finally:
            raw.execute(f"PRAGMA busy_timeout={self._busy_timeout_ms}")

    def is_busy(self, exc: BaseException) -> bool:
        if isinstance(exc, sa.exc.DBAPIError):
            exc = exc.orig  # type: ignore[assignment]
        return isinstance(exc, WriteLockBusy) or (
            isinstance(exc, sqlite3.OperationalError) and ("locked" in str(exc) or "busy" in str(exc))
        )

    def in_transaction(self, raw: Any) -> bool:
        return raw.in_transaction

    def sql(self, text: str) -> str:
        return text  # sqlite3 takes ``?`` placeholders

    def executemany(self, raw: Any, sql: str, rows: Sequence[tuple]) -> None:
        raw.executemany(sql, rows)

    def insert_or_nothing(self, table: sa.Table, index_elements: Sequence[str], **values: Any) -> Any:
        return sqlite_dialect.insert(table).values(**values).on_conflict_do_nothing(index_elements=list(index_elements))

    def claim_ticks(
        self,
        db: Transactions,
        *,
        kinds: Sequence[str],
        now_us: int,
        token: str,
        worker_id: str,
        until_us: int,
        limit: int,
        exclude_sessions: Sequence[str] = (),
    ) -> list[ClaimedRow]:
        """``BEGIN IMMEDIATE`` + one ``UPDATE … WHERE request_id IN (pick) RETURNING``, after a
        look in a read transaction: an idle worker polls often and must not take the write lock
        to find nothing. The write lock makes the pick and the update one step, so two
        processes never take the same tick. SQLite's ``RETURNING`` cannot name another table
        and returns rows in no set order, so the ticks' events are read by a second statement
        and the rows sorted by position here."""
        pick, params = pick_ticks(now_us, kinds, limit, exclude_sessions)
        with db.read() as conn:
            if driver_connection(conn).execute(pick, params).fetchone() is None:
                return []
        with db.write() as conn:
            raw = driver_connection(conn)
            claimed = raw.execute(
                f"""UPDATE ticks SET status = 'claimed', claim_token = ?, claimed_by = ?, claimed_until_us = ?,
                        attempts = attempts + 1
                    WHERE request_id IN ({pick})
                    RETURNING position, request_id, session_id, seq, kind, attempts""",
                (token, worker_id, until_us, *params),
            ).fetchall()
            out: list[ClaimedRow] = []
            for _, request_id, session_id, seq, kind, attempts in sorted(claimed):
                ev = raw.execute("SELECT type, version, data, payload, sealed FROM events WHERE session_id = ? AND seq = ?", (session_id, seq)).fetchone()
                out.append((request_id, session_id, seq, kind, attempts, *ev))
            return out
