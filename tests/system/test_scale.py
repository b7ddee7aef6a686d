"""Issue 6: many servers and workers on one database — sessions moving between servers under
ownership fences, and group commit. What each backend must guarantee on its own (ownership
fences, claims, wake-ups) is in the conformance suite (store_conformance.py)."""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path

import pytest
import sqlalchemy as sa

from duplex_es.domain import AppendText
from duplex_es.events import SessionConfig, SessionOpened, TextAppended
from duplex_es.server.host import SessionMoved
from duplex_es.server.sessions import DuplexSessions
from duplex_es.store.database import DRIVER_ERRORS
from duplex_es.store import (
    Database,
    EventLog,
    GroupCommitWriter,
    OwnershipLost,
    SessionOwners,
    WrongExpectedSeq,
    upgrade,
)
from duplex_es_tools.processes import free_port, start_server, start_worker, wait_healthy
from servers import session_state
from wsclient import WsClient


def _open(log: EventLog, sid: str) -> None:
    log.append(sid, [SessionOpened(session_id=sid, config=SessionConfig(model="m"))], expected_seq=0)


# ------------------------------------------------------------------- sessions moving between servers


def test_a_session_resumed_on_another_server_moves_there_and_the_old_one_can_write_nothing(db: Database):
    """Two servers' session engines in one process, on one database: B takes a session A
    hosts; A's listener is told ``session.replaced``, and A's late command is refused."""

    async def run() -> None:
        a = DuplexSessions(db, server_id="a", reaper_interval_ms=3_600_000)
        b = DuplexSessions(db, server_id="b", reaper_interval_ms=3_600_000)
        host_a = await a.open_session()
        listener = host_a.listener
        stream = asyncio.create_task(_drain(host_a))  # what A's connection would be sent
        assert await host_a.submit(AppendText(text="one"), listener=listener)
        host_b = await b.resume_session(host_a.session_id)
        assert await host_b.submit(AppendText(text="two"), listener=host_b.listener)
        # A has not heard of the move: its append carries the old fence and is refused.
        assert await host_a.submit(AppendText(text="late"), listener=listener) is False
        with pytest.raises(SessionMoved):
            await host_a.submit(AppendText(text="later"))
        told = await asyncio.wait_for(stream, 10)
        assert told[-1]["type"] == "session.replaced" and told[-1]["reason"] == "moved_to_another_server"
        assert a.get(host_a.session_id) is None and b.get(host_a.session_id) is host_b
        texts = [r.event.text for r in b.log.read_session(host_a.session_id) if isinstance(r.event, TextAppended)]
        assert texts == ["one", "two"]
        await a.stop()
        await b.stop()

    asyncio.run(run())


def test_a_server_learns_from_the_log_that_its_session_was_resumed_elsewhere(db: Database):
    async def run() -> None:
        a = DuplexSessions(db, server_id="a", reaper_interval_ms=3_600_000, poll_ms=5)
        b = DuplexSessions(db, server_id="b", reaper_interval_ms=3_600_000, poll_ms=5)
        await a.start()
        host_a = await a.open_session()
        stream = asyncio.create_task(_drain(host_a))
        await asyncio.sleep(0.1)
        await b.resume_session(host_a.session_id)
        told = await asyncio.wait_for(stream, 10)  # A's follower sees B's session.resumed
        assert told[-1]["type"] == "session.replaced"
        assert a.get(host_a.session_id) is None
        await a.stop()
        await b.stop()

    asyncio.run(run())


async def _drain(host) -> list[dict]:  # noqa: ANN001
    return [w async for w in host.events()]


def test_a_dead_servers_sessions_are_taken_up_by_a_live_one(db: Database):
    async def run() -> None:
        a = DuplexSessions(db, server_id="a", owner_ttl_ms=300, reaper_interval_ms=3_600_000)
        host_a = await a.open_session()  # a never renews: as good as dead
        b = DuplexSessions(db, server_id="b", owner_ttl_ms=300, reaper_interval_ms=3_600_000)
        await b.start()
        deadline = time.monotonic() + 10
        log = EventLog(db)
        while time.monotonic() < deadline and not any(r.event.TYPE == "session.detached" for r in log.read_session(host_a.session_id)):
            await asyncio.sleep(0.05)
        adopted = b.get(host_a.session_id)
        assert adopted is not None and adopted.state.lease.detached_at_ms is not None  # waits for a resume
        with pytest.raises(SessionMoved):
            await host_a.submit(AppendText(text="too late"))
        await b.stop()

    asyncio.run(run())


