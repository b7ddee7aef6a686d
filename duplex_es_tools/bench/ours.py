"""duplex_es's side of the comparisons, through the project's real code: ``EventLog.append`` and
``read_session``, the group-commit writer, ``fold``, snapshots (``load_state`` /
``save_snapshot``) and the tick queue."""

from __future__ import annotations

import asyncio
import inspect
import threading
import time
from typing import Any, Callable, Optional

from duplex_es.domain import fold
from duplex_es.snapshots import load_state, save_snapshot
from duplex_es.store import Database, EventLog, SnapshotStore, TickQueue
from duplex_es_tools.bench.databases import BenchDatabase
from duplex_es_tools.bench.fill import bulk_history, history_state
from duplex_es_tools.bench.histogram import Latencies
from duplex_es_tools.bench.timing import SerialContender, ThreadedContender
from duplex_es_tools.bench.workload import history_event, opened, text_event, tick

__all__ = [
    "writer_class",
    "sealing_log",
    "can_seal",
    "BENCH_MASTER_KEY",
    "OursAppend",
    "OursConcurrent",
    "rebuild",
    "sealed_history",
    "Loader",
    "TickFeeder",
    "claim_loop",
    "WakeupProbe",
    "wakeup_api",
]


def writer_class() -> Optional[type]:
    """``duplex_es.store.writer.GroupCommitWriter`` if this tree has it, else ``None``."""
    try:
        from duplex_es.store.writer import GroupCommitWriter
    except ImportError:
        return None
    return GroupCommitWriter


#: The master key of the bench's sealed contenders (issue 17: the cost of sealing, measured
#: beside the same path in the clear). A constant: the bench measures, it protects nothing.
BENCH_MASTER_KEY = bytes(range(32))


def can_seal() -> bool:
    """Whether this tree seals content (``EventLog(master_keys=...)``, issue 17)."""
    return "master_keys" in inspect.signature(EventLog).parameters


def sealing_log(db: Database) -> Optional[EventLog]:
    """An ``EventLog`` that seals content under :data:`BENCH_MASTER_KEY`, or ``None`` if this
    tree cannot seal (before issue 17)."""
    if not can_seal():
        return None
    from duplex_es.store.datakeys import MasterKeys

    return EventLog(db, master_keys=MasterKeys.from_keys([BENCH_MASTER_KEY]))  # type: ignore[call-arg]


def wakeup_api() -> Optional[tuple[type, str]]:
    """``(Wakeup, TICKS_CHANNEL)`` from ``duplex_es.store.notify`` if this tree has it."""
    try:
        from duplex_es.store.notify import TICKS_CHANNEL, Wakeup
    except ImportError:
        return None
    return Wakeup, TICKS_CHANNEL


class OursAppend(SerialContender):
    """One client appending ``batch`` events per command to one session with an expected seq:
    through ``EventLog.append`` (one transaction per command) or, with ``via_writer``, through
    one ``GroupCommitWriter`` the way a server does — on SQLite awaited on an event loop and
    committed on it (``inline``, when the tree has it), on PostgreSQL in the writer's thread
    (``writer.append``, blocking)."""

    def __init__(self, bdb: BenchDatabase, *, batch: int = 1, via_writer: bool = False, session_id: str = "bench-ours", sealed: bool = False) -> None:
        self.db = bdb.duplex()
        self.log = (sealing_log(self.db) if sealed else None) or EventLog(self.db)
        self.events_per_op = batch
        self.name = "duplex_es " + ("GroupCommitWriter.append" if via_writer else "EventLog.append")
        self.writer: Any = None
        self._loop: Optional[asyncio.AbstractEventLoop] = None
        self._append: Callable[..., Any] = self.log.append
        if via_writer:
            cls = writer_class()
            inline = bdb.is_sqlite and hasattr(cls, "append_async") and "inline" in inspect.signature(cls).parameters
            self.writer = cls(self.log, inline=True) if inline else cls(self.log)  # type: ignore[misc]
            self._append = self.writer.append
            if inline:
                loop = self._loop = asyncio.new_event_loop()
                self._append = lambda *a, **k: loop.run_until_complete(self.writer.append_async(*a, **k))
                self.name = "duplex_es GroupCommitWriter.append_async, inline on an event loop (the server's SQLite path)"
        if sealed:
            self.name += ", content sealed (--master-key-file)"
        self.session_id = session_id
        self.seq = self._append(session_id, [opened(session_id)], expected_seq=0).last_seq

    def op(self, i: int) -> None:
        """Append command ``i``'s events at the session's head."""
        b = self.events_per_op
        events = [text_event(i * b + k) for k in range(b)]
        self.seq = self._append(self.session_id, events, expected_seq=self.seq).last_seq

    def close(self) -> None:
        """Stop the writer and close the pool."""
        if self.writer is not None:
            self.writer.close()
        if self._loop is not None:
            self._loop.close()
        self.db.dispose()


