"""The session kinds this code serves: one line each in :data:`KINDS`.

Everything generic — ``decide``, ``evolve``, the host, snapshots, replay, audit — finds a
session's kind here, by its state (:func:`kind_of`), its first event (:func:`started_by`) or its
name (:func:`named`). docs/architecture.md ("Session kinds") shows how to add one.
"""

from __future__ import annotations

from typing import Any, Optional

from duplex_es.domain.kind import SessionKind
from duplex_es.domain.kinds.speech import SPEECH
from duplex_es.domain.kinds.world import WORLD
from duplex_es.events import Event

__all__ = ["KINDS", "SessionKind", "kind_of", "started_by", "named", "opened_by", "ENDED_BY"]

#: Every kind, the default (the state before any event) first.
KINDS: tuple[SessionKind, ...] = (SPEECH, WORLD)

_BY_STATE = {k.state_type: k for k in KINDS}
_BY_START_EVENT = {k.start_event: k for k in KINDS}
_BY_START_COMMAND = {k.start_command: k for k in KINDS}
_BY_NAME = {k.name: k for k in KINDS}

#: Every event class after which a session of some kind takes no more commands.
ENDED_BY: tuple[type[Event], ...] = tuple(t for k in KINDS for t in k.ended_by)


def kind_of(state: Any) -> SessionKind:
    """The kind of a session state.

    Raises:
        KeyError: ``state`` is no kind's state class.
    """
    return _BY_STATE[type(state)]


def started_by(event: Event) -> Optional[SessionKind]:
    """The kind whose sessions begin with ``event``, if it is a start event."""
    return _BY_START_EVENT.get(type(event))


def opened_by(command: object) -> Optional[SessionKind]:
    """The kind whose sessions ``command`` opens, if it is a start command."""
    return _BY_START_COMMAND.get(type(command))


def named(name: str) -> SessionKind:
    """The kind called ``name``.

    Raises:
        KeyError: no kind has that name.
    """
    return _BY_NAME[name]
