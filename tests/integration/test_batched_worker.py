"""Batched workers against a real log and real sessions: a worker claims the ticks of several
sessions in one statement, steps them in one ``step_batch`` call of a plugin engine, and commits
every output in one transaction, each fenced by its own claim (docs/architecture.md, "Ticks and
workers"; I6)."""

from __future__ import annotations

import asyncio
import base64
import os
import time
from pathlib import Path
from typing import Any, Callable, Optional

import pytest

from duplex_es.api import Database, DuplexSessions, command_from_realtime, new_id
from duplex_es.audit import audit_session
from duplex_es.domain import SessionPatch, UpdateSession
from duplex_es.events import TickFailed, TickIssued, TickOutput, UnitIssued, UnitOutput
from duplex_es.server.host import SessionHost
from duplex_es.store import EventLog, TickQueue, upgrade
from duplex_es.worker.engine import EngineError, EngineOutput, TickContext
from duplex_es.worker.runner import Worker
from duplex_es_tools.processes import start_worker

from plugins import BatchedDuplexListener, BatchedSpeech

TESTS = str(Path(__file__).resolve().parents[1])  # where plugins.py is


def _ask(text: str) -> list[dict[str, Any]]:
    """A session with 24 kHz PCM output and no turn detection, a typed user turn, a response."""
    return [
        {"type": "session.update", "session": {"type": "realtime", "output_modalities": ["audio"], "audio": {
            "input": {"format": {"type": "audio/pcm", "rate": 24000}, "turn_detection": None},
            "output": {"format": {"type": "audio/pcm", "rate": 24000}},
        }}},
        {"type": "conversation.item.create", "item": {"type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]}},
        {"type": "response.create"},
    ]


class Clients:
    """Speech sessions served in process by :class:`DuplexSessions` (its log follower takes up
    each committed output and issues the response's next tick), with the wire each received."""

    def __init__(self, sessions: DuplexSessions) -> None:
        self.sessions = sessions
        self.hosts: list[SessionHost] = []
        self.wire: dict[str, list[dict]] = {}
        self._listeners: list[asyncio.Task] = []

    async def ask(self, text: str) -> str:
        host = await self.sessions.open_session()
        self.hosts.append(host)
        got = self.wire.setdefault(host.session_id, [])

        async def listen() -> None:
            async for event in host.events():
                got.append(event)

        self._listeners.append(asyncio.create_task(listen()))
        for frame in _ask(text):
            await host.submit(command_from_realtime(frame, new_id))
        return host.session_id

    def done(self, sid: str) -> Optional[dict]:
        return next((e for e in self.wire[sid] if e["type"] == "response.done"), None)

    async def until(self, pred: Callable[[], bool], what: str, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while not pred():
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out waiting for {what}")
            await asyncio.sleep(0.01)

    async def close(self) -> None:
        for host in self.hosts:
            await host.submit(command_from_realtime({"type": "session.close"}, new_id))
        await asyncio.wait_for(asyncio.gather(*self._listeners), 10)


async def _open_duplex(clients: Clients) -> str:
    """A full-duplex session (``duplex-es-duplex``) with a listener, nothing appended yet."""
    host = await clients.sessions.open_session(model="duplex-es-duplex")
    # vLLM-Omni's events (input_audio_buffer.processed among them) are asked for.
    await host.submit(UpdateSession(patch=SessionPatch(extension_events=True)))
    clients.hosts.append(host)
    got = clients.wire.setdefault(host.session_id, [])

    async def listen() -> None:
        async for event in host.events():
            got.append(event)

    clients._listeners.append(asyncio.create_task(listen()))
    return host.session_id


async def _speak(clients: Clients, sid: str, ms: int) -> None:
    """``ms`` of loud PCM16 at 24 kHz appended to session ``sid`` in one append."""
    host = next(h for h in clients.hosts if h.session_id == sid)
    audio = base64.b64encode(int(8000).to_bytes(2, "little", signed=True) * (24 * ms)).decode()
    await host.submit(command_from_realtime({"type": "input_audio_buffer.append", "audio": audio}, new_id))


def _text(wire: list[dict]) -> str:
    return "".join(e["delta"] for e in wire if e["type"] == "response.output_audio_transcript.delta")


def _answers(log: EventLog, sid: str) -> list[Any]:
    return [r for r in log.read_session(sid) if isinstance(r.event, (TickOutput, TickFailed))]


def _run(coro_fn: Callable[[DuplexSessions, Clients], Any], db: Database) -> Any:
    async def main() -> Any:
        sessions = DuplexSessions(db, reaper_interval_ms=3_600_000)
        await sessions.start()
        clients = Clients(sessions)
        try:
            result = await coro_fn(sessions, clients)
            await clients.close()
            return result
        finally:
            await sessions.stop()

    return asyncio.run(main())


@pytest.mark.invariant("I6")
def test_one_batch_steps_four_sessions_and_commits_their_outputs_in_one_transaction(log: EventLog):
    """Four sessions ask at once; the worker (B = 8) claims their four first ticks together,
    the plugin steps them in one call and the four answers — three outputs and the failure of
    the session whose user typed "fail" — are committed in one transaction; the three second
    chunks go as a batch of three. Each client hears its own reply, the failed one its
    failure, and every session passes the audit."""
    engine = BatchedSpeech()
    worker = Worker(log, [engine], batch_size=8)
    texts = ("hello one", "hello two", "please fail", "hello four")

    async def scenario(sessions: DuplexSessions, clients: Clients) -> tuple[list[str], dict]:
        sids = [await clients.ask(text) for text in texts]
        queue = TickQueue(log)
        assert queue.count("pending") == 4
        assert await asyncio.to_thread(worker.run_once)
        await clients.until(lambda: queue.count("pending") == 3, "the three second chunks")
        assert await asyncio.to_thread(worker.run_once)
        await clients.until(lambda: all(clients.done(s) for s in sids), "every response.done")
        return sids, clients.wire

    sids, wire = _run(scenario, log.db)
    assert engine.batch_sizes == [4, 3]
    assert dict(worker.stats.sizes) == {4: 1, 3: 1} and worker.stats.lost == 0 and worker.committed == 7

    first = [_answers(log, sid)[0] for sid in sids]
    assert [type(r.event) for r in first] == [TickOutput, TickOutput, TickFailed, TickOutput]
    assert len({r.recorded_at_us for r in first}) == 1  # one commit
    positions = sorted(r.position for r in first)
    assert positions == list(range(positions[0], positions[0] + 4))  # nothing between them

    for sid, text in zip(sids, texts):
        done = next(e for e in wire[sid] if e["type"] == "response.done")["response"]
        if text == "please fail":
            assert done["status"] == "failed" and _text(wire[sid]) == ""
        else:
            assert done["status"] == "completed" and _text(wire[sid]) == "[batch of 4] [batch of 3] "
        report = audit_session(log, sid)
        assert report.ok, report.violations


class _TakenOverMidBatch(BatchedSpeech):
    """Its first batch runs for ``stall_s`` (longer than the worker's lease: only the heartbeat
    keeps the claims), and meanwhile another worker, whose clock is past the lease — as after
    a stall of this one — takes the oldest tick of the batch over."""

    def __init__(self, log: EventLog, stall_s: float) -> None:
        super().__init__()
        self.log, self.stall_s = log, stall_s
        self.usurped: Optional[str] = None

    def step_batch(self, ctxs: list[TickContext]) -> list[EngineOutput | EngineError]:
        if self.usurped is None:
            time.sleep(self.stall_s)
            later = time.time_ns() // 1000 + 2_000_000
            taken = TickQueue(self.log).claim("usurper", ttl_ms=300, now_us=later)
            assert taken is not None
            self.usurped = taken.request_id
        return super().step_batch(ctxs)


@pytest.mark.invariant("I6")
def test_a_claim_lost_mid_batch_is_not_committed_and_the_rest_of_the_batch_is(log: EventLog):
    """A worker (lease 400 ms) steps a batch of three sessions for 1.2 s: its heartbeat extends
    every claim of the batch, but another worker takes one tick over meanwhile. The batch's
    commit writes the other two outputs, in one transaction, and nothing for the lost tick;
    once the usurper's lease runs out the tick is taken up again and answered exactly once,
    and every session completes and passes the audit."""
    engine = _TakenOverMidBatch(log, stall_s=1.2)
    worker = Worker(log, [engine], batch_size=8, claim_ttl_ms=400)

    async def scenario(sessions: DuplexSessions, clients: Clients) -> tuple[list[str], dict]:
        sids = [await clients.ask(f"hello {i}") for i in range(3)]
        deadline = time.monotonic() + 60
        while not all(clients.done(s) for s in sids):
            assert time.monotonic() < deadline, "the responses did not finish"
            if not await asyncio.to_thread(worker.run_once):
                await asyncio.sleep(0.02)
        return sids, clients.wire

    sids, wire = _run(scenario, log.db)
    assert engine.batch_sizes[0] == 3 and worker.stats.lost == 1
    first = {sid: _answers(log, sid)[0] for sid in sids}
    usurped_sid = next(sid for sid in sids if any(r.event.request_id == engine.usurped for r in log.read_session(sid) if isinstance(r.event, TickIssued)))
    assert usurped_sid == sids[0]  # the oldest tick of the batch
    kept = [first[sid] for sid in sids[1:]]
    assert len({r.recorded_at_us for r in kept}) == 1 and abs(kept[0].position - kept[1].position) == 1
    # The lost tick was answered once, later, by the worker that took it up again (third attempt).
    answers = [r for r in _answers(log, usurped_sid) if r.event.request_id == engine.usurped]
    assert len(answers) == 1 and answers[0].recorded_at_us > kept[0].recorded_at_us
    row = TickQueue(log).status(engine.usurped)
    assert row["status"] == "done" and row["attempts"] == 3 and row["claimed_by"] == worker.worker_id
    for sid in sids:
        done = next(e for e in wire[sid] if e["type"] == "response.done")["response"]
        assert done["status"] == "completed"
        report = audit_session(log, sid)
        assert report.ok, report.violations


def test_a_worker_waits_up_to_batch_wait_ms_to_fill_its_batch(sqlite_log: EventLog):
    """B = 4. With W = 0 a lone tick is stepped at once, alone. With W = 5 s the worker claims
    the one tick there is (that reply's second chunk), and the three that other sessions ask
    for 0.3 s later join its batch: it steps the full batch at once, without waiting out W."""
    log = sqlite_log
    engine = BatchedSpeech()
    patient = Worker(log, [engine], batch_size=4, batch_wait_ms=5000)
    queue = TickQueue(log)

    async def scenario(sessions: DuplexSessions, clients: Clients) -> float:
        await clients.ask("first")
        assert await asyncio.to_thread(Worker(log, [engine], batch_size=4).run_once)
        await clients.until(lambda: queue.count("pending") == 1, "the first reply's second chunk")
        started = time.monotonic()
        stepped = asyncio.create_task(asyncio.to_thread(patient.run_once))
        await asyncio.sleep(0.3)
        for i in range(3):
            await clients.ask(f"later {i}")
        assert await stepped
        return time.monotonic() - started

    took = _run(scenario, log.db)
    assert engine.batch_sizes == [1, 4]
    assert dict(patient.stats.sizes) == {4: 1}
    assert 300 <= patient.stats.max_fill_wait_ms < 5000 and took < 5
    patient.wakeup.close()


def test_the_worker_command_steps_batches_of_the_size_asked(tmp_path: Path):
    """``duplex-es worker --batch-size 8 --engine-plugin plugins:BatchedSpeech``, started while
    three sessions wait for their first chunk: the first chunk of each reply says it was
    stepped in a batch of three, and every response completes."""
    url = f"sqlite:///{tmp_path / 'batched.db'}"
    db = Database(url)
    upgrade(db)
    path = os.pathsep.join(p for p in (TESTS, os.environ.get("PYTHONPATH")) if p)

    async def scenario(sessions: DuplexSessions, clients: Clients) -> tuple[list[str], dict]:
        sids = [await clients.ask(f"hello {i}") for i in range(3)]
        worker = start_worker(url, tmp_path / "worker.log", ["--batch-size", "8", "--engine-plugin", "plugins:BatchedSpeech"], env={"PYTHONPATH": path})
        try:
            await clients.until(lambda: all(clients.done(s) for s in sids), "every response.done", timeout=60)
        finally:
            worker.stop()
        return sids, clients.wire

    sids, wire = _run(scenario, db)
    for sid in sids:
        done = next(e for e in wire[sid] if e["type"] == "response.done")["response"]
        assert done["status"] == "completed" and _text(wire[sid]).startswith("[batch of 3] ")
    db.dispose()


@pytest.mark.invariant("I6")
def test_a_worker_killed_between_stepping_and_committing_a_batch_loses_nothing(tmp_path: Path):
    """A ``--batch-size 8`` worker SIGKILLs itself after stepping the batch of three sessions'
    first ticks, before committing it (``DUPLEX_ES_CRASH_AT=after_step``). Its claims run out
    (600 ms) and a second worker takes the whole batch over: every tick is answered exactly
    once, on its second attempt, and every response completes."""
    url = f"sqlite:///{tmp_path / 'killed.db'}"
    db = Database(url)
    upgrade(db)
    log = EventLog(db)
    path = os.pathsep.join(p for p in (TESTS, os.environ.get("PYTHONPATH")) if p)
    args = ["--batch-size", "8", "--claim-ttl-ms", "600", "--engine-plugin", "plugins:BatchedSpeech"]

    async def scenario(sessions: DuplexSessions, clients: Clients) -> tuple[list[str], list[str]]:
        sids = [await clients.ask(f"hello {i}") for i in range(3)]
        first = [r.event.request_id for sid in sids for r in log.read_session(sid) if isinstance(r.event, TickIssued)]
        doomed = start_worker(url, tmp_path / "doomed.log", [*args, "--worker-id", "doomed"], env={"PYTHONPATH": path, "DUPLEX_ES_CRASH_AT": "after_step"})
        await clients.until(lambda: not doomed.alive(), "the first worker to die after its step", timeout=60)
        doomed.stop()
        assert all(TickQueue(log).status(rid)["status"] == "claimed" for rid in first)
        heir = start_worker(url, tmp_path / "heir.log", [*args, "--worker-id", "heir"], env={"PYTHONPATH": path})
        try:
            await clients.until(lambda: all(clients.done(s) for s in sids), "every response.done", timeout=60)
        finally:
            heir.stop()
        return sids, first

    sids, first = _run(scenario, db)
    for rid in first:
        row = TickQueue(log).status(rid)
        assert row["status"] == "done" and row["attempts"] == 2 and row["claimed_by"] == "heir"
    for sid in sids:
        answers = [r.event.request_id for r in _answers(log, sid)]
        assert len(answers) == len(set(answers)) == 2  # two chunks, each answered once
        report = audit_session(log, sid)
        assert report.ok, report.violations
    db.dispose()


@pytest.mark.invariant("I6")
def test_full_duplex_units_of_three_sessions_are_stepped_as_one_batch_and_carry_their_state(log: EventLog):
    """Three full-duplex sessions each hear a chunk period of input: their three units are
    claimed together (B = 16), stepped in one ``step_batch`` of a duplex plugin and answered in
    one transaction; each session's next unit carries the engine state its own answer left,
    every append is acknowledged with ``input_audio_buffer.processed``, and the audit holds."""
    engine = BatchedDuplexListener()
    worker = Worker(log, [engine], batch_size=16)
    queue = TickQueue(log)

    async def scenario(sessions: DuplexSessions, clients: Clients) -> tuple[list[str], dict]:
        sids = [await _open_duplex(clients) for _ in range(3)]
        for sid in sids:
            await _speak(clients, sid, 200)
        assert queue.count("pending") == 3
        assert await asyncio.to_thread(worker.run_once)
        for sid in sids:
            await _speak(clients, sid, 200)
        await clients.until(lambda: queue.count("pending") == 3, "the three second units")
        assert await asyncio.to_thread(worker.run_once)
        processed = lambda: all(sum(e["type"] == "input_audio_buffer.processed" for e in clients.wire[s]) == 2 for s in sids)  # noqa: E731
        await clients.until(processed, "both appends of every session acknowledged")
        return sids, clients.wire

    sids, wire = _run(scenario, log.db)
    assert engine.batch_sizes == [3, 3] and dict(worker.stats.sizes) == {3: 2}
    outputs = {sid: [r for r in log.read_session(sid) if isinstance(r.event, UnitOutput)] for sid in sids}
    first = [outputs[sid][0] for sid in sids]
    assert len({r.recorded_at_us for r in first}) == 1  # one commit
    for sid in sids:
        units = [r.event for r in log.read_session(sid) if isinstance(r.event, UnitIssued)]
        assert [u.engine_state for u in units] == [None, {"units": 1, "batch": 3}]
        assert [o.event.engine_state for o in outputs[sid]] == [{"units": 1, "batch": 3}, {"units": 2, "batch": 3}]
        report = audit_session(log, sid)
        assert report.ok, report.violations
