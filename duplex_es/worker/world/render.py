"""A procedural world rendered with numpy: a seeded height-field terrain seen by a camera.

The renderer is a "voxel space" ray-caster: for every screen column it steps outward along the
view ray, projects the terrain height at each step onto the screen, and keeps what is nearest.
Everything is a pure function of the seed and the camera pose, computed in float64 with numpy,
so the same inputs give the same pixels, bit for bit.
"""

from __future__ import annotations

import functools
import math

import attrs
import numpy as np

__all__ = ["Camera", "Terrain", "terrain", "render"]

#: Side of the (wrapping) height map, in world units.
MAP_SIZE = 512

#: Steps along each view ray and how far the camera sees.
RAY_STEPS = 160
NEAR, FAR = 2.0, 320.0
FOV = math.radians(70)


@attrs.frozen
class Camera:
    """Where the camera is: ``x``, ``y`` on the map, ``heading`` (radians), ``pitch`` (the
    horizon's offset from the screen centre, in fractions of the screen height)."""

    x: float = 256.0
    y: float = 256.0
    heading: float = 0.0
    pitch: float = 0.0


@attrs.frozen(eq=False)
class Terrain:
    """A seeded height map (world units) and its colour map (RGB, uint8)."""

    height: np.ndarray
    color: np.ndarray


@functools.lru_cache(maxsize=8)
def terrain(seed: int) -> Terrain:
    """The terrain of ``seed``: a sum of seeded sine waves that wraps around the map's edges."""
    rng = np.random.default_rng(seed)
    n = MAP_SIZE
    u = np.arange(n, dtype=np.float64) / n * 2 * np.pi
    gx, gy = np.meshgrid(u, u, indexing="xy")
    h = np.zeros((n, n))
    for octave in range(5):
        for _ in range(3):
            fx, fy = rng.integers(-(2 ** octave) - 1, 2 ** octave + 2, size=2)
            phase = rng.uniform(0, 2 * np.pi)
            h += np.sin(fx * gx + fy * gy + phase) * (40.0 / (1.6 ** octave))
    h = (h - h.min()) / (h.max() - h.min()) * 90.0
    # Colour by height band, shaded by the slope towards the light.
    bands = np.array([[40, 70, 160], [210, 200, 140], [70, 140, 60], [50, 110, 45], [120, 110, 100], [245, 245, 250]], dtype=np.float64)
    edges = np.array([22.0, 27.0, 45.0, 62.0, 76.0])
    idx = np.searchsorted(edges, h)
    base = bands[idx]
    slope = np.roll(h, -1, axis=1) - h
    shade = np.clip(1.0 + slope * 0.06, 0.55, 1.35)[..., None]
    water = (h < edges[0])[..., None]
    color = np.where(water, bands[0], base * shade)
    return Terrain(height=np.maximum(h, edges[0]), color=np.clip(color, 0, 255).astype(np.uint8))


def ground(seed: int, x: float, y: float) -> float:
    """Terrain height under a point (nearest sample)."""
    t = terrain(seed)
    return float(t.height[int(y) % MAP_SIZE, int(x) % MAP_SIZE])


def render(seed: int, cam: Camera, width: int, height: int) -> np.ndarray:
    """One frame, ``height`` × ``width`` × 3 uint8 RGB."""
    t = terrain(seed)
    cam_z = ground(seed, cam.x, cam.y) + 40.0
    horizon = height * (0.42 + cam.pitch)
    scale = height * 0.6
    # Ray geometry: distances grow geometrically, angles span the field of view.
    d = NEAR * (FAR / NEAR) ** (np.arange(RAY_STEPS, dtype=np.float64) / (RAY_STEPS - 1))  # (D,)
    ang = cam.heading + FOV * (np.arange(width, dtype=np.float64) / max(1, width - 1) - 0.5)  # (W,)
    px = (cam.x + np.cos(ang)[None, :] * d[:, None]) % MAP_SIZE  # (D, W)
    py = (cam.y + np.sin(ang)[None, :] * d[:, None]) % MAP_SIZE
    ix, iy = px.astype(np.int64), py.astype(np.int64)
    fx, fy = px - ix, py - iy
    jx, jy = (ix + 1) % MAP_SIZE, (iy + 1) % MAP_SIZE
    # Bilinear heights: nearest sampling makes far columns flicker against their neighbours.
    h = (t.height[iy, ix] * (1 - fx) + t.height[iy, jx] * fx) * (1 - fy) + (t.height[jy, ix] * (1 - fx) + t.height[jy, jx] * fx) * fy
    col = t.color[iy, ix].astype(np.float64)  # (D, W, 3)
    # Screen row of each sample; the nearest sample that reaches a row paints it.
    rows = (cam_z - h) / d[:, None] * scale + horizon  # (D, W)
    top = np.minimum.accumulate(rows, axis=0)  # visible top edge after each step (non-increasing)
    sky_top = np.array([90, 140, 220], dtype=np.float64)
    sky_low = np.array([200, 220, 240], dtype=np.float64)
    r = np.arange(height, dtype=np.float64)
    sky = sky_top + (sky_low - sky_top) * np.clip(r / max(1.0, horizon), 0, 1)[:, None]  # (H, 3)
    frame = np.repeat(sky[:, None, :], width, axis=1)  # (H, W, 3)
    # For every pixel, the first step whose top edge is at or above it: a search per column,
    # done at once by offsetting each column into its own range of a flat sorted array.
    span = float(height + 4 * scale + 10)
    keys = (-top + np.arange(width)[None, :] * span).T.ravel()  # non-decreasing per column
    queries = (-(r[:, None]) + np.arange(width)[None, :] * span).T.ravel()
    hit = np.searchsorted(keys, queries, side="left").reshape(width, height) - (np.arange(width) * RAY_STEPS)[:, None]
    inside = hit < RAY_STEPS  # (W, H)
    step = np.clip(hit, 0, RAY_STEPS - 1)
    wi = np.broadcast_to(np.arange(width)[:, None], step.shape)
    fog = (d[step] / FAR)[..., None] ** 0.8  # (W, H, 1)
    ground_rgb = col[step, wi] * (1 - fog) + sky_low * fog
    frame = np.where(inside.T[..., None], ground_rgb.transpose(1, 0, 2), frame)
    return np.clip(np.rint(frame), 0, 255).astype(np.uint8)
