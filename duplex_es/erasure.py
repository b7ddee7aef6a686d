"""Erasing a session's content: the one path that ``duplex-es erase``, the owner's
``DELETE /v1/sessions/{id}`` and retention take (docs/privacy.md, "Erasure").

The log is immutable; what makes erasure possible is that a session's content is sealed under its
own data key (:mod:`duplex_es.store.datakeys`). Erasing destroys that key, deletes the session's
snapshots and appends ``session.erased`` — the time it used and who asked (docs/architecture.md,
I11) — in one transaction (:meth:`duplex_es.store.EventLog.erase`). Afterwards the session's
structure stays readable and auditable; its content opens for no one.

Refused (:class:`ErasureRefused`, with a code a caller can branch on) while the session is still
going (``session_live``: end it first — ``session.close``, or its expiry), when part of its content
was recorded in the clear (``not_sealed``: before a master key was configured; an immutable log
cannot forget it), and for a session that does not exist (``session_not_found``). Erasing an
erased session again changes nothing and says so. An archived session is erased the same way,
without its file: its key is here (docs/privacy.md, "Archives").
"""

from __future__ import annotations

import time
from typing import Optional

import attrs

from duplex_es.domain.kinds import ENDED_BY
from duplex_es.errors import OperationRefused
from duplex_es.events import SessionErased, decode
from duplex_es.events.codec import has_content
from duplex_es.store import EventLog
from duplex_es.store.archives import ArchivedSession, archived_records

__all__ = ["ErasureRefused", "Erasure", "erase_session"]

_ENDED = frozenset(t.TYPE for t in ENDED_BY)


class ErasureRefused(OperationRefused):
    """An erasure that was not done; nothing changed.

    Attributes:
        code: ``session_not_found``, ``session_live`` or ``not_sealed``.
        session_id: the session.
    """


@attrs.frozen
class Erasure:
    """What an erasure did.

    Attributes:
        session_id: the session.
        seq: the seq of its ``session.erased`` (the earlier one's, if it was erased before).
        at_us: when (Unix µs).
        sealed_events: how many of its events hold sealed content, now unreadable.
        key_destroyed: whether a data key was destroyed (``False``: erased before).
        snapshots_deleted: how many snapshots were deleted.
        already: the session had been erased before; nothing was done now.
    """

    session_id: str
    seq: int
    at_us: int
    sealed_events: int
    key_destroyed: bool
    snapshots_deleted: int
    already: bool = False


def erase_session(log: EventLog, session_id: str, *, by: str, reason: str = "request", now_us: Optional[int] = None) -> Erasure:
    """Erase the content of the ended session ``session_id`` (see the module).

    Args:
        log: the log (its master key is not needed: destroying a key needs none).
        by: who asked: a principal, ``operator`` (the command line) or ``retention``; logged.
        reason: why, logged (bounded by the caller: ``request``, ``retention``, a ticket id).
        now_us: the time the erasure uses (Unix µs; default: the clock).

    Raises:
        ErasureRefused: see the module (code and message name the session and what failed).
    """
    rows = log.read_raw(session_id)
    archived = archived_records(log.db, [session_id]).get(session_id)
    if archived is not None:
        return _erase_archived(log, archived, rows, by=by, reason=reason, now_us=now_us)
    if not rows:
        raise ErasureRefused("session_not_found", session_id, f"no session {session_id!r} in this log")
    already = _already(session_id, rows)
    if already is not None:
        return already
    if not any(r.type in _ENDED for r in rows):
        raise ErasureRefused(
            "session_live", session_id,
            f"session {session_id} has not ended (last event {rows[-1].type} at seq {rows[-1].seq}): end it first "
            "(session.close, or let its disconnect grace or idle TTL expire it), then erase it",
        )
    clear = [r.seq for r in rows if r.sealed is None and has_content(decode(r.type, r.version, r.data, r.payload))]
    if clear:
        shown = ", ".join(map(str, clear[:5])) + (f" and {len(clear) - 5} more" if len(clear) > 5 else "")
        raise ErasureRefused(
            "not_sealed", session_id,
            f"session {session_id}: {len(clear)} event(s) were recorded with their content in the clear (seq {shown}; "
            "written without --master-key-file), and the log cannot forget them; nothing was erased",
        )
    at = time.time_ns() // 1000 if now_us is None else now_us
    sealed = sum(1 for r in rows if r.sealed is not None)
    result, destroyed, dropped = log.erase(
        session_id, [SessionErased(at_us=at, by=by, reason=reason, sealed_events=sealed)], expected_seq=rows[-1].seq
    )
    return Erasure(session_id, result.records[-1].seq, at, sealed, destroyed, dropped)



def _already(session_id: str, rows: list) -> Optional[Erasure]:
    """The earlier erasure among ``rows``, if there is one."""
    earlier = next((r for r in rows if r.type == SessionErased.TYPE), None)
    if earlier is None:
        return None
    ev = decode(earlier.type, earlier.version, earlier.data)
    assert isinstance(ev, SessionErased)
    return Erasure(session_id, earlier.seq, ev.at_us, ev.sealed_events, False, 0, already=True)


def _erase_archived(log: EventLog, archived: ArchivedSession, rows: list, *, by: str, reason: str, now_us: Optional[int]) -> Erasure:
    """Erase a session whose events are in an archive file (docs/privacy.md, "Archives"): its
    key is in this log, so destroying it erases the content of every copy of the file; its
    ``session.erased`` continues the archived chain here (``rows``: what the log holds after
    the archived head). No file is read."""
    sid = archived.session_id
    already = _already(sid, rows)
    if already is not None:
        return already
    if archived.clear_content:
        raise ErasureRefused(
            "not_sealed", sid,
            f"session {sid} (archived): {archived.clear_content} event(s) were recorded with their content in the clear "
            "(written without --master-key-file), and neither the log nor its archive can forget them; nothing was erased",
        )
    at = time.time_ns() // 1000 if now_us is None else now_us
    head = rows[-1].seq if rows else archived.last_seq
    result, destroyed, dropped = log.erase(
        sid, [SessionErased(at_us=at, by=by, reason=reason, sealed_events=archived.sealed_events)], expected_seq=head, archived=True
    )
    return Erasure(sid, result.records[-1].seq, at, archived.sealed_events, destroyed, dropped)
