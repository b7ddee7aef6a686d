"""The world kind's audit (docs/world.md): interactions applied exactly once, in order, by
committed ticks of their epoch, or discarded by name (the ``audit`` command runs it)."""

from __future__ import annotations

from typing import Sequence

from duplex_es.domain.kind import Evolve, TickAudit, Violation
from duplex_es.domain.world import WorldState, world_verdict
from duplex_es.events import (
    Event,
    InteractionAccepted,
    WorldChunk,
    WorldClosed,
    WorldReset,
    WorldTickFailed,
    WorldTickIssued,
)

__all__ = ["audit_world"]


def audit_world(session_id: str, events: Sequence[tuple[int, Event]], evolve: Evolve) -> TickAudit:
    """World sessions (docs/world.md): every accepted interaction is applied by exactly one committed
    tick of its epoch, in id order, or discarded by name; chunk indexes run from 0 per epoch;
    every block echoes its tick; no tick has two blocks. ``evolve`` folds the state the
    verdicts are judged on."""
    bad: list[Violation] = []
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
        state = evolve(state, seq, ev)
    pending = [i for i in accepted if i not in applied and i not in discarded]
    if closed:
        for i in pending:
            bad.append(Violation("interactions", accepted[i][0], f"interaction {i} was never applied nor discarded"))
    return TickAudit(
        violations=tuple(bad),
        ticks=len(ticks),
        committed_ticks=len(committed),
        applied_events=len(applied),
        discarded_events=len(discarded),
        pending_events=len(pending),
    )
