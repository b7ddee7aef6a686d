"""World sessions: interactive AR-diffusion ticks (docs/world.md, "The tick protocol"; vLLM-Omni's tick
protocol: docs/sources.md, "vLLM-Omni's AR-diffusion tick protocol").

An interaction is *accepted* when it is not a duplicate, not at or below the floor (the highest id
of the last committed tick, or of the tick in flight) and the queue (pending plus in flight) has
room; it is *applied* when the tick that contains it commits. One tick is in flight at a time;
interactions accepted meanwhile wait for the next. A tick folds the pending interactions in id
order onto what was committed: the last prompt wins, each control track is last-writer-wins,
untouched tracks are inherited. An output is committed only if it echoes its tick exactly;
otherwise — or when the engine fails — the session fails closed: pending interactions are kept but
never applied, and only ``session.reset`` (epoch + 1, chunk 0, pending discarded by name, ids
still rising) or close continue it.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Optional, Union

import attrs

from duplex_es.domain.commands import Detach, Expire, Pump, Resume
from duplex_es.domain.errors import Code
from duplex_es.domain.lease import grace_still_running_out, resume_events, with_token
from duplex_es.domain.replace import replace
from duplex_es.domain.rules import MAX_MESSAGE_CHARS, MAX_PARAM_CHARS, clip
from duplex_es.domain.state import Lease
from duplex_es.domain.ticks import Verdict, judge_echo
from duplex_es.events import (
    Control,
    ControlEvent,
    Event,
    InteractionAccepted,
    InteractionRejected,
    SessionDetached,
    TickIdentity,
    WorldChunk,
    WorldClosed,
    WorldConfig,
    WorldFailed,
    WorldReset,
    WorldStarted,
    WorldTickFailed,
    WorldTickIssued,
)

__all__ = [
    "WorldState",
    "Pending",
    "WorldTick",
    "StartWorld",
    "Interact",
    "RefuseInteraction",
    "ResetWorld",
    "CloseWorld",
    "IdRanges",
    "WorldStatus",
    "WORLD_TRANSITIONS",
    "start_world",
    "world_verdict",
    "world_judge",
    "next_tick_due_ms",
]


# ------------------------------------------------------------------------------------ values


@attrs.frozen
class IdRanges:
    """A set of integer ids kept as sorted, disjoint, inclusive ranges: compact when ids arrive
    (mostly) in order, as interaction ids do."""

    ranges: tuple[tuple[int, int], ...] = ()

    def __contains__(self, i: int) -> bool:
        return any(lo <= i <= hi for lo, hi in self.ranges)

    def add(self, i: int) -> "IdRanges":
        """The set with ``i`` added."""
        out: list[tuple[int, int]] = []
        placed = False
        for lo, hi in self.ranges:
            if placed or hi < i - 1:
                out.append((lo, hi))
            elif lo > i + 1:
                out.append((i, i))
                out.append((lo, hi))
                placed = True
            else:
                out.append((min(lo, i), max(hi, i)))
                placed = True
        if not placed:
            out.append((i, i))
        merged: list[tuple[int, int]] = []
        for lo, hi in out:
            if merged and lo <= merged[-1][1] + 1:
                merged[-1] = (merged[-1][0], max(hi, merged[-1][1]))
            else:
                merged.append((lo, hi))
        return IdRanges(tuple(merged))

    @property
    def highest(self) -> int:
        """The largest id in the set (-1 if empty)."""
        return self.ranges[-1][1] if self.ranges else -1


@attrs.frozen(kw_only=True)
class Pending:
    """An accepted interaction waiting for a tick."""

    event_id: int
    prompt: Optional[str] = None
    controls: tuple[Control, ...] = ()


@attrs.frozen(kw_only=True)
class WorldTick:
    """The tick in flight: what its output must echo, and the fold it will commit."""

    request_id: str
    epoch: int
    chunk_index: int
    applied_event_ids: tuple[int, ...]
    prompt: str
    controls: tuple[Control, ...]

    def identity(self, session_id: str) -> TickIdentity:
        """What this tick's output must echo."""
        return TickIdentity(
            session_id=session_id,
            request_id=self.request_id,
            epoch=self.epoch,
            chunk_index=self.chunk_index,
            applied_event_ids=self.applied_event_ids,
        )


