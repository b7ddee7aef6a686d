"""The commit path never stalls the event loop (docs/security.md, "No global stalls"): a commit on
the loop does not wait for a write lock held elsewhere, and SQLite's WAL checkpoints run in a
thread of their own, not inside a commit. Real SQLite files; the lock is held by a second
connection, as another process would."""

from __future__ import annotations

import asyncio
import sqlite3
import time
from pathlib import Path

import pytest

from duplex_es.events import TextAppended
from duplex_es.store import Database, EventLog, GroupCommitWriter, LogUnavailable, upgrade
from duplex_es.store.checkpointer import Checkpointer


def _text(size: int = 1) -> TextAppended:
    return TextAppended(text="x" * size)


async def _loop_gaps(stop: asyncio.Event) -> float:
    """The longest time the loop went without running this task (ms)."""
    worst, last = 0.0, time.monotonic()
    while not stop.is_set():
        await asyncio.sleep(0.002)
        now = time.monotonic()
        worst, last = max(worst, (now - last) * 1000), now
    return worst


def test_an_inline_commit_waits_for_a_held_lock_without_blocking_the_loop(tmp_path: Path) -> None:
    db = Database(f"sqlite:///{tmp_path / 'log.db'}")
    upgrade(db)
    log = EventLog(db)
    writer = GroupCommitWriter(log, inline=True, timeout_ms=400)
    other = sqlite3.connect(tmp_path / "log.db", isolation_level=None)

    async def scenario() -> tuple[float, BaseException | None, float]:
        stop = asyncio.Event()
        ticker = asyncio.create_task(_loop_gaps(stop))
        other.execute("BEGIN IMMEDIATE")  # another process's writer holds the lock
        started = time.monotonic()
        try:
            await writer.append_async("s1", [_text()], expected_seq=0)
            refused = None
        except LogUnavailable as exc:
            refused = exc
        waited = (time.monotonic() - started) * 1000
        other.execute("ROLLBACK")
        result = await writer.append_async("s1", [_text()], expected_seq=0)  # free again: it commits
        assert result.records[0].seq == 1
        stop.set()
        return await ticker, refused, waited

    try:
        worst_gap_ms, refused, waited_ms = asyncio.run(scenario())
    finally:
        other.close()
        writer.close()
        db.dispose()
    assert isinstance(refused, LogUnavailable) and refused.reason == "busy"
    assert 350 <= waited_ms < 3000
    # The old commit slept in SQLite's busy handler on the loop for the whole wait.
    assert worst_gap_ms < 200, f"the loop stalled {worst_gap_ms:.0f} ms while the lock was held"
    assert len(log.read_session("s1")) == 1  # the refused append wrote nothing


def test_commits_leave_checkpoints_to_the_checkpointer(tmp_path: Path) -> None:
    path = tmp_path / "log.db"
    db = Database(f"sqlite:///{path}")
    upgrade(db)
    # An interval longer than the test: only close() checkpoints, so what the WAL holds shows
    # whether the commits themselves checkpointed (SQLite's default does at 1,000 pages, 4 MiB).
    checkpointer = Checkpointer(db.engine, db.backend, interval_ms=3_600_000)
    log = EventLog(db)
    for i in range(120):  # about 7 MiB of events, committed one by one
        log.append(f"s{i}", [_text(60_000)], expected_seq=0)
    wal = Path(f"{path}-wal")
    assert wal.stat().st_size > 6 * 2**20, "a commit checkpointed the WAL"
    before = path.stat().st_size
    checkpointer.close()
    assert checkpointer.checkpoints == 1
    assert path.stat().st_size > before + 6 * 2**20  # the WAL was copied into the database file
    with db.engine.connect() as conn:  # connections opened after close() checkpoint on commit again
        assert conn.exec_driver_sql("PRAGMA wal_autocheckpoint").scalar() == 1000
    db.dispose()


