"""``decide(state, command) -> events``: what a command means, given the session's state.

Pure (docs/architecture.md, I2). An accepted command returns the events that record it; a refused one returns
exactly one ``command.rejected`` carrying the error code, message, offending ``param`` and the
client's ``event_id`` (docs/architecture.md, I3). Commands that could target several things must name their
target or have exactly one candidate; the resolved target is written into the event (docs/protocol.md,
"no guessing"). The rules per command live in the concern modules.
"""

from __future__ import annotations

# Importing the concern modules registers their deciders.
from duplex_es.domain import input as _input, items as _items, lease as _lease, lifecycle as _lifecycle  # noqa: F401
from duplex_es.domain import playback as _playback, responses as _responses, transcription as _transcription  # noqa: F401
from duplex_es.domain.commands import Detach, Duplicate, Expire, Invalid, OpenSession, Pump
from duplex_es.domain.errors import Code
from duplex_es.domain.rules import decider, reject, rejection
from duplex_es.domain.state import SessionState
from duplex_es.domain.world import StartWorld, WorldState, world_decider
from duplex_es.events import CommandDeduplicated, Event, SessionConfig, SessionOpened, TurnDetection, WorldStarted

__all__ = ["decide"]


def decide(state: SessionState | WorldState, command: object) -> list[Event]:
    """The events that record ``command`` against ``state``; ``[]`` when there is nothing to do
    (only the host's ``Pump``, ``Detach`` and ``Expire`` can decide nothing).

    Raises:
        TypeError: for an object that is not a known command.
    """
    if isinstance(command, Invalid):
        return [rejection(command.event_id, command.command_type, command.code, command.message, command.param, command.excerpt)]
    if isinstance(command, Duplicate):
        return [
            CommandDeduplicated(
                client_event_id=command.event_id, command_type=command.command_type, first_seq=command.first_seq, last_seq=command.last_seq
            )
        ]
    if isinstance(command, (OpenSession, StartWorld)):
        if state.status != "new":
            return reject(command, Code.SESSION_ALREADY_OPEN, f"session {state.session_id} already exists")
        if isinstance(command, StartWorld):
            return [
                WorldStarted(
                    client_event_id=command.event_id,
                    session_id=command.session_id,
                    config=command.config,
                    at_ms=command.at_ms,
                    resume_token_hash=command.resume_token_hash,
                )
            ]
        # Turn detection starts as OpenAI's default (server VAD), which clients expect.
        config = SessionConfig(model=command.model, engine=command.engine or command.model, turn_detection=TurnDetection())
        return [SessionOpened(session_id=command.session_id, config=config, resume_token_hash=command.resume_token_hash)]
    if not state.is_open:
        if isinstance(command, (Pump, Detach, Expire)):
            return []
        return reject(command, Code.SESSION_CLOSED, f"the session is {state.status}")
    expected = getattr(command, "expected_epoch", None)
    if expected is not None and expected != state.epoch:
        return reject(
            command, Code.STALE_FENCE, f"the command is fenced to epoch {expected}; the session is at epoch {state.epoch}", "expected_epoch"
        )
    if isinstance(state, WorldState):
        return world_decider(command, state)
    return decider(command, state)
