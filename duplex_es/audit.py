"""Audit: prove from the stored rows that a session's log is intact and that every model step
applied exactly the accepted events it claims, once, in order.

The checks deliberately do not reuse the reducer's bookkeeping: they walk the raw rows and
recompute what must hold, so a reducer bug cannot hide itself.

* **chain** — seqs run 1..n without gaps and positions rise with them; each ``prev_hash`` is the
  previous row's ``hash`` and each ``hash`` recomputes (docs/architecture.md, I9): any edit,
  deletion or reordering breaks it. An event signed with a chain key must verify under that key
  from the log's key ring (so an edit whose chain was recomputed with the public formula is
  found); an unkeyed event after keyed ones — in its session, or in the log once it is keyed —
  is a downgrade (docs/security.md, "Tamper evidence");
* **key** — an event signed with a key the ring does not hold (or with no ring given) cannot be
  verified: reported once per session and key id, as "wrong key" rather than "edited";
* **decode** — every row decodes with the current catalogue (upcasting older versions);
* **the kind's own checks** — each session kind audits its ticks (``SessionKind.audit``): for
  speech :mod:`duplex_es.domain.speech_audit` (every model step applied exactly the accepted
  events it names, once, in order; outputs echo their ticks; one ``response.done`` per
  response; transcriptions answered once; every function call made once, and every
  ``function_call_output`` answering one earlier call of the session, no call twice), for
  world sessions
  :mod:`duplex_es.domain.world_audit` (every accepted interaction applied by exactly one
  committed tick of its epoch, in id order, or discarded by name);
* **snapshots** — every stored snapshot of this reducer version whose digest holds equals the
  full replay of the log up to its seq (a corrupt one or one of another version is not trusted
  by loads, so it is counted, not flagged).
"""

from __future__ import annotations

import hmac
from typing import TYPE_CHECKING, Optional, Sequence

import attrs
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from duplex_es.domain import KINDS, REDUCER_VERSION, evolve, new_state
from duplex_es.domain.kind import Violation
from duplex_es.domain.kinds import started_by
from duplex_es.events import Event, SessionErased
from duplex_es.snapshots import decode_state
from duplex_es.store import EventLog, SnapshotStore
from duplex_es.store.archives import ArchivedSession, ArchiveError, archived_records
from duplex_es.store.chain import GENESIS, KeyRing, event_hash
from duplex_es.store.database import driver_connection
from duplex_es.store.datakeys import MasterKeyError, SealError, decode_stored, key_row

if TYPE_CHECKING:
    from duplex_es.archive import OpenedArchive

__all__ = ["Violation", "SessionAudit", "audit_session", "audit_all", "audit_archived", "audit_opened_archive"]


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
    key_ids: tuple[str, ...] = ()  # the chain keys that signed its events, in first-use order
    unkeyed_events: int = 0  # events on the unkeyed chain (an edit with a recomputed chain goes unseen)
    sealed_events: int = 0  # events whose content is sealed (docs/privacy.md)
    erased_at_us: Optional[int] = None  # when its content was erased (its ``session.erased``), if it was
    archive: Optional[str] = None  # the archive file its events were read from (docs/privacy.md, "Archives")

    @property
    def ok(self) -> bool:
        """True when no rule is broken."""
        return not self.violations


def audit_session(log: EventLog, session_id: str, *, keyed_since: Optional[int] = None, key_rules: bool = True) -> SessionAudit:
    """Audit one session from its stored rows (and its snapshots), verifying keyed hashes with
    ``log.keys``.

    Args:
        keyed_since: the log's first keyed position (:meth:`EventLog.first_keyed_position`;
            looked up when ``None`` and the log has a key ring): an unkeyed event after it is
            a violation.
        key_rules: check the data key's rules (``False``: an archive read without the log
            that holds its key, which cannot tell a destroyed key from one not brought along).
    """
    if keyed_since is None and log.keys is not None:
        keyed_since = log.first_keyed_position()
    rows = log.read_raw(session_id)
    cipher, key_bad = _check_key(log, session_id, rows)
    if not key_rules:
        key_bad = [v for v in key_bad if v.check == "key"]
    report = _audit_rows(session_id, rows, log.keys, keyed_since, cipher, key_bad)
    checked, bad = _check_snapshots(log, session_id, rows, cipher)
    return attrs.evolve(report, snapshots=checked, violations=report.violations + tuple(bad))


