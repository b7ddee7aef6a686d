"""The log on real SQLite files and a real PostgreSQL server: appends, conflicts, idempotency,
the hash chain, immutability triggers, the global tail and the tick queue."""

from __future__ import annotations

import threading

import pytest
import sqlalchemy as sa
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext

from duplex_es.audit import audit_session
from duplex_es.events import (
    EpochAdvanced,
    SessionConfig,
    SessionOpened,
    TextAppended,
    TickIssued,
    TickOutput,
)
from duplex_es.store import ANY_SEQ, ClaimLost, Database, EventLog, TickQueue, WrongExpectedSeq
from duplex_es.store.schema import metadata


def opened(sid: str) -> SessionOpened:
    return SessionOpened(session_id=sid, config=SessionConfig(model="m"))


def text(i: int) -> TextAppended:
    return TextAppended(client_event_id=f"e{i}", text=f"t{i}")


def test_batch_append_is_gapless_and_positions_follow_commits(log: EventLog):
    r1 = log.append("s1", [opened("s1"), text(1), text(2)], expected_seq=0)
    r2 = log.append("s2", [opened("s2")], expected_seq=0)
    r3 = log.append("s1", [text(3)], expected_seq=3)
    assert [r.seq for r in r1.records] == [1, 2, 3] and r3.records[0].seq == 4
    assert [r.seq for r in log.read_session("s1")] == [1, 2, 3, 4]
    tail = log.tail()
    assert [(r.session_id, r.seq) for r in tail] == [("s1", 1), ("s1", 2), ("s1", 3), ("s2", 1), ("s1", 4)]
    positions = [r.position for r in tail]
    assert positions == sorted(positions)
    assert [r.event for r in log.tail(after_position=positions[2])] == [opened("s2"), text(3)]
    assert log.head("s1") == 4 and log.head("nope") == 0
    assert log.session_ids() == ["s1", "s2"]


def test_wrong_expected_seq_writes_nothing(log: EventLog):
    log.append("s", [opened("s")], expected_seq=0)
    with pytest.raises(WrongExpectedSeq) as err:
        log.append("s", [text(1), text(2)], expected_seq=0)
    assert (err.value.expected, err.value.actual) == (0, 1)
    assert log.head("s") == 1
    with pytest.raises(WrongExpectedSeq):
        log.append("new", [opened("new")], expected_seq=5)
    assert log.head("new") == 0


def test_idempotency_key_returns_the_first_batch_and_writes_nothing(log: EventLog):
    log.append("s", [opened("s")], expected_seq=0)
    first = log.append("s", [text(1), text(2)], expected_seq=1, idempotency_key="evt-1")
    again = log.append("s", [text(9)], expected_seq=1, idempotency_key="evt-1")
    assert not first.duplicate and again.duplicate
    assert [r.seq for r in again.records] == [2, 3] and again.records == first.records
    assert log.head("s") == 3
    # Keys are per session: the same client event id in another session is a new command.
    other = log.append("t", [opened("t")], expected_seq=0, idempotency_key="evt-1")
    assert not other.duplicate


