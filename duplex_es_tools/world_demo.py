"""A scripted world session for the demo: a few seconds of steering, saved as an animated GIF."""

from __future__ import annotations

import base64
import io
import json
from pathlib import Path
from typing import Any

import attrs

__all__ = ["Steering", "STEERING_SCRIPT", "steer"]

CAMERA = "duplex_es.camera_keys.v1"

#: (chunk index at which to send it, keys held, prompt or None): forward, a left turn while
#: moving, a look up, a tap of the right-turn key, then sunset.
STEERING_SCRIPT: tuple[tuple[int, list[str], Any], ...] = (
    (0, ["W"], None),
    (3, ["W", "J"], None),
    (6, ["W", "I"], None),
    (8, ["L"], None),
    (8, [], None),
    (10, ["W"], "sunset over the hills"),
)


@attrs.define
class Steering:
    """What the scripted world session produced."""

    session_id: str = ""
    frames: list[bytes] = attrs.Factory(list)
    chunks: list[dict[str, Any]] = attrs.Factory(list)
    gif: str = ""


def steer(port: int, out: Path, *, chunks: int = 14, width: int = 160, height: int = 96, fps: int = 12, seed: int = 11) -> Steering:
    """Run the scripted session against ``ws://127.0.0.1:PORT/v1/world`` and write the GIF."""
    from PIL import Image
    from websockets.sync.client import connect

    result = Steering()
    with connect(f"ws://127.0.0.1:{port}/v1/world", max_size=None) as ws:
        ws.send(json.dumps({"type": "session.start", "prompt": "green hills by the sea", "seed": seed, "width": width,
                            "height": height, "fps": fps, "frames_per_chunk": 6, "max_chunks": chunks, "pacing": "fast"}))
        script = list(STEERING_SCRIPT)
        next_id = 1
        while len(result.chunks) < chunks:
            ev = json.loads(ws.recv(timeout=60))
            if ev["type"] == "session.started":
                result.session_id = ev["session_id"]
            elif ev["type"] == "error":
                raise RuntimeError(f"world session refused: {ev['error']}")
            elif ev["type"] == "session.failed":
                raise RuntimeError(f"world session failed: {ev}")
            elif ev["type"] == "world.chunk":
                result.chunks.append({k: v for k, v in ev.items() if k != "frames"})
                result.frames += [base64.b64decode(f) for f in ev["frames"]]
            # Steer on the chunk boundaries the script names.
            while script and script[0][0] <= len(result.chunks):
                _, keys, prompt = script.pop(0)
                msg: dict[str, Any] = {"type": "session.interaction", "event_id": next_id,
                                       "controls": [{"track": "camera", "schema": CAMERA, "data": {"keys": keys}}]}
                if prompt:
                    msg["prompt"] = prompt
                ws.send(json.dumps(msg))
                next_id += 1
        ws.send(json.dumps({"type": "session.close"}))
    images = [Image.open(io.BytesIO(f)).convert("P", palette=Image.Palette.ADAPTIVE) for f in result.frames]
    out.parent.mkdir(parents=True, exist_ok=True)
    images[0].save(out, save_all=True, append_images=images[1:], duration=round(1000 / fps), loop=0)
    result.gif = str(out)
    return result
