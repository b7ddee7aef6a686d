"""The storage backends: each registered backend runs the conformance suite
(``store_conformance.py``) on a real database — a SQLite file, a PostgreSQL schema — plus the
guarantees only its own database can be asked for; and the registry picks a backend from a URL."""

from __future__ import annotations

import multiprocessing
import sqlite3
import threading
import time
from pathlib import Path
from typing import Iterator

import pytest

from duplex_es.events import SessionErased, TextAppended
from duplex_es.store.datakeys import MasterKeys
from duplex_es.store import Database, DatabaseNotFound, EventLog, WrongExpectedSeq, resolve_url, upgrade
from duplex_es.store.postgres import PostgresBackend
from duplex_es.store.registry import BACKENDS
from duplex_es.store.sqlite import SqliteBackend

from conftest import pg_schema
from store_conformance import MASTER, SECRETS, StoreConformance, opened, spoken


class TestSQLiteFile(StoreConformance):
    """The embedded backend, on a SQLite file in a fresh folder."""

    backend = SqliteBackend
    drop_guard = ("DROP TRIGGER events_refuse_update", "DROP TRIGGER events_refuse_delete")

    @pytest.fixture
    def url(self, tmp_path: Path) -> Iterator[str]:
        yield f"sqlite:///{tmp_path / 'log.db'}"

    def test_two_processes_of_read_check_append_cycles_on_one_sqlite_file(self, tmp_path: Path):
        """Case 13: no ``database is locked`` escapes and the seqs stay contiguous."""
        url = f"sqlite:///{tmp_path / 'two.db'}"
        db = Database(url)
        upgrade(db)
        EventLog(db).append("shared", [opened("shared")], expected_seq=0)
        ctx = multiprocessing.get_context("spawn")
        out = ctx.Queue()
        procs = [ctx.Process(target=_cycles, args=(url, "shared", 2000, out), name=f"p{i}") for i in range(2)]
        for p in procs:
            p.start()
        results = [out.get(timeout=300) for _ in procs]
        for p in procs:
            p.join(60)
        assert results == [[], []]
        seqs = [r.seq for r in EventLog(db).read_session("shared")]
        assert seqs == list(range(1, 4002))
        db.dispose()

    def test_nothing_readable_of_a_sealed_then_erased_session_is_in_the_file_or_its_wal(self, tmp_path: Path):
        """The SQLite file and its WAL, read as bytes: no word or audio of a sealed session
        while it lives, and after its erasure not even its wrapped data key (the freed bytes
        are overwritten and the WAL checkpointed), so a copy of the files taken afterwards and
        the master key together still open nothing (docs/privacy.md)."""
        path = tmp_path / "log.db"
        db = Database(f"sqlite:///{path}")
        upgrade(db)
        log = EventLog(db, master_keys=MasterKeys.from_keys([MASTER]))
        log.append("s", spoken("s"), expected_seq=0)

        def files() -> bytes:
            return b"".join(p.read_bytes() for p in tmp_path.iterdir() if p.name.startswith("log.db"))

        assert [s for s in SECRETS if s in files()] == []
        with db.read() as conn:
            wrapped = bytes(conn.exec_driver_sql("SELECT wrapped FROM session_keys WHERE session_id = 's'").scalar_one())
        assert wrapped in files()
        log.erase("s", [SessionErased(at_us=1, by="operator")], expected_seq=5)
        assert wrapped not in files() and [s for s in SECRETS if s in files()] == []
        db.dispose()

    def test_an_external_exclusive_lock_delays_an_append_but_loses_nothing(self, tmp_path: Path):
        """Case 15: another program holds ``BEGIN EXCLUSIVE`` on the SQLite file for 2 s; an append
        made meanwhile waits (busy timeout) and then succeeds; nothing is discarded."""
        path = tmp_path / "locked.db"
        db = Database(f"sqlite:///{path}")
        upgrade(db)
        log = EventLog(db)
        log.append("x", [opened("x")], expected_seq=0)
        other = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        other.execute("BEGIN EXCLUSIVE")
        released = threading.Timer(2.0, lambda: other.execute("COMMIT"))
        released.start()
        started = time.monotonic()
        result = log.append("x", [_said("during the lock")], expected_seq=1)
        waited = time.monotonic() - started
        released.join()
        other.close()
        assert result.records[0].seq == 2 and waited >= 1.5
        assert [getattr(r.event, "text", None) for r in log.read_session("x")] == [None, "during the lock"]
        db.dispose()


class TestPostgreSQL(StoreConformance):
    """The shared backend, on a fresh schema of the local PostgreSQL server."""

    backend = PostgresBackend
    extra_refused = ("TRUNCATE events",)
    drop_guard = ("ALTER TABLE events DISABLE TRIGGER USER",)

    @pytest.fixture
    def url(self) -> Iterator[str]:
        with pg_schema() as url:
            yield url


def _said(tag: str) -> TextAppended:
    return TextAppended(client_event_id=tag, text=tag)


def _cycles(url: str, sid: str, n: int, out: "multiprocessing.Queue") -> None:
    db = Database(url)
    log = EventLog(db)
    errors, done = [], 0
    while done < n:
        try:
            head = log.head(sid)  # read, check, append: the pattern that breaks with a deferred BEGIN
            log.append(sid, [_said(f"{multiprocessing.current_process().name}-{done}")], expected_seq=head)
            done += 1
        except WrongExpectedSeq:
            continue
        except Exception as exc:
            errors.append(repr(exc))
            break
    out.put(errors)
    db.dispose()


# ------------------------------------------------------------------------------- the registry


def test_every_registered_backend_runs_the_conformance_suite():
    """Registering a backend without running the suite on it is a mistake this catches."""
    assert {c.backend for c in StoreConformance.__subclasses__()} == set(BACKENDS)


@pytest.mark.parametrize(
    "given,resolved",
    [
        ("./x.db", "sqlite:///./x.db"),
        ("sqlite:///x.db", "sqlite:///x.db"),
        ("postgresql://u@h/db", "postgresql+psycopg://u@h/db"),
        ("postgres://u@h/db", "postgresql+psycopg://u@h/db"),
        ("postgresql+psycopg://u@h/db", "postgresql+psycopg://u@h/db"),
    ],
)
def test_a_url_selects_its_backend_and_its_default_driver(given: str, resolved: str):
    assert resolve_url(given) == resolved


def test_the_backend_comes_from_the_url(tmp_path: Path):
    db = Database(f"sqlite:///{tmp_path / 'a.db'}")
    assert isinstance(db.backend, SqliteBackend) and db.is_sqlite
    db.dispose()
    with pytest.raises(ValueError, match="unsupported database backend 'mysql'"):
        Database("mysql://u@h/db")
    with pytest.raises(ValueError, match="not a database URL"):
        Database("bad url://x")
    with pytest.raises(DatabaseNotFound):
        Database(f"sqlite:///{tmp_path / 'missing.db'}", create=False)