@pytest.mark.parametrize("interval_ms", [20])
def test_the_checkpointer_keeps_the_wal_bounded(tmp_path: Path, interval_ms: int) -> None:
    path = tmp_path / "log.db"
    db = Database(f"sqlite:///{path}")
    upgrade(db)
    checkpointer = Checkpointer(db.engine, db.backend, interval_ms=interval_ms, wal_limit=2 * 2**20)
    log = EventLog(db)
    try:
        for i in range(240):  # nearly back to back: a PASSIVE checkpoint alone never catches up
            log.append(f"s{i}", [_text(60_000)], expected_seq=0)
            time.sleep(0.001)  # the gap a server leaves between commits, for the RESTART step
        assert checkpointer.checkpoints > 0
        assert checkpointer.restarts > 0  # the WAL passed its limit: restarted, and truncated
        # Checkpointed while the appends went on: the WAL was reused, not grown to hold all
        # 14 MiB of them (it holds what came since the last restart, over the 2 MiB limit).
        assert Path(f"{path}-wal").stat().st_size < 12 * 2**20
    finally:
        checkpointer.close()
        db.dispose()


def test_an_inline_commits_fsync_runs_off_the_loop_and_what_came_meanwhile_shares_the_next(tmp_path: Path) -> None:
    """The loop runs a batch's statements; its COMMIT (SQLite's fsync, synchronous=FULL) runs in
    the committer thread, and appends decided meanwhile go in the next transaction. Each caller
    gets its own outcome, in order per session, only once the commit holding it returned."""
    import threading

    import sqlalchemy as sa

    from duplex_es.store import WrongExpectedSeq

    db = Database(f"sqlite:///{tmp_path / 'log.db'}")
    upgrade(db)
    commits: list[int] = []  # the thread of every COMMIT SQLite ran

    @sa.event.listens_for(db.engine, "connect")
    def _trace(dbapi_conn, _record) -> None:  # noqa: ANN001
        dbapi_conn.set_trace_callback(lambda sql: commits.append(threading.get_ident()) if sql.strip().upper() == "COMMIT" else None)

    db.engine.dispose()  # connections made from now on are traced
    log = EventLog(db)
    writer = GroupCommitWriter(log, inline=True)
    sessions, per_session = 8, 25

    async def client(sid: str) -> list[int]:
        seqs = []
        for i in range(per_session):
            result = await writer.append_async(sid, [_text()], expected_seq=i)
            seqs.append(result.records[0].seq)
        return seqs

    async def scenario() -> tuple[list[list[int]], BaseException, int]:
        got = await asyncio.gather(*(client(f"s{n}") for n in range(sessions)))
        try:
            await writer.append_async("s0", [_text()], expected_seq=3)  # stale: refused alone
        except WrongExpectedSeq as exc:
            refused = exc
        return got, refused, threading.get_ident()

    try:
        got, refused, loop_thread = asyncio.run(scenario())
    finally:
        writer.close()
    assert got == [list(range(1, per_session + 1))] * sessions
    assert isinstance(refused, WrongExpectedSeq)
    assert writer.commands == sessions * per_session + 1 and writer.transactions < writer.commands
    assert commits and loop_thread not in commits  # no fsync on the loop
    for n in range(sessions):
        assert [r.seq for r in log.read_session(f"s{n}")] == list(range(1, per_session + 1))
    db.dispose()


def test_an_inline_append_queued_when_the_writer_closes_still_commits(tmp_path: Path) -> None:
    """A server stopping closes its writer while the loop may still hold a batch: that batch
    commits (on the loop, the committer being gone) and its caller gets its outcome; an append
    after the close is refused."""
    db = Database(f"sqlite:///{tmp_path / 'log.db'}")
    upgrade(db)
    log = EventLog(db)
    writer = GroupCommitWriter(log, inline=True)

    async def scenario() -> int:
        await writer.append_async("s", [_text()], expected_seq=0)  # the committer thread exists
        queued = asyncio.ensure_future(writer.append_async("s", [_text()], expected_seq=1))
        await asyncio.sleep(0)  # it is queued, its flush scheduled after this coroutine's turn
        writer.close()
        with pytest.raises(RuntimeError):
            await writer.append_async("s", [_text()], expected_seq=2)
        return (await asyncio.wait_for(queued, 10)).records[0].seq

    assert asyncio.run(scenario()) == 2
    assert [r.seq for r in log.read_session("s")] == [1, 2]
    db.dispose()
