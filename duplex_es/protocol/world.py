"""World sessions on the wire: ``/v1/world`` client messages → commands, committed world events →
server messages (docs/world.md). Registered on the same projection as speech sessions, so stamping
and byte-exact re-sends work the same way (docs/architecture.md, I13).
"""

from __future__ import annotations

import json
from typing import Any, Callable, Optional

from duplex_es.domain.commands import Invalid
from duplex_es.domain.errors import Code
from duplex_es.domain.world import CloseWorld, Interact, RefuseInteraction, ResetWorld, StartWorld, world_verdict
from duplex_es.events import (
    CAMERA_SCHEMA,
    Control,
    InteractionAccepted,
    InteractionRejected,
    WorldChunk,
    WorldClosed,
    WorldConfig,
    WorldFailed,
    WorldReset,
    WorldStarted,
)
from duplex_es.protocol.inbound import MAX_INT, CommandError, _bad_string, _printable, read_frame, resume_request
from duplex_es.protocol.outbound import Ctx, Projection

__all__ = ["parse_world_frame", "world_start_config", "WORLD_LIMITS", "CAMERA_SCHEMA", "PROJECTIONS", "SILENT_EVENT_TYPES"]

#: Bounds of client strings a world session keeps (characters) and of a control's data (bytes
#: of JSON): what is accepted is stored, and controls ride along with every later tick.
MAX_EVENT_ID_CHARS, MAX_CONTROL_NAME_CHARS, MAX_CONTROL_DATA_BYTES = 256, 128, 16_384

#: Bounds of a ``session.start`` request.
WORLD_LIMITS = {"width": (16, 1024), "height": (16, 1024), "fps": (1, 60), "frames_per_chunk": (1, 48), "max_pending": (1, 1024)}

_START_KEYS = {"type", "event_id", "prompt", "seed", "width", "height", "fps", "frames_per_chunk", "max_chunks", "pacing", "max_pending", "binary", "model"}


def _invalid(message: str, param: Optional[str] = None) -> CommandError:
    """A malformed field of a world message (the parser's one error, as for Realtime messages);
    ``parse_world_frame`` gives it its code."""
    return CommandError(Code.INVALID_EVENT, message, param)


def _int_in(msg: dict, key: str, lo: int, hi: int, default: Optional[int]) -> Optional[int]:
    v = msg.get(key, default)
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, int) or not lo <= v <= hi:
        raise _invalid(f"{key} must be an integer in [{lo}, {hi}]", key)
    return v


def world_start_config(msg: dict) -> WorldConfig:
    """The configuration a ``session.start`` asks for.

    Raises:
        CommandError: a field is unknown, of the wrong type or out of bounds (``invalid_event``,
            naming it).
    """
    for key in msg:
        if key not in _START_KEYS:
            raise _invalid(f"unknown parameter {_printable(key, 60)!r}", _printable(key, 60))
    prompt = msg.get("prompt", "")
    if not isinstance(prompt, str) or len(prompt) > 4096:
        raise _invalid("prompt must be a string of at most 4096 characters", "prompt")
    pacing = msg.get("pacing", "fast")
    if pacing not in ("fast", "realtime"):
        raise _invalid('pacing must be "fast" or "realtime"', "pacing")
    binary = msg.get("binary", False)
    if not isinstance(binary, bool):
        raise _invalid("binary must be a boolean", "binary")
    model = msg.get("model", WorldConfig().model)
    if not isinstance(model, str) or not model:
        raise _invalid("model must be a string", "model")
    fields: dict[str, Any] = {name: _int_in(msg, name, lo, hi, getattr(WorldConfig(), name)) for name, (lo, hi) in WORLD_LIMITS.items()}
    return WorldConfig(
        model=model,
        prompt=prompt,
        seed=_int_in(msg, "seed", 0, MAX_INT, 0),  # type: ignore[arg-type]
        max_chunks=_int_in(msg, "max_chunks", 1, 1_000_000, None),
        pacing=pacing,
        binary=binary,
        **fields,
    )