# ----------------------------------------------------------------------------- group commit


def test_group_commit_fails_only_the_command_whose_expected_seq_is_wrong(log: EventLog):
    for sid in ("a", "b", "c"):
        _open(log, sid)
    owners = SessionOwners(log.db)
    fence_c = owners.acquire("c", "me")
    owners.acquire("c", "someone-else", take_over=True)
    writer = GroupCommitWriter(log, window_ms=200)  # the commands below land in one batch
    try:
        futures = [
            writer.submit("a", [TextAppended(text="a1")], expected_seq=1),
            writer.submit("b", [TextAppended(text="b-wrong")], expected_seq=7),
            writer.submit("a", [TextAppended(text="a2")], expected_seq=2),  # sees a1 in the batch
            writer.submit("c", [TextAppended(text="c-fenced")], expected_seq=1, fence=fence_c),
            writer.submit("b", [TextAppended(text="b1")], expected_seq=1),
        ]
        for f in futures:
            f.exception(timeout=30)
        assert writer.transactions == 1
    finally:
        writer.close()
    assert isinstance(futures[1].exception(), WrongExpectedSeq)
    assert isinstance(futures[3].exception(), OwnershipLost)
    assert [f.result().last_seq for f in (futures[0], futures[2], futures[4])] == [2, 3, 2]
    assert [r.event.text for r in log.read_session("a")[1:]] == ["a1", "a2"]
    assert [r.event.text for r in log.read_session("b")[1:]] == ["b1"]
    assert log.head("c") == 1


def test_group_commit_isolates_a_command_the_database_refuses(pg_schema_url: str):
    """A statement failing inside the shared transaction (a session id longer than the
    column) rolls the batch back; the others are then committed one by one."""
    db = Database(pg_schema_url)
    upgrade(db)
    log = EventLog(db)
    _open(log, "ok")
    writer = GroupCommitWriter(log, window_ms=200)
    try:
        good = writer.submit("ok", [TextAppended(text="kept")], expected_seq=1)
        bad = writer.submit("x" * 300, [TextAppended(text="too long an id")], expected_seq=0)
        assert good.result(timeout=30).last_seq == 2
        assert isinstance(bad.exception(timeout=30), (sa.exc.DBAPIError, *DRIVER_ERRORS))
    finally:
        writer.close()
    assert [r.event.text for r in log.read_session("ok")[1:]] == ["kept"]
    db.dispose()


def test_many_threads_through_one_writer_get_commit_ordered_gapless_positions(log: EventLog):
    writer = GroupCommitWriter(log)
    per_thread = 60

    def write(sid: str) -> None:
        _open(log, sid)
        for i in range(per_thread):
            writer.append(sid, [TextAppended(text=f"{sid}-{i}")], expected_seq=1 + i)

    threads = [threading.Thread(target=write, args=(f"s{i}",)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    writer.close()
    everything = log.tail(0, limit=100_000)
    assert len(everything) == 6 * (per_thread + 1)
    positions = [r.position for r in everything]
    assert positions == sorted(positions) and len(set(positions)) == len(positions)
    for i in range(6):
        seqs = [r.seq for r in everything if r.session_id == f"s{i}"]
        assert seqs == list(range(1, per_thread + 2))
    assert writer.transactions < writer.commands  # some commands did share a commit


# ------------------------------------------------------------- two servers, two workers


@pytest.mark.slow
def test_two_servers_and_two_workers_share_one_postgresql(pg_schema_url: str, tmp_path: Path):
    """Sessions opened on either server complete; a session resumed on the other server
    continues there, and the server it left tells its old connection and lets go."""
    db = Database(pg_schema_url)
    upgrade(db)
    ports = [free_port(), free_port()]
    servers = [start_server(pg_schema_url, p, tmp_path / f"serve{i}.log", ["--server-id", f"srv{i}"]) for i, p in enumerate(ports)]
    workers = [start_worker(pg_schema_url, tmp_path / f"worker{i}.log", ["--chunk-ms", "250"]) for i in range(2)]
    try:
        for port, proc in zip(ports, servers):
            wait_healthy(port, proc)
        clients = [WsClient(port) for port in ports]
        assert [SessionOwners(db).current(c.session_id)[0].generation for c in clients] == [1, 1]
        for c in clients:
            c.say("What is the weather like?")
            assert c.respond()["status"] == "completed"
        moving = clients[0]
        moving.say("Tell me more.")
        moving.send({"type": "response.create"})
        moving.recv("response.created")
        # The client reappears on the other server mid-response, with its token.
        resumed = WsClient(
            ports[1],
            first={"type": "session.resume", "session_id": moving.session_id, "resume_token": moving.token,
                   "last_server_event_seq": moving.last_seq()},
        )
        assert moving.recv("session.replaced", 20)["reason"] == "moved_to_another_server"
        resumed.recv("response.done", 60)
        resumed.say("And tomorrow?")
        assert resumed.respond()["status"] == "completed"
        assert session_state(ports[1], moving.session_id)["live"] is True
        assert session_state(ports[0], moving.session_id)["live"] is False
        rows = EventLog(db).read_session(moving.session_id)
        assert sum(r.event.TYPE == "response.done" for r in rows) == 3
        for c in (resumed, clients[1]):
            c.close()
        owners = SessionOwners(db)
        deadline = time.monotonic() + 10
        while owners.current(clients[1].session_id) is not None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert owners.current(clients[1].session_id) is None  # released once it closed
    finally:
        for p in workers + servers:
            p.stop()
        db.dispose()


def test_a_tailing_reader_skips_nothing_while_several_group_commit_writers_append(log: EventLog):
    """Under load: three writers (as three servers would have), three sessions each, for two
    seconds, while a reader tails the global log by position: it is delivered every event once,
    in position order, although batches of different writers commit interleaved."""
    from store_conformance import Tailer, all_rows

    writers = [GroupCommitWriter(log) for _ in range(3)]
    stop = time.monotonic() + 2.0
    errors: list[BaseException] = []

    def feed(writer: GroupCommitWriter, sid: str) -> None:
        try:
            _open(log, sid)
            seq = 1
            while time.monotonic() < stop:
                writer.append(sid, [TextAppended(text=f"{sid}-{seq}")], expected_seq=seq)
                seq += 1
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=feed, args=(w, f"w{i}s{j}")) for i, w in enumerate(writers) for j in range(3)]
    reader = Tailer(log)
    for t in threads:
        t.start()
    reader.follow(threads)
    for w in writers:
        w.close()
    assert not errors
    assert reader.seen == all_rows(log) and len(reader.seen) > 50


