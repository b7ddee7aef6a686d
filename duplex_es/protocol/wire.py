"""Committed log events → wire events, for every session kind: the kinds' projection tables
merged, one line per kind (docs/architecture.md, I13: the wire is a projection of the log).

:func:`project` is a pure function of the log: the same log event, met in the same state (and,
for ``conversation.item.retrieved``, the same logged audio), always gives the same wire events,
stamped with their log-derived ``event_id`` and ``server_event_seq``
(:func:`~duplex_es.protocol.outbound.stamp`).
"""

from __future__ import annotations

from typing import Any, Optional

from duplex_es.events import Event
from duplex_es.protocol import duplex, outbound, world
from duplex_es.protocol.outbound import AudioReader, Ctx, Projection, stamp

__all__ = ["PROJECTIONS", "SILENT_EVENT_TYPES", "project"]

#: Every projection: event class → ``projection(event, ctx)``.
PROJECTIONS: dict[type, Projection] = {
    **outbound.PROJECTIONS,
    **world.PROJECTIONS,
    **duplex.PROJECTIONS,
}

#: Every event type deliberately not on the wire.
SILENT_EVENT_TYPES: frozenset[str] = outbound.SILENT_EVENT_TYPES | world.SILENT_EVENT_TYPES | duplex.SILENT_EVENT_TYPES


def project(before: Any, seq: int, event: Event, after: Any, audio_of: Optional[AudioReader] = None) -> list[dict[str, Any]]:
    """The wire events a committed log event produces, already stamped (``[]`` for a silent
    event).

    Args:
        before: the session state before the event.
        seq: the event's session seq.
        event: the event.
        after: ``evolve(before, seq, event)``.
        audio_of: reads logged audio, for ``conversation.item.retrieved`` (omitted without it).
    """
    projection = PROJECTIONS.get(type(event))
    if projection is None:
        return []
    return stamp(seq, projection(event, Ctx(before, after, audio_of)))