def _controls(raw: Any) -> tuple[Control, ...]:
    if raw is None:
        return ()
    if not isinstance(raw, list):
        raise _invalid("controls must be a list of {track, schema, data}", "controls")
    seen: set[str] = set()
    out = []
    for i, c in enumerate(raw):
        path = f"controls[{i}]"
        if not isinstance(c, dict) or set(c) - {"track", "schema", "data"}:
            raise _invalid(f"{path} must be an object with track, schema and data", path)
        track, schema, data = c.get("track"), c.get("schema"), c.get("data", {})
        for name, value in (("track", track), ("schema", schema)):
            if not isinstance(value, str) or not 0 < len(value) <= MAX_CONTROL_NAME_CHARS:
                raise _invalid(f"{path}.{name} must be a string of 1-{MAX_CONTROL_NAME_CHARS} characters", f"{path}.{name}")
        if track in seen:
            raise _invalid(f"track {track!r} appears twice in one interaction", f"{path}.track")
        if not isinstance(data, dict):
            raise _invalid(f"{path}.data must be a JSON object", f"{path}.data")
        if len(json.dumps(data)) > MAX_CONTROL_DATA_BYTES:  # every later tick carries the fold of the controls
            raise _invalid(f"{path}.data must be at most {MAX_CONTROL_DATA_BYTES} bytes of JSON", f"{path}.data")
        seen.add(track)
        out.append(Control(track=track, schema=schema, data=data))
    return tuple(out)


def parse_world_frame(raw: str | bytes, new_id: Callable[[str], str], now_ms: int, *, started: bool, session_id: str) -> object:
    """Turn one ``/v1/world`` frame into a command (an ``Invalid`` or ``RefuseInteraction``
    command for anything malformed, so the refusal is logged), or a ``ResumeRequest`` for
    ``session.resume``, which the transport handles."""
    msg = read_frame(raw, "binary frames are not part of the world protocol; send JSON text")
    if isinstance(msg, Invalid):
        return msg
    if not isinstance(msg, dict):
        return Invalid(code=Code.INVALID_EVENT, message="a client message must be a JSON object", excerpt=_printable(raw))
    why = _bad_string(msg)
    if why is not None:
        return Invalid(code=Code.INVALID_EVENT, message=why, excerpt=_printable(raw))
    kind = msg.get("type")
    sid = msg.get("event_id") if isinstance(msg.get("event_id"), str) else None
    if sid is not None and not 0 < len(sid) <= MAX_EVENT_ID_CHARS and kind != "session.interaction":
        # Refused like a Realtime event_id: an id the server would store and echo on every reply.
        return Invalid(
            command_type=_printable(kind, 128) if isinstance(kind, str) else None,
            code=Code.INVALID_EVENT,
            message=f"event_id must be a string of 1-{MAX_EVENT_ID_CHARS} characters",
            param="event_id",
        )
    if kind == "session.start":
        if started:
            return Invalid(event_id=sid, command_type=kind, code=Code.SESSION_ALREADY_OPEN, message="the session already started")
        try:
            config = world_start_config(msg)
        except CommandError as err:
            return Invalid(event_id=sid, command_type=kind, code=err.code, message=err.message, param=err.param)
        return StartWorld(event_id=sid, session_id=session_id, config=config, at_ms=now_ms)
    if kind == "session.interaction":
        event_id = msg.get("event_id")
        if isinstance(event_id, bool) or not isinstance(event_id, int) or not 0 <= event_id <= MAX_INT:
            return RefuseInteraction(code=Code.INVALID_INTERACTION, message="event_id must be an integer >= 0", param="event_id")
        try:
            extra = set(msg) - {"type", "event_id", "prompt", "controls"}
            if extra:
                raise _invalid(f"unknown parameter {_printable(sorted(extra)[0], 60)!r}", _printable(sorted(extra)[0], 60))
            prompt = msg.get("prompt")
            if prompt is not None and (not isinstance(prompt, str) or len(prompt) > 4096):
                raise _invalid("prompt must be a string of at most 4096 characters", "prompt")
            return Interact(event_id=event_id, prompt=prompt, controls=_controls(msg.get("controls")))
        except CommandError as bad:
            return RefuseInteraction(event_id=event_id, code=Code.INVALID_INTERACTION, message=bad.message, param=bad.param)
    if kind == "session.resume":
        try:
            return resume_request(msg)
        except CommandError as err:
            return Invalid(event_id=sid, command_type=kind, code=err.code, message=err.message, param=err.param)
    if kind == "session.reset":
        return ResetWorld(event_id=sid, at_ms=now_ms)
    if kind == "session.close":
        return CloseWorld(event_id=sid)
    if not isinstance(kind, str) or not kind:
        return Invalid(event_id=sid, code=Code.MISSING_TYPE, message="the message has no string 'type'", param="type")
    return Invalid(event_id=sid, command_type=_printable(kind, 128), code=Code.UNKNOWN_TYPE, message=f"unknown message type {kind[:128]!r}", param="type")