class WorldStatus(StrEnum):
    """A world session's status (moves: :data:`WORLD_TRANSITIONS`)."""

    NEW = "new"
    ACTIVE = "active"
    FAILED = "failed"
    CLOSED = "closed"


#: The status moves an event may make (checked by ``evolve``): a failed session comes back
#: only through ``session.reset``; a closed one never.
WORLD_TRANSITIONS: dict[str, frozenset[str]] = {
    WorldStatus.NEW: frozenset({WorldStatus.ACTIVE}),
    WorldStatus.ACTIVE: frozenset({WorldStatus.FAILED, WorldStatus.CLOSED}),
    WorldStatus.FAILED: frozenset({WorldStatus.ACTIVE, WorldStatus.CLOSED}),
}


@attrs.frozen(kw_only=True)
class WorldState:
    """The derived state of a world session after its event ``seq``.

    ``floor`` is the highest applied id (raised above every discarded id by a reset);
    ``prompt`` / ``controls`` / ``engine_state`` are what the last committed chunk left;
    ``failed_output`` marks an output that broke the tick protocol, waiting for the host to log
    the failure. ``lease`` is as for speech sessions; while it is detached no tick is issued (the
    world pauses), and ``paused_base_ms`` is the lease's ``detached_total_ms`` when the epoch
    began, so realtime pacing skips the time nobody watched.
    """

    session_id: str = ""
    seq: int = 0
    status: WorldStatus = WorldStatus.NEW
    config: Optional[WorldConfig] = None
    epoch: int = 0
    chunk_index: int = 0
    epoch_started_at_ms: int = 0
    pending: tuple[Pending, ...] = ()
    seen: IdRanges = IdRanges()
    floor: int = 0
    inflight: Optional[WorldTick] = None
    prompt: str = ""
    controls: tuple[Control, ...] = ()
    engine_state: Optional[dict] = None
    failure_code: Optional[str] = None
    failure_message: Optional[str] = None
    failed_request_id: Optional[str] = None
    chunks_committed: int = 0
    lease: Lease = Lease()
    paused_base_ms: int = 0

    @property
    def is_open(self) -> bool:
        """True until the session is closed (a failed session still takes reset and close)."""
        return self.status == WorldStatus.ACTIVE or self.status == WorldStatus.FAILED

    @property
    def ended(self) -> bool:
        """True once the session was closed (it never opens again)."""
        return self.status == WorldStatus.CLOSED

    @property
    def stale_floor(self) -> int:
        """Ids at or below this are stale: the applied floor, or the tick in flight's highest id."""
        inflight = max(self.inflight.applied_event_ids, default=0) if self.inflight else 0
        return max(self.floor, inflight)


# ----------------------------------------------------------------------------------- commands


@attrs.frozen(kw_only=True)
class StartWorld:
    """``session.start`` on ``/v1/world``, at ``at_ms`` (the host's clock)."""

    event_id: Optional[str] = None
    session_id: str
    config: WorldConfig
    at_ms: int
    resume_token_hash: Optional[str] = None
    principal: Optional[str] = None


@attrs.frozen(kw_only=True)
class Interact:
    """``session.interaction``: an optional prompt and controls, under the client's id."""

    event_id: int
    prompt: Optional[str] = None
    controls: tuple[Control, ...] = ()


@attrs.frozen(kw_only=True)
class RefuseInteraction:
    """An interaction the protocol layer found malformed (``invalid_interaction``)."""

    event_id: Optional[int] = None
    code: str
    message: str
    param: Optional[str] = None


