"""Group commit: one writer thread per process turns the appends waiting for it into one
transaction and one commit.

A durable commit costs an fsync (SQLite WAL with ``synchronous=FULL``) or a WAL flush and a
round trip (PostgreSQL), whatever it holds; under the global-order lock only one commit runs at
a time. So commands that arrive while a commit is in flight wait for it and then share the next
one — the batching of effect-cqrs' PostgreSQL store and of ObneyAI/grain's SQLite write queue
(docs/sources.md, "Group commit in other event stores"). One command alone pays nothing extra: with
the default window of 0 the writer never waits for company, it takes what is queued. On SQLite
the server commits on its event loop instead (``inline``): the commands decided in one turn of
the loop share the transaction, with no thread and no GIL hand-offs in between.

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
import logging
import threading
import time
from typing import Optional, Sequence

import attrs
import sqlalchemy as sa
from prometheus_client import Histogram

from duplex_es.events import Event
from duplex_es.store.database import DRIVER_ERRORS
from duplex_es.store.log import AppendRequest, AppendResult, EventLog
from duplex_es.store.ownership import Fence

__all__ = ["GroupCommitWriter"]

log = logging.getLogger(__name__)

BATCH_COMMANDS = Histogram(
    "duplex_es_group_commit_commands",
    "Commands committed together by the group-commit writer",
    buckets=(1, 2, 4, 8, 16, 32, 64, 128, 256, 512),
)

@attrs.define
class _Request:
    append: AppendRequest
    future: concurrent.futures.Future | asyncio.Future  # an asyncio one belongs to an awaiting loop


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
        inline: commit :meth:`append_async` batches on the caller's event loop (the commands
            decided in one turn of the loop share one transaction) instead of in the thread.
            For SQLite, where a commit is a local fsync of well under a millisecond: the
            thread spent most of its batch waiting for the GIL, once per statement, which the
            busy loop holds for up to the 5 ms switch interval, so under load a batch took tens
            of ms (issue 6 row 10: 30 sessions held p99 246 ms in the thread, 56 ms inline).
            Not for PostgreSQL: a commit there waits on the network and on the other servers'
            append lock, which must not stall the loop. :meth:`submit` always uses the thread.
    """

    def __init__(self, log: EventLog, *, window_ms: float = 0.0, max_batch: int = 512, inline: bool = False) -> None:
        if window_ms < 0 or max_batch < 1:
            raise ValueError("window_ms must be >= 0 and max_batch >= 1")
        self.log = log
        self.inline = inline
        self.window_ms = window_ms
        self.max_batch = max_batch
        self.transactions = 0  #: commits made (for operators and benchmarks)
        self.commands = 0  #: commands committed or refused
        self._pending: collections.deque[_Request] = collections.deque()
        self._inline: list[_Request] = []  # awaited appends of this turn of the loop (inline)
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
    ) -> AppendResult:
        """:meth:`submit` for a caller on an event loop: the same contract, awaited.

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
        if not self.inline:
            self._enqueue(req)
        else:
            if self._closed:
                raise RuntimeError("the group-commit writer is closed")
            self._inline.append(req)
            if len(self._inline) == 1:  # the first of this turn schedules the commit for all
                if self.window_ms > 0:
                    loop.call_later(self.window_ms / 1000, self._flush_inline)
                else:
                    loop.call_soon(self._flush_inline)
        return await future

    def _flush_inline(self) -> None:
        batch, self._inline = self._inline[: self.max_batch], self._inline[self.max_batch :]
        if self._inline:
            asyncio.get_running_loop().call_soon(self._flush_inline)
        _settle_async([(r.future, outcome) for r, outcome in self._outcomes(batch)])  # type: ignore[misc]

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
            if live:
                self._settle(self._outcomes(live))

    def _outcomes(self, batch: list[_Request]) -> list[tuple[_Request, object]]:
        """Commit ``batch``; each request with its outcome (never one left without)."""
        settled: list[tuple[_Request, object]] = []
        try:
            self._commit_group(batch, settled)
        except BaseException as exc:  # never leave a caller waiting forever
            log.exception("group commit failed unexpectedly")
            done = {id(r) for r, _ in settled}
            settled += [(r, exc) for r in batch if id(r) not in done]
        return settled

    def _commit_group(self, batch: list[_Request], settled: list[tuple[_Request, object]]) -> None:
        """Commit ``batch`` and add each request's outcome to ``settled`` (nobody learns anything
        before the commit returned)."""
        try:
            with self.log.db.write() as conn:
                outcomes = self.log.append_batch_in(conn, [r.append for r in batch])
        except (sa.exc.DBAPIError, *DRIVER_ERRORS) as exc:
            if len(batch) == 1:
                settled.append((batch[0], exc))
                return
            log.warning("group of %d commands failed (%s); committing them one by one", len(batch), exc)
            for r in batch:
                self._commit_group([r], settled)
            return
        self.transactions += 1
        self.commands += len(batch)
        BATCH_COMMANDS.observe(len(batch))
        settled.extend(zip(batch, outcomes))

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