def _check_key(log: EventLog, session_id: str, rows: list) -> tuple[Optional[AESGCM], list[Violation]]:
    """The session's data key (docs/privacy.md) against its log, with no master key needed: a
    sealed session whose key is gone without a logged ``session.erased`` (a key deleted
    outside an erasure), or a ``session.erased`` whose key still exists, is a violation; a
    payload in the clear recorded after the key was created had its sealed flag cleared. With
    the master key, the cipher the rows are opened with (``None``: not opened); a key that does
    not unwrap is reported once, not once per row."""
    first_sealed = next((r.seq for r in rows if r.sealed is not None), None)
    erased_at = next((r.seq for r in rows if r.type == SessionErased.TYPE), None)
    with log.db.read() as conn:
        row = key_row(driver_connection(conn), log.db.backend.sql, session_id)
    bad: list[Violation] = []
    destroyed = row is None or row[0]
    if first_sealed is not None and destroyed and erased_at is None:
        bad.append(Violation("sealed", first_sealed, "sealed events, but the session's data key is gone and no session.erased is logged (a key deleted outside an erasure)"))
    if erased_at is not None and row is not None and not row[0]:
        bad.append(Violation("sealed", erased_at, "session.erased is logged, but the session's data key still exists (restored after the erasure?)"))
    if row is not None:
        for r in rows:
            if r.sealed is None and r.payload is not None and r.recorded_at_us >= row[1]:
                bad.append(Violation("sealed", r.seq, "a payload in the clear recorded after the session was sealed (its sealed flag was cleared)"))
    if log.data_keys is None or first_sealed is None:
        return None, bad
    try:
        return log.data_keys.states_now([session_id])[session_id].cipher, bad
    except MasterKeyError as exc:
        bad.append(Violation("key", first_sealed, f"{exc}: its sealed content was not opened"))
        return None, bad


def _check_snapshots(log: EventLog, session_id: str, rows: list, cipher: Optional[AESGCM] = None) -> tuple[int, list[Violation]]:
    snaps = [s for s in SnapshotStore(log.db, data_keys=log.data_keys).all_of(session_id) if s.reducer_version == REDUCER_VERSION and s.intact]
    if not snaps:
        return 0, []
    bad: list[Violation] = []
    want = {s.seq: s for s in snaps}
    state = new_state()
    for r in rows:
        try:
            state = evolve(state, r.seq, decode_stored(cipher, r.session_id, r.seq, r.type, r.version, r.data, r.payload, r.sealed)[0])
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


def _check_chain(rows: list, keys: Optional[KeyRing], keyed_since: Optional[int]) -> tuple[list[Violation], tuple[str, ...], int]:
    """The chain's violations, the key ids that signed events, and the unkeyed events' count."""
    bad: list[Violation] = []
    prev, prev_position = GENESIS, None
    key_ids: dict[str, None] = {}
    unverifiable: set[str] = set()
    unkeyed = 0
    for i, r in enumerate(rows, start=1):
        if r.seq != i:
            bad.append(Violation("chain", r.seq, f"expected seq {i}, found {r.seq} (gap or reordering)"))
        if r.prev_hash != prev:
            bad.append(Violation("chain", r.seq, "prev_hash does not match the previous event's hash"))
        if prev_position is not None and r.position <= prev_position:
            bad.append(Violation("chain", r.seq, f"position {r.position} is not after the previous event's {prev_position} (moved)"))
        prev, prev_position = r.hash, r.position
        if r.key_id is None:
            unkeyed += 1
            if r.hash != event_hash(r.prev_hash, r.session_id, r.seq, r.type, r.version, r.data, r.recorded_at_us, r.payload, r.sealed):
                bad.append(Violation("chain", r.seq, "hash does not match the event's content (edited)"))
            if key_ids:
                bad.append(Violation("chain", r.seq, f"unkeyed after events signed with chain key {next(iter(key_ids))} (downgraded to the public formula)"))
            elif keyed_since is not None and r.position > keyed_since:
                bad.append(
                    Violation(
                        "chain", r.seq,
                        f"unkeyed at position {r.position}, but the log is keyed from position {keyed_since} on "
                        "(an appender without the key, or the chain rewritten with the public formula)",
                    )
                )
            continue
        key_ids.setdefault(r.key_id, None)
        want = keys.sign(r.key_id, r.prev_hash, r.session_id, r.seq, r.type, r.version, r.data, r.recorded_at_us, r.payload, r.sealed) if keys is not None else None
        if want is None:
            if r.key_id not in unverifiable:  # once per key, not once per event
                unverifiable.add(r.key_id)
                held = "no key ring was given (--chain-key-file)" if keys is None else f"the key ring holds {sorted(keys.keys)}"
                bad.append(Violation("key", r.seq, f"signed with chain key {r.key_id}, but {held}: its hashes cannot be verified (wrong key file, or the key id was edited)"))
            continue
        if not hmac.compare_digest(r.hash, want):
            bad.append(Violation("chain", r.seq, f"hash does not verify under chain key {r.key_id} (edited)"))
    return bad, tuple(key_ids), unkeyed


