"""The global log under concurrency (issue 5, cases 1-7 and 13-15), after the failure reports
of other event stores (``reference/event-store-anchors.md`` §D): a tailing reader never skips a
late commit, conflicts do not stall readers, the session head never moves back, and SQLite
writers never see ``database is locked``."""

from __future__ import annotations

import multiprocessing
import threading
import time
from pathlib import Path

import pytest
import sqlalchemy as sa

from duplex_es.events import SessionConfig, SessionOpened, TextAppended
from duplex_es.store import Database, EventLog, WrongExpectedSeq, upgrade
from duplex_es.store.schema import events as events_t


def opened(sid: str) -> SessionOpened:
    return SessionOpened(session_id=sid, config=SessionConfig(model="m"))


def text(tag: str) -> TextAppended:
    return TextAppended(client_event_id=tag, text=tag)


class Tailer:
    """A global reader as the server's follower is one: it remembers the last position it was
    given (its checkpoint) and asks for what is after it."""

    def __init__(self, log: EventLog) -> None:
        self.log = log
        self.checkpoint = 0
        self.seen: list[tuple[int, str]] = []  # (position, text) in delivery order

    def poll(self) -> int:
        rows = self.log.tail(self.checkpoint, limit=500)
        for r in rows:
            assert r.position > self.checkpoint, "delivered out of order"
            self.checkpoint = r.position
            self.seen.append((r.position, getattr(r.event, "text", r.event.TYPE)))
        return len(rows)


def all_rows(log: EventLog) -> list[tuple[int, str]]:
    out, after = [], 0
    while page := log.tail(after, limit=1000):
        out += [(r.position, getattr(r.event, "text", r.event.TYPE)) for r in page]
        after = page[-1].position
    return out


@pytest.mark.parametrize("writers", [2, 8])
def test_a_transaction_that_commits_late_is_still_delivered_in_order(pg_schema_url: str, writers: int):
    """Case 1 (PostgreSQL): writer A draws its position and holds its transaction open; the
    other writers try to commit meanwhile; a tailing reader running throughout gets A's event and
    nothing out of order, because positions follow commit order."""
    db = Database(pg_schema_url)
    upgrade(db)
    log = EventLog(db)
    for i in range(writers):
        log.append(f"s{i}", [opened(f"s{i}")], expected_seq=0)
    reader = Tailer(log)
    reader.poll()
    a_holds = threading.Event()
    release = threading.Event()

    def writer_a() -> None:
        with db.write() as conn:
            log.append_in(conn, "s0", [text("A")], expected_seq=1)
            a_holds.set()
            release.wait(10)

    def writer(i: int) -> None:
        a_holds.wait(10)
        log.append(f"s{i}", [text(f"B{i}")], expected_seq=1)

    threads = [threading.Thread(target=writer_a)] + [threading.Thread(target=writer, args=(i,)) for i in range(1, writers)]
    for t in threads:
        t.start()
    a_holds.wait(10)
    deadline = time.monotonic() + 0.5
    while time.monotonic() < deadline:  # the others are trying to commit now
        reader.poll()
        time.sleep(0.01)
    assert all(t != "A" for _, t in reader.seen)
    release.set()
    for t in threads:
        t.join()
    while reader.poll():
        pass
    assert reader.seen == all_rows(log)  # every event, each once, in position order
    texts = [t for _, t in reader.seen]
    assert texts.index("A") < min(texts.index(f"B{i}") for i in range(1, writers))
    db.dispose()


def test_concurrent_writers_on_many_sessions_lose_nothing_for_a_global_reader(log: EventLog):
    """Cases 2 and 3: writers on different sessions for a few seconds while a reader tails;
    zero missing, zero duplicates, and its checkpoint only ever moved over what it was given."""
    stop = time.monotonic() + 3.0
    reader = Tailer(log)
    errors: list[BaseException] = []

    def writer(i: int) -> None:
        sid, seq = f"w{i}", 0
        try:
            log.append(sid, [opened(sid)], expected_seq=0)
            seq = 1
            while time.monotonic() < stop:
                log.append(sid, [text(f"{sid}-{seq}")], expected_seq=seq)
                seq += 1
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    checkpoints = []
    while any(t.is_alive() for t in threads):
        if not reader.poll():
            time.sleep(0.002)  # as a follower polls; spinning would starve the writers of the GIL
        checkpoints.append(reader.checkpoint)
    for t in threads:
        t.join()
    while reader.poll():
        pass
    assert not errors
    assert reader.seen == all_rows(log) and len(reader.seen) > 20
    assert checkpoints == sorted(checkpoints)
    assert len({p for p, _ in reader.seen}) == len(reader.seen)


