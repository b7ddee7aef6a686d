"""Export: a session's log (or the whole log) as JSON Lines, every event in its current shape.

Each line is one event with its log coordinates: ``position``, ``session_id``, ``seq``,
``recorded_at_us``, ``hash`` (of the stored row), ``type``, ``version`` (the current schema
version: older rows are upcast on the way out, as on every read path) and ``event`` (its fields).
"""

from __future__ import annotations

import json
from typing import Any, Iterator, Optional, TextIO

from duplex_es.events import to_plain
from duplex_es.store import EventLog, Recorded

__all__ = ["export_lines", "write_jsonl"]

#: Events read from the global log per query when exporting everything.
PAGE = 1000


def _records(log: EventLog, session_id: Optional[str]) -> Iterator[Recorded]:
    if session_id is not None:
        yield from log.read_session(session_id)
        return
    after = 0
    while True:
        page = log.tail(after, limit=PAGE)
        if not page:
            return
        yield from page
        after = page[-1].position


def export_lines(log: EventLog, session_id: Optional[str] = None) -> Iterator[dict[str, Any]]:
    """The events of ``session_id`` (default: every session, in position order) as dicts.

    Raises:
        duplex_es.store.StoredEventError: a row cannot be decoded (its position and type named).
    """
    for r in _records(log, session_id):
        yield {
            "position": r.position,
            "session_id": r.session_id,
            "seq": r.seq,
            "recorded_at_us": r.recorded_at_us,
            "hash": r.hash,
            "type": r.event.TYPE,
            "version": r.event.VERSION,
            "event": to_plain(r.event),
        }


def write_jsonl(log: EventLog, out: TextIO, session_id: Optional[str] = None) -> int:
    """Write :func:`export_lines` to ``out``, one JSON object per line; returns the count."""
    n = 0
    for line in export_lines(log, session_id):
        out.write(json.dumps(line, sort_keys=True, ensure_ascii=False) + "\n")
        n += 1
    return n
