"""The worker loop: claim a tick, run the engine, commit the output fenced by the claim.

A worker needs only the database URL. While an engine step runs, a heartbeat thread extends the
claim; if the worker dies, the claim expires and another worker takes the tick over (docs/architecture.md, I6).
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from typing import Sequence

from duplex_es.events import AudioAppended, AudioSegment, Event, ItemCreated, ResponseCreated, segments_audio
from duplex_es.store import TICKS_CHANNEL, Claim, ClaimLost, EventLog, TickQueue, Wakeup
from duplex_es.worker.contracts import CONTRACTS
from duplex_es.worker.engine import Engine, EngineError
from duplex_es.worker.faults import crash_point

__all__ = ["Worker"]

log = logging.getLogger(__name__)


#: The fallback poll interval of an idle worker that listens for new ticks (PostgreSQL), in ms.
PG_FALLBACK_POLL_MS = 100


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
        step_delay_ms: extra time spent per step, to stand in for a slower (GPU) model in demos
            and crash tests.
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
    ) -> None:
        self.log = log
        self.queue = TickQueue(log)
        self.engines = {kind: e for e in engines for kind in e.kinds}
        self.worker_id = worker_id or f"{socket.gethostname()}:{os.getpid()}"
        self.claim_ttl_ms = claim_ttl_ms
        self.poll_ms = poll_ms
        self.step_delay_ms = step_delay_ms
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
            if not isinstance(r.event, (AudioAppended, ItemCreated, ResponseCreated)):
                raise EngineError("input_missing", f"seq {r.seq} is a {r.event.TYPE}, which holds no input audio")
        return segments_audio({r.seq: r.event for r in records}, segments, bytes_per_sample)

    def run_once(self) -> bool:
        """Claim and run at most one tick; ``True`` if there was one."""
        claim = self.queue.claim(self.worker_id, ttl_ms=self.claim_ttl_ms, kinds=tuple(self.engines))
        if claim is None:
            return False
        log.info(
            "claimed %s %s (session %s, %s, attempt %d)",
            claim.kind,
            claim.request_id,
            claim.session_id,
            f"chunk {claim.tick.chunk_index}" if claim.tick.FENCED else f"item {getattr(claim.tick, 'item_id', '?')}",
            claim.attempts,
        )
        crash_point("after_claim")
        holder = {"claim": claim}
        beat_stop = threading.Event()
        beat = threading.Thread(target=self._heartbeat, args=(holder, beat_stop), daemon=True)
        beat.start()
        try:
            events = self._step(claim)
            if self.step_delay_ms:
                time.sleep(self.step_delay_ms / 1000)
        finally:
            beat_stop.set()
            beat.join()
        crash_point("after_step")  # the effect happened; the commit has not
        try:
            result = self.queue.commit(holder["claim"], events)
        except ClaimLost as lost:
            log.warning("not committing %s: %s", claim.request_id, lost.reason)
            return True
        crash_point("after_commit")
        self.committed += 1
        log.info("%s %s", result.status, claim.request_id)
        return True

    def _step(self, claim: Claim) -> list[Event]:
        """Run the claimed tick through its engine, by the contract of its kind; an engine
        failure becomes the tick's failure answer (it fails the response, not the worker)."""
        engine = self.engines[claim.kind]
        contract = CONTRACTS[claim.kind]
        try:
            return contract.answer(claim.session_id, engine.name, engine.step(contract.context(claim.session_id, claim.tick, self.read_audio)))
        except EngineError as err:
            log.warning("engine failed on %s: %s", claim.request_id, err)
            return [claim.tick.failed(claim.session_id, err.code, err.message[:500])]
        except Exception as exc:  # a crashing model must fail the response, not the worker
            log.exception("engine crashed on %s", claim.request_id)
            return [claim.tick.failed(claim.session_id, "engine_failed", f"{type(exc).__name__}: {exc}"[:500])]

    def _heartbeat(self, holder: dict, stop: threading.Event) -> None:
        while not stop.wait(self.claim_ttl_ms / 3000):
            try:
                holder["claim"] = self.queue.extend(holder["claim"], ttl_ms=self.claim_ttl_ms)
            except ClaimLost:
                request_id = holder["claim"].request_id
                row = self.queue.status(request_id)
                if row is not None and row["status"] == "cancelled":
                    # A barge-in or cancel fenced it: its output is logged and discarded.
                    log.info("tick %s was cancelled while it ran (the session moved on)", request_id)
                else:
                    log.warning("lost the claim on %s while running it (%s)", request_id, row["status"] if row else "no row")
                return

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