class OursConcurrent(ThreadedContender):
    """``threads`` writers, each appending one event per command to its own session, all
    through ONE shared ``GroupCommitWriter`` (``via_writer``) or each through
    ``EventLog.append`` on its own pooled connection."""

    def __init__(self, bdb: BenchDatabase, *, threads: int = 4, via_writer: bool = True) -> None:
        super().__init__()
        self.threads = threads
        self.db = bdb.duplex()
        self.log = EventLog(self.db)
        self.writer = writer_class()(self.log) if via_writer else None  # type: ignore[misc]
        self.name = f"duplex_es, {threads} writers, " + ("one shared GroupCommitWriter" if via_writer else "EventLog.append each")
        self.session_ids = [f"bench-w{k}" for k in range(threads)]

    def make_worker(self, index: int) -> Callable[[int], None]:
        """Thread ``index`` appends to session ``bench-w{index}``."""
        append = self.writer.append if self.writer is not None else self.log.append
        sid = self.session_ids[index]
        state = {"seq": append(sid, [opened(sid)], expected_seq=0).last_seq}

        def op(i: int) -> None:
            state["seq"] = append(sid, [text_event(i)], expected_seq=state["seq"]).last_seq

        return op

    def close(self) -> None:
        """Stop the writer and close the pool (the database stays for the order check)."""
        if self.writer is not None:
            self.writer.close()
        self.db.dispose()


def sealed_history(log: EventLog, session_id: str, upto_seq: int, batch: int = 1000) -> None:
    """Write :func:`~duplex_es_tools.bench.workload.history_event` ``1 .. upto_seq`` to
    ``session_id`` through ``log.append`` (``log`` sealing: row 5's sealed session), in
    batches of ``batch`` events."""
    for start in range(1, upto_seq + 1, batch):
        end = min(upto_seq, start + batch - 1)
        log.append(session_id, [history_event(session_id, s) for s in range(start, end + 1)], expected_seq=start - 1)


def rebuild(log: EventLog, session_id: str) -> Callable[[], int]:
    """The rebuild of row 5 as a call: ``read_session`` (decode included) and ``fold``;
    returns how many events were folded."""

    def call() -> int:
        records = log.read_session(session_id)
        state = fold((r.seq, r.event) for r in records)
        assert state.seq == len(records)
        return len(records)

    return call


