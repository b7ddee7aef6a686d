"""Shared fixtures: real SQLite files and real PostgreSQL schemas, one fresh log per test."""

from __future__ import annotations

import contextlib
import os
import secrets
from pathlib import Path
from typing import Iterator

import pytest
import sqlalchemy as sa

from duplex_es.store import Database, EventLog, upgrade

#: The PostgreSQL server the tests use (trust auth on the local cluster).
PG_BASE_URL = os.environ.get("DUPLEX_ES_TEST_PG_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/test")

FIXTURES = Path(__file__).resolve().parents[1].parent / "shared" / "fixtures"


def _pg_url(schema: str) -> str:
    sep = "&" if "?" in PG_BASE_URL else "?"
    return f"{PG_BASE_URL}{sep}options=-csearch_path%3D{schema}"


@contextlib.contextmanager
def pg_schema() -> Iterator[str]:
    """A URL whose connections use a new, empty PostgreSQL schema (dropped afterwards)."""
    schema = f"dxes_test_{os.getpid()}_{secrets.token_hex(4)}"
    admin = sa.create_engine(PG_BASE_URL, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.exec_driver_sql(f'CREATE SCHEMA "{schema}"')
    try:
        yield _pg_url(schema)
    finally:
        with admin.connect() as conn:
            conn.exec_driver_sql(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
        admin.dispose()


@contextlib.contextmanager
def backend_url(name: str, folder: Path) -> Iterator[str]:
    """A fresh database URL on ``name`` (``sqlite`` or ``postgresql``)."""
    if name == "sqlite":
        yield f"sqlite:///{folder / 'log.db'}"
    else:
        with pg_schema() as url:
            yield url


@pytest.fixture
def pg_schema_url() -> Iterator[str]:
    """A URL whose connections use a new, empty PostgreSQL schema (dropped afterwards)."""
    with pg_schema() as url:
        yield url


@pytest.fixture
def sqlite_url(tmp_path: Path) -> str:
    """A URL for a new SQLite file."""
    return f"sqlite:///{tmp_path / 'log.db'}"


@pytest.fixture(params=["sqlite", "postgresql"])
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A fresh, unmigrated database on each backend."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'log.db'}"
    else:
        yield request.getfixturevalue("pg_schema_url")


@pytest.fixture
def db(db_url: str) -> Iterator[Database]:
    """A migrated database on each backend."""
    database = Database(db_url)
    upgrade(database)
    yield database
    database.dispose()


@pytest.fixture
def log(db: Database) -> EventLog:
    """The event log on a migrated database, on each backend."""
    return EventLog(db)


@pytest.fixture
def sqlite_log(sqlite_url: str) -> Iterator[EventLog]:
    """The event log on a migrated SQLite file."""
    database = Database(sqlite_url)
    upgrade(database)
    yield EventLog(database)
    database.dispose()


@pytest.fixture(scope="session")
def weather_pcm() -> bytes:
    """The spoken weather question, 24 kHz PCM16 mono (5.19 s)."""
    from duplex_es_tools.conversation import read_wav_pcm16

    return read_wav_pcm16(FIXTURES / "audio" / "weather_question_24k.wav")


# ----------------------------------------------------------------------------- test layout
#
# tests/unit (no database, socket or process), tests/integration (real SQLite files and the real
# PostgreSQL, in-process servers and workers), tests/system (real serve and worker processes,
# real clients, faults and load), tests/tools (the tooling). Tests of an invariant of
# docs/architecture.md carry @pytest.mark.invariant("I<n>"); tests/unit/test_invariants.py checks
# the docs' table against the markers.


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--invariant", action="append", default=[], metavar="I<n>", help="run only the tests of these invariants")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    wanted = set(config.getoption("--invariant"))
    if not wanted:
        return
    keep, drop, seen = [], [], set()
    for item in items:
        names = {n for m in item.iter_markers("invariant") for n in m.args}
        seen |= names
        (keep if names & wanted else drop).append(item)
    if wanted - seen:
        raise pytest.UsageError(f"--invariant: no collected test is marked with {sorted(wanted - seen)} (marked: {sorted(seen)})")
    config.hook.pytest_deselected(items=drop)
    items[:] = keep
