"""A hosted session: the single writer that turns commands into committed events and committed
events into wire events for its connection.

For each command the host decides against its state, appends the batch with the seq it decided
on (retrying after catching up if a worker appended meanwhile), then folds the committed events
and sends their projection. Nothing reaches the client before its transaction commits (DESIGN I4),
and the state it holds is always the fold of the log up to ``state.seq`` (DESIGN I1).
"""

from __future__ import annotations

import asyncio
import logging
import secrets
from typing import Any, Awaitable, Callable, Iterable, Optional

from prometheus_client import Counter, Histogram

from duplex_es.domain import COMMAND_TYPES, Code, Pump, SessionState, decide, evolve
from duplex_es.domain.commands import Command, Invalid
from duplex_es.events import CommandRejected, SessionClosed
from duplex_es.protocol import encode_wire, project
from duplex_es.store import EventLog, Recorded, WrongExpectedSeq

__all__ = ["SessionHost", "new_id"]

log = logging.getLogger(__name__)

COMMANDS = Counter("duplex_es_commands_total", "Client commands by verdict", ["verdict"])
WIRE_EVENTS = Counter("duplex_es_wire_events_total", "Server events sent to clients")
APPEND_SECONDS = Histogram(
    "duplex_es_append_seconds",
    "Time to append one command's batch to the log",
    buckets=(0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 1.0),
)

#: How many times a command is re-decided after losing an append race to a worker.
MAX_RETRIES = 50

Send = Callable[[str], Awaitable[None]]


def new_id(prefix: str) -> str:
    """A fresh id such as ``item_1f0c9a3b5e7d2468`` (64 random bits)."""
    return f"{prefix}_{secrets.token_hex(8)}"


class SessionHost:
    """One session owned by this server process.

    Args:
        log: the event log.
        session_id: the session.
        send: coroutine that sends one text frame to the client; ``None`` while detached.
    """

    def __init__(self, log: EventLog, session_id: str, send: Optional[Send] = None) -> None:
        self.log = log
        self.session_id = session_id
        self.state = SessionState()
        self._send = send
        self._lock = asyncio.Lock()
        self.closed = asyncio.Event()

    # ----------------------------------------------------------------------------------- public

    async def handle(self, command: Command) -> None:
        """Decide, append and publish one command, then let the session advance."""
        async with self._lock:
            await self._execute(command, getattr(command, "event_id", None))
            await self._pump()

    async def catch_up(self) -> None:
        """Fold and publish events other processes appended (worker outputs), then advance."""
        async with self._lock:
            await self._catch_up()
            await self._pump()

    def detach(self) -> None:
        """Stop sending: the client is gone. The session stays in the log."""
        self._send = None

    # --------------------------------------------------------------------------------- internals

    async def _execute(self, command: Command, key: Optional[str]) -> None:
        for _ in range(MAX_RETRIES):
            events = decide(self.state, command)
            if not events:
                return
            if isinstance(events[0], CommandRejected):
                # Only applied commands are keyed: a refusal changes nothing, and keying it
                # would answer a corrected retry with the old error.
                key = None
            try:
                with APPEND_SECONDS.time():
                    result = await asyncio.to_thread(
                        self.log.append, self.session_id, events, expected_seq=self.state.seq, idempotency_key=key
                    )
            except WrongExpectedSeq:
                await self._catch_up()
                continue
            if result.duplicate:
                first, last = result.records[0].seq, result.records[-1].seq
                command = Invalid(
                    event_id=key,
                    command_type=COMMAND_TYPES.get(type(command)),
                    code=Code.DUPLICATE_EVENT_ID,
                    message=f"event_id {key!r} was already applied (log seq {first}-{last}); nothing was done again",
                    param="event_id",
                )
                key = None
                continue
            if not isinstance(command, Pump):
                rejected = isinstance(events[0], CommandRejected)
                COMMANDS.labels("rejected" if rejected else "accepted").inc()
                if rejected:
                    log.info("session %s: rejected %s", self.session_id, events[0])
            await self._publish(result.records)
            return
        raise RuntimeError(f"session {self.session_id}: gave up after {MAX_RETRIES} append conflicts")

    async def _catch_up(self) -> None:
        records = await asyncio.to_thread(self.log.read_session, self.session_id, after_seq=self.state.seq)
        await self._publish(records)

    async def _pump(self) -> None:
        # A worker output may let the response advance (next tick) or end (response.done).
        await self._execute(Pump(request_id=new_id("req")), None)

    async def _publish(self, records: Iterable[Recorded]) -> None:
        for r in records:
            if r.seq != self.state.seq + 1:
                raise RuntimeError(f"session {self.session_id}: got seq {r.seq} after {self.state.seq}")
            before = self.state
            self.state = evolve(before, r.seq, r.event)
            for wire in project(before, r.seq, r.event, self.state):
                await self._emit(wire)
            if isinstance(r.event, SessionClosed):
                self.closed.set()

    async def _emit(self, wire: dict[str, Any]) -> None:
        if self._send is None:
            return
        try:
            await self._send(encode_wire(wire))
            WIRE_EVENTS.inc()
        except Exception as exc:  # the socket went away mid-send; the log has everything
            log.info("session %s: client gone while sending (%s)", self.session_id, exc)
            self._send = None
