"""The reference world engine: a deterministic procedural world steered by camera keys (CPU).

It plays the part of an interactive AR-diffusion world model: one tick in, one block of frames
out. The camera follows the control track ``camera`` (schema ``duplex_es.camera_keys.v1``, data
``{"keys": [...]}`` = the keys held after the interaction): W/S move forward and back, A/D strafe,
J/L turn left and right, I/K look up and down. Held keys carry across chunks. If keys were pressed
and released inside one chunk, the chunk's first frame still moves with the last non-empty key
set (vLLM-Omni's LingBot reducer rule), so a tap always moves at least one frame. A prompt with
``night``, ``sunset`` or ``fog`` tints the frames.

Frames are a pure function of the tick (seed, epoch, chunk index, applied controls and the
engine state the previous chunk left), so replay re-renders them bit for bit.
"""

from __future__ import annotations

import hashlib
import io
import math
from typing import Any, Optional

import attrs
import numpy as np

from duplex_es.events import CAMERA_SCHEMA, TickIdentity, WorldTickIssued
from duplex_es.worker.engine import EngineError
from duplex_es.worker.world.render import Camera, render

__all__ = ["WorldEngine", "WorldContext", "WorldOutput", "CAMERA_SCHEMA", "KEYS", "encode_png", "frame_hash"]


#: The keys the camera understands.
KEYS = frozenset("WASDIJKL")

STEP = 3.0  # world units per frame
TURN = 0.06  # radians per frame
LOOK = 0.02  # horizon shift per frame (fraction of the screen height)
MAX_LOOK = 0.3

_TINTS = {"night": (0.35, 0.4, 0.65), "sunset": (1.15, 0.8, 0.6), "fog": (1.1, 1.1, 1.1)}


@attrs.frozen(kw_only=True)
class WorldContext:
    """A world tick and its session."""

    session_id: str
    tick: WorldTickIssued

    @property
    def identity(self) -> TickIdentity:
        """The identity this tick's output must echo."""
        return TickIdentity.of(self.session_id, self.tick)


@attrs.frozen(kw_only=True)
class WorldOutput:
    """One block: its echo, PNG frames, the hash of each frame's raw RGB, and the state the next
    chunk starts from."""

    echo: TickIdentity
    frames: tuple[bytes, ...]
    frame_hashes: tuple[str, ...]
    engine_state: dict[str, Any]


def frame_hash(rgb: np.ndarray) -> str:
    """SHA-256 (hex) of a frame's raw RGB bytes: what replay compares."""
    return hashlib.sha256(np.ascontiguousarray(rgb).tobytes()).hexdigest()


def encode_png(rgb: np.ndarray) -> bytes:
    """A frame as PNG (Pillow)."""
    from PIL import Image

    buf = io.BytesIO()
    Image.fromarray(rgb).save(buf, format="PNG")
    return buf.getvalue()


def _keys(data: dict[str, Any]) -> tuple[str, ...]:
    raw = data.get("keys", [])
    if not isinstance(raw, list) or not all(isinstance(k, str) for k in raw):
        raise EngineError("invalid_control", 'camera data must be {"keys": ["W", ...]}')
    bad = [k for k in raw if k.upper() not in KEYS]
    if bad:
        raise EngineError("invalid_control", f"unknown camera keys {bad}; use {''.join(sorted(KEYS))}")
    return tuple(sorted({k.upper() for k in raw}))


def _move(cam: Camera, keys: tuple[str, ...]) -> Camera:
    x, y, heading, pitch = cam.x, cam.y, cam.heading, cam.pitch
    fwd = ("W" in keys) - ("S" in keys)
    side = ("D" in keys) - ("A" in keys)
    heading += TURN * (("L" in keys) - ("J" in keys))
    pitch = max(-MAX_LOOK, min(MAX_LOOK, pitch + LOOK * (("I" in keys) - ("K" in keys))))
    x += STEP * (fwd * math.cos(heading) - side * math.sin(heading))
    y += STEP * (fwd * math.sin(heading) + side * math.cos(heading))
    return Camera(x=x, y=y, heading=heading, pitch=pitch)


def _tint(prompt: str) -> Optional[tuple[float, float, float]]:
    words = prompt.lower()
    for word, tint in _TINTS.items():
        if word in words:
            return tint
    return None


class WorldEngine:
    """Renders one chunk of ``frames_per_chunk`` frames per tick (numpy + Pillow, CPU)."""

    name = "duplex_es.procedural_world/1"
    kinds = ("world",)

    def render_chunk(self, tick: WorldTickIssued) -> tuple[list[np.ndarray], dict[str, Any]]:
        """The raw RGB frames of a tick and the engine state after them."""
        cfg = tick.config
        state = tick.engine_state or {}
        cam = Camera(
            x=float(state.get("x", 256.0)),
            y=float(state.get("y", 256.0)),
            heading=float(state.get("heading", 0.0)),
            pitch=float(state.get("pitch", 0.0)),
        )
        held = tuple(state.get("held", ()))
        presses = [_keys(e.control.data) for e in tick.control_events if e.control.track == "camera" and e.control.schema == CAMERA_SCHEMA]
        final = presses[-1] if presses else held
        first = next((k for k in reversed(presses) if k), final)
        tint = _tint(tick.prompt)
        frames = []
        for i in range(cfg.frames_per_chunk):
            cam = _move(cam, first if i == 0 else final)
            rgb = render(tick.seed, cam, cfg.width, cfg.height)
            if tint is not None:
                rgb = np.clip(np.rint(rgb.astype(np.float64) * np.array(tint)), 0, 255).astype(np.uint8)
            frames.append(rgb)
        after = {"x": cam.x, "y": cam.y, "heading": cam.heading, "pitch": cam.pitch, "held": list(final)}
        return frames, after

    def step(self, ctx: WorldContext) -> WorldOutput:
        """Render a tick's block. Raises :class:`EngineError` for a control it cannot read."""
        frames, after = self.render_chunk(ctx.tick)
        return WorldOutput(
            echo=ctx.identity,
            frames=tuple(encode_png(f) for f in frames),
            frame_hashes=tuple(frame_hash(f) for f in frames),
            engine_state=after,
        )

