"""The per-session hash chain (docs/architecture.md, I9).

Each event's hash covers the previous event's hash and everything stored about the event, so an
edit, a deletion or a reordering anywhere in a session breaks every hash after it.
"""

from __future__ import annotations

import hashlib

__all__ = ["GENESIS", "event_hash"]

#: ``prev_hash`` of a session's first event.
GENESIS = "0" * 64


def event_hash(prev_hash: str, session_id: str, seq: int, type_: str, version: int, data: str, recorded_at_us: int) -> str:
    """SHA-256 (hex) of one event chained to ``prev_hash``.

    The fields are joined with a separator that cannot occur in the first five (ids, integers
    and wire names have no NUL), so two different events never produce the same input.
    """
    h = hashlib.sha256()
    h.update(f"{prev_hash}\0{session_id}\0{seq}\0{type_}\0{version}\0{recorded_at_us}\0".encode())
    h.update(data.encode())
    return h.hexdigest()