@attrs.frozen(kw_only=True)
class ResetWorld:
    """``session.reset`` at ``at_ms``."""

    event_id: Optional[str] = None
    at_ms: int


@attrs.frozen(kw_only=True)
class CloseWorld:
    """``session.close``."""

    event_id: Optional[str] = None
    reason: str = "client_close"


# ------------------------------------------------------------------------------------ verdicts


def world_judge(state: WorldState, ev: Union[WorldChunk, WorldTickFailed]) -> Verdict:
    """Judge a world output: accepted; discarded ``cancelled_tick`` (not the tick in flight: a
    reset or close cancelled it); rejected ``identity_mismatch`` (it answers the tick in flight
    but does not echo it exactly)."""
    t = state.inflight
    return judge_echo(t.identity(state.session_id) if t is not None else None, ev, epoch=state.epoch, gone="cancelled_tick")


def world_verdict(state: WorldState, ev: Union[WorldChunk, WorldTickFailed]) -> str:
    """``accepted``, ``discarded`` or ``rejected``: :func:`world_judge`'s kind."""
    return world_judge(state, ev).kind


def next_tick_due_ms(state: WorldState) -> Optional[int]:
    """When the next tick may be issued (Unix ms): at once under ``fast`` pacing; under
    ``realtime`` one chunk ahead of playback, counted from the epoch's start. ``None`` when no
    tick is due at all (one in flight, failed, closed, detached, or ``max_chunks`` reached)."""
    cfg = state.config
    if cfg is None or state.status != WorldStatus.ACTIVE or state.inflight is not None or state.lease.detached_at_ms is not None:
        return None
    if cfg.max_chunks is not None and state.chunk_index >= cfg.max_chunks:
        return None
    if cfg.pacing != "realtime":
        return state.epoch_started_at_ms
    period = cfg.frames_per_chunk * 1000 // cfg.fps
    paused = state.lease.detached_total_ms - state.paused_base_ms
    return state.epoch_started_at_ms + paused + max(0, state.chunk_index - 1) * period


def _fold(base_prompt: str, base: tuple[Control, ...], pending: tuple[Pending, ...]) -> tuple[str, tuple[Control, ...]]:
    prompt = base_prompt
    tracks = {c.track: c for c in base}
    for p in sorted(pending, key=lambda p: p.event_id):
        if p.prompt is not None:
            prompt = p.prompt
        for c in p.controls:
            tracks[c.track] = c
    return prompt, tuple(tracks[k] for k in sorted(tracks))


# ------------------------------------------------------------------------------------ deciders


def start_world(cmd: StartWorld) -> list[Event]:
    """``session.start``: the world session's first event."""
    return [
        WorldStarted(
            client_event_id=cmd.event_id,
            session_id=cmd.session_id,
            config=cmd.config,
            at_ms=cmd.at_ms,
            resume_token_hash=cmd.resume_token_hash,
            principal=cmd.principal,
        )
    ]


def decide_interact(cmd: Interact, state: WorldState) -> list[Event]:
    def refuse(code: str, message: str, param: Optional[str] = None) -> list[Event]:
        return [_interaction_rejected(cmd.event_id, code, message, param)]

    if state.status == WorldStatus.FAILED:
        return refuse(Code.SESSION_FAILED, f"the session failed ({state.failure_code}); send session.reset to continue")
    if cmd.event_id < 0:
        return refuse(Code.INVALID_INTERACTION, "event_id must be >= 0", "event_id")
    if cmd.event_id in state.seen:
        return refuse(Code.DUPLICATE_EVENT, f"interaction {cmd.event_id} was already accepted", "event_id")
    if cmd.event_id <= state.stale_floor:
        return refuse(Code.STALE_EVENT, f"interaction {cmd.event_id} is at or below the floor {state.stale_floor}", "event_id")
    if cmd.prompt is None and not cmd.controls:
        return refuse(Code.INVALID_INTERACTION, "an interaction needs a prompt or controls")
    assert state.config is not None
    if len(state.pending) >= state.config.max_pending:
        return refuse(Code.QUEUE_FULL, f"{len(state.pending)} interactions are waiting (pending and in flight); the limit is {state.config.max_pending}")
    return [InteractionAccepted(event_id=cmd.event_id, prompt=cmd.prompt, controls=cmd.controls, pending=len(state.pending) + 1)]