def test_concurrent_appends_to_one_session_never_claim_a_seq_they_did_not_write(log: EventLog):
    log.append("s", [opened("s")], expected_seq=0)
    wins: list[int] = []
    conflicts = 0
    lock = threading.Lock()

    def writer(i: int) -> None:
        nonlocal conflicts
        for attempt in range(2000):
            head = log.head("s")
            try:
                r = log.append("s", [text(i)], expected_seq=head)
            except WrongExpectedSeq:
                with lock:
                    conflicts += 1
                continue
            with lock:
                wins.append(r.records[0].seq)
            return

    threads = [threading.Thread(target=writer, args=(i,)) for i in range(50)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    stored = log.read_session("s")
    assert len(wins) == 50 and sorted(wins) == list(range(2, 52))
    assert [r.seq for r in stored] == list(range(1, 52))
    # Each writer's reported seq holds its own event.
    by_seq = {r.seq: r.event for r in stored}
    assert sorted(by_seq[s].text for s in wins) == sorted(f"t{i}" for i in range(50))


def test_two_writers_racing_on_a_new_session_one_wins(log: EventLog):
    results: list[str] = []
    barrier = threading.Barrier(2)

    def create(tag: str) -> None:
        barrier.wait()
        try:
            log.append("race", [SessionOpened(session_id="race", config=SessionConfig(model=tag))], expected_seq=0)
            results.append("ok")
        except WrongExpectedSeq:
            results.append("conflict")
        except sa.exc.IntegrityError:
            results.append("conflict")

    threads = [threading.Thread(target=create, args=(t,)) for t in ("a", "b")]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(results) == ["conflict", "ok"]
    assert log.head("race") == 1


def test_the_database_refuses_to_update_delete_or_truncate_events(log: EventLog):
    log.append("s", [opened("s"), text(1)], expected_seq=0)
    statements = ["UPDATE events SET data = '{}' WHERE seq = 2", "DELETE FROM events WHERE seq = 2", "DELETE FROM events"]
    if not log.db.is_sqlite:
        statements.append("TRUNCATE events")
    for stmt in statements:
        with pytest.raises(sa.exc.DBAPIError) as err:
            with log.db.write() as conn:
                conn.exec_driver_sql(stmt)
        assert "immutable" in str(err.value)
    assert [r.seq for r in log.read_session("s")] == [1, 2]


def _without_triggers(db: Database, stmt: str) -> None:
    """What an attacker with DDL rights could do: drop the guard and edit the table."""
    with db.write() as conn:
        if db.is_sqlite:
            conn.exec_driver_sql("DROP TRIGGER events_refuse_update")
            conn.exec_driver_sql("DROP TRIGGER events_refuse_delete")
        else:
            conn.exec_driver_sql("ALTER TABLE events DISABLE TRIGGER USER")
        conn.exec_driver_sql(stmt)


@pytest.mark.parametrize(
    "tamper,expect",
    [
        ("UPDATE events SET data = replace(data, 't2', 'tX') WHERE seq = 3", "edited"),
        ("DELETE FROM events WHERE seq = 2", "gap"),
        ("UPDATE events SET seq = seq + 100 WHERE seq = 2", "gap"),
    ],
    ids=["edit", "delete", "reorder"],
)
def test_audit_detects_edits_deletions_and_reordering(log: EventLog, tamper: str, expect: str):
    log.append("s", [opened("s"), text(1), text(2), text(3)], expected_seq=0)
    assert audit_session(log, "s").ok
    _without_triggers(log.db, tamper)
    report = audit_session(log, "s")
    assert not report.ok
    assert any(v.check == "chain" for v in report.violations)
    assert any(expect in v.message for v in report.violations)


def test_schema_comes_from_the_migration_and_matches_the_query_tables(db: Database):
    with db.engine.connect() as conn:
        diff = compare_metadata(MigrationContext.configure(conn), metadata)
    assert diff == []


def _tick(request_id: str, chunk: int = 0, epoch: int = 0) -> TickIssued:
    return TickIssued(request_id=request_id, response_id="resp", epoch=epoch, chunk_index=chunk)


def _output(request_id: str, chunk: int = 0) -> TickOutput:
    return TickOutput(session_id="s", request_id=request_id, response_id="resp", epoch=0, chunk_index=chunk)


def test_a_tick_is_claimable_only_after_its_event_commits_and_only_once(log: EventLog):
    q = TickQueue(log)
    assert q.claim("w", ttl_ms=1000) is None
    log.append("s", [opened("s"), _tick("r0")], expected_seq=0)
    c = q.claim("w1", ttl_ms=60_000)
    assert c is not None and c.request_id == "r0" and c.tick == _tick("r0") and c.attempts == 1
    assert q.claim("w2", ttl_ms=60_000) is None  # held
    res = q.commit(c, [_output("r0")])
    assert res.status == "committed" and res.records[0].seq == 3
    assert q.status("r0")["status"] == "done"
    # A redelivered, already-committed tick is only acknowledged.
    again = q.commit(c, [_output("r0")])
    assert again.status == "already_committed" and again.records == res.records
    assert log.head("s") == 3


def test_an_expired_claim_is_taken_over_and_the_old_worker_cannot_commit(log: EventLog):
    q = TickQueue(log)
    log.append("s", [opened("s"), _tick("r0")], expected_seq=0)
    t0 = 1_000_000_000_000
    old = q.claim("w1", ttl_ms=1000, now_us=t0)
    assert q.claim("w2", ttl_ms=1000, now_us=t0 + 500_000) is None
    new = q.claim("w2", ttl_ms=1000, now_us=t0 + 1_500_000)
    assert new is not None and new.token != old.token and new.attempts == 2
    with pytest.raises(ClaimLost):
        q.commit(old, [_output("r0")], now_us=t0 + 1_600_000)
    with pytest.raises(ClaimLost):
        q.extend(old, ttl_ms=1000, now_us=t0 + 1_600_000)
    assert q.commit(new, [_output("r0")], now_us=t0 + 1_700_000).status == "committed"
    assert [r.event.TYPE for r in log.read_session("s")] == ["session.opened", "tick.issued", "tick.output"]


def test_an_expired_claim_cannot_commit_even_before_anyone_reclaims(log: EventLog):
    q = TickQueue(log)
    log.append("s", [opened("s"), _tick("r0")], expected_seq=0)
    t0 = 2_000_000_000_000
    c = q.claim("w1", ttl_ms=1000, now_us=t0)
    extended = q.extend(c, ttl_ms=1000, now_us=t0 + 900_000)
    assert extended.claimed_until_us == t0 + 1_900_000
    with pytest.raises(ClaimLost):
        q.commit(extended, [_output("r0")], now_us=t0 + 2_000_000)
    assert log.head("s") == 2


def test_cancelled_ticks_are_not_handed_out_but_a_running_one_still_logs_its_output(log: EventLog):
    q = TickQueue(log)
    log.append("s", [opened("s"), _tick("r0"), _tick("r1", chunk=1)], expected_seq=0)
    running = q.claim("w1", ttl_ms=60_000)
    assert running.request_id == "r0"
    log.append("s", [EpochAdvanced(epoch=1, reason="client_cancelled", cancelled_request_ids=("r0", "r1"))], expected_seq=ANY_SEQ)
    assert q.claim("w2", ttl_ms=60_000) is None
    assert q.count("cancelled") == 2
    # The output is logged (the reducer marks it discarded: docs/architecture.md, I7).
    assert q.commit(running, [_output("r0")]).status == "committed"
    assert log.read_session("s")[-1].event.TYPE == "tick.output"


def test_concurrent_workers_claim_each_tick_once(log: EventLog):
    q = TickQueue(log)
    log.append("s", [opened("s")] + [_tick(f"r{i}", chunk=i) for i in range(30)], expected_seq=0)
    claimed: list[str] = []
    lock = threading.Lock()

    def work(name: str) -> None:
        while True:
            c = q.claim(name, ttl_ms=60_000)
            if c is None:
                return
            q.commit(c, [_output(c.request_id, c.tick.chunk_index)])
            with lock:
                claimed.append(c.request_id)

    threads = [threading.Thread(target=work, args=(f"w{i}",)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(claimed) == sorted(f"r{i}" for i in range(30))
    assert q.count("done") == 30
