"""Group commit: one writer thread per process turns the appends waiting for it into one
transaction and one commit.

A durable commit costs an fsync (SQLite WAL with ``synchronous=FULL``) or a WAL flush and a
round trip (PostgreSQL), whatever it holds; under the global-order lock only one commit runs at
a time. So commands that arrive while a commit is in flight wait for it and then share the next
one — the batching of effect-cqrs' PostgreSQL store and of ObneyAI/grain's SQLite write queue
(docs/sources.md, "Group commit in other event stores"). One command alone pays nothing extra: with
the default window of 0 the writer never waits for company, it takes what is queued. On SQLite
the server writes on its event loop instead (``inline``): the commands decided in one turn of
the loop share the transaction, whose statements run on the loop with no GIL hand-offs in
between; only its ``COMMIT`` — the fsync, most of a small batch's time — runs in a committer
thread, and what the loop decides meanwhile makes the next batch (docs/performance.md, "The
append path"). An inline write never waits for a lock: if the write lock is taken it tries
again a little later, and fails the waiting commands with :class:`LogUnavailable` once they have
waited ``timeout_ms``; nothing of theirs was written (docs/security.md, "No global stalls").

Each command keeps its own checks — fence, idempotency key, expected seq — run inside the shared
transaction in arrival order (a later command sees an earlier one's events), and fails alone:
those checks refuse a command before it writes anything, so the others commit. The batch costs
about as many statements as one command (``EventLog.append_batch_in``). Should the database
itself refuse a statement mid-batch, the batch is rolled back and every command is retried in a
transaction of its own, so again only the culprit fails. Every caller learns its outcome only
after the commit that holds its events returned (docs/architecture.md, I4).
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import contextlib
import itertools
import logging
import threading
import time
from typing import Optional, Sequence

import attrs
import sqlalchemy as sa
from prometheus_client import Histogram

from duplex_es.errors import LogError
from duplex_es.events import Event
from duplex_es.store.backend import WriteLockBusy
from duplex_es.store.database import DRIVER_ERRORS
from duplex_es.store.log import AppendRequest, AppendResult, EventLog
from duplex_es.store.ownership import Fence

__all__ = ["GroupCommitWriter", "LogHealth", "LogUnavailable"]

log = logging.getLogger(__name__)

BATCH_COMMANDS = Histogram(
    "duplex_es_group_commit_commands",
    "Commands committed together by the group-commit writer",
    buckets=(1, 2, 4, 8, 16, 32, 64, 128, 256, 512),
)

#: Retry delays of an inline commit that found the write lock taken (s): short at first (a
#: worker's commit or a checkpoint's last step holds it for a millisecond or a few), then every
#: 10 ms until the timeout.
_BUSY_RETRY_S = (0.0005, 0.001, 0.001, 0.002, 0.002, 0.005, 0.01)


class LogUnavailable(LogError):
    """The log could not commit an append: the database stayed busy (a lock not granted, a
    statement timed out) past the writer's bound, or it failed. Nothing of the append was
    written; the same command may be sent again.

    Attributes:
        reason: ``busy`` (the database was busy for ``waited_ms``) or ``failed`` (it refused).
        waited_ms: how long the append waited before giving up (ms).
    """

    def __init__(self, reason: str, detail: str, waited_ms: float) -> None:
        self.reason = reason
        self.detail = detail
        self.waited_ms = waited_ms
        super().__init__(f"the log is unavailable ({reason} for {waited_ms:.0f} ms): {detail}")


@attrs.define
class LogHealth:
    """What one writer saw of its database lately, for ``/healthz`` (read without touching the
    database, so it answers at once whatever state the database is in).

    Attributes:
        last_commit_at: monotonic time (s) of the last commit, or ``None``.
        last_failure_at: monotonic time (s) of the last append that failed busy or failed.
        last_failure: what that failure said (bounded).
        oldest_waiting_ms: how long the oldest append not yet committed has waited (ms).
    """

    last_commit_at: Optional[float]
    last_failure_at: Optional[float]
    last_failure: Optional[str]
    oldest_waiting_ms: float


@attrs.define
class _Request:
    append: AppendRequest
    future: concurrent.futures.Future | asyncio.Future  # an asyncio one belongs to an awaiting loop
    since: float = attrs.field(factory=time.monotonic)  # when it was queued (monotonic s)


def _settle_async(settled: list[tuple[asyncio.Future, object]]) -> None:
    for future, outcome in settled:
        if future.cancelled():
            continue  # its caller went away; the commit stands, as the log says
        if isinstance(outcome, BaseException):
            future.set_exception(outcome)
        else:
            future.set_result(outcome)


class GroupCommitWriter:
    """The appends of one process, committed in groups by one background thread — or, with
    ``inline``, the awaited ones on the event loop itself.

    Args:
        log: the event log to append to.
        window_ms: after taking the first waiting command, wait this long for more before
            committing (0: take only what is already queued — no added latency).
        max_batch: the most commands in one transaction.
        inline: write :meth:`append_async` batches on the caller's event loop (the commands
            decided in one turn of the loop share one transaction) instead of in the thread,
            with only the ``COMMIT`` (the fsync) in a committer thread, one batch at a time.
            For SQLite, where a commit is a local fsync of well under a millisecond: the
            thread spent most of its batch waiting for the GIL, once per statement, which the
            busy loop holds for up to the 5 ms switch interval, so under load a batch took tens
            of ms (issue 6 row 10: 30 sessions held p99 246 ms in the thread, 56 ms inline);
            the ``COMMIT`` is one call that waits without the GIL. Not for PostgreSQL: a
            statement there waits on the network and on the other servers' append lock, which
            must not stall the loop. :meth:`submit` always uses the thread. An inline write
            never waits on a lock (:meth:`Database.write` with ``wait=False``).
        timeout_ms: how long an append may wait for the write lock, from its ``since``, before
            it fails with :class:`LogUnavailable` (ms). Inline, the writer tries again on a timer
            until then; in the thread, the database's own ``write_timeout_ms`` bounds each
            transaction, and while the database stays busy, appends already past the bound are
            refused without another try.
    """

    def __init__(
        self, log: EventLog, *, window_ms: float = 0.0, max_batch: int = 512, inline: bool = False, timeout_ms: float = 2000.0
    ) -> None:
        if window_ms < 0 or max_batch < 1 or timeout_ms <= 0:
            raise ValueError("window_ms must be >= 0, max_batch >= 1 and timeout_ms > 0")
        self.log = log
        self.inline = inline
        self.window_ms = window_ms
        self.max_batch = max_batch
        self.timeout_ms = timeout_ms
        self.transactions = 0  #: commits made (for operators and benchmarks)
        self.commands = 0  #: commands committed or refused
        self._pending: collections.deque[_Request] = collections.deque()
        self._inline: list[_Request] = []  # awaited appends of this turn of the loop (inline)
        self._inline_scheduled = False
        self._busy_tries = 0  # consecutive inline attempts that found the lock taken
        self._committing = False  # an inline batch's COMMIT runs in the committer thread
        self._committing_since: Optional[float] = None  # the oldest append of that batch
        self._committer: Optional[concurrent.futures.ThreadPoolExecutor] = None
        self._in_flight_since: Optional[float] = None  # the thread's batch being committed
        self._last_commit_at: Optional[float] = None
        self._last_failure_at: Optional[float] = None
        self._last_failure: Optional[str] = None
        self._busy_failed_at: Optional[float] = None  # the last append refused as busy
        self._cond = threading.Condition()
        self._closed = False
        self._thread = threading.Thread(target=self._run, name="group-commit", daemon=True)
        self._thread.start()

    def submit(
        self,
        session_id: str,
        events: Sequence[Event],
        *,
        expected_seq: int,
        idempotency_key: Optional[str] = None,
        fence: Optional[Fence] = None,
    ) -> concurrent.futures.Future:
        """Queue an append; the future resolves to its :class:`AppendResult` after its commit,
        or to the exception :meth:`EventLog.append` would have raised (``WrongExpectedSeq``,
        ``OwnershipLost``, a database error). Arguments as for :meth:`EventLog.append`.

        Raises:
            RuntimeError: the writer was closed.
        """
        future: concurrent.futures.Future = concurrent.futures.Future()
        self._enqueue(_Request(AppendRequest(session_id, tuple(events), expected_seq, idempotency_key, fence), future))
        return future

    async def append_async(
        self,
        session_id: str,
        events: Sequence[Event],
        *,
        expected_seq: int,
        idempotency_key: Optional[str] = None,
        fence: Optional[Fence] = None,
        since: Optional[float] = None,
    ) -> AppendResult:
        """:meth:`submit` for a caller on an event loop: the same contract, awaited.

        ``since`` (monotonic s, default now) is when the caller received the command: the
        ``timeout_ms`` bound runs from then, so commands that queued behind a stalled one are
        refused within the bound of their arrival, not one bound after another.

        With ``inline`` the commit runs on this loop; otherwise the thread settles all the
        loop's callers of one commit with one ``call_soon_threadsafe`` (one wake-up of the loop
        per commit, not one per command). A caller cancelled while waiting does not cancel its
        append.

        Raises:
            RuntimeError: the writer was closed.
        """
        loop = asyncio.get_running_loop()
        future = loop.create_future()
        req = _Request(AppendRequest(session_id, tuple(events), expected_seq, idempotency_key, fence), future)
        if since is not None:
            req.since = since
        if not self.inline:
            self._enqueue(req)
        else:
            if self._closed:
                raise RuntimeError("the group-commit writer is closed")
            self._inline.append(req)
            if not self._inline_scheduled:  # the first of this turn schedules the commit for all
                self._inline_scheduled = True
                if self.window_ms > 0:
                    loop.call_later(self.window_ms / 1000, self._flush_inline)
                else:
                    loop.call_soon(self._flush_inline)
        return await future

    def _flush_inline(self) -> None:
        self._inline_scheduled = False
        if not self._inline or self._committing:
            return  # a commit in flight flushes what waits once it is done
        loop = asyncio.get_running_loop()
        batch = self._inline[: self.max_batch]
        try:
            pending = self._begin_inline(batch)
        except WriteLockBusy as busy:
            # Someone else holds the write lock: nothing was written. Fail what waited too
            # long, and try the rest again shortly — the loop serves everybody meanwhile.
            # Once one append has waited out its bound, the database is known busy: until
            # something commits, later ones are refused after one try, so commands a client sends
            # one after another into a stall are each answered within the bound of their arrival.
            now = time.monotonic()
            fail_fast = self._known_busy()
            expired = [r for r in self._inline if fail_fast or (now - r.since) * 1000 >= self.timeout_ms]
            if expired:
                self._inline = [r for r in self._inline if not (fail_fast or (now - r.since) * 1000 >= self.timeout_ms)]
                self._failed(f"write lock busy: {busy}", busy=True)
                _settle_async(
                    [(r.future, LogUnavailable("busy", str(busy), (now - r.since) * 1000)) for r in expired]  # type: ignore[misc]
                )
            if self._inline:
                self._inline_scheduled = True
                loop.call_later(_BUSY_RETRY_S[min(self._busy_tries, len(_BUSY_RETRY_S) - 1)], self._flush_inline)
                self._busy_tries += 1
            return
        self._busy_tries = 0
        del self._inline[: len(batch)]
        if isinstance(pending, list):  # the statements failed: settled the synchronous way
            self._after_inline(loop)
            _settle_async([(r.future, outcome) for r, outcome in pending])  # type: ignore[misc]
            return
        stack, outcomes = pending
        # The COMMIT (SQLite's fsync) runs in the committer thread: the loop goes on serving
        # sessions meanwhile, and what is decided meanwhile makes the next batch. Nobody learns
        # an outcome before the commit returned (docs/architecture.md, I4).
        self._committing = True
        self._committing_since = min(r.since for r in batch)
        if self._committer is None:
            self._committer = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="sqlite-commit")
        try:
            done = loop.run_in_executor(self._committer, stack.close)
        except RuntimeError:  # closed while this batch waited (shutting down): commit it here
            done = loop.create_future()
            try:
                stack.close()
                done.set_result(None)
            except Exception as exc:
                done.set_exception(exc)
        done.add_done_callback(lambda f: self._committed(loop, batch, outcomes, f))

    def _begin_inline(self, batch: list[_Request]) -> "tuple[contextlib.ExitStack, list] | list[tuple[_Request, object]]":
        """Open the write transaction on the loop (never waiting for the lock) and run the
        batch's statements in it; returns the open transaction (its ``close`` commits) and the
        outcomes. Should a statement fail, the transaction is rolled back and the batch goes
        the synchronous way (:meth:`_outcomes`: one by one, so only the culprit fails); its
        settled outcomes are returned instead.

        Raises:
            WriteLockBusy: the write lock was taken (nothing written).
        """
        stack = contextlib.ExitStack()
        conn = stack.enter_context(self.log.db.write(wait=False))  # WriteLockBusy: nothing open
        try:
            outcomes = self.log.append_batch_in(conn, [r.append for r in batch])
        except Exception as exc:
            try:
                stack.__exit__(type(exc), exc, exc.__traceback__)  # rolls back, releases the lock
            except Exception:
                pass  # the rollback passes the statement's error on: handled the synchronous way
            return self._outcomes(batch, wait=False)
        except BaseException as exc:
            stack.__exit__(type(exc), exc, exc.__traceback__)
            raise
        return stack, outcomes

    def _committed(self, loop: asyncio.AbstractEventLoop, batch: list[_Request], outcomes: list, done: "asyncio.Future[None]") -> None:
        """The committer thread's COMMIT of ``batch`` returned: settle its callers."""
        self._committing_since = None
        exc = done.exception()
        if exc is None:
            self.transactions += 1
            self.commands += len(batch)
            self._last_commit_at = time.monotonic()
            BATCH_COMMANDS.observe(len(batch))
            settled = list(zip(batch, outcomes))
        else:  # the COMMIT itself failed: the transaction is gone, nothing of it was written
            detail = str(exc).splitlines()[0][:300] if str(exc) else type(exc).__name__
            self._failed(f"commit failed: {detail}")
            log.warning("the commit of %d command(s) failed: %s", len(batch), detail)
            now = time.monotonic()
            settled = [(r, LogUnavailable("failed", detail, (now - r.since) * 1000)) for r in batch]
        self._after_inline(loop)
        _settle_async([(r.future, outcome) for r, outcome in settled])  # type: ignore[misc]

    def _after_inline(self, loop: asyncio.AbstractEventLoop) -> None:
        self._committing = False
        if self._inline and not self._inline_scheduled:
            self._inline_scheduled = True
            loop.call_soon(self._flush_inline)

    def health(self) -> LogHealth:
        """What this writer saw of the database lately (:class:`LogHealth`); touches nothing."""
        now = time.monotonic()
        waiting = [r.since for r in self._inline[:1]]
        with self._cond:
            waiting += [r.since for r in itertools.islice(self._pending, 1)]
        if self._in_flight_since is not None:
            waiting.append(self._in_flight_since)
        if self._committing_since is not None:
            waiting.append(self._committing_since)
        oldest = (now - min(waiting)) * 1000 if waiting else 0.0
        return LogHealth(self._last_commit_at, self._last_failure_at, self._last_failure, oldest)

    def _known_busy(self) -> bool:
        """Whether an append failed because the database was busy, with none committed since."""
        return self._busy_failed_at is not None and (self._last_commit_at is None or self._last_commit_at < self._busy_failed_at)

    def _failed(self, what: str, *, busy: bool = False) -> None:
        self._last_failure_at = time.monotonic()
        self._last_failure = what[:300]
        if busy:
            self._busy_failed_at = self._last_failure_at

    def _enqueue(self, request: _Request) -> None:
        with self._cond:
            if self._closed:
                raise RuntimeError("the group-commit writer is closed")
            self._pending.append(request)
            self._cond.notify()

    def append(
        self,
        session_id: str,
        events: Sequence[Event],
        *,
        expected_seq: int,
        idempotency_key: Optional[str] = None,
        fence: Optional[Fence] = None,
    ) -> AppendResult:
        """:meth:`submit` and wait for the outcome (blocking): the same contract as
        :meth:`EventLog.append`."""
        return self.submit(
            session_id, events, expected_seq=expected_seq, idempotency_key=idempotency_key, fence=fence
        ).result()

    def close(self, timeout_s: float = 10.0) -> None:
        """Commit what is queued, then stop the thread. Later submits raise."""
        with self._cond:
            self._closed = True
            self._cond.notify()
        self._thread.join(timeout_s)
        if self._committer is not None:
            self._committer.shutdown(wait=True)  # a COMMIT in flight finishes

    # --------------------------------------------------------------------------------- internals

    def _take(self) -> list[_Request]:
        with self._cond:
            while not self._pending and not self._closed:
                self._cond.wait()
            batch = [self._pending.popleft() for _ in range(min(len(self._pending), self.max_batch))]
        if batch and self.window_ms > 0 and len(batch) < self.max_batch:
            time.sleep(self.window_ms / 1000)
            with self._cond:
                while self._pending and len(batch) < self.max_batch:
                    batch.append(self._pending.popleft())
        return batch

    def _run(self) -> None:
        while True:
            batch = self._take()
            if not batch:
                return  # closed and drained
            live = [r for r in batch if isinstance(r.future, asyncio.Future) or r.future.set_running_or_notify_cancel()]
            if live and self._known_busy():
                # The database stayed busy for the last batch. For one bound after that failure
                # commands are refused without another wait (so those a client sends one after
                # another into a stall are each answered within the bound of their arrival);
                # after it, the next batch tries again. What already waited its bound is refused.
                now = time.monotonic()
                assert self._busy_failed_at is not None
                cooling = (now - self._busy_failed_at) * 1000 < self.timeout_ms
                expired = [r for r in live if cooling or (now - r.since) * 1000 >= self.timeout_ms]
                if expired:
                    live = [r for r in live if not (cooling or (now - r.since) * 1000 >= self.timeout_ms)]
                    self._settle([(r, LogUnavailable("busy", self._last_failure or "busy", (now - r.since) * 1000)) for r in expired])
            if live:
                self._in_flight_since = min(r.since for r in live)
                try:
                    settled = self._outcomes(live)
                finally:
                    self._in_flight_since = None
                self._settle(settled)

    def _outcomes(self, batch: list[_Request], *, wait: bool = True) -> list[tuple[_Request, object]]:
        """Commit ``batch``; each request with its outcome (never one left without).

        Raises:
            WriteLockBusy: with ``wait=False``, the write lock was taken (nothing written).
        """
        settled: list[tuple[_Request, object]] = []
        try:
            self._commit_group(batch, settled, wait=wait)
        except WriteLockBusy:  # only a write that must not wait lets it out: nothing was written
            raise
        except BaseException as exc:  # never leave a caller waiting forever
            log.exception("group commit failed unexpectedly")
            done = {id(r) for r, _ in settled}
            settled += [(r, exc) for r in batch if id(r) not in done]
        return settled

    def _commit_group(self, batch: list[_Request], settled: list[tuple[_Request, object]], *, wait: bool = True) -> None:
        """Commit ``batch`` and add each request's outcome to ``settled`` (nobody learns anything
        before the commit returned). A database that stayed busy fails the whole batch with
        :class:`LogUnavailable` (retrying each command alone would only wait again, once per
        command); a statement the database refused is retried command by command, so only
        the culprit fails.

        Raises:
            WriteLockBusy: with ``wait=False``, the write lock was taken (nothing written).
        """
        try:
            with self.log.db.write(wait=wait) as conn:
                outcomes = self.log.append_batch_in(conn, [r.append for r in batch])
        except WriteLockBusy:
            if not settled and not wait:
                raise
            # a retry one by one found the lock taken: the others of the batch committed
            self._fail_busy(batch, settled, "write lock busy")
            return
        except (sa.exc.DBAPIError, *DRIVER_ERRORS) as exc:
            if self.log.db.backend.is_busy(exc):
                self._fail_busy(batch, settled, str(exc).splitlines()[0] if str(exc) else type(exc).__name__)
                return
            if len(batch) == 1:
                self._failed(f"{type(exc).__name__}: {exc}")
                settled.append((batch[0], exc))
                return
            log.warning("group of %d commands failed (%s); committing them one by one", len(batch), exc)
            for r in batch:
                self._commit_group([r], settled, wait=wait)
            return
        self.transactions += 1
        self.commands += len(batch)
        self._last_commit_at = time.monotonic()
        BATCH_COMMANDS.observe(len(batch))
        settled.extend(zip(batch, outcomes))

    def _fail_busy(self, batch: list[_Request], settled: list[tuple[_Request, object]], detail: str) -> None:
        now = time.monotonic()
        self._failed(f"busy: {detail}", busy=True)
        log.warning("the log stayed busy; %d command(s) fail: %s", len(batch), detail[:300])
        settled.extend((r, LogUnavailable("busy", detail[:300], (now - r.since) * 1000)) for r in batch)

    @staticmethod
    def _settle(settled: list[tuple[_Request, object]]) -> None:
        by_loop: dict[asyncio.AbstractEventLoop, list[tuple[asyncio.Future, object]]] = {}
        for r, outcome in settled:
            if isinstance(r.future, asyncio.Future):
                by_loop.setdefault(r.future.get_loop(), []).append((r.future, outcome))
            elif isinstance(outcome, BaseException):
                r.future.set_exception(outcome)
            else:
                r.future.set_result(outcome)
        for loop, items in by_loop.items():
            try:
                loop.call_soon_threadsafe(_settle_async, items)
            except RuntimeError:  # the loop is closed: nobody is waiting any more
                pass
