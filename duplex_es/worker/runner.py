"""The worker loop: claim a batch of ticks, run the engines, commit the outputs fenced by the claims.

A worker needs only the database URL. It claims up to ``batch_size`` ticks across sessions in one
statement (one per session), waits up to ``batch_wait_ms`` for more to fill the batch, steps each
kind's ticks as one batch (``Engine.step_batch`` where the engine has it, else tick by tick) and
commits every output in one transaction, each fenced by its own claim. While the engines run, a
heartbeat thread extends every claim of the batch; if the worker dies, the claims expire and
other workers take the ticks over (docs/architecture.md, I6). With the defaults (1, 0 ms) it runs
one tick at a time.
"""

from __future__ import annotations

import logging
import os
import socket
import collections
import threading
import time
from typing import Any, Sequence

import attrs

from duplex_es.events import AudioAppended, AudioSegment, Event, ItemCreated, ResponseCreated, segments_audio
from duplex_es.store import TICKS_CHANNEL, Claim, ClaimLost, EventLog, TickQueue, Wakeup
from duplex_es.store.ticks import MAX_BATCH
from duplex_es.worker.contracts import CONTRACTS
from duplex_es.worker.engine import Engine, EngineError
from duplex_es.worker.faults import crash_point

__all__ = ["BatchStats", "Worker"]

log = logging.getLogger(__name__)

#: The failure code of a tick whose content this worker cannot open (docs/privacy.md).
CONTENT_WITHHELD = "content_withheld"


def _withheld_message(session_id: str) -> str:
    return (
        f"session {session_id}: its content is sealed and this worker cannot open it (start the worker with the "
        "servers' --master-key-file; or the session was erased)"
    )


#: The fallback poll interval of an idle worker that listens for new ticks (PostgreSQL), in ms.
PG_FALLBACK_POLL_MS = 100


@attrs.define
class BatchStats:
    """What a worker's batches were: counters kept on :attr:`Worker.stats` (the worker exposes
    no metrics endpoint; the same figures are logged at debug level per batch).

    Attributes:
        sizes: batch size → how many batches of that size were stepped.
        fill_wait_ms: total time spent waiting for a batch to fill (ms), over all batches.
        max_fill_wait_ms: the longest such wait (ms).
        lost: outputs not committed because their claim was lost (expired or taken over).
    """

    sizes: collections.Counter = attrs.Factory(collections.Counter)
    fill_wait_ms: float = 0.0
    max_fill_wait_ms: float = 0.0
    lost: int = 0

    @property
    def batches(self) -> int:
        """How many batches were stepped."""
        return sum(self.sizes.values())

    @property
    def ticks(self) -> int:
        """How many ticks were stepped."""
        return sum(size * n for size, n in self.sizes.items())

    def record(self, size: int, waited_ms: float) -> None:
        """Count one stepped batch of ``size`` ticks that waited ``waited_ms`` to fill."""
        self.sizes[size] += 1
        self.fill_wait_ms += waited_ms
        self.max_fill_wait_ms = max(self.max_fill_wait_ms, waited_ms)


class _Heartbeat:
    """Extends every claim of a batch every third of the lease, from a thread, in one statement
    per beat; a claim found lost (cancelled, expired, taken over) is dropped from the beat and
    keeps its last known state, so its commit is refused alone."""

    def __init__(self, queue: TickQueue, ttl_ms: int) -> None:
        self.queue, self.ttl_ms = queue, ttl_ms
        self._claims: dict[str, Claim] = {}
        self._lost: set[str] = set()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="claim-heartbeat")

    def add(self, claims: Sequence[Claim]) -> None:
        with self._lock:
            self._claims.update((c.request_id, c) for c in claims)

    def current(self, claim: Claim) -> Claim:
        """The newest state of ``claim`` (its extended expiry)."""
        with self._lock:
            return self._claims[claim.request_id]

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        while not self._stop.wait(self.ttl_ms / 3000):
            with self._lock:
                live = [c for rid, c in self._claims.items() if rid not in self._lost]
            if not live:
                return
            try:
                outcomes = self.queue.extend_batch(live, ttl_ms=self.ttl_ms)
            except Exception:  # a database hiccup: the next beat tries again, well within the lease
                log.exception("heartbeat: extending %d claims failed", len(live))
                continue
            with self._lock:
                for claim, out in zip(live, outcomes):
                    if isinstance(out, ClaimLost):
                        self._lost.add(claim.request_id)
                    else:
                        self._claims[claim.request_id] = out
            for claim, out in zip(live, outcomes):
                if isinstance(out, ClaimLost):
                    self._report_lost(claim.request_id)

    def _report_lost(self, request_id: str) -> None:
        row = self.queue.status(request_id)
        if row is not None and row["status"] == "cancelled":
            # A barge-in or cancel fenced it: its output is logged and discarded.
            log.info("tick %s was cancelled while it ran (the session moved on)", request_id)
        else:
            log.warning("lost the claim on %s while running it (%s)", request_id, row["status"] if row else "no row")


