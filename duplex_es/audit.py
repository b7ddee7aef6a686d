"""Audit: prove from the stored rows that a session's log is intact and that every model step
applied exactly the accepted events it claims, once, in order.

The checks deliberately do not reuse the reducer's bookkeeping: they walk the raw rows and
recompute what must hold, so a reducer bug cannot hide itself.

* **chain** — seqs run 1..n without gaps; each ``prev_hash`` is the previous row's ``hash`` and
  each ``hash`` recomputes (docs/architecture.md, I9): any edit, deletion or reordering breaks it;
* **decode** — every row decodes with the current catalogue (upcasting older versions);
* **ticks** — each tick's ``applied_event_ids`` are strictly increasing, name accepted
  model-feeding events logged before the tick, and are never named by another tick; every
  model-feeding event is applied by exactly one committed tick or discarded by exactly one
  explicit event; a closed session leaves nothing pending (docs/architecture.md, I5);
* **outputs** — every output names an issued tick and echoes its identity exactly; no tick has
  two outputs (docs/architecture.md, I5, I6);
* **responses** — each response ends with exactly one ``response.done`` and no accepted output
  follows it;
* **transcriptions** — each input transcription names a user item of the session, is answered
  at most once by an output echoing its request and item, and a closed session leaves none
  unanswered and uncancelled.

World sessions get their own tick checks (:func:`_audit_world`): every accepted interaction is
applied by exactly one committed tick of its epoch, in id order, or discarded by name.

* **snapshots** — every stored snapshot of this reducer version whose digest holds equals the
  full replay of the log up to its seq (a corrupt one or one of another version is not trusted
  by loads, so it is counted, not flagged).
"""

from __future__ import annotations

from typing import Optional

import attrs

from duplex_es.domain import REDUCER_VERSION, SessionState, classify_output, evolve
from duplex_es.domain.world import WorldState, world_verdict
from duplex_es.events import (
    MODEL_FEEDING,
    EpochAdvanced,
    Event,
    ResponseCreated,
    ResponseDone,
    SessionClosed,
    TickFailed,
    TickIssued,
    TranscriptionCompleted,
    TranscriptionFailed,
    TranscriptionRequested,
    TickOutput,
    InteractionAccepted,
    WorldChunk,
    WorldClosed,
    WorldReset,
    WorldStarted,
    WorldTickFailed,
    WorldTickIssued,
    decode,
)
from duplex_es.snapshots import decode_state
from duplex_es.store import EventLog, SnapshotStore
from duplex_es.store.chain import GENESIS, event_hash

__all__ = ["Violation", "SessionAudit", "audit_session", "audit_all"]


@attrs.frozen
class Violation:
    """One broken rule: which check, at which seq, and what is wrong."""

    check: str
    seq: Optional[int]
    message: str


