"""The heard prefix: how much of an assistant transcript the user heard, from playback ms.

The engine sends marks ``(text_chars, audio_ms)`` — "the first ``text_chars`` characters are
spoken by ``audio_ms``" — at word starts. The heard prefix at a cutoff is the text up to the last
mark at or before the cutoff: the words the user heard to their end. A word cut off mid-way is
left out rather than split (vLLM-Omni interpolates inside words, keeping fragments such as
"hello w"; ``reference/duplex-semantics.md`` §5.3).
Without marks the prefix is proportional to the audio played.
"""

from __future__ import annotations

from typing import Sequence

from duplex_es.events import Mark

__all__ = ["heard_prefix"]


def heard_prefix(text: str, marks: Sequence[Mark], cutoff_ms: int, total_ms: int, complete: bool) -> str:
    """The part of ``text`` heard by ``cutoff_ms`` ms of its audio.

    Args:
        text: the full transcript generated so far.
        marks: alignment points, cumulative from the response's start, in audio order.
        cutoff_ms: how much audio was heard (played, committed or truncated), in ms.
        total_ms: how much audio was generated, in ms.
        complete: the response generated all its audio; then a cutoff at or past ``total_ms``
            hears the whole text.

    Returns:
        A prefix of ``text`` with trailing whitespace removed.
    """
    if cutoff_ms <= 0 or not text:
        return ""
    if complete and cutoff_ms >= total_ms:
        return text
    if marks:
        chars = 0
        for m in marks:
            if m.audio_ms <= cutoff_ms:
                chars = max(chars, m.text_chars)
            else:
                break
    else:
        chars = len(text) * min(cutoff_ms, total_ms) // max(1, total_ms)
    return text[: min(chars, len(text))].rstrip()
