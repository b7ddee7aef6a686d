"""The world kind's tick contract: a world engine gets :class:`WorldContext` and its block is
logged as ``world.chunk`` (docs/world.md)."""

from __future__ import annotations

import base64

from duplex_es.events import WorldChunk, WorldTickIssued
from duplex_es.worker.engine import AudioCutter, TickContract
from duplex_es.worker.world.engine import WorldContext, WorldOutput

__all__ = ["WORLD_TICKS", "world_output_events"]


def world_context(session_id: str, tick: WorldTickIssued, cut: AudioCutter) -> WorldContext:
    """A world tick's context (it reads nothing from the log: the tick holds it all)."""
    return WorldContext(session_id=session_id, tick=tick)


def world_output_events(session_id: str, engine_name: str, out: WorldOutput) -> list[WorldChunk]:
    """The ``world.chunk`` of a block: frames as base64 PNG, identity from the engine's echo."""
    e = out.echo
    return [
        WorldChunk(
            session_id=e.session_id,
            request_id=e.request_id,
            epoch=e.epoch,
            chunk_index=e.chunk_index,
            applied_event_ids=e.applied_event_ids,
            frames=tuple(base64.b64encode(f).decode("ascii") for f in out.frames),
            frame_hashes=out.frame_hashes,
            engine_state=out.engine_state,
            engine=engine_name,
        )
    ]


WORLD_TICKS = TickContract(kind="world", context=world_context, answer=world_output_events)