# ---------------------------------------------------------------------------------- projection


def project_world_started(ev: WorldStarted, ctx: Ctx) -> list[dict[str, Any]]:
    c = ev.config
    return [
        {
            "type": "session.started",
            "session_id": ev.session_id,
            "model": c.model,
            "prompt": c.prompt,
            "seed": c.seed,
            "width": c.width,
            "height": c.height,
            "fps": c.fps,
            "frames_per_chunk": c.frames_per_chunk,
            "max_chunks": c.max_chunks,
            "pacing": c.pacing,
            "max_pending": c.max_pending,
            "binary": c.binary,
            "control_schemas": [CAMERA_SCHEMA],
        }
    ]


def project_interaction_accepted(ev: InteractionAccepted, ctx: Ctx) -> list[dict[str, Any]]:
    # "event_id" is the server event's own id; the interaction's id travels beside it.
    return [{"type": "session.interaction.accepted", "interaction_event_id": ev.event_id, "pending": ev.pending}]


def project_interaction_rejected(ev: InteractionRejected, ctx: Ctx) -> list[dict[str, Any]]:
    return [{"type": "error", "error": {"type": "invalid_request_error", "code": ev.code, "message": ev.message, "param": ev.param, "event_id": ev.event_id}}]


def project_world_chunk(ev: WorldChunk, ctx: Ctx) -> list[dict[str, Any]]:
    if world_verdict(ctx.before, ev) != "accepted":  # type: ignore[arg-type]
        return []  # a cancelled tick's chunk or a broken echo is logged, never sent
    return [
        {
            "type": "world.chunk",
            "session_id": ev.session_id,
            "request_id": ev.request_id,
            "epoch": ev.epoch,
            "chunk_index": ev.chunk_index,
            "applied_event_ids": list(ev.applied_event_ids),
            "frame_count": len(ev.frames),
            "mime_type": ev.mime_type,
            "frame_hashes": list(ev.frame_hashes),
            "frames": list(ev.frames),
        }
    ]


def project_world_failed(ev: WorldFailed, ctx: Ctx) -> list[dict[str, Any]]:
    return [{"type": "session.failed", "code": ev.code, "message": ev.message, "request_id": ev.request_id}]


def project_world_reset(ev: WorldReset, ctx: Ctx) -> list[dict[str, Any]]:
    return [{"type": "session.reset_done", "epoch": ev.epoch, "chunk_index": 0, "floor": ev.floor, "discarded_event_ids": list(ev.discarded_event_ids)}]


def project_world_closed(ev: WorldClosed, ctx: Ctx) -> list[dict[str, Any]]:
    return [{"type": "session.closed", "session_id": ctx.after.session_id, "reason": ev.reason}]


#: The world kind's projections: event class → projection.
PROJECTIONS: dict[type, Projection] = {
    WorldStarted: project_world_started,
    InteractionAccepted: project_interaction_accepted,
    InteractionRejected: project_interaction_rejected,
    WorldChunk: project_world_chunk,
    WorldFailed: project_world_failed,
    WorldReset: project_world_reset,
    WorldClosed: project_world_closed,
}

#: World log events deliberately not on the wire: a tick is between the session and its
#: workers; a failed one reaches the client as ``session.failed``.
SILENT_EVENT_TYPES = frozenset({"world.tick.issued", "world.tick.failed"})