def test_a_thousand_version_conflicts_do_not_stall_readers(log: EventLog):
    """Case 4: forced conflicts (and, on PostgreSQL, positions burned by a failed insert) leave
    no hole a reader waits on: its lag is back to zero as soon as it polls."""
    log.append("c", [opened("c")], expected_seq=0)
    for _ in range(1000):
        with pytest.raises(WrongExpectedSeq):
            log.append("c", [text("stale")], expected_seq=0)
    if not log.db.is_sqlite:  # a failed insert burns sequence values on PostgreSQL
        with pytest.raises(sa.exc.IntegrityError):
            with log.db.write() as conn:
                conn.execute(events_t.insert().values(session_id="c", seq=1, type="x", version=1, data="{}", recorded_at_us=0, prev_hash="", hash=""))
    log.append("c", [text("after")], expected_seq=1)
    reader = Tailer(log)
    started = time.monotonic()
    while reader.poll():
        pass
    assert reader.checkpoint == log.last_position() and time.monotonic() - started < 5
    assert [t for _, t in reader.seen] == ["session.opened", "after"]


def test_the_session_head_never_moves_back_and_equals_the_highest_seq(log: EventLog):
    """Case 7: empty appends and real appends racing; the head (what expected-seq checks read)
    is monotonic and always the highest stored seq."""
    log.append("h", [opened("h")], expected_seq=0)
    stop = time.monotonic() + 1.5
    heads: list[int] = []

    def empties() -> None:
        while time.monotonic() < stop:
            head = log.head("h")
            try:
                assert log.append("h", [], expected_seq=head).records == ()
            except WrongExpectedSeq:
                pass

    def writes(tag: str) -> None:
        n = 0
        while time.monotonic() < stop:
            try:
                log.append("h", [text(f"{tag}{n}")], expected_seq=log.head("h"))
                n += 1
            except WrongExpectedSeq:
                pass

    threads = [threading.Thread(target=empties), threading.Thread(target=writes, args=("a",)), threading.Thread(target=writes, args=("b",))]
    for t in threads:
        t.start()
    while any(t.is_alive() for t in threads):
        heads.append(log.head("h"))
    for t in threads:
        t.join()
    assert heads == sorted(heads)
    seqs = [r.seq for r in log.read_session("h")]
    assert log.head("h") == max(seqs) and seqs == list(range(1, len(seqs) + 1))


def _cycles(url: str, sid: str, n: int, out: "multiprocessing.Queue") -> None:
    db = Database(url)
    log = EventLog(db)
    errors, done = [], 0
    while done < n:
        try:
            head = log.head(sid)  # read, check, append: the pattern that breaks with a deferred BEGIN
            log.append(sid, [text(f"{multiprocessing.current_process().name}-{done}")], expected_seq=head)
            done += 1
        except WrongExpectedSeq:
            continue
        except Exception as exc:
            errors.append(repr(exc))
            break
    out.put(errors)
    db.dispose()


def test_two_processes_of_read_check_append_cycles_on_one_sqlite_file(tmp_path: Path):
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


def test_sixteen_writer_threads_in_one_process(log: EventLog):
    """Case 14: no exception escapes; every append lands."""
    errors: list[BaseException] = []

    def writer(i: int) -> None:
        sid = f"t{i}"
        try:
            log.append(sid, [opened(sid)], expected_seq=0)
            for n in range(40):
                log.append(sid, [text(f"{sid}-{n}")], expected_seq=n + 1)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(i,)) for i in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert all(log.head(f"t{i}") == 41 for i in range(16))


def test_an_external_exclusive_lock_delays_an_append_but_loses_nothing(tmp_path: Path):
    """Case 15: another program holds ``BEGIN EXCLUSIVE`` on the SQLite file for 2 s; an append
    made meanwhile waits (busy timeout) and then succeeds; nothing is discarded."""
    import sqlite3

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
    result = log.append("x", [text("during the lock")], expected_seq=1)
    waited = time.monotonic() - started
    released.join()
    other.close()
    assert result.records[0].seq == 2 and waited >= 1.5
    assert [getattr(r.event, "text", None) for r in log.read_session("x")] == [None, "during the lock"]
    db.dispose()
