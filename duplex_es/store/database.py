"""Connections to the log's database, SQLite (embedded default) or PostgreSQL.

Transactions are explicit on both backends so their locking is visible here and nowhere else:

* SQLite runs in WAL mode; every write transaction starts with ``BEGIN IMMEDIATE`` so a writer
  takes the write lock before it reads (a deferred transaction that reads first can fail with
  ``SQLITE_BUSY`` at the upgrade without the busy handler running — see
  ``reference/event-store-anchors.md`` §C.6). Writers inside one process also queue on a lock,
  so only one connection per process ever waits on SQLite's.
* PostgreSQL (psycopg 3) takes a transaction-level advisory lock before appending, which makes
  commit order equal position order for the global log: a reader tailing by position never
  skips an event that commits late (docs/architecture.md, I8).
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import threading
from pathlib import Path
from typing import Any, Iterator

import psycopg
import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine

__all__ = [
    "Database",
    "DatabaseNotFound",
    "DRIVER_ERRORS",
    "default_url",
    "driver_connection",
    "resolve_url",
    "DEFAULT_SQLITE_FILE",
    "APPEND_LOCK_KEY",
]

#: File name of the embedded default database, created in the working directory.
DEFAULT_SQLITE_FILE = "duplex_es.db"

#: The PostgreSQL advisory lock key that serializes appends (the ASCII of "dxes" as an int).
APPEND_LOCK_KEY = 0x64786573


#: What the drivers raise for a statement run on :func:`driver_connection` (SQLAlchemy's own
#: statements raise ``sqlalchemy.exc.DBAPIError`` instead).
DRIVER_ERRORS: tuple[type[Exception], ...] = (sqlite3.Error, psycopg.Error)


class DatabaseNotFound(FileNotFoundError):
    """A SQLite database file (or its folder) that should exist does not."""


def driver_connection(conn: Connection) -> Any:
    """The driver's own connection (``sqlite3.Connection`` or ``psycopg.Connection``) under a
    SQLAlchemy connection, for the few fixed statements of the append path."""
    return conn.connection.dbapi_connection


def _in_transaction(raw: Any) -> bool:
    if isinstance(raw, sqlite3.Connection):
        return raw.in_transaction
    return raw.info.transaction_status != psycopg.pq.TransactionStatus.IDLE


def default_url() -> str:
    """``DUPLEX_ES_DATABASE_URL`` if set, else a SQLite file in the working directory."""
    return os.environ.get("DUPLEX_ES_DATABASE_URL") or f"sqlite:///{DEFAULT_SQLITE_FILE}"


def resolve_url(url: str | None) -> str:
    """Normalize a user-given database URL.

    ``None`` gives :func:`default_url`; a bare path (``./x.db``) becomes a SQLite URL;
    ``postgresql://`` and ``postgres://`` select the psycopg 3 driver.
    """
    if not url:
        return default_url()
    if "://" not in url:
        return f"sqlite:///{url}"
    for prefix in ("postgresql://", "postgres://"):
        if url.startswith(prefix):
            return "postgresql+psycopg://" + url[len(prefix):]
    return url


class Database:
    """An engine plus the transaction discipline of its backend.

    Args:
        url: a SQLAlchemy URL (``sqlite:///file.db`` or ``postgresql+psycopg://...``), or
            ``None`` for :func:`default_url`.
        synchronous: SQLite's ``PRAGMA synchronous`` (``FULL`` by default: an acknowledged
            append survives power loss).
        busy_timeout_ms: how long a SQLite writer waits for another process's write lock.
        create: a missing SQLite file may be created (its folder must exist); ``False`` for
            commands that only read.

    Raises:
        ValueError: for a backend other than SQLite or PostgreSQL, or a malformed URL.
        DatabaseNotFound: the SQLite file (with ``create=False``) or its folder is missing.
    """

    def __init__(
        self, url: str | None = None, *, synchronous: str = "FULL", busy_timeout_ms: int = 30_000, create: bool = True
    ):
        self.url = resolve_url(url)
        try:
            backend = sa.engine.make_url(self.url).get_backend_name()
        except sa.exc.ArgumentError as exc:
            raise ValueError(f"not a database URL: {url!r}") from exc
        if backend not in ("sqlite", "postgresql"):
            raise ValueError(f"unsupported database backend {backend!r}: use sqlite or postgresql")
        self.backend = backend
        self._write_lock = threading.Lock()
        if backend == "sqlite":
            self._check_sqlite_path(create)
            self.engine: Engine = sa.create_engine(
                self.url,
                isolation_level="AUTOCOMMIT",
                connect_args={"timeout": busy_timeout_ms / 1000, "check_same_thread": False},
            )
            sync = synchronous

            @sa.event.listens_for(self.engine, "connect")
            def _pragmas(dbapi_conn, _record):  # noqa: ANN001
                cur = dbapi_conn.cursor()
                cur.execute("PRAGMA journal_mode=WAL")
                cur.execute(f"PRAGMA synchronous={sync}")
                cur.execute(f"PRAGMA busy_timeout={int(busy_timeout_ms)}")
                cur.close()

        else:
            # No pre-ping: it costs a round trip per transaction; a connection found broken is
            # invalidated when its transaction fails, and the caller's retry gets a fresh one.
            self.engine = sa.create_engine(self.url, isolation_level="AUTOCOMMIT")

    def _check_sqlite_path(self, create: bool) -> None:
        name = sa.engine.make_url(self.url).database
        if not name or name == ":memory:":
            return
        path = Path(name).expanduser()
        if not create and not path.exists():
            raise DatabaseNotFound(f"no database at {path} (pass --db, or set DUPLEX_ES_DATABASE_URL)")
        if not path.parent.exists():
            raise DatabaseNotFound(f"folder {path.parent} does not exist (for the database {path})")

    @property
    def is_sqlite(self) -> bool:
        """True for the embedded SQLite backend."""
        return self.backend == "sqlite"

    def describe(self) -> str:
        """The URL with any password masked, for logs and CLI output."""
        return sa.engine.make_url(self.url).render_as_string(hide_password=True)

    @contextlib.contextmanager
    def write(self) -> Iterator[Connection]:
        """A write transaction that appends in global order; commits on exit, rolls back on error."""
        with self._write_lock if self.is_sqlite else contextlib.nullcontext():
            # PostgreSQL: the lock rides in the same round trip as BEGIN (one simple query).
            begin = "BEGIN IMMEDIATE" if self.is_sqlite else f"BEGIN; SELECT pg_advisory_xact_lock({APPEND_LOCK_KEY})"
            with self._begin(begin) as conn:
                yield conn

    @contextlib.contextmanager
    def transaction(self) -> Iterator[Connection]:
        """A write transaction that does not append events (tick claims): no global append lock
        on PostgreSQL, where row locks (``FOR UPDATE SKIP LOCKED``) are enough."""
        if self.is_sqlite:
            with self.write() as conn:
                yield conn
        else:
            with self._begin("BEGIN") as conn:
                yield conn

    @contextlib.contextmanager
    def _begin(self, begin_sql: str) -> Iterator[Connection]:
        # Transaction control goes straight to the driver: it is on every append's path, and
        # SQLAlchemy's execution machinery cost more than the statements (issue 6 profile).
        with self.engine.connect() as conn:
            raw = driver_connection(conn)
            raw.execute(begin_sql)
            try:
                yield conn
            except BaseException:
                try:
                    raw.execute("ROLLBACK")
                except Exception:  # the connection itself is broken: never pool it again
                    conn.invalidate()
                raise
            try:
                if _in_transaction(raw):  # Alembic, run inside a write, may have committed already
                    raw.execute("COMMIT")
            except Exception:
                conn.invalidate()
                raise

    @contextlib.contextmanager
    def read(self) -> Iterator[Connection]:
        """A read-only transaction: one consistent snapshot for everything read inside it."""
        with self.engine.connect() as conn:
            conn.exec_driver_sql("BEGIN" if self.is_sqlite else "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
            try:
                yield conn
            finally:
                conn.exec_driver_sql("ROLLBACK")

    def dispose(self) -> None:
        """Close every pooled connection."""
        self.engine.dispose()
