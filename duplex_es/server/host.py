"""A hosted session: the I/O shell around the session's sans-I/O core
(:class:`~duplex_es.server.core.SessionCore`).

For each command the core plans a batch against the session's state; the host appends it with
the seq it was decided on (re-planning after catching up if a worker appended meanwhile), hands
the committed records back to the core, and queues their projection for whoever listens. Nothing
is queued before its transaction commits (docs/architecture.md, I4), and the state it holds is
always the fold of the log up to ``state.seq`` (docs/architecture.md, I1). The host owns the
session's lock, the listener's queue, the writer, the timer and the metrics; the rules are the
core's.
"""

from __future__ import annotations

import asyncio
import logging

import sqlalchemy as sa
import hashlib
import itertools
import secrets
import time
from typing import Any, AsyncIterator, Callable, Iterable, Optional, Protocol

from prometheus_client import Counter, Histogram

from duplex_es.errors import SessionError
from duplex_es.domain import Detach, Resume
from duplex_es.domain.commands import Command
from duplex_es.events import CommandRejected, SessionResumed
from duplex_es.server.alarm import Alarm
from duplex_es.server.core import MAX_REPLAY_EVENTS, Applied, ModelResolver, SessionCore, idempotency_key
from duplex_es.snapshots import load_state, save_snapshot
from duplex_es.store import EventLog, Fence, GroupCommitWriter, LogUnavailable, OwnershipLost, Recorded, SnapshotStore, WrongExpectedSeq
from duplex_es.store.database import DRIVER_ERRORS

__all__ = ["Acquirer", "ResumeDenied", "SessionHost", "SessionMoved", "idempotency_key", "new_id", "now_ms", "ModelResolver", "MAX_REPLAY_EVENTS"]

log = logging.getLogger(__name__)

COMMANDS = Counter("duplex_es_commands_total", "Client commands by verdict", ["verdict"])
WIRE_EVENTS = Counter("duplex_es_wire_events_total", "Server events produced for clients")
APPEND_SECONDS = Histogram(
    "duplex_es_append_seconds",
    "Time to append one command's batch to the log",
    buckets=(0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 1.0),
)

#: How many times a command is re-decided after losing an append race to a worker.
MAX_RETRIES = 50
#: After a pump found the log unavailable, how long until the session is pumped again (s).
PUMP_RETRY_S = 0.1

_END = object()


class Acquirer(Protocol):
    """Moves a session's ownership to this process (see :meth:`SessionHost.take_over`)."""

    async def observe(self) -> int:
        """The session's current ownership generation (0: no owner)."""

    async def take(self, observed: int) -> Fence:
        """Take the session if its generation is still ``observed``.

        Raises:
            SessionMoved: it is not.
        """


class SessionMoved(SessionError):
    """The session is owned by another server now (a client resumed it there, or this
    server's ownership lease ran out): this process may no longer append to it. Nothing of
    the command was logged."""

    def __init__(self, session_id: str, reason: str) -> None:
        self.session_id, self.reason = session_id, reason
        super().__init__(f"session {session_id} moved to another server ({reason})")


class ResumeDenied(SessionError):
    """The domain refused a resume (``event`` is the ``command.rejected`` it decided). Nothing
    was logged: a refused resume changes nothing, and logging it would let anyone who can guess
    a session id write rows into that session's log."""

    def __init__(self, event: CommandRejected) -> None:
        self.event = event
        super().__init__(f"{event.code}: {event.message}")


#: Ids must be unguessable (a session id names a session), but ``os.urandom`` per id — about
#: 70 µs a call on this VM, eight ids per command — was the largest single cost in issue 6's
#: load test. So ids are a keyed BLAKE2b (a PRF) of a counter, under a 256-bit key drawn once
#: from the OS: as unpredictable as the key, at about 1 µs an id.
_id_key = secrets.token_bytes(32)
_id_counter = itertools.count()


def new_id(prefix: str) -> str:
    """A fresh id such as ``item_1f0c9a3b5e7d2468`` (64 bits, unpredictable without the
    process's key)."""
    block = hashlib.blake2b(next(_id_counter).to_bytes(8, "little"), key=_id_key, digest_size=8)
    return f"{prefix}_{block.hexdigest()}"


def now_ms() -> int:
    """The wall clock in Unix ms: only ever read outside the domain, and logged (docs/architecture.md, I11)."""
    return time.time_ns() // 1_000_000


