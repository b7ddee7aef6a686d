"""The audio clock: positions and durations from sample counts in the declared format (DESIGN I12).

Nothing here reads a clock; a millisecond is always ``samples * 1000 / rate`` of the session's
declared format, never wall time.
"""

from __future__ import annotations

from duplex_es.events import AudioFormat

__all__ = ["SUPPORTED_FORMATS", "bytes_per_sample", "samples_of", "ms_of", "samples_at_ms", "is_supported"]

#: (type, rate) pairs a session may declare. GA Realtime pins ``audio/pcm`` to 24000 Hz.
SUPPORTED_FORMATS: frozenset[tuple[str, int]] = frozenset({("audio/pcm", 24000)})


def is_supported(fmt: AudioFormat) -> bool:
    """True if duplex_es can take or produce audio in ``fmt``."""
    return (fmt.type, fmt.rate) in SUPPORTED_FORMATS


def bytes_per_sample(fmt: AudioFormat) -> int:
    """2 for ``audio/pcm`` (PCM16), 1 for G.711 (``audio/pcmu``, ``audio/pcma``)."""
    return 2 if fmt.type == "audio/pcm" else 1


def samples_of(nbytes: int, fmt: AudioFormat) -> int:
    """Number of samples in ``nbytes`` bytes of ``fmt`` (mono)."""
    return nbytes // bytes_per_sample(fmt)


def ms_of(samples: int, rate: int) -> int:
    """Duration in whole ms (rounded down) of ``samples`` samples at ``rate`` Hz."""
    return samples * 1000 // rate


def samples_at_ms(ms: int, rate: int) -> int:
    """The sample position ``ms`` ms into a stream at ``rate`` Hz (rounded down)."""
    return ms * rate // 1000
