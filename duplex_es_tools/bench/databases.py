"""A fresh database for every measurement: a new SQLite file in the bench's temp folder, or a new
PostgreSQL schema on the bench server, dropped afterwards. The same database can be opened by
duplex_es (a SQLAlchemy URL), by raw drivers (``sqlite3`` / ``psycopg``) and by ``eventsourcing``
(its environment variables), so each contender of a row runs on a database of its own, under the
same durability settings.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import secrets
import sqlite3
from pathlib import Path
from typing import Iterator, Optional

import attrs
import psycopg
import sqlalchemy as sa

from duplex_es.store import Database, upgrade

__all__ = ["BenchDatabase", "fresh_database", "pg_base_url", "pg_conninfo"]

_counter = itertools.count(1)


def pg_base_url(url: str) -> sa.engine.URL:
    """The server and database of ``url`` with the psycopg 3 driver and without an ``options``
    query (a ``search_path`` set by a test fixture, say): schemas are chosen per measurement."""
    u = sa.engine.make_url(url)
    return u.set(drivername="postgresql+psycopg").difference_update_query(["options"])


def pg_conninfo(url: sa.engine.URL) -> str:
    """The libpq URL (``postgresql://user@host:port/db``) for psycopg."""
    return url.set(drivername="postgresql").render_as_string(hide_password=False)


@attrs.frozen
class BenchDatabase:
    """One fresh, empty database.

    Attributes:
        backend: ``sqlite`` or ``postgresql``.
        url: its SQLAlchemy URL, for :class:`duplex_es.store.Database`.
        path: the SQLite file (``None`` on PostgreSQL).
        conninfo: the libpq URL of the server (``None`` on SQLite).
        schema: the PostgreSQL schema (``None`` on SQLite).
        server_url: the SQLAlchemy URL of the PostgreSQL server, without a schema.
    """

    backend: str
    url: str
    path: Optional[Path] = None
    conninfo: Optional[str] = None
    schema: Optional[str] = None
    server_url: Optional[sa.engine.URL] = None

    @property
    def is_sqlite(self) -> bool:
        """True for a SQLite file."""
        return self.backend == "sqlite"

    def duplex(self, *, synchronous: str = "FULL") -> Database:
        """duplex_es's :class:`Database` on it, migrated (``duplex-es db upgrade``)."""
        db = Database(self.url, synchronous=synchronous)
        upgrade(db)
        return db

    def sqlite(self, *, synchronous: str = "FULL") -> sqlite3.Connection:
        """A raw stdlib connection in autocommit mode (transactions are explicit), WAL,
        ``synchronous`` as given, a 30 s busy timeout."""
        assert self.path is not None
        conn = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False, timeout=30)
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute(f"PRAGMA synchronous={synchronous}")
        return conn

    def psycopg(self, *, autocommit: bool = False) -> psycopg.Connection:
        """A raw psycopg 3 connection whose ``search_path`` is the schema."""
        assert self.conninfo is not None
        return psycopg.connect(self.conninfo, autocommit=autocommit, options=f"-c search_path={self.schema}")

    def eventsourcing_env(self) -> dict[str, str]:
        """The environment of an ``eventsourcing`` Application persisting here: its SQLite
        recorder on the file (it switches the file to WAL itself), or its PostgreSQL recorder in
        the schema (default settings: ``LOCK TABLE … IN EXCLUSIVE MODE`` per insert)."""
        if self.is_sqlite:
            return {"PERSISTENCE_MODULE": "eventsourcing.sqlite", "SQLITE_DBNAME": str(self.path), "SQLITE_LOCK_TIMEOUT": "30"}
        u = self.server_url
        assert u is not None
        return {
            "PERSISTENCE_MODULE": "eventsourcing.postgres",
            "POSTGRES_DBNAME": u.database or "",
            "POSTGRES_HOST": u.host or "127.0.0.1",
            "POSTGRES_PORT": str(u.port or 5432),
            "POSTGRES_USER": u.username or "postgres",
            "POSTGRES_PASSWORD": u.password or "",
            "POSTGRES_SCHEMA": self.schema or "public",
            "POSTGRES_POOL_SIZE": "8",
        }


@contextlib.contextmanager
def fresh_database(backend: str, folder: Path, pg_url: Optional[str], label: str) -> Iterator[BenchDatabase]:
    """A new empty database named after ``label``: a SQLite file in ``folder`` (deleted with
    its WAL afterwards) or a PostgreSQL schema on ``pg_url``'s server (dropped afterwards)."""
    n = next(_counter)
    if backend == "sqlite":
        path = folder / f"{label}-{n}.db"
        try:
            yield BenchDatabase("sqlite", f"sqlite:///{path}", path=path)
        finally:
            for suffix in ("", "-wal", "-shm", "-journal"):
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(f"{path}{suffix}")
        return
    if not pg_url:
        raise ValueError("a PostgreSQL bench needs a server URL (--pg)")
    server = pg_base_url(pg_url)
    conninfo = pg_conninfo(server)
    schema = f"dxes_bench_{os.getpid()}_{label.replace('-', '_')}_{n}_{secrets.token_hex(3)}"
    with psycopg.connect(conninfo, autocommit=True) as admin:
        admin.execute(f'CREATE SCHEMA "{schema}"')
    sep = "&" if "?" in server.render_as_string(hide_password=False) else "?"
    url = f"{server.render_as_string(hide_password=False)}{sep}options=-csearch_path%3D{schema}"
    try:
        yield BenchDatabase("postgresql", url, conninfo=conninfo, schema=schema, server_url=server)
    finally:
        with psycopg.connect(conninfo, autocommit=True) as admin:
            admin.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