def test_a_key_repeated_within_one_batch_is_written_once(log: EventLog):
    _open(log, "a")
    writer = GroupCommitWriter(log, window_ms=200)
    try:
        first = writer.submit("a", [TextAppended(text="once")], expected_seq=1, idempotency_key="evt_1")
        again = writer.submit("a", [TextAppended(text="once")], expected_seq=2, idempotency_key="evt_1")
        later = writer.submit("a", [TextAppended(text="next")], expected_seq=2, idempotency_key="evt_2")
        results = [f.result(timeout=30) for f in (first, again, later)]
    finally:
        writer.close()
    assert [r.duplicate for r in results] == [False, True, False]
    assert results[1].records == results[0].records
    assert [r.event.text for r in log.read_session("a")[1:]] == ["once", "next"]


@pytest.mark.parametrize("inline", [False, True], ids=["thread", "inline"])
def test_awaited_appends_of_one_commit_each_learn_their_own_outcome(log: EventLog, inline: bool):
    # The server's path: hosts on one event loop await append_async; one commit settles them all,
    # committed by the writer's thread or (inline, the server on SQLite) on the loop itself.
    for sid in ("a", "b"):
        _open(log, sid)
    writer = GroupCommitWriter(log, window_ms=200, inline=inline)

    async def main() -> list:
        calls = [
            asyncio.ensure_future(writer.append_async("a", [TextAppended(text="a1")], expected_seq=1)),
            asyncio.ensure_future(writer.append_async("b", [TextAppended(text="b-wrong")], expected_seq=5)),
            asyncio.ensure_future(writer.append_async("b", [TextAppended(text="b1")], expected_seq=1)),
        ]
        waited = asyncio.ensure_future(writer.append_async("a", [TextAppended(text="a2")], expected_seq=2))
        await asyncio.sleep(0.05)  # all four are queued, in this order, inside the 200 ms window
        waited.cancel()  # its caller gave up: the append still commits, as the log will say
        return await asyncio.gather(*calls, return_exceptions=True)

    try:
        outcomes = asyncio.run(main())
    finally:
        writer.close()
    assert outcomes[0].last_seq == 2 and outcomes[2].last_seq == 2
    assert isinstance(outcomes[1], WrongExpectedSeq)
    assert writer.transactions == 1
    assert [r.event.text for r in log.read_session("a")[1:]] == ["a1", "a2"]
    assert [r.event.text for r in log.read_session("b")[1:]] == ["b1"]