def decide_refuse_interaction(cmd: RefuseInteraction, state: WorldState) -> list[Event]:
    return [_interaction_rejected(cmd.event_id, cmd.code, cmd.message, cmd.param)]


def _interaction_rejected(event_id: Optional[int], code: str, message: str, param: Optional[str]) -> InteractionRejected:
    """An interaction's refusal, its message and ``param`` cut to bounded excerpts (they may
    quote what the client sent; see :func:`~duplex_es.domain.rules.clip`)."""
    return InteractionRejected(
        event_id=event_id, code=code, message=clip(message, MAX_MESSAGE_CHARS), param=None if param is None else clip(param, MAX_PARAM_CHARS)
    )


def decide_reset_world(cmd: ResetWorld, state: WorldState) -> list[Event]:
    discarded = tuple(p.event_id for p in state.pending)
    return [
        WorldReset(
            client_event_id=cmd.event_id,
            epoch=state.epoch + 1,
            floor=max(state.floor, state.seen.highest, 0),
            cancelled_request_ids=(state.inflight.request_id,) if state.inflight else (),
            discarded_event_ids=discarded,
            at_ms=cmd.at_ms,
        )
    ]


def decide_close_world(cmd: CloseWorld, state: WorldState) -> list[Event]:
    return _close(state, cmd.reason, cmd.event_id)


def _close(state: WorldState, reason: str, event_id: Optional[str]) -> list[Event]:
    return [
        WorldClosed(
            client_event_id=event_id,
            reason=reason,
            cancelled_request_ids=(state.inflight.request_id,) if state.inflight else (),
            discarded_event_ids=tuple(p.event_id for p in state.pending),
        )
    ]


def decide_expire(cmd: Expire, state: WorldState) -> list[Event]:
    if not grace_still_running_out(cmd, state.lease):
        return []
    return _close(state, cmd.reason, None)


def decide_detach(cmd: Detach, state: WorldState) -> list[Event]:
    # The world pauses (no new ticks) and waits for a resume or its disconnect grace; a tick in
    # flight still commits, and a resuming client is re-sent its chunk.
    if state.lease.detached_at_ms is not None:
        return []
    return [SessionDetached(at_ms=cmd.at_ms, reason=cmd.reason)]


def decide_resume(cmd: Resume, state: WorldState) -> list[Event]:
    return resume_events(cmd, state)


def pump_world(cmd: Pump, state: WorldState) -> list[Event]:
    """The host's nudge: log a failure an output caused, or issue the next tick when it is due."""
    if state.failed_request_id is not None and state.status == WorldStatus.ACTIVE:
        return [WorldFailed(code=state.failure_code or Code.ENGINE_FAILED, message=state.failure_message or "", request_id=state.failed_request_id)]
    due = next_tick_due_ms(state)
    if due is None or not cmd.request_ids or (cmd.now_ms is not None and cmd.now_ms < due):
        return []
    cfg = state.config
    assert cfg is not None
    prompt, controls = _fold(state.prompt, state.controls, state.pending)
    ordered = sorted(state.pending, key=lambda p: p.event_id)
    return [
        WorldTickIssued(
            request_id=cmd.request_ids[0],
            epoch=state.epoch,
            chunk_index=state.chunk_index,
            applied_event_ids=tuple(p.event_id for p in ordered),
            prompt=prompt,
            controls=controls,
            control_events=tuple(ControlEvent(event_id=p.event_id, control=c) for p in ordered for c in p.controls),
            engine_state=state.engine_state,
            seed=cfg.seed,
            config=cfg,
            reset=state.chunk_index == 0 and state.epoch > 0,
            issued_at_ms=cmd.now_ms,
        )
    ]


