"""World-session events: interactive AR-diffusion ticks (docs/world.md).

A world session streams one chunk of video frames per tick. Clients send interaction events with
their own strictly increasing integer ids; an interaction is *accepted* when it is logged and
*applied* when the tick that contains it commits. Each tick snapshot carries everything the
engine reads — folded prompt and controls, the ordered control events, the engine state left by
the previous chunk, the seed and the engine contract — so its frames are a pure function of it.
"""

from typing import Any, Optional

import attrs

from duplex_es.events.base import Event, Refusal, event
from duplex_es.events.ticks import TickAnswer, TickCanceller, TickRequest

__all__ = [
    "CAMERA_SCHEMA",
    "WorldConfig",
    "Control",
    "ControlEvent",
    "WorldStarted",
    "InteractionAccepted",
    "InteractionRejected",
    "WorldTickIssued",
    "WorldChunk",
    "WorldTickFailed",
    "WorldFailed",
    "WorldReset",
    "WorldClosed",
]


#: The control schema of the reference engine's camera track: ``{"keys": ["W", "A", ...]}``.
CAMERA_SCHEMA = "duplex_es.camera_keys.v1"


@attrs.frozen(kw_only=True)
class WorldConfig:
    """What ``session.start`` asked for: the engine contract and the session's bounds.

    ``width`` × ``height`` pixels, ``fps`` frames per second, ``frames_per_chunk`` frames per
    tick, ``max_chunks`` ticks per epoch (``None``: unbounded), ``pacing`` ``"realtime"`` (one chunk
    per chunk period of wall time) or ``"fast"`` (as fast as the engine goes), ``max_pending``
    interactions waiting (pending plus in flight), ``binary`` frames sent as binary WebSocket
    frames instead of base64 PNG inside the JSON.
    """

    model: str = "duplex_es.procedural_world/1"
    prompt: str = ""
    seed: int = 0
    width: int = 256
    height: int = 256
    fps: int = 16
    frames_per_chunk: int = 12
    max_chunks: Optional[int] = None
    pacing: str = "fast"
    max_pending: int = 64
    binary: bool = False


@attrs.frozen(kw_only=True)
class Control:
    """One control track's value: ``schema`` names its meaning (e.g.
    ``duplex_es.camera_keys.v1``); ``data`` is JSON-like and opaque to duplex_es."""

    track: str
    schema: str
    data: dict[str, Any] = attrs.Factory(dict)


@attrs.frozen(kw_only=True)
class ControlEvent:
    """A control as one interaction set it, for engines that need the order (key pulses)."""

    event_id: int
    control: Control


@event("world.session.started")
class WorldStarted(Event):
    """A world session came into existence at ``at_ms`` (Unix ms; realtime pacing counts from
    it) (wire: ``session.started``). ``resume_token_hash`` and ``principal``: as for
    ``session.opened``."""

    client_event_id: Optional[str] = None
    session_id: str
    config: WorldConfig
    at_ms: int = 0
    resume_token_hash: Optional[str] = None
    principal: Optional[str] = None


@event("world.interaction.accepted")
class InteractionAccepted(Event):
    """An interaction passed admission: not a duplicate, above the floor, the queue had room.
    It is *applied* only when a committed tick names it."""

    event_id: int
    prompt: Optional[str] = None
    controls: tuple[Control, ...] = ()
    pending: int = 0


@event("world.interaction.rejected")
class InteractionRejected(Refusal):
    """An interaction refused at admission (``duplicate_event``, ``stale_event``, ``queue_full``,
    ``invalid_interaction``, ``session_failed``, ...); changes nothing (docs/architecture.md, I3)."""

    event_id: Optional[int] = None
    code: str
    message: str
    param: Optional[str] = None


@event("world.tick.issued")
class WorldTickIssued(TickRequest):
    """The frozen input of one AR block (vLLM-Omni's ``ARDiffusionTickRequest``).

    ``applied_event_ids`` are the pending interactions this block applies, sorted; ``prompt`` and
    ``controls`` the fold of everything committed so far plus them (last prompt wins, each track
    last-writer-wins, tracks sorted); ``control_events`` the same controls in id order;
    ``engine_state`` what the previous chunk of this epoch left (``None`` at chunk 0);
    ``reset`` marks chunk 0 of an epoch after a reset; ``issued_at_ms`` is the pacing time used.
    """

    request_id: str
    epoch: int
    chunk_index: int
    applied_event_ids: tuple[int, ...] = ()
    prompt: str = ""
    controls: tuple[Control, ...] = ()
    control_events: tuple[ControlEvent, ...] = ()
    engine_state: Optional[dict[str, Any]] = None
    seed: int = 0
    config: WorldConfig = WorldConfig()
    reset: bool = False
    close_session: bool = False
    kind: str = "world"
    issued_at_ms: Optional[int] = None

    def failed(self, session_id: str, code: str, message: str) -> "WorldTickFailed":
        """The answer a worker logs when its engine failed on this tick (echoing it)."""
        return WorldTickFailed(
            session_id=session_id,
            request_id=self.request_id,
            epoch=self.epoch,
            chunk_index=self.chunk_index,
            applied_event_ids=self.applied_event_ids,
            code=code,
            message=message,
        )


@event("world.chunk")
class WorldChunk(TickAnswer):
    """One block of frames from a worker, echoing its tick's identity.

    ``frames`` are base64 PNG images, ``frame_hashes`` the SHA-256 (hex) of each frame's raw RGB
    pixels (what ``replay --render`` compares), ``engine_state`` what the next chunk starts from.
    """

    session_id: str
    request_id: str
    epoch: int
    chunk_index: int
    applied_event_ids: tuple[int, ...] = ()
    mime_type: str = "image/png"
    frames: tuple[str, ...] = ()
    frame_hashes: tuple[str, ...] = ()
    engine_state: Optional[dict[str, Any]] = None
    engine: str = ""


@event("world.tick.failed")
class WorldTickFailed(TickAnswer):
    """The engine failed on a tick; the session fails closed."""

    FAILURE = True

    session_id: str
    request_id: str
    epoch: int
    chunk_index: int
    applied_event_ids: tuple[int, ...] = ()
    code: str
    message: str


@event("world.session.failed")
class WorldFailed(Event):
    """The session failed closed: pending interactions are kept but never applied until a reset
    discards them (vLLM-Omni's fail-closed rule)."""

    code: str
    message: str
    request_id: Optional[str] = None


@event("world.session.reset")
class WorldReset(TickCanceller):
    """``session.reset``: the epoch rises, ``chunk_index`` restarts at 0, the tick in flight (if
    any) is cancelled and every pending interaction is discarded by name; ids must keep rising
    above ``floor``."""

    client_event_id: Optional[str] = None
    epoch: int
    floor: int
    cancelled_request_ids: tuple[str, ...] = ()
    discarded_event_ids: tuple[int, ...] = ()
    at_ms: int = 0


@event("world.session.closed")
class WorldClosed(TickCanceller):
    """The world session ended; pending interactions are discarded by name."""

    client_event_id: Optional[str] = None
    reason: str = "client_close"
    cancelled_request_ids: tuple[str, ...] = ()
    discarded_event_ids: tuple[int, ...] = ()