def _audit_rows(
    session_id: str,
    rows: list,
    keys: Optional[KeyRing] = None,
    keyed_since: Optional[int] = None,
    cipher: Optional[AESGCM] = None,
    key_violations: Sequence[Violation] = (),
) -> SessionAudit:
    # chain -------------------------------------------------------------------------------
    bad, key_ids, unkeyed = _check_chain(rows, keys, keyed_since)
    bad += key_violations

    # decode (and, with the master key, open every sealed row: a payload moved from another
    # row or session does not; without it, or once erased, the content reads as withheld) --
    events: list[tuple[int, Event]] = []
    for r in rows:
        try:
            events.append((r.seq, decode_stored(cipher, session_id, r.seq, r.type, r.version, r.data, r.payload, r.sealed)[0]))
        except SealError as exc:
            bad.append(Violation("sealed", r.seq, str(exc)))
        except Exception as exc:
            bad.append(Violation("decode", r.seq, str(exc)))
    erased = [ev.at_us for _, ev in events if isinstance(ev, SessionErased)]

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
        key_ids=key_ids,
        unkeyed_events=unkeyed,
        sealed_events=sum(1 for r in rows if r.sealed is not None),
        erased_at_us=erased[-1] if erased else None,
    )


def audit_all(log: EventLog, *, archive_dirs: Sequence[str] = ()) -> list[SessionAudit]:
    """Audit every session that has any stored row (one whose first event is gone too), then
    every archived session from its file (:func:`audit_archived`; ``archive_dirs``: where
    moved files may be)."""
    keyed_since = log.first_keyed_position() if log.keys is not None else None
    archived = archived_records(log.db)
    out = [audit_session(log, sid, keyed_since=keyed_since) for sid in log.every_session_id()]
    return out + [audit_archived(log, rec, archive_dirs) for rec in archived.values()]


def audit_archived(log: EventLog, record: ArchivedSession, archive_dirs: Sequence[str] = ()) -> SessionAudit:
    """Audit an archived session from its file (docs/privacy.md, "Archives"), found at its
    recorded location or by name in ``archive_dirs``: the file must be the one recorded (its
    SHA-256, events and head hash), and the session's chain, with the events the log holds
    after it (its erasure), must pass every check :func:`audit_session` makes. A file that is
    missing or unreadable is a violation (``archive``): the log no longer holds those events,
    so nothing else vouches for them."""
    from duplex_es.archive import locate, open_archive

    path = locate(record, archive_dirs)
    try:
        master = log.data_keys.master if log.data_keys else None
        with open_archive(path, hot=log, keys=log.keys, master_keys=master, session_id=record.session_id) as opened:
            return audit_opened_archive(opened, record.session_id)
    except ArchiveError as exc:
        return SessionAudit(record.session_id, "?", record.events, 0, 0, 0, 0, 0, 0, (Violation("archive", 0, f"{exc}: its events cannot be checked"),), archive=path)


def audit_opened_archive(opened: "OpenedArchive", session_id: str) -> SessionAudit:
    """:func:`audit_session` of an opened archive (:func:`duplex_es.archive.open_archive`),
    with how the file differs from what the log recorded of it first (check ``archive``:
    another digest, event count or head hash); the key's rules are checked only when its key
    row came with it."""
    report = audit_session(opened.log, session_id, key_rules=opened.key_known)
    last = opened.record.last_seq if opened.record is not None else opened.header.last_seq
    extra = tuple(Violation("archive", last, m) for m in opened.mismatches)
    return attrs.evolve(report, violations=extra + report.violations, archive=opened.path)