class Loader:
    """Row 6: a session of ``length`` events with a snapshot ``tail`` events before its head
    (saved with ``save_snapshot``), loaded with ``load_state`` (snapshot + tail). The session is
    written with :func:`~duplex_es_tools.bench.fill.bulk_history` (the project's codec and hash chain,
    in bulk)."""

    def __init__(self, bdb: BenchDatabase, db: Database, length: int, tail: int, say: Callable[[str], Any] = print) -> None:
        self.log = EventLog(db)
        self.snapshots = SnapshotStore(db)
        self.session_id = f"bench-load-{length}"
        t0 = time.perf_counter()
        bulk_history(bdb, self.session_id, length)
        t1 = time.perf_counter()
        at_snapshot = history_state(self.session_id, length - tail)
        save_snapshot(self.snapshots, at_snapshot)
        tail_events = ((s, history_event(self.session_id, s)) for s in range(length - tail + 1, length + 1))
        self.state = fold(tail_events, at_snapshot)
        say(f"    session of {length:,} events: written in {t1 - t0:.1f} s, snapshot state folded in {time.perf_counter() - t1:.1f} s")
        self.length, self.tail = length, tail
        self.check()

    def check(self) -> None:
        """The loaded state is the folded one, from the snapshot plus exactly ``tail`` events."""
        loaded = load_state(self.log, self.snapshots, self.session_id)
        assert loaded.state == self.state, "snapshot + tail differs from the full fold"
        assert (loaded.snapshot_seq, loaded.applied) == (self.length - self.tail, self.tail), (loaded.snapshot_seq, loaded.applied)

    def load(self, lat: Latencies) -> None:
        """One timed ``load_state``."""
        t0 = time.perf_counter_ns()
        load_state(self.log, self.snapshots, self.session_id)
        lat.since(t0)


class TickFeeder:
    """A session holding ticks for the queue (rows 7 and 8)."""

    def __init__(self, log: EventLog, session_id: str = "bench-ticks") -> None:
        self.log = log
        self.session_id = session_id
        self.seq = log.append(session_id, [opened(session_id)], expected_seq=0).last_seq
        self.issued = 0

    def issue(self, count: int, *, batch: int = 100) -> None:
        """Append ``count`` more ticks (``batch`` per transaction)."""
        while count > 0:
            k = min(batch, count)
            events = [tick(self.issued + j) for j in range(k)]
            self.seq = self.log.append(self.session_id, events, expected_seq=self.seq).last_seq
            self.issued += k
            count -= k


def claim_loop(queue: TickQueue, worker_id: str = "bench-worker") -> Callable[[int], None]:
    """Row 7's operation: one ``TickQueue.claim`` that must find a tick."""

    def op(_i: int) -> None:
        if queue.claim(worker_id, ttl_ms=600_000) is None:
            raise RuntimeError("the bench queue ran out of ticks")

    return op


class WakeupProbe:
    """Row 8: an idle worker thread running exactly the worker's idle loop (claim; if nothing,
    ``Wakeup.wait(poll_s)``), and :meth:`once`, which appends one ``TickIssued`` through
    ``EventLog.append`` and returns the time (ns) from that commit returning to the worker's
    claim returning. The worker has a ``Database`` of its own, as a worker process would."""

    def __init__(self, bdb: BenchDatabase, *, poll_s: float = 0.010) -> None:
        api = wakeup_api()
        assert api is not None, "duplex_es.store.notify is missing"
        wakeup_cls, channel = api
        self.server_db, self.worker_db = bdb.duplex(), bdb.duplex()
        self.log = EventLog(self.server_db)
        self.queue = TickQueue(EventLog(self.worker_db))
        self.feeder = TickFeeder(self.log, "bench-wake")
        self.wakeup = wakeup_cls(self.worker_db, channel)
        self.poll_s = poll_s
        self._claimed = threading.Event()
        self._claimed_at = 0
        self._stop = False
        self._thread = threading.Thread(target=self._idle_loop, name="bench-idle-worker", daemon=True)
        self._thread.start()

    def _idle_loop(self) -> None:
        while not self._stop:
            c = self.queue.claim("bench-idle-worker", ttl_ms=600_000)
            if c is not None:
                self._claimed_at = time.perf_counter_ns()
                self._claimed.set()
            else:
                self.wakeup.wait(self.poll_s)

    def once(self) -> int:
        """Issue one tick; the wake-up latency in ns."""
        self._claimed.clear()
        self.feeder.issue(1)
        committed = time.perf_counter_ns()
        if not self._claimed.wait(10.0):
            raise RuntimeError("the idle worker did not claim the tick within 10 s")
        return self._claimed_at - committed

    def close(self) -> None:
        """Stop the worker thread and the wake-up listener; close both pools."""
        self._stop = True
        self._thread.join(timeout=5)
        self.wakeup.close()
        self.server_db.dispose()
        self.worker_db.dispose()
