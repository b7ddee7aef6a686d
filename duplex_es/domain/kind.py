"""What a session kind is to the rest of duplex_es: one :class:`SessionKind` value per kind
(speech, world), listed once in :mod:`duplex_es.domain.kinds`.

The decider, the reducer, the host, snapshots, replay and audit ask the session's kind for its
state class, its tables and its clock; none of them names a kind (docs/architecture.md, "Session
kinds"). Adding a kind is writing its modules plus one registration line in each layer it
reaches: ``kinds.KINDS`` here, the projection merge in ``protocol/wire.py``, the tick contracts
in ``worker/contracts.py`` (and a route for its endpoint).
"""

from __future__ import annotations

from typing import Any, Callable, Mapping, Optional, Sequence

import attrs

from duplex_es.errors import DuplexError
from duplex_es.events import Event

__all__ = ["SessionKind", "IllegalTransition", "Decider", "Evolver", "RunEvolver", "Evolve", "Violation", "TickAudit"]

#: ``decider(command, state) -> events`` for one command class, against an open session.
Decider = Callable[[Any, Any], list[Event]]
#: ``evolver(event, state, seq) -> state`` for one event class.
Evolver = Callable[[Any, Any, int], Any]
#: ``run_evolver(state, seqs, events) -> state``: several events of one class, logged one after
#: the other, applied at once; the same state as their evolver applied to each in turn.
RunEvolver = Callable[[Any, Sequence[int], Sequence[Any]], Any]
#: ``evolve(state, seq, event) -> state``: the whole reducer (what a kind's audit folds with).
Evolve = Callable[[Any, int, Event], Any]


@attrs.frozen
class Violation:
    """One broken rule found by ``audit``: which check, at which seq, and what is wrong."""

    check: str
    seq: Optional[int]
    message: str


@attrs.frozen(kw_only=True)
class TickAudit:
    """What a kind's audit found in a session's events: the broken rules, and the counts the
    audit report shows (ticks issued and committed; model-feeding inputs applied, discarded and
    still pending; responses)."""

    violations: tuple[Violation, ...]
    ticks: int
    committed_ticks: int
    applied_events: int
    discarded_events: int
    pending_events: int
    responses: int = 0


class IllegalTransition(DuplexError, RuntimeError):
    """An evolver moved a status (a session's, a response's) along an edge its machine does not
    allow: a reducer bug or a log no decider of this code could have written (the fold stops
    here). ``subject`` names what moved (``speech session sess_…``, ``response resp_…``)."""

    def __init__(self, subject: str, seq: int, event_type: str, before: str, after: str) -> None:
        self.subject, self.seq, self.event_type, self.before, self.after = subject, seq, event_type, before, after
        super().__init__(f"{subject}: {event_type} at seq {seq} moved the status from {before!r} to {after!r}, which is not allowed")


@attrs.frozen(kw_only=True)
class SessionKind:
    """One kind of session and everything the generic machinery needs of it.

    Attributes:
        name: the kind's name (``speech``, ``world``): in snapshots, audit reports and the
            ``kind`` a resume is checked against.
        state_type: the frozen class of its derived state; ``state_type()`` is the state before
            its first event. It has ``session_id``, ``seq``, ``status``, ``epoch``, ``lease``
            and ``is_open``.
        start_command / start_event: the command that opens a session of this kind and the
            event that records it (always the session's first event).
        start: ``start(command) -> events``: decide the opening.
        deciders: command class → decider, for an open session (the host's ``Pump``,
            ``Detach``, ``Expire`` and ``Resume`` included).
        evolvers: event class → evolver: every event a session of this kind can log.
        command_types: command class → wire name (``command.rejected.command_type``).
        transitions: status → the statuses an event may move it to; :func:`evolve` raises
            :class:`IllegalTransition` for any other move.
        ended_by: the event classes after which the session takes no more commands.
        audit: ``audit(session_id, events, evolve) -> TickAudit``: the kind's own checks on a
            session's decoded ``(seq, event)`` pairs (the ``audit`` command adds the chain,
            decode and snapshot checks every kind shares).
        judge: ``judge(state, answer) -> Verdict``: the verdict on a worker's answer
            (:class:`~duplex_es.events.TickAnswer`) given the state before it.
        wakeup_ms: ``wakeup_ms(state) -> Unix ms | None``: when the host must pump the session
            without being asked (a realtime-paced world's next tick); ``None``: only on input
            and worker outputs.
        pump_idle: ``pump_idle(state) -> bool``: ``True`` only when a ``Pump`` would decide
            nothing at any time, so the host need not make one (default: never idle).
        run_evolvers: event class → :data:`RunEvolver`, for the classes a session logs many
            of in a row (a speech session's audio appends): :func:`~duplex_es.domain.fold`
            applies such a run in one step. Only for classes whose evolver never changes the
            session's status or kind; it must give exactly the state the evolver gives event
            by event (a property test checks it).
    """

    name: str
    state_type: type
    start_command: type
    start_event: type[Event]
    start: Callable[[Any], list[Event]]
    deciders: Mapping[type, Decider]
    evolvers: Mapping[type, Evolver]
    command_types: Mapping[type, str]
    transitions: Mapping[str, frozenset[str]]
    ended_by: tuple[type[Event], ...]
    judge: Callable[[Any, Any], Any]
    audit: Callable[[str, Sequence[tuple[int, Event]], Evolve], TickAudit]
    wakeup_ms: Callable[[Any], Optional[int]] = lambda state: None
    pump_idle: Callable[[Any], bool] = lambda state: False
    run_evolvers: Mapping[type, RunEvolver] = attrs.field(factory=dict)
