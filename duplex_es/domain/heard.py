"""The heard prefix: how much of an assistant transcript the user heard, from playback ms.

The engine sends marks ``(text_chars, audio_ms)`` — "the first ``text_chars`` characters are
spoken by ``audio_ms``". The number of characters heard at a cutoff is read off the piecewise
linear curve through ``(0, 0)``, the marks in audio order, and ``(end, len(text))`` where ``end``
is the later of the generated audio and the last mark; a cutoff at or past ``end`` of a complete
response hears everything. Without marks the prefix is proportional to the audio heard. The
result is cut with ``int()`` and trailing whitespace is dropped. This is vLLM-Omni's rule
(docs/sources.md, "vLLM-Omni's heard prefix"): marks ``(6 @ 1000 ms, 11 @ 2000 ms)`` on "hello world"
and a cutoff of 1200 ms give ``6 + 5 × 0.2 = 7`` characters, "hello w".
"""

from __future__ import annotations

from typing import Sequence

from duplex_es.events import Mark

__all__ = ["heard_prefix", "heard_chars"]


def heard_chars(text_len: int, marks: Sequence[Mark], cutoff_ms: int, total_ms: int, complete: bool) -> int:
    """How many characters of a ``text_len``-character transcript ``cutoff_ms`` ms of audio covers.

    Args:
        text_len: length of the full transcript generated so far.
        marks: alignment points, cumulative from the response's start.
        cutoff_ms: how much audio was heard (played, committed or truncated), in ms.
        total_ms: how much audio was generated, in ms.
        complete: the response generated all of its audio.
    """
    if cutoff_ms <= 0 or text_len <= 0:
        return 0
    points = sorted((m.audio_ms, min(m.text_chars, text_len)) for m in marks)
    end_ms = max([total_ms] + [p[0] for p in points])
    if complete and cutoff_ms >= end_ms:
        return text_len
    if not points:
        return text_len * min(cutoff_ms, total_ms) // max(1, total_ms)
    prev_ms, prev_chars = 0, 0
    for ms, chars in points + [(end_ms, text_len)]:
        if cutoff_ms <= ms:
            if ms == prev_ms:
                return chars
            return int(prev_chars + (chars - prev_chars) * (cutoff_ms - prev_ms) / (ms - prev_ms))
        prev_ms, prev_chars = ms, chars
    return text_len if complete else prev_chars


def heard_prefix(text: str, marks: Sequence[Mark], cutoff_ms: int, total_ms: int, complete: bool) -> str:
    """The part of ``text`` heard by ``cutoff_ms`` ms of its audio, trailing whitespace removed;
    see :func:`heard_chars`."""
    return text[: heard_chars(len(text), marks, cutoff_ms, total_ms, complete)].rstrip()
