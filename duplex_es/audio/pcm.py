"""Declared audio formats: which are supported, how many bytes a ms holds, and conversion to and
from PCM16 (docs/sources.md, "Audio formats")."""

from __future__ import annotations

import numpy as np

from duplex_es.audio.g711 import alaw_decode, alaw_encode, ulaw_decode, ulaw_encode

__all__ = ["FORMATS", "is_supported", "bytes_per_sample", "bytes_per_ms", "decode_to_pcm16", "encode_from_pcm16"]

#: Supported ``(type, rate)`` pairs: PCM16 at 24000 Hz (GA) and 16000 Hz (a duplex_es
#: extension), G.711 mu-law (``audio/pcmu``) and a-law (``audio/pcma``) at 8000 Hz.
FORMATS: frozenset[tuple[str, int]] = frozenset(
    {("audio/pcm", 24000), ("audio/pcm", 16000), ("audio/pcmu", 8000), ("audio/pcma", 8000)}
)


def is_supported(type_: str, rate: int) -> bool:
    """True if duplex_es can take or produce audio of ``type_`` at ``rate`` Hz."""
    return (type_, rate) in FORMATS


def bytes_per_sample(type_: str) -> int:
    """2 for ``audio/pcm`` (PCM16), 1 for G.711."""
    return 2 if type_ == "audio/pcm" else 1


def bytes_per_ms(type_: str, rate: int) -> float:
    """Bytes in one ms: 48 for PCM16 at 24 kHz, 32 at 16 kHz, 8 for G.711 at 8 kHz."""
    return bytes_per_sample(type_) * rate / 1000


def decode_to_pcm16(data: bytes, type_: str) -> np.ndarray:
    """Audio bytes of ``type_`` → int16 samples (same rate)."""
    if type_ == "audio/pcmu":
        return ulaw_decode(data)
    if type_ == "audio/pcma":
        return alaw_decode(data)
    return np.frombuffer(data[: len(data) // 2 * 2], dtype="<i2")


def encode_from_pcm16(samples: np.ndarray, type_: str) -> bytes:
    """int16 samples → audio bytes of ``type_`` (same rate)."""
    if type_ == "audio/pcmu":
        return ulaw_encode(samples)
    if type_ == "audio/pcma":
        return alaw_encode(samples)
    return samples.astype("<i2").tobytes()
