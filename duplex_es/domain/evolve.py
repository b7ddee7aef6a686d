"""``evolve(state, seq, event) -> state``: the one writer of session state.

Pure: no clock, no randomness, no I/O (docs/architecture.md, I2). A live session's state is always
``fold(evolve, its events)`` (docs/architecture.md, I1); :func:`fold` is that fold. The rules per event live in
the concern modules.
"""

from __future__ import annotations

from typing import Iterable

# Importing the concern modules registers their evolvers.
from duplex_es.domain import input as _input, items as _items, lease as _lease, lifecycle as _lifecycle  # noqa: F401
from duplex_es.domain import playback as _playback, responses as _responses, transcription as _transcription  # noqa: F401
from duplex_es.domain.world import WorldState
from duplex_es.domain.rules import apply
from duplex_es.domain.state import SessionState
from duplex_es.events import Event, WorldStarted

__all__ = ["evolve", "fold", "REDUCER_VERSION"]

#: The version of the fold. Bump it whenever a change to the evolvers or the state classes would
#: fold some existing log to a different state: snapshots taken by another version are then
#: ignored and rebuilt from the log (issue 5, snapshots).
REDUCER_VERSION = 3  # 3: client settings, input transcription, idle timeout, usage (issue 10); 2: snapshots keep dict order


def evolve(state: SessionState | WorldState, seq: int, event: Event) -> SessionState | WorldState:
    """Apply the event logged at ``seq`` to ``state`` and return the new state. A session whose
    first event is ``world.session.started`` is a world session (:class:`WorldState`).

    Raises:
        TypeError: for an event type the reducer does not know.
    """
    if isinstance(event, WorldStarted) and state.status == "new" and not isinstance(state, WorldState):
        state = WorldState()
    return apply(state, seq, event)


def fold(events: Iterable[tuple[int, Event]], state: SessionState | WorldState | None = None) -> SessionState | WorldState:
    """Fold ``(seq, event)`` pairs into a state, starting from ``state`` or an empty one."""
    s = state if state is not None else SessionState()
    for seq, ev in events:
        s = evolve(s, seq, ev)
    return s
