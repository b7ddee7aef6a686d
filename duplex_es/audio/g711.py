"""G.711 mu-law and a-law (ITU-T G.711), vectorized with numpy.

Decoding uses the standard 256-entry expansion tables; encoding the standard segment search on
16-bit input. ``encode(decode(c)) == c`` for every code but mu-law's negative zero (0x7F), which
decodes to 0 and encodes as positive zero (0xFF).
"""

from __future__ import annotations

import numpy as np

__all__ = ["ulaw_decode", "ulaw_encode", "alaw_decode", "alaw_encode"]

_BIAS = 0x84
_CLIP = 32635


def _ulaw_table() -> np.ndarray:
    codes = ~np.arange(256, dtype=np.int32) & 0xFF
    sign = codes & 0x80
    exponent = (codes >> 4) & 0x07
    mantissa = codes & 0x0F
    magnitude = (((mantissa << 3) + _BIAS) << exponent) - _BIAS
    return np.where(sign != 0, -magnitude, magnitude).astype(np.int16)


def _alaw_table() -> np.ndarray:
    codes = np.arange(256, dtype=np.int32) ^ 0x55
    sign = codes & 0x80
    exponent = (codes >> 4) & 0x07
    mantissa = codes & 0x0F
    magnitude = np.where(exponent == 0, (mantissa << 4) + 8, ((mantissa << 4) + 0x108) << np.maximum(exponent - 1, 0))
    return np.where(sign != 0, magnitude, -magnitude).astype(np.int16)


_ULAW = _ulaw_table()
_ALAW = _alaw_table()


def ulaw_decode(data: bytes) -> np.ndarray:
    """mu-law bytes → int16 samples."""
    return _ULAW[np.frombuffer(data, dtype=np.uint8)]


def alaw_decode(data: bytes) -> np.ndarray:
    """a-law bytes → int16 samples."""
    return _ALAW[np.frombuffer(data, dtype=np.uint8)]


def ulaw_encode(samples: np.ndarray) -> bytes:
    """int16 samples → mu-law bytes."""
    x = samples.astype(np.int32)
    sign = np.where(x < 0, 0x80, 0)
    mag = np.minimum(np.abs(x), _CLIP) + _BIAS
    exponent = np.clip(np.floor(np.log2(np.maximum(mag, 1))).astype(np.int32) - 7, 0, 7)
    mantissa = (mag >> (exponent + 3)) & 0x0F
    return (~(sign | (exponent << 4) | mantissa) & 0xFF).astype(np.uint8).tobytes()


def alaw_encode(samples: np.ndarray) -> bytes:
    """int16 samples → a-law bytes."""
    x = samples.astype(np.int32)
    sign = np.where(x >= 0, 0x80, 0)
    mag = np.minimum(np.where(x >= 0, x, -x - 1), 32767)
    exponent = np.clip(np.floor(np.log2(np.maximum(mag, 1))).astype(np.int32) - 7, 0, 7)
    mantissa = np.where(exponent == 0, mag >> 4, mag >> (exponent + 3)) & 0x0F
    return ((sign | (exponent << 4) | mantissa) ^ 0x55).astype(np.uint8).tobytes()
