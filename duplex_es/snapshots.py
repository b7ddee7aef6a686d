"""Loading a session's state fast: the newest usable snapshot plus the events after it.

A snapshot is the folded state after some seq, under one reducer version
(:data:`~duplex_es.domain.REDUCER_VERSION`), as JSON with a digest. Loading takes the
newest snapshot at or before the wanted seq whose version is this code's and whose digest still
matches, and folds only the events after it; a snapshot of another version, a corrupt one, or
one that does not decode is skipped with a warning, and when that forced a longer replay the
result is snapshotted again. Snapshots are a cache: the log stays the truth, and
:func:`~duplex_es.audit.audit_session` checks every snapshot against the full replay.
"""

from __future__ import annotations

import json
import logging
from typing import Any, Optional

import attrs

from duplex_es.domain import REDUCER_VERSION, fold, kind_of, named, new_state
from duplex_es.events.codec import converter, parse_json
from duplex_es.store import EventLog, Recorded, SnapshotStore

__all__ = ["State", "LoadedState", "encode_state", "decode_state", "load_state", "save_snapshot"]

log = logging.getLogger(__name__)

#: A session state of any kind (see :mod:`duplex_es.domain.kinds`).
State = Any


def encode_state(state: State) -> str:
    """The JSON of a state (no whitespace), tagged with its kind.

    Keys keep their order: the reducer iterates some dicts (responses, ticks) in insertion order,
    so a snapshot with sorted keys would load into a state that compares equal but later folds
    differently. (``make chaos`` found exactly that.)"""
    return json.dumps({"kind": kind_of(state).name, "state": converter.unstructure(state)}, separators=(",", ":"), ensure_ascii=False)


def decode_state(data: str) -> State:
    """The state :func:`encode_state` wrote.

    Raises:
        ValueError: the text is not a snapshot this code can read.
    """
    try:
        doc = parse_json(data)  # the events' parser (json.loads' values, faster): loading is on every resume
        return converter.structure(doc["state"], named(doc["kind"]).state_type)
    except Exception as exc:  # json, key and cattrs errors alike
        raise ValueError(f"unreadable snapshot: {str(exc)[:200]}") from exc


@attrs.frozen
class LoadedState:
    """A state as loaded: ``snapshot_seq`` is the seq of the snapshot it started from (0: from
    the first event), ``applied`` how many events were folded onto it, ``records`` those events,
    and ``skipped`` the snapshots ignored on the way (another reducer version, or corrupt)."""

    state: State
    snapshot_seq: int
    applied: int
    records: tuple[Recorded, ...]
    skipped: int = 0


def load_state(
    log_: EventLog,
    snapshots: Optional[SnapshotStore],
    session_id: str,
    *,
    up_to_seq: Optional[int] = None,
    resnapshot: bool = True,
) -> LoadedState:
    """The session's state after ``up_to_seq`` (default: its head), from the newest usable
    snapshot plus the events after it.

    Args:
        log_: the event log.
        snapshots: where snapshots live (``None``: fold the whole log).
        session_id: the session.
        up_to_seq: stop after this seq.
        resnapshot: when unusable snapshots forced a longer replay, store a fresh snapshot of
            the result.

    Raises:
        duplex_es.store.StoredEventError: an event cannot be decoded (its position and type named).
    """
    base: State = new_state()
    base_seq = 0
    skipped = 0
    if snapshots is not None:
        for snap in snapshots.recent(session_id, max_seq=up_to_seq):
            why = None
            if snap.reducer_version != REDUCER_VERSION:
                why = f"it was folded by reducer version {snap.reducer_version}, this code folds with {REDUCER_VERSION}"
            elif not snap.intact:
                why = "its data does not match its digest (corrupt)"
            else:
                try:
                    state = decode_state(snap.data)
                except ValueError as exc:
                    why = str(exc)
                else:
                    if state.seq != snap.seq or state.session_id != session_id:
                        why = f"it holds seq {state.seq} of {state.session_id!r}"
                    else:
                        base, base_seq = state, snap.seq
                        break
            skipped += 1
            log.warning("session %s: snapshot at seq %d ignored: %s; replaying the log", session_id, snap.seq, why)
    records = tuple(log_.read_session(session_id, after_seq=base_seq, up_to_seq=up_to_seq))
    state = fold(((r.seq, r.event) for r in records), base)
    if skipped and resnapshot and snapshots is not None and state.seq > 0:
        save_snapshot(snapshots, state)
    return LoadedState(state=state, snapshot_seq=base_seq, applied=len(records), records=records, skipped=skipped)


def save_snapshot(snapshots: SnapshotStore, state: State) -> None:
    """Store ``state`` as the snapshot of its session after ``state.seq``."""
    snapshots.save(state.session_id, state.seq, REDUCER_VERSION, encode_state(state))