class SessionHost:
    """One session owned by this process: the in-process handle of the Python API.

    Commands go in with :meth:`submit`; the server events they (and worker outputs) produce come
    out of :meth:`events`, in log order, as GA Realtime dicts stamped with their log-derived
    ``event_id`` and ``server_event_seq``.

    Args:
        log: the event log.
        session_id: the session.
        snapshots: where to store snapshots of the state (``None``: none are taken).
        snapshot_every: take one each time the state moved this many events past the last
            (0: never).
        writer: the process's group-commit writer (``None``: each append commits alone).
        fence: this process's ownership of the session; every append carries it, so once the
            session moved to another server nothing more is written here
            (:class:`SessionMoved`). ``None``: ownership is not checked (a single process).
        on_moved: called with the host once it learns the session moved.
        resolve_model: the server's model map: a ``session.update`` naming a model is refused
            (``model_not_found``) unless the map serves it, and accepted when it names the
            session's model or another name of the same engine.
    """

    def __init__(
        self,
        log: EventLog,
        session_id: str,
        *,
        snapshots: Optional[SnapshotStore] = None,
        snapshot_every: int = 0,
        writer: Optional[GroupCommitWriter] = None,
        fence: Optional[Fence] = None,
        on_moved: Optional[Callable[["SessionHost"], None]] = None,
        resolve_model: Optional[ModelResolver] = None,
    ) -> None:
        self.log = log
        self.core = SessionCore(session_id, new_id=new_id, clock=now_ms, resolve_model=resolve_model)
        self.writer = writer
        self.fence = fence
        self.moved: Optional[str] = None  # why the session left this process, once it did
        self._on_moved = on_moved
        self.session_id = session_id
        self.snapshots = snapshots
        self.snapshot_every = snapshot_every
        self.snapshot_seq = 0  # the newest snapshot taken (or loaded from)
        # The last seq of this host's own append in flight (0: none). The log follower sees those
        # rows commit before the host folds them; it must not wake the host to read them back.
        self.appending_through = 0
        self._snapshot_task: Optional[asyncio.Task] = None
        self._lock = asyncio.Lock()
        self._queue: Optional[asyncio.Queue] = None
        self.ended = asyncio.Event()
        self.last_activity_ms = now_ms()
        self._alarm = Alarm(self.catch_up, clock=now_ms)
        self.listener = 0  # bumped by every attach: a transport holding an older number was replaced

    @property
    def state(self) -> Any:
        """The session's state: the fold of its log up to ``state.seq``."""
        return self.core.state

    @state.setter
    def state(self, state: Any) -> None:
        self.core.state = state

    # ----------------------------------------------------------------------------------- public

    def reveal_token(self, token_hash: str, token: str) -> None:
        """See :meth:`SessionCore.reveal_token <duplex_es.server.core.SessionCore.reveal_token>`."""
        self.core.reveal_token(token_hash, token)

    async def submit(self, command: Command, *, listener: Optional[int] = None) -> bool:
        """Decide, append and publish one command, then let the session advance.

        Args:
            command: the command.
            listener: the listener number of the connection sending it; if another client
                has taken the session over since (checked under the session's lock, so a
                takeover cannot slip in between), nothing is done.

        Returns:
            ``False`` when ``listener`` was replaced (by a resume here or on another server)
            and the command was dropped.

        Raises:
            SessionMoved: the session moved to another server (for callers without a
                ``listener``; a listener's stream gets ``session.replaced`` and ends).
            LogUnavailable: the log could not store the command's events (busy past the
                writer's bound, or failing): nothing of it was applied or published, and the
                client may send it again.
        """
        received = time.monotonic()  # the commit bound runs from here, queueing included
        key = idempotency_key(command)
        command = self.core.resolved(command)
        async with self._lock:
            if listener is not None and listener != self.listener:
                return False
            try:
                if self.moved is not None:
                    raise SessionMoved(self.session_id, self.moved)
                if self.core.is_activity(command):
                    self.last_activity_ms = now_ms()
                await self._execute(command, key, received=received)
                await self._pump()
            except SessionMoved:
                if listener is not None:
                    return False
                raise
            return True

    async def expire_if_due(self, now: int, *, disconnect_grace_ms: int, idle_ttl_ms: int) -> Optional[str]:
        """Expire the session if its lease ran out at ``now`` (Unix ms), deciding under the
        session's lock so a resume or a command that just arrived is taken into account.
        Returns the reason (``disconnect_grace_expired`` or ``idle_ttl_expired``), or ``None``."""
        async with self._lock:
            if self.moved is not None:
                return None
            command = self.core.expiry(now, self.last_activity_ms, disconnect_grace_ms=disconnect_grace_ms, idle_ttl_ms=idle_ttl_ms)
            if command is None:
                return None
            await self._execute(command, None)
            return command.reason

    async def take_over(
        self,
        command: Resume,
        last_server_event_seq: Optional[int],
        token: Optional[str] = None,
        owner: Optional["Acquirer"] = None,
    ) -> Recorded:
        """Resume the session for a new listener, atomically with its catch-up.

        Decides and appends ``command``; on success the previous listener gets
        ``session.replaced`` and its stream ends, and the new listener's stream starts with the
        wire events after ``last_server_event_seq`` re-projected from the log (byte-identical
        to their first sending, docs/architecture.md, I13) — or ``session.resync_required`` when the client
        claims events the log does not hold or missed more than :data:`MAX_REPLAY_EVENTS` —
        then the ``session.resumed`` of this resume. ``None`` replays nothing. Nothing is
        missed or doubled between the replay and the live stream: both happen under the lock.

        ``token`` is the plain resume token whose digest is ``command.new_token_hash``: the new
        listener's ``session.resumed`` carries it. ``owner`` moves the session's ownership to
        this process (it may live on another server), under the session's lock so no command
        of this process is caught between the move and its new fence — and only for a resume
        the domain accepts on the state caught up after the ownership was read, taken by a
        compare-and-swap on that generation: a resume refused, or one that lost a race with a
        resume on another server, moves nothing.

        Returns:
            the logged ``session.resumed``.

        Raises:
            ResumeDenied: the domain refused the resume; nothing was logged or changed.
            SessionMoved: another server moved the session while this resume was deciding.
        """
        async with self._lock:
            if owner is not None:
                observed = await owner.observe()
                await self._catch_up(adopt=True)
                self._refuse_unlogged(command)
                self.fence = await owner.take(observed)
                self.moved = None
            await self._catch_up(adopt=True)
            self._refuse_unlogged(command)
            if token is not None and command.new_token_hash is not None:
                self.core.reveal_token(command.new_token_hash, token)
            old = self._queue
            records = await self._execute(command, None, quiet=True)  # its events go out in the replay
            outcome = next((r for r in records if isinstance(r.event, (SessionResumed, CommandRejected))), None)
            if outcome is None or not isinstance(outcome.event, SessionResumed):
                # Only an append race can get here (the state moved between the check and the
                # append): the refusal is then in the log, as for any other command.
                self.core.forget_token()
                if outcome is None:
                    raise RuntimeError(f"session {self.session_id}: the resume logged nothing")
                raise ResumeDenied(outcome.event)  # type: ignore[arg-type]
            if old is not None:
                old.put_nowait(self.core.replaced(outcome.event.lease_generation))
                old.put_nowait(_END)
            self._queue = asyncio.Queue()
            self.listener += 1
            for wire in await self._replay(outcome.seq, last_server_event_seq):
                self._queue.put_nowait(wire)
            await self._pump()
            return outcome

    def _refuse_unlogged(self, command: Resume) -> None:
        """Raise :class:`ResumeDenied` if the domain refuses ``command`` on the current state."""
        plan = self.core.plan(command, None)
        if plan is not None and isinstance(plan.events[0], CommandRejected):
            raise ResumeDenied(plan.events[0])

    async def _replay(self, resumed_seq: int, last: Optional[int]) -> list[dict[str, Any]]:
        """The wire events a resuming client gets before the live stream (see :meth:`take_over`
        and :class:`~duplex_es.server.core.Catchup`)."""
        catchup = self.core.catchup(resumed_seq, last)
        # Projecting event ``first_seq`` needs the state before it: start from a snapshot.
        base = await asyncio.to_thread(
            load_state, self.log, self.snapshots, self.session_id, up_to_seq=max(0, catchup.first_seq - 1), resnapshot=False
        )
        records = await asyncio.to_thread(self.log.read_session, self.session_id, after_seq=base.state.seq, up_to_seq=self.state.seq)
        shadow = SessionCore(self.session_id, new_id=new_id, clock=now_ms, state=base.state)
        for r in records:
            if r.seq > self.state.seq:
                break  # later events reach the new listener live
            applied = shadow.apply(r.seq, r.event)
            if r.seq >= catchup.first_seq:
                catchup.feed(applied, await self._audio_for(applied))
        return catchup.wires()

    async def catch_up(self) -> None:
        """Fold and publish events other processes appended (worker outputs), then advance."""
        async with self._lock:
            if self.moved is not None:
                return
            try:
                await self._catch_up()
                await self._pump()
            except SessionMoved:
                pass  # the listener was told; the new owner advances the session
            except (LogUnavailable, sa.exc.DBAPIError, *DRIVER_ERRORS) as exc:
                # The follower or the timer calls again; the log holds what is not yet folded.
                log.warning("session %s: catch-up postponed: %s", self.session_id, str(exc).splitlines()[0][:300])

    def attach(self) -> int:
        """Start a fresh event stream for a new listener (events from now on); the previous
        listener's stream ends. Returns the new listener's number (see :attr:`listener`)."""
        if self._queue is not None:
            self._queue.put_nowait(_END)
        self._queue = asyncio.Queue()
        self.listener += 1
        return self.listener

    def release(self) -> None:
        """End the current listener's stream without replacing it (the transport is done
        with this session; nothing is logged)."""
        if self._queue is not None:
            self._queue.put_nowait(_END)
            self._queue = None

    def tell(self, wire: dict[str, Any]) -> None:
        """Queue a server event for the current listener only, in order with the session's
        events; it is not from the log (a refusal concerning another session, say)."""
        if self._queue is not None:
            self._queue.put_nowait(wire)

    async def detach(self, reason: str = "connection_closed", *, listener: Optional[int] = None) -> None:
        """The listener is gone without ``session.close``: stop streaming, log ``session.detached``
        (a speech session's responses go on generating into the log, for the resume to re-send;
        a world session pauses); the session waits for a resume or its expiry. With ``listener``, nothing happens if that listener
        was already replaced by a resume (the session is held by someone else)."""
        if listener is None or listener == self.listener:
            self.release()
        await self.submit(Detach(at_ms=now_ms(), reason=reason), listener=listener)

    async def events(self) -> AsyncIterator[dict[str, Any]]:
        """The server events for the current listener, until the session ends or a new
        listener attaches."""
        queue = self._queue
        if queue is None:
            return
        while True:
            item = await queue.get()
            if item is _END:
                return
            yield item

    # --------------------------------------------------------------------------------- internals

    async def _execute(
        self, command: Command, key: Optional[str], *, quiet: bool = False, received: Optional[float] = None
    ) -> list[Recorded]:
        """Append what the core plans for ``command`` (re-planning after append races); returns
        what it logged. With ``quiet`` its own events are folded but not queued for the listener;
        ``received`` (monotonic s) is when the command arrived, from which the writer's commit
        bound runs (default: now)."""
        for _ in range(MAX_RETRIES):
            plan = self.core.plan(command, key)
            if plan is None:
                return []
            if plan.check_key:
                prior = await asyncio.to_thread(self.log.applied_key, self.session_id, key)
                if prior is not None:
                    command, key = self.core.duplicate(command, prior), None
                    continue
                key = None
            self.appending_through = plan.expected_seq + len(plan.events)
            try:
                with APPEND_SECONDS.time():
                    try:
                        if self.writer is not None:
                            result = await self.writer.append_async(
                                self.session_id, list(plan.events), expected_seq=plan.expected_seq, idempotency_key=plan.key,
                                fence=self.fence, since=received,
                            )
                        else:
                            result = await asyncio.to_thread(
                                self.log.append, self.session_id, list(plan.events), expected_seq=plan.expected_seq,
                                idempotency_key=plan.key, fence=self.fence,
                            )
                    finally:
                        self.appending_through = 0  # _publish starts folding the records before it first yields
            except WrongExpectedSeq:
                await self._catch_up()
                if self.moved is not None:
                    raise SessionMoved(self.session_id, self.moved)
                continue
            except OwnershipLost as lost:
                await self._catch_up(adopt=True)  # show what the new owner did, then let go
                self._lose(f"owned by {lost.owner_id} at generation {lost.generation}")
                raise SessionMoved(self.session_id, self.moved or "moved") from lost
            except (sa.exc.DBAPIError, *DRIVER_ERRORS) as exc:
                # Nothing was published, so the state is as before; if the commit happened after
                # all (a lost reply), the next append finds the log ahead and catches up.
                first_line = str(exc).splitlines()[0][:300] if str(exc) else type(exc).__name__
                raise LogUnavailable("failed", first_line, 0.0) from exc
            if result.duplicate:
                # A retry of an applied command (same event_id, same content): recorded, not
                # applied again; the client got (or a resume re-sends) the first one's events.
                command, key = self.core.duplicate(command, (result.records[0].seq, result.records[-1].seq)), None
                continue
            if plan.counted:
                COMMANDS.labels("rejected" if plan.rejected else "accepted").inc()
                if plan.rejected:
                    # The refusal's code and what it refused, not its message or excerpt: those
                    # may quote what the client sent (the session's content, docs/privacy.md).
                    why = plan.events[0]
                    log.info(
                        "session %s: rejected %s (%s%s)", self.session_id, getattr(why, "command_type", None) or why.TYPE,
                        getattr(why, "code", "?"), f", param {why.param}" if getattr(why, "param", None) else "",
                    )
            await self._publish(result.records, quiet=quiet)
            return list(result.records)
        raise RuntimeError(f"session {self.session_id}: gave up after {MAX_RETRIES} append conflicts")

    async def _catch_up(self, *, adopt: bool = False) -> None:
        """Fold and publish the events appended by other processes. A ``session.resumed``
        among them was written by another server a client resumed on: the session lives
        there now, so unless this host is adopting it back (``adopt``) it lets go."""
        records = await asyncio.to_thread(self.log.read_session, self.session_id, after_seq=self.state.seq)
        if not adopt and self.fence is not None and any(isinstance(r.event, SessionResumed) for r in records):
            await self._publish(records, quiet=True)
            self._lose("resumed on another server")
            return
        await self._publish(records)

    def _lose(self, reason: str) -> None:
        """The session moved to another server: end the listener's stream with
        ``session.replaced`` (its socket closes with 4000) and stop acting for it."""
        if self.moved is not None:
            return
        self.moved = reason
        log.info("session %s moved: %s", self.session_id, reason)
        if self._queue is not None:
            self._queue.put_nowait(self.core.replaced(self.state.lease.generation, reason="moved_to_another_server"))
            self._queue.put_nowait(_END)
            self._queue = None
        self.listener += 1
        self._alarm.cancel()
        if self._on_moved is not None:
            self._on_moved(self)

    async def _pump(self) -> None:
        # A worker output may let a response advance (next tick) or end (response.done).
        # One step may enable the next (a response ends, a deferred one starts): pump until quiet.
        if self.core.pump_idle():  # nothing can follow (most audio appends): no ids, no decide
            self._schedule_wakeup()
            return
        try:
            for _ in range(4):
                if not await self._execute(self.core.pump(), None):
                    break
            else:
                self._alarm.at(now_ms())  # still going after four steps: the rest after others had a turn
        except LogUnavailable as exc:
            # The command that led here is committed and told; what it enables is decided
            # again shortly (a pump decides from the state, so nothing is lost by waiting).
            log.warning("session %s: pump postponed: %s", self.session_id, exc)
            self._alarm.at(now_ms() + int(PUMP_RETRY_S * 1000))
            return
        self._schedule_wakeup()

    def _schedule_wakeup(self) -> None:
        """A session whose kind paces itself (a realtime world issues its next tick when it is
        due, a full-duplex session its silence unit) is pumped when the core says: wake up then."""
        due = self.core.wakeup_ms()
        if due is not None:
            self._alarm.at(due)

    async def _audio_for(self, applied: Applied) -> Optional[bytes]:
        """The logged audio the projection of ``applied`` needs, read from the log (or ``None``)."""
        wanted = self.core.audio_wanted(applied.event, applied.after)
        if wanted is None:
            return None
        logged = await asyncio.to_thread(self.log.read_seqs, self.session_id, wanted.seqs)
        return wanted.cut({x.seq: x.event for x in logged})

    async def _publish(self, records: Iterable[Recorded], *, quiet: bool = False) -> None:
        for r in records:
            applied = self.core.apply(r.seq, r.event)
            # Only a retrieve reads logged audio: no await on the wire loop for anything else.
            audio = await self._audio_for(applied) if self.core.audio_wanted(applied.event, applied.after) is not None else None
            wires = self.core.wires(applied, audio)
            WIRE_EVENTS.inc(len(wires))
            if self._queue is not None and not quiet:
                for wire in self.core.revealed(r.event, wires):
                    self._queue.put_nowait(wire)
            if applied.ended:
                self.ended.set()
                if self._queue is not None:
                    self._queue.put_nowait(_END)
                    self._queue = None
        self._maybe_snapshot()

    def _maybe_snapshot(self) -> None:
        """Snapshot the state in the background once it is ``snapshot_every`` events past the
        last snapshot (one save at a time; a failed save only costs a longer load later)."""
        if not self.snapshot_every or self.snapshots is None or self.state.seq - self.snapshot_seq < self.snapshot_every:
            return
        if self._snapshot_task is not None and not self._snapshot_task.done():
            return
        state, store = self.state, self.snapshots
        self.snapshot_seq = state.seq

        async def save() -> None:
            try:
                await asyncio.to_thread(save_snapshot, store, state)
            except Exception:
                log.exception("session %s: snapshot at seq %d failed", self.session_id, state.seq)

        self._snapshot_task = asyncio.get_running_loop().create_task(save())
