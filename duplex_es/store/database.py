"""Connections to the log's database, and the transaction discipline every backend follows.

Transactions are explicit, opened with SQL the backend gives (:mod:`duplex_es.store.backend`), so
their locking is visible in one place per backend (:mod:`duplex_es.store.sqlite`,
:mod:`duplex_es.store.postgres`): an append's transaction serialises appenders so positions
follow commit order (docs/architecture.md, I8); other writes use what locks the database has;
reads see one snapshot.
"""

from __future__ import annotations

import contextlib
import os
from typing import Iterator

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine

from duplex_es.store.backend import Backend, DatabaseNotFound, EngineOptions, driver_connection
from duplex_es.store.postgres import APPEND_LOCK_KEY
from duplex_es.store.registry import BACKENDS, backend_class, normalize_url

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

# APPEND_LOCK_KEY is re-exported for duplex_es_tools/bench/peer_raw.py, which takes the same lock
# in its raw-driver peer; it belongs to the PostgreSQL backend (duplex_es/store/postgres.py).

#: What the registered drivers raise for a statement run on :func:`driver_connection`
#: (SQLAlchemy's own statements raise ``sqlalchemy.exc.DBAPIError`` instead).
DRIVER_ERRORS: tuple[type[Exception], ...] = tuple(e for b in BACKENDS for e in b.driver_errors)


def default_url() -> str:
    """``DUPLEX_ES_DATABASE_URL`` if set, else a SQLite file in the working directory."""
    return os.environ.get("DUPLEX_ES_DATABASE_URL") or f"sqlite:///{DEFAULT_SQLITE_FILE}"


def resolve_url(url: str | None) -> str:
    """Normalize a user-given database URL.

    ``None`` gives :func:`default_url`; a bare path (``./x.db``) becomes a SQLite URL; a URL that
    names no driver gets its backend's default (``postgresql://`` and ``postgres://`` select
    psycopg 3).
    """
    if not url:
        return default_url()
    if "://" not in url:
        return f"sqlite:///{url}"
    return normalize_url(url)


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
        write_timeout_ms: the longest a write may wait for a lock or run one statement (ms);
            ``None``: as long as the database lets it (see
            :class:`~duplex_es.store.backend.EngineOptions`).

    Attributes:
        url: the resolved URL (:func:`resolve_url`).
        backend: the :class:`~duplex_es.store.backend.Backend` the URL selected; code that
            needs a dialect-specific answer asks it.
        engine: the SQLAlchemy engine, in autocommit mode (transactions are opened below).

    Raises:
        ValueError: for a backend that is not registered (:mod:`duplex_es.store.registry`), or
            a malformed URL.
        DatabaseNotFound: the SQLite file (with ``create=False``) or its folder is missing.
    """

    def __init__(
        self,
        url: str | None = None,
        *,
        synchronous: str = "FULL",
        busy_timeout_ms: int = 30_000,
        create: bool = True,
        write_timeout_ms: int | None = None,
    ):
        self.url = resolve_url(url)
        self.backend: Backend = backend_class(self.url)()
        options = EngineOptions(synchronous=synchronous, busy_timeout_ms=busy_timeout_ms, create=create, write_timeout_ms=write_timeout_ms)
        self.engine: Engine = self.backend.create_engine(self.url, options)

    @property
    def is_sqlite(self) -> bool:
        """True for the embedded SQLite backend.

        A compatibility property for callers written before :attr:`backend` existed (nothing in
        this repository uses it any more: the benchmark has its own ``BenchDatabase.is_sqlite``);
        code asks :attr:`backend` for the decision itself instead of testing which database it is."""
        return self.backend.name == "sqlite"

    def describe(self) -> str:
        """The URL with any password masked, for logs and CLI output."""
        return sa.engine.make_url(self.url).render_as_string(hide_password=True)

    @contextlib.contextmanager
    def write(self, *, wait: bool = True) -> Iterator[Connection]:
        """A write transaction that appends in global order (the backend's ``append_begin``);
        commits on exit, rolls back on error.

        Args:
            wait: ``False`` for a caller that must not block on a lock (a commit on an event
                loop): if the write lock is taken, fail at once instead of waiting for it.

        Raises:
            WriteLockBusy: with ``wait=False``, the lock was taken; no transaction was opened.
        """
        if wait:
            with self.backend.write_guard():
                with self._begin(self.backend.append_begin) as conn:
                    yield conn
        else:
            with self.backend.write_guard_nowait():
                with self._begin(self.backend.append_begin, nowait=True) as conn:
                    yield conn

    @contextlib.contextmanager
    def transaction(self) -> Iterator[Connection]:
        """A write transaction that does not append events (tick claims, ownership, snapshots):
        the backend's ``write_begin``, without the global append lock where row locks suffice."""
        with self.backend.write_guard():
            with self._begin(self.backend.write_begin) as conn:
                yield conn

    @contextlib.contextmanager
    def _begin(self, begin_sql: str, *, nowait: bool = False) -> Iterator[Connection]:
        # Transaction control goes straight to the driver: it is on every append's path, and
        # SQLAlchemy's execution machinery cost more than the statements (issue 6 profile).
        with self.engine.connect() as conn:
            raw = driver_connection(conn)
            if nowait:
                self.backend.begin_nowait(raw, begin_sql)
            else:
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
                if self.backend.in_transaction(raw):  # Alembic, run inside a write, may have committed already
                    raw.execute("COMMIT")
            except Exception:
                conn.invalidate()
                raise

    @contextlib.contextmanager
    def read(self) -> Iterator[Connection]:
        """A read-only transaction: one consistent snapshot for everything read inside it."""
        with self.engine.connect() as conn:
            conn.exec_driver_sql(self.backend.read_begin)
            try:
                yield conn
            finally:
                conn.exec_driver_sql("ROLLBACK")

    def dispose(self) -> None:
        """Close every pooled connection."""
        self.engine.dispose()