@attrs.frozen
class SessionAudit:
    """The audit of one session."""

    session_id: str
    kind: str  # speech | world
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
    state = SessionState()
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

    if events and isinstance(events[0][1], WorldStarted):
        return _audit_world(session_id, len(rows), events, bad)

    # ticks and outputs ---------------------------------------------------------------------
    feeding: dict[int, str] = {}  # seq -> type of every accepted model-feeding event
    applied_by: dict[int, str] = {}  # event seq -> request_id of the tick naming it
    discarded: dict[int, int] = {}  # event seq -> seq of the event discarding it
    ticks: dict[str, tuple[int, TickIssued]] = {}
    outputs: dict[str, int] = {}
    committed: set[str] = set()
    cancelled: set[str] = set()
    created: dict[str, int] = {}
    done: dict[str, int] = {}
    transcriptions: dict[str, tuple[int, str]] = {}  # request_id -> (seq, item_id)
    transcribed: dict[str, int] = {}  # request_id -> seq of its output
    closed = False
    state = SessionState()
    for seq, ev in events:
        relevant = getattr(ev, "model_relevant", True) and getattr(ev, "in_conversation", True)
        if ev.TYPE in MODEL_FEEDING and relevant:
            feeding[seq] = ev.TYPE
        if isinstance(ev, TickIssued):
            if ev.request_id in ticks:
                bad.append(Violation("ticks", seq, f"request_id {ev.request_id} issued twice"))
            ticks[ev.request_id] = (seq, ev)
            ids = list(ev.applied_event_ids)
            if ids != sorted(set(ids)):
                bad.append(Violation("ticks", seq, f"applied_event_ids {ids} are not strictly increasing"))
            for a in ids:
                if a >= seq or a not in feeding:
                    bad.append(Violation("ticks", seq, f"applies seq {a}, which is not an accepted model-feeding event before it"))
                elif a in applied_by:
                    bad.append(Violation("ticks", seq, f"applies seq {a}, already applied by {applied_by[a]}"))
                elif a in discarded:
                    bad.append(Violation("ticks", seq, f"applies seq {a}, discarded at seq {discarded[a]}"))
                else:
                    applied_by[a] = ev.request_id
        elif isinstance(ev, (TickOutput, TickFailed)):
            issued = ticks.get(ev.request_id)
            if issued is None:
                bad.append(Violation("outputs", seq, f"output for unknown tick {ev.request_id}"))
            else:
                t = issued[1]
                echo = (ev.session_id, ev.response_id, ev.epoch, ev.chunk_index, tuple(ev.applied_event_ids))
                want = (session_id, t.response_id, t.epoch, t.chunk_index, tuple(t.applied_event_ids))
                if echo != want:
                    bad.append(Violation("outputs", seq, f"output does not echo tick {ev.request_id}: {echo} != {want}"))
            if ev.request_id in outputs:
                bad.append(Violation("outputs", seq, f"tick {ev.request_id} has a second output (first at seq {outputs[ev.request_id]})"))
            outputs[ev.request_id] = seq
            verdict = classify_output(state, ev)
            if isinstance(ev, TickOutput) and verdict.accepted:
                committed.add(ev.request_id)
                if ev.response_id in done:
                    bad.append(Violation("responses", seq, f"accepted output after response.done of {ev.response_id}"))
        elif isinstance(ev, EpochAdvanced):
            cancelled.update(ev.cancelled_request_ids)
            for d in ev.discarded_event_ids:
                if d not in feeding:
                    bad.append(Violation("ticks", seq, f"discards seq {d}, which is not a model-feeding event"))
                elif d in discarded:
                    bad.append(Violation("ticks", seq, f"discards seq {d} a second time"))
                else:
                    owner = applied_by.get(d)
                    if owner is not None and (owner in committed or owner not in ev.cancelled_request_ids):
                        bad.append(Violation("ticks", seq, f"discards seq {d}, applied by live or committed tick {owner}"))
                    discarded[d] = seq
        elif isinstance(ev, ResponseCreated):
            created[ev.response_id] = seq
        elif isinstance(ev, ResponseDone):
            if ev.response_id not in created:
                bad.append(Violation("responses", seq, f"response.done for unknown response {ev.response_id}"))
            if ev.response_id in done:
                bad.append(Violation("responses", seq, f"second response.done for {ev.response_id}"))
            done[ev.response_id] = seq
        elif isinstance(ev, TranscriptionRequested):
            if ev.request_id in transcriptions or ev.request_id in ticks:
                bad.append(Violation("transcriptions", seq, f"request_id {ev.request_id} issued twice"))
            transcriptions[ev.request_id] = (seq, ev.item_id)
            if ev.item_id not in state.items or state.items[ev.item_id].role != "user":
                bad.append(Violation("transcriptions", seq, f"transcription of {ev.item_id}, which is not a user item of this session"))
        elif isinstance(ev, (TranscriptionCompleted, TranscriptionFailed)):
            asked = transcriptions.get(ev.request_id)
            if asked is None:
                bad.append(Violation("transcriptions", seq, f"transcript for unknown request {ev.request_id}"))
            elif ev.item_id != asked[1] or ev.session_id != session_id:
                bad.append(Violation("transcriptions", seq, f"transcript of {ev.item_id} does not echo request {ev.request_id} (item {asked[1]})"))
            if ev.request_id in transcribed:
                bad.append(Violation("transcriptions", seq, f"request {ev.request_id} answered twice (first at seq {transcribed[ev.request_id]})"))
            transcribed[ev.request_id] = seq
        elif isinstance(ev, SessionClosed):
            closed = True
        state = evolve(state, seq, ev)

    for rid, (seq, t) in ticks.items():
        if t.applied_event_ids and rid not in committed and rid not in cancelled and closed:
            bad.append(Violation("ticks", seq, f"tick {rid} neither committed nor cancelled in a closed session"))
    applied_ok = {s for s, rid in applied_by.items() if rid in committed}
    pending = [s for s in feeding if s not in applied_ok and s not in discarded]
    if closed:
        for s in pending:
            bad.append(Violation("ticks", s, f"{feeding[s]} at seq {s} was never applied nor discarded"))
    for rid, seq in created.items():
        if rid not in done and closed:
            bad.append(Violation("responses", seq, f"response {rid} never got response.done"))
    for rid, (seq, item_id) in transcriptions.items():
        if closed and rid not in transcribed and rid not in cancelled:
            bad.append(Violation("transcriptions", seq, f"transcription {rid} of {item_id} neither answered nor cancelled in a closed session"))

    return SessionAudit(
        session_id=session_id,
        kind="speech",
        events=len(rows),
        ticks=len(ticks),
        committed_ticks=len(committed),
        applied_events=len(applied_ok),
        discarded_events=len(discarded),
        pending_events=len(pending),
        responses=len(created),
        violations=tuple(bad),
    )


