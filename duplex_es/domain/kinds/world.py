"""The world kind's tables: interactive AR-diffusion sessions (docs/world.md). The rules live in
:mod:`duplex_es.domain.world`; this module only lists them.
"""

from __future__ import annotations

from duplex_es.domain import commands as c
from duplex_es.domain import world_audit
from duplex_es.domain import lease, world
from duplex_es.domain.kind import Decider, Evolver, SessionKind
from duplex_es.domain.rules import keep
from duplex_es.events import (
    SessionErased,
    CommandDeduplicated,
    CommandRejected,
    InteractionAccepted,
    InteractionRejected,
    SessionDetached,
    SessionResumed,
    WorldChunk,
    WorldClosed,
    WorldFailed,
    WorldReset,
    WorldStarted,
    WorldTickFailed,
    WorldTickIssued,
)

__all__ = ["WORLD", "DECIDERS", "EVOLVERS", "COMMAND_TYPES"]

#: Wire name of each world command, recorded in ``command.rejected.command_type``.
COMMAND_TYPES: dict[type, str] = {
    world.StartWorld: "session.start",
    world.Interact: "session.interaction",
    world.RefuseInteraction: "session.interaction",
    world.ResetWorld: "session.reset",
    world.CloseWorld: "session.close",
    c.Resume: "session.resume",
    c.Detach: "session.detach",
    c.Expire: "session.expire",
    c.Pump: "session.pump",
}

DECIDERS: dict[type, Decider] = {
    world.Interact: world.decide_interact,
    world.RefuseInteraction: world.decide_refuse_interaction,
    world.ResetWorld: world.decide_reset_world,
    world.CloseWorld: world.decide_close_world,
    c.Expire: world.decide_expire,
    c.Detach: world.decide_detach,
    c.Resume: world.decide_resume,
    c.Pump: world.decide_pump,
}

EVOLVERS: dict[type, Evolver] = {
    WorldStarted: world.evolve_world_started,
    InteractionAccepted: world.evolve_interaction_accepted,
    InteractionRejected: keep,
    WorldTickIssued: world.evolve_world_tick_issued,
    WorldChunk: world.evolve_world_chunk,
    WorldTickFailed: world.evolve_world_tick_failed,
    WorldFailed: world.evolve_world_failed,
    WorldReset: world.evolve_world_reset,
    WorldClosed: world.evolve_world_closed,
    SessionDetached: lease.evolve_session_detached,
    SessionResumed: lease.evolve_session_resumed,
    CommandRejected: keep,
    CommandDeduplicated: keep,
    SessionErased: keep,  # after the session ended (docs/privacy.md)
}

WORLD = SessionKind(
    name="world",
    state_type=world.WorldState,
    start_command=world.StartWorld,
    start_event=WorldStarted,
    start=world.start_world,
    deciders=DECIDERS,
    evolvers=EVOLVERS,
    command_types=COMMAND_TYPES,
    transitions=world.WORLD_TRANSITIONS,
    ended_by=(WorldClosed,),
    audit=world_audit.audit_world,
    judge=world.world_judge,
    wakeup_ms=world.next_tick_due_ms,
)
