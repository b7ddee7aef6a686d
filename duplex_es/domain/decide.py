"""``decide(state, command) -> events``: what a command means, given the session's state.

Pure (docs/architecture.md, I2). An accepted command returns the events that record it; a refused one returns
exactly one ``command.rejected`` carrying the error code, message, offending ``param`` and the
client's ``event_id`` (docs/architecture.md, I3). Commands that could target several things must name their
target or have exactly one candidate; the resolved target is written into the event (docs/protocol.md,
"no guessing"). The rules per command live in the concern modules; the session's kind
(:mod:`duplex_es.domain.kinds`) lists which rule decides which command.
"""

from __future__ import annotations

from duplex_es.domain.commands import Detach, Duplicate, Expire, Invalid, Pump
from duplex_es.domain.errors import Code
from duplex_es.domain.kinds import kind_of, opened_by
from duplex_es.domain.rules import reject, rejection
from duplex_es.events import CommandDeduplicated, Event

__all__ = ["decide"]

#: The host's own commands: against a session that is not open they decide nothing.
_HOUSEKEEPING = (Pump, Detach, Expire)


def decide(state: object, command: object) -> list[Event]:
    """The events that record ``command`` against ``state`` (any kind's state); ``[]`` when
    there is nothing to do (only the host's ``Pump``, ``Detach`` and ``Expire`` can decide
    nothing).

    Raises:
        TypeError: for an object that is not a command of the session's kind.
    """
    if isinstance(command, Invalid):
        return [rejection(command.event_id, command.command_type, command.code, command.message, command.param, command.excerpt)]
    if isinstance(command, Duplicate):
        return [
            CommandDeduplicated(
                client_event_id=command.event_id, command_type=command.command_type, first_seq=command.first_seq, last_seq=command.last_seq
            )
        ]
    opening = opened_by(command)
    if opening is not None:
        if state.status != "new":  # type: ignore[attr-defined]
            return reject(command, Code.SESSION_ALREADY_OPEN, f"session {state.session_id} already exists")  # type: ignore[attr-defined]
        return opening.start(command)
    if not state.is_open:  # type: ignore[attr-defined]
        if isinstance(command, _HOUSEKEEPING):
            return []
        return reject(command, Code.SESSION_CLOSED, f"the session is {state.status}")  # type: ignore[attr-defined]
    expected = getattr(command, "expected_epoch", None)
    if expected is not None and expected != state.epoch:  # type: ignore[attr-defined]
        return reject(
            command, Code.STALE_FENCE, f"the command is fenced to epoch {expected}; the session is at epoch {state.epoch}", "expected_epoch"  # type: ignore[attr-defined]
        )
    kind = kind_of(state)
    decider = kind.deciders.get(type(command))
    if decider is None:
        raise TypeError(f"not a {kind.name}-session command: {command!r}")
    return decider(command, state)