def _audit_world(session_id: str, n_events: int, events: list[tuple[int, Event]], bad: list[Violation]) -> SessionAudit:
    """World sessions (docs/world.md): every accepted interaction is applied by exactly one committed
    tick of its epoch, in id order, or discarded by name; chunk indexes run from 0 per epoch;
    every block echoes its tick; no tick has two blocks."""
    accepted: dict[int, tuple[int, int]] = {}  # interaction id -> (seq, epoch accepted in)
    applied: dict[int, str] = {}  # interaction id -> request id of the committed tick
    discarded: dict[int, int] = {}  # interaction id -> seq of the reset/close naming it
    ticks: dict[str, tuple[int, WorldTickIssued]] = {}
    outputs: dict[str, int] = {}
    committed: set[str] = set()
    last_applied: dict[int, int] = {}  # epoch -> highest id applied so far
    next_chunk: dict[int, int] = {}  # epoch -> chunk index the next committed block must have
    epoch = 0
    closed = False
    state: WorldState = WorldState()
    for seq, ev in events:
        if isinstance(ev, InteractionAccepted):
            if ev.event_id in accepted:
                bad.append(Violation("interactions", seq, f"interaction {ev.event_id} accepted twice"))
            accepted[ev.event_id] = (seq, epoch)
        elif isinstance(ev, WorldTickIssued):
            ticks[ev.request_id] = (seq, ev)
            ids = list(ev.applied_event_ids)
            if ids != sorted(set(ids)):
                bad.append(Violation("ticks", seq, f"applied_event_ids {ids} are not strictly increasing"))
            for i in ids:
                if i not in accepted or i in applied or i in discarded:
                    bad.append(Violation("ticks", seq, f"applies interaction {i}, which is not accepted and pending"))
        elif isinstance(ev, (WorldChunk, WorldTickFailed)):
            if ev.request_id in outputs:
                bad.append(Violation("outputs", seq, f"tick {ev.request_id} has a second output (first at seq {outputs[ev.request_id]})"))
            outputs[ev.request_id] = seq
            issued = ticks.get(ev.request_id)
            if issued is None:
                bad.append(Violation("outputs", seq, f"output for unknown tick {ev.request_id}"))
            elif isinstance(ev, WorldChunk) and world_verdict(state, ev) == "accepted":
                t = issued[1]
                committed.add(ev.request_id)
                if t.chunk_index != next_chunk.get(t.epoch, 0):
                    bad.append(Violation("ticks", seq, f"committed chunk {t.chunk_index} of epoch {t.epoch}, expected {next_chunk.get(t.epoch, 0)}"))
                next_chunk[t.epoch] = t.chunk_index + 1
                if t.applied_event_ids and min(t.applied_event_ids) <= last_applied.get(t.epoch, -1):
                    bad.append(Violation("ticks", seq, f"tick {t.request_id} applies ids out of order"))
                for i in t.applied_event_ids:
                    if accepted.get(i, (0, t.epoch))[1] != t.epoch:
                        bad.append(Violation("ticks", seq, f"interaction {i} applied in another epoch than it was accepted in"))
                    applied[i] = t.request_id
                if t.applied_event_ids:
                    last_applied[t.epoch] = max(t.applied_event_ids)
            elif isinstance(ev, WorldChunk) and world_verdict(state, ev) == "rejected":
                bad.append(Violation("outputs", seq, f"block does not echo tick {ev.request_id}"))
        elif isinstance(ev, (WorldReset, WorldClosed)):
            for i in ev.discarded_event_ids:
                if i not in accepted or i in applied or i in discarded:
                    bad.append(Violation("interactions", seq, f"discards interaction {i}, which is not accepted and pending"))
                discarded[i] = seq
            if isinstance(ev, WorldReset):
                epoch = ev.epoch
            else:
                closed = True
        state = evolve(state, seq, ev)  # type: ignore[assignment]
    pending = [i for i in accepted if i not in applied and i not in discarded]
    if closed:
        for i in pending:
            bad.append(Violation("interactions", accepted[i][0], f"interaction {i} was never applied nor discarded"))
    return SessionAudit(
        session_id=session_id,
        kind="world",
        events=n_events,
        ticks=len(ticks),
        committed_ticks=len(committed),
        applied_events=len(applied),
        discarded_events=len(discarded),
        pending_events=len(pending),
        responses=0,
        violations=tuple(bad),
    )


def audit_all(log: EventLog) -> list[SessionAudit]:
    """Audit every session in the log."""
    return [audit_session(log, sid) for sid in log.session_ids()]