def decide_pump(cmd: Pump, state: WorldState) -> list[Event]:
    return pump_world(cmd, state)


# ------------------------------------------------------------------------------------ evolvers


def evolve_world_started(ev: WorldStarted, state: WorldState, seq: int) -> WorldState:
    started = replace(
        state, session_id=ev.session_id, status=WorldStatus.ACTIVE, config=ev.config, prompt=ev.config.prompt, epoch_started_at_ms=ev.at_ms
    )
    return with_token(started, ev.resume_token_hash, ev.principal)


def evolve_interaction_accepted(ev: InteractionAccepted, state: WorldState, seq: int) -> WorldState:
    pending = tuple(sorted(state.pending + (Pending(event_id=ev.event_id, prompt=ev.prompt, controls=ev.controls),), key=lambda p: p.event_id))
    return replace(state, pending=pending, seen=state.seen.add(ev.event_id))


def evolve_world_tick_issued(ev: WorldTickIssued, state: WorldState, seq: int) -> WorldState:
    tick = WorldTick(
        request_id=ev.request_id,
        epoch=ev.epoch,
        chunk_index=ev.chunk_index,
        applied_event_ids=ev.applied_event_ids,
        prompt=ev.prompt,
        controls=ev.controls,
    )
    return replace(state, inflight=tick)


def evolve_world_chunk(ev: WorldChunk, state: WorldState, seq: int) -> WorldState:
    verdict = world_verdict(state, ev)
    if verdict == "discarded":
        return state
    if verdict == "rejected":
        return replace(
            state,
            failure_code=Code.TICK_IDENTITY_MISMATCH,
            failure_message="the engine's output does not echo its tick",
            failed_request_id=ev.request_id,
        )
    t = state.inflight
    assert t is not None
    applied = set(t.applied_event_ids)
    return replace(
        state,
        inflight=None,
        pending=tuple(p for p in state.pending if p.event_id not in applied),
        floor=max([state.floor, *t.applied_event_ids]),
        prompt=t.prompt,
        controls=t.controls,
        engine_state=ev.engine_state,
        chunk_index=state.chunk_index + 1,
        chunks_committed=state.chunks_committed + 1,
    )


def evolve_world_tick_failed(ev: WorldTickFailed, state: WorldState, seq: int) -> WorldState:
    verdict = world_verdict(state, ev)
    if verdict == "discarded":
        return state
    code = ev.code if verdict == "accepted" else Code.TICK_IDENTITY_MISMATCH
    return replace(state, failure_code=code, failure_message=ev.message, failed_request_id=ev.request_id)


def evolve_world_failed(ev: WorldFailed, state: WorldState, seq: int) -> WorldState:
    # Fail closed: nothing in flight, pending kept but never applied until a reset.
    return replace(state, status=WorldStatus.FAILED, inflight=None, failure_code=ev.code, failure_message=ev.message, failed_request_id=None)


def evolve_world_reset(ev: WorldReset, state: WorldState, seq: int) -> WorldState:
    cfg = state.config
    assert cfg is not None
    return replace(
        state,
        status=WorldStatus.ACTIVE,
        epoch=ev.epoch,
        chunk_index=0,
        epoch_started_at_ms=ev.at_ms,
        paused_base_ms=state.lease.detached_total_ms,
        pending=(),
        floor=ev.floor,
        inflight=None,
        prompt=cfg.prompt,
        controls=(),
        engine_state=None,
        failure_code=None,
        failure_message=None,
        failed_request_id=None,
    )


def evolve_world_closed(ev: WorldClosed, state: WorldState, seq: int) -> WorldState:
    return replace(state, status=WorldStatus.CLOSED, inflight=None, pending=())

