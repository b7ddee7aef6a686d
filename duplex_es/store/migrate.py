"""Applying the Alembic migrations: the only way the log's schema is created or changed."""

from __future__ import annotations

import logging
from pathlib import Path

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

    Runs inside the backend's write transaction, so several processes starting at once
    (``serve`` and ``worker``) migrate one after the other, never concurrently.
    """
    cfg = _config(db)
    # Alembic logs every step at INFO; a routine upgrade at startup is not news.
    logging.getLogger("alembic").setLevel(max(logging.WARNING, logging.getLogger().level))
    with db.write() as conn:
        cfg.attributes["connection"] = conn
        command.upgrade(cfg, revision)
        return MigrationContext.configure(conn).get_current_revision()


def current_revision(db: Database) -> str | None:
    """The schema revision of the database, or ``None`` if it was never migrated."""
    with db.engine.connect() as conn:
        return MigrationContext.configure(conn).get_current_revision()


def head_revision() -> str | None:
    """The newest revision the migrations folder knows."""
    cfg = Config()
    cfg.set_main_option("script_location", str(migrations_dir()))
    return ScriptDirectory.from_config(cfg).get_current_head()
