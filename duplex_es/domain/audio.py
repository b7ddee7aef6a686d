"""The audio clock: positions and durations from sample counts in the declared format (docs/architecture.md, I12).

Nothing here reads a clock; a millisecond is always ``samples * 1000 / rate`` of the session's
declared format, never wall time.
"""

from __future__ import annotations

from duplex_es.audio.pcm import bytes_per_sample
from duplex_es.events import AudioFormat

__all__ = ["samples_of", "ms_of", "samples_at_ms"]


def samples_of(nbytes: int, fmt: AudioFormat) -> int:
    """Number of samples in ``nbytes`` bytes of ``fmt`` (mono): 2 bytes each for PCM16, 1 for G.711."""
    return nbytes // bytes_per_sample(fmt.type)


def ms_of(samples: int, rate: int) -> int:
    """Duration in whole ms (rounded down) of ``samples`` samples at ``rate`` Hz."""
    return samples * 1000 // rate


def samples_at_ms(ms: int, rate: int) -> int:
    """The sample position ``ms`` ms into a stream at ``rate`` Hz (rounded down)."""
    return ms * rate // 1000
