"""Applying the Alembic migrations: the only way the log's schema is created or changed."""

from __future__ import annotations

import contextlib
import fcntl
import logging
from pathlib import Path
from typing import Iterator

import sqlalchemy as sa

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory

from duplex_es.store.database import Database

__all__ = ["upgrade", "current_revision", "head_revision", "migrations_dir"]


def migrations_dir() -> Path:
    """The ``migrations/`` folder beside the package (a source checkout or editable install).

    Raises:
        FileNotFoundError: if the folder is missing (a wheel without the migrations).
    """
    path = Path(__file__).resolve().parents[2] / "migrations"
    if not (path / "env.py").exists():
        raise FileNotFoundError(f"duplex_es migrations not found at {path}; install from a source checkout")
    return path


def _config(db: Database) -> Config:
    cfg = Config()
    cfg.set_main_option("script_location", str(migrations_dir()))
    cfg.set_main_option("sqlalchemy.url", db.url.replace("%", "%%"))
    return cfg


def upgrade(db: Database, revision: str = "head") -> str | None:
    """Upgrade the schema to ``revision`` and return the revision now current.

    Several processes starting at once (``serve``, ``worker``, ``db upgrade``) migrate one
    after the other, never concurrently: the upgrade runs inside the backend's write
    transaction and, for a database file, under an exclusive lock on a side file (see
    :func:`_file_lock`).
    """
    cfg = _config(db)
    # Alembic logs every step at INFO; a routine upgrade at startup is not news.
    logging.getLogger("alembic").setLevel(max(logging.WARNING, logging.getLogger().level))
    with _file_lock(db), db.write() as conn:
        cfg.attributes["connection"] = conn
        command.upgrade(cfg, revision)
        return MigrationContext.configure(conn).get_current_revision()


@contextlib.contextmanager
def _file_lock(db: Database) -> Iterator[None]:
    """For a database that is a file (SQLite), an exclusive ``flock`` on ``<file>.lock`` until
    the upgrade ends; nothing for a server database or an in-memory one.

    The write transaction alone does not serialise upgrades on SQLite: Alembic commits DDL as
    it goes, which ends the ``BEGIN IMMEDIATE`` and lets a second process, which found no
    ``alembic_version`` yet, create the same tables (``table ... already exists``). The lock is
    the kernel's, so it goes with the process however it ends; the side file is left in place
    (removing it would race with a process about to lock it).
    """
    url = sa.engine.make_url(db.url)
    name = url.database
    if url.get_backend_name() != "sqlite" or not name or name == ":memory:" or name.startswith("file:"):
        yield
        return
    try:
        side = open(f"{Path(name).expanduser()}.lock", "a+b")
    except OSError:  # a read-only folder: nobody can migrate here, and a check needs no lock
        yield
        return
    with side:
        fcntl.flock(side.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(side.fileno(), fcntl.LOCK_UN)


def current_revision(db: Database) -> str | None:
    """The schema revision of the database, or ``None`` if it was never migrated."""
    with db.engine.connect() as conn:
        return MigrationContext.configure(conn).get_current_revision()


def head_revision() -> str | None:
    """The newest revision the migrations folder knows."""
    cfg = Config()
    cfg.set_main_option("script_location", str(migrations_dir()))
    return ScriptDirectory.from_config(cfg).get_current_head()