class Worker:
    """Claims and runs ticks until stopped.

    Args:
        log: the event log.
        engines: the engines this worker runs, one per tick kind.
        worker_id: recorded on claims; defaults to ``host:pid``.
        claim_ttl_ms: the claim lease; the heartbeat extends it every third of it.
        poll_ms: how long an idle worker waits between claim attempts on SQLite. On PostgreSQL
            it is woken by ``NOTIFY`` when a tick is issued and polls only as a fallback (for
            claims that expired, or a lost listener connection), every
            :data:`PG_FALLBACK_POLL_MS` at most.
        step_delay_ms: extra time spent per step (per batch: a batch stands for one forward
            pass), to stand in for a slower (GPU) model in demos and crash tests.
        batch_size: B, the most ticks claimed and stepped at once (at most one per session);
            1 runs one tick at a time.
        batch_wait_ms: the longest a worker that claimed fewer than B ticks waits for more to
            fill the batch before it steps what it has (0: never waits); its claims are
            extended meanwhile.

    Attributes:
        stats: the sizes of the batches stepped and the time spent filling them
            (:class:`BatchStats`).

    Raises:
        ValueError: ``batch_size`` outside 1 to ``MAX_BATCH``, or a negative ``batch_wait_ms``.
    """

    def __init__(
        self,
        log: EventLog,
        engines: Sequence[Engine],
        *,
        worker_id: str | None = None,
        claim_ttl_ms: int = 5000,
        poll_ms: int = 10,
        step_delay_ms: int = 0,
        batch_size: int = 1,
        batch_wait_ms: int = 0,
    ) -> None:
        if not 1 <= batch_size <= MAX_BATCH:
            raise ValueError(f"batch_size={batch_size}: a worker steps 1 to {MAX_BATCH} ticks at once")
        if batch_wait_ms < 0:
            raise ValueError(f"batch_wait_ms={batch_wait_ms}: the wait to fill a batch cannot be negative")
        self.log = log
        self.queue = TickQueue(log)
        self.engines = {kind: e for e in engines for kind in e.kinds}
        self.worker_id = worker_id or f"{socket.gethostname()}:{os.getpid()}"
        self.claim_ttl_ms = claim_ttl_ms
        self.poll_ms = poll_ms
        self.step_delay_ms = step_delay_ms
        self.batch_size = batch_size
        self.batch_wait_ms = batch_wait_ms
        self.stats = BatchStats()
        self.stopping = threading.Event()
        self.committed = 0
        self.wakeup = Wakeup(log.db, TICKS_CHANNEL)

    def read_audio(self, session_id: str, segments: tuple[AudioSegment, ...], bytes_per_sample: int = 2) -> bytes:
        """The input audio of ``segments`` (of appends or created items), cut from the log."""
        seqs = sorted({s.seq for s in segments})
        records = self.log.read_seqs(session_id, seqs)
        if [r.seq for r in records] != seqs:
            raise EngineError("input_missing", f"audio events {seqs} are not all in the log")
        for r in records:
            if r.withheld:  # silence would be answered as if it had been said
                raise EngineError(CONTENT_WITHHELD, _withheld_message(session_id))
            if not isinstance(r.event, (AudioAppended, ItemCreated, ResponseCreated)):
                raise EngineError("input_missing", f"seq {r.seq} is a {r.event.TYPE}, which holds no input audio")
        return segments_audio({r.seq: r.event for r in records}, segments, bytes_per_sample)

    def run_once(self) -> bool:
        """Claim up to ``batch_size`` ticks, run them and commit their outputs in one
        transaction; ``True`` if there was at least one tick."""
        kinds = tuple(self.engines)
        claims = self.queue.claim_batch(self.worker_id, ttl_ms=self.claim_ttl_ms, kinds=kinds, max_ticks=self.batch_size)
        if not claims:
            return False
        beat = _Heartbeat(self.queue, self.claim_ttl_ms)
        beat.add(claims)
        beat.start()
        try:
            waited_ms = self._fill(claims, beat, kinds)
            for claim in claims:
                log.info(
                    "claimed %s %s (session %s, %s, attempt %d)",
                    claim.kind,
                    claim.request_id,
                    claim.session_id,
                    f"chunk {claim.tick.chunk_index}" if claim.tick.FENCED else f"item {getattr(claim.tick, 'item_id', '?')}",
                    claim.attempts,
                )
            crash_point("after_claim")
            answers = self._step_all(claims)
            if self.step_delay_ms:
                time.sleep(self.step_delay_ms / 1000)
        finally:
            beat.stop()
        self.stats.record(len(claims), waited_ms)
        log.debug("stepped a batch of %d ticks (waited %.1f ms to fill it)", len(claims), waited_ms)
        crash_point("after_step")  # the effects happened; the commit has not
        outcomes = self.queue.commit_batch([(beat.current(c), events) for c, events in zip(claims, answers)])
        crash_point("after_commit")
        for claim, outcome in zip(claims, outcomes):
            if isinstance(outcome, ClaimLost):
                self.stats.lost += 1
                log.warning("not committing %s: %s", claim.request_id, outcome.reason)
            else:
                self.committed += 1
                log.info("%s %s", outcome.status, claim.request_id)
        return True

    def _fill(self, claims: list[Claim], beat: _Heartbeat, kinds: tuple[str, ...]) -> float:
        """Claim more ticks, of sessions not in the batch yet, until it holds ``batch_size`` or
        ``batch_wait_ms`` passed; returns the time waited (ms)."""
        started = time.monotonic()
        deadline = started + self.batch_wait_ms / 1000
        while len(claims) < self.batch_size and not self.stopping.is_set():
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            if self.wakeup.listens:
                self.wakeup.wait(min(remaining, PG_FALLBACK_POLL_MS / 1000))
            else:
                self.stopping.wait(min(remaining, self.poll_ms / 1000))
            more = self.queue.claim_batch(
                self.worker_id,
                ttl_ms=self.claim_ttl_ms,
                kinds=kinds,
                max_ticks=self.batch_size - len(claims),
                exclude_sessions=[c.session_id for c in claims],
            )
            beat.add(more)
            claims.extend(more)
        return (time.monotonic() - started) * 1000 if self.batch_wait_ms else 0.0

    def _step_all(self, claims: Sequence[Claim]) -> list[list[Event]]:
        """The events answering each claim, in order: each kind's ticks go to its engine as one
        batch (``step_batch``) or one by one (``step``); by the contract of the kind, an
        engine's output becomes its log events and a failure the tick's failure answer (it
        fails the response, not the worker)."""
        answers: list[list[Event] | None] = [None] * len(claims)
        by_kind: dict[str, list[int]] = {}
        for i, c in enumerate(claims):
            by_kind.setdefault(c.kind, []).append(i)
        for kind, idx in by_kind.items():
            engine = self.engines[kind]
            contract = CONTRACTS[kind]
            ctxs: list[Any] = []
            for i in idx:
                c = claims[i]
                if c.withheld:
                    answers[i] = self._failed(c, EngineError(CONTENT_WITHHELD, _withheld_message(c.session_id)))
                    ctxs.append(None)
                    continue
                try:
                    ctxs.append(contract.context(c.session_id, c.tick, self.read_audio))
                except Exception as exc:
                    answers[i] = self._failed(c, exc)
                    ctxs.append(None)
            todo = [(i, ctx) for i, ctx in zip(idx, ctxs) if ctx is not None]
            for (i, _), out in zip(todo, self._outputs(engine, [ctx for _, ctx in todo])):
                c = claims[i]
                if isinstance(out, BaseException):
                    answers[i] = self._failed(c, out)
                    continue
                try:
                    answers[i] = list(contract.answer(c.session_id, engine.name, out))
                except Exception as exc:
                    answers[i] = self._failed(c, exc)
        return answers  # type: ignore[return-value]

    @staticmethod
    def _outputs(engine: Engine, ctxs: list[Any]) -> list[Any]:
        """One output or exception per context: one ``step_batch`` call if the engine has it,
        else ``step`` per context."""
        if not ctxs:
            return []
        step_batch = getattr(engine, "step_batch", None)
        if callable(step_batch):
            try:
                outs = list(step_batch(ctxs))
            except Exception as exc:
                return [exc] * len(ctxs)
            if len(outs) != len(ctxs):
                wrong = EngineError("engine_failed", f"{engine.name}: step_batch returned {len(outs)} outputs for {len(ctxs)} ticks")
                return [wrong] * len(ctxs)
            return outs
        outs: list[Any] = []
        for ctx in ctxs:
            try:
                outs.append(engine.step(ctx))
            except Exception as exc:
                outs.append(exc)
        return outs

    @staticmethod
    def _failed(claim: Claim, exc: BaseException) -> list[Event]:
        """The tick's failure answer for an engine error (its code) or a crash (``engine_failed``)."""
        if isinstance(exc, EngineError):
            log.warning("engine failed on %s: %s", claim.request_id, exc)
            return [claim.tick.failed(claim.session_id, exc.code, exc.message[:500])]
        log.error("engine crashed on %s", claim.request_id, exc_info=exc)
        return [claim.tick.failed(claim.session_id, "engine_failed", f"{type(exc).__name__}: {exc}"[:500])]

    def run(self) -> None:
        """Run until :attr:`stopping` is set."""
        log.info("worker %s ready (engines: %s)", self.worker_id, ", ".join(sorted(self.engines)))
        while not self.stopping.is_set():
            try:
                busy = self.run_once()
            except Exception:
                log.exception("worker loop error; retrying")
                busy = False
            if not busy:
                self.idle_wait()
        self.wakeup.close()

    def idle_wait(self) -> bool:
        """Wait for work: until a tick is issued (PostgreSQL ``NOTIFY``) or the poll interval
        passes. Returns whether a notification cut the wait short."""
        if self.wakeup.listens:
            return self.wakeup.wait(max(self.poll_ms, PG_FALLBACK_POLL_MS) / 1000)
        self.stopping.wait(self.poll_ms / 1000)
        return False
