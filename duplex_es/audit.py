"""Audit: prove from the stored rows that a session's log is intact and that every model step
applied exactly the accepted events it claims, once, in order.

The checks deliberately do not reuse the reducer's bookkeeping: they walk the raw rows and
recompute what must hold, so a reducer bug cannot hide itself.

* **chain** — seqs run 1..n without gaps; each ``prev_hash`` is the previous row's ``hash`` and
  each ``hash`` recomputes (docs/architecture.md, I9): any edit, deletion or reordering breaks it;
* **decode** — every row decodes with the current catalogue (upcasting older versions);
* **the kind's own checks** — each session kind audits its ticks (``SessionKind.audit``): for
  speech :mod:`duplex_es.domain.speech_audit` (every model step applied exactly the accepted
  events it names, once, in order; outputs echo their ticks; one ``response.done`` per
  response; transcriptions answered once), for world sessions
  :mod:`duplex_es.domain.world_audit` (every accepted interaction applied by exactly one
  committed tick of its epoch, in id order, or discarded by name);
* **snapshots** — every stored snapshot of this reducer version whose digest holds equals the
  full replay of the log up to its seq (a corrupt one or one of another version is not trusted
  by loads, so it is counted, not flagged).
"""

from __future__ import annotations

import attrs

from duplex_es.domain import KINDS, REDUCER_VERSION, evolve, new_state
from duplex_es.domain.kind import Violation
from duplex_es.domain.kinds import started_by
from duplex_es.events import Event, decode
from duplex_es.snapshots import decode_state
from duplex_es.store import EventLog, SnapshotStore
from duplex_es.store.chain import GENESIS, event_hash

__all__ = ["Violation", "SessionAudit", "audit_session", "audit_all"]


@attrs.frozen
class SessionAudit:
    """The audit of one session."""

    session_id: str
    kind: str  # the session kind's name (speech, world)
    events: int
    ticks: int
    committed_ticks: int
    applied_events: int
    discarded_events: int
    pending_events: int
    responses: int
    violations: tuple[Violation, ...]
    snapshots: int = 0  # snapshots checked against the full replay

    @property
    def ok(self) -> bool:
        """True when no rule is broken."""
        return not self.violations


def audit_session(log: EventLog, session_id: str) -> SessionAudit:
    """Audit one session from its stored rows (and its snapshots)."""
    rows = log.read_raw(session_id)
    report = _audit_rows(session_id, rows)
    checked, bad = _check_snapshots(log, session_id, rows)
    return attrs.evolve(report, snapshots=checked, violations=report.violations + tuple(bad))


def _check_snapshots(log: EventLog, session_id: str, rows: list) -> tuple[int, list[Violation]]:
    snaps = [s for s in SnapshotStore(log.db).all_of(session_id) if s.reducer_version == REDUCER_VERSION and s.intact]
    if not snaps:
        return 0, []
    bad: list[Violation] = []
    want = {s.seq: s for s in snaps}
    state = new_state()
    for r in rows:
        try:
            state = evolve(state, r.seq, decode(r.type, r.version, r.data))
        except Exception:
            return 0, []  # the decode check already reports it
        snap = want.get(r.seq)
        if snap is None:
            continue
        try:
            same = decode_state(snap.data) == state
        except ValueError as exc:
            bad.append(Violation("snapshots", r.seq, f"the snapshot does not decode: {exc}"))
            continue
        if not same:
            bad.append(Violation("snapshots", r.seq, "the snapshot differs from the full replay up to its seq"))
    for seq in sorted(set(want) - {r.seq for r in rows}):
        bad.append(Violation("snapshots", seq, "a snapshot after the last event"))
    return len(snaps), bad


def _audit_rows(session_id: str, rows: list) -> SessionAudit:
    bad: list[Violation] = []

    # chain -------------------------------------------------------------------------------
    prev = GENESIS
    for i, r in enumerate(rows, start=1):
        if r.seq != i:
            bad.append(Violation("chain", r.seq, f"expected seq {i}, found {r.seq} (gap or reordering)"))
        if r.prev_hash != prev:
            bad.append(Violation("chain", r.seq, "prev_hash does not match the previous event's hash"))
        want = event_hash(r.prev_hash, r.session_id, r.seq, r.type, r.version, r.data, r.recorded_at_us)
        if r.hash != want:
            bad.append(Violation("chain", r.seq, "hash does not match the event's content (edited)"))
        prev = r.hash

    # decode ------------------------------------------------------------------------------
    events: list[tuple[int, Event]] = []
    for r in rows:
        try:
            events.append((r.seq, decode(r.type, r.version, r.data)))
        except Exception as exc:
            bad.append(Violation("decode", r.seq, str(exc)))

    kind = (started_by(events[0][1]) if events else None) or KINDS[0]
    found = kind.audit(session_id, events, evolve)
    return SessionAudit(
        session_id=session_id,
        kind=kind.name,
        events=len(rows),
        ticks=found.ticks,
        committed_ticks=found.committed_ticks,
        applied_events=found.applied_events,
        discarded_events=found.discarded_events,
        pending_events=found.pending_events,
        responses=found.responses,
        violations=tuple(bad) + found.violations,
    )


def audit_all(log: EventLog) -> list[SessionAudit]:
    """Audit every session in the log."""
    return [audit_session(log, sid) for sid in log.session_ids()]
