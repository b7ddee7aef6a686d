"""Sample-rate conversion (numpy, deterministic)."""

from __future__ import annotations

import numpy as np

__all__ = ["resample_pcm16"]


def resample_pcm16(pcm: bytes, src_rate: int, dst_rate: int) -> bytes:
    """Resample mono PCM16 little-endian audio by linear interpolation.

    Good enough for speech going into an ASR model or out of a formant synthesizer; the result
    is a pure function of its inputs, which replay needs.

    Args:
        pcm: PCM16 LE bytes (even length).
        src_rate: input rate in Hz.
        dst_rate: output rate in Hz.

    Returns:
        PCM16 LE bytes with ``len(pcm) // 2 * dst_rate // src_rate`` samples.
    """
    if src_rate == dst_rate or not pcm:
        return pcm
    x = np.frombuffer(pcm, dtype="<i2").astype(np.float64)
    n_out = len(x) * dst_rate // src_rate
    t = np.arange(n_out, dtype=np.float64) * (src_rate / dst_rate)
    y = np.interp(t, np.arange(len(x), dtype=np.float64), x)
    return np.clip(np.round(y), -32768, 32767).astype("<i2").tobytes()
