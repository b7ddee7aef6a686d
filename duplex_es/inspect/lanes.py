"""Audio lanes: where a lane's audio lives in the log, its waveform peaks, and its samples.

A lane is the user's input audio (on the input clock) or one response's output audio (on the
response's own clock, its items one after the other). It remembers each piece of audio by the
seq of the event that logged it, so any range can be read back from the log without keeping the
audio in memory, and it folds every piece into min/max peaks per :data:`BASE_MS` while the
timeline is built, so a whole-session waveform never reads the audio twice.
"""

from __future__ import annotations

import bisect
import io
import wave
from array import array
from collections.abc import Iterable

import numpy as np

from duplex_es.audio import decode_to_pcm16
from duplex_es.events import Event
from duplex_es.events.audio import audio_bytes

__all__ = ["BASE_MS", "MAX_BUCKETS", "Lane", "wav_bytes"]

#: The resolution of the peaks kept per lane (ms): one hour is 360,000 pairs of int16.
BASE_MS = 10

#: The most buckets one peaks request may ask for.
MAX_BUCKETS = 4000

#: Samples gathered before they are folded into peaks (one numpy reduction per ~1 s of audio
#: instead of one per 20 ms append).
_FOLD_AT_MS = 1000


class Lane:
    """One lane's audio map and peaks.

    Args:
        name: ``user`` or ``response:<id>``.
        type_: the audio type as logged (``audio/pcm``, ``audio/pcmu``, ``audio/pcma``).
        rate: its sample rate (Hz).
    """

    def __init__(self, name: str, type_: str, rate: int) -> None:
        self.name, self.type, self.rate = name, type_, rate
        self.seqs = array("q")  # the event that logged each piece
        self.starts = array("q")  # where each piece starts on the lane's clock (samples)
        self.counts = array("q")  # how many samples it holds
        self.samples = 0  # the lane's end (samples): pieces are contiguous
        self._bucket = max(1, rate * BASE_MS // 1000)  # samples per peak bucket
        self._mins: list[np.ndarray] = []
        self._maxs: list[np.ndarray] = []
        self._pending: list[np.ndarray] = []
        self._pending_n = 0

    @property
    def ms(self) -> int:
        """The lane's length (ms, rounded down)."""
        return self.samples * 1000 // self.rate

    def add(self, seq: int, start: int, pcm: np.ndarray) -> None:
        """Record ``pcm`` (int16 samples, decoded from the event at ``seq``) at ``start``
        samples on the lane's clock; a piece that does not start at the lane's end is placed
        at its end (the lane's clock has no gaps: input appends are contiguous by
        construction, response audio is its chunks one after the other)."""
        if not pcm.size:
            return
        start = self.samples if start != self.samples else start
        self.seqs.append(seq)
        self.starts.append(start)
        self.counts.append(int(pcm.size))
        self.samples = start + int(pcm.size)
        self._pending.append(pcm)
        self._pending_n += int(pcm.size)
        if self._pending_n >= self.rate * _FOLD_AT_MS // 1000:
            self._fold()

    def add_many(self, seqs: list[int], pieces: list[bytes]) -> None:
        """Record ``pieces`` (the audio bytes logged at ``seqs``, in this lane's type) one after
        the other at the lane's end, as :meth:`add` of each decoded would: one decode for all
        of them."""
        width = 2 if self.type == "audio/pcm" else 1
        if width == 2 and any(len(p) & 1 for p in pieces):  # a piece's odd byte is dropped: one by one
            for seq, p in zip(seqs, pieces):
                self.add(seq, self.samples, decode_to_pcm16(p, self.type))
            return
        pcm = decode_to_pcm16(b"".join(pieces), self.type)
        if not pcm.size:
            return
        at = self.samples
        for seq, p in zip(seqs, pieces):
            n = len(p) // width
            if n:
                self.seqs.append(seq)
                self.starts.append(at)
                self.counts.append(n)
                at += n
        self.samples = at
        self._pending.append(pcm)
        self._pending_n += int(pcm.size)
        if self._pending_n >= self.rate * _FOLD_AT_MS // 1000:
            self._fold()

    def _blocks(self, samples: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(mins, maxs, rest)``: the peaks of ``samples``' whole buckets and what is left over."""
        whole = samples.size // self._bucket * self._bucket
        blocks = samples[:whole].reshape(-1, self._bucket)
        return blocks.min(axis=1, initial=32767), blocks.max(axis=1, initial=-32768), samples[whole:]

    def _fold(self) -> None:
        joined = np.concatenate(self._pending) if len(self._pending) > 1 else self._pending[0]
        lo, hi, rest = self._blocks(joined)
        self._mins.append(lo)
        self._maxs.append(hi)
        self._pending = [rest] if rest.size else []
        self._pending_n = int(rest.size)

    def base_peaks(self) -> tuple[np.ndarray, np.ndarray]:
        """``(mins, maxs)``: int16 peaks per :data:`BASE_MS` over the whole lane (the last
        bucket may be partial). Does not consume what is pending, so the lane can grow."""
        mins, maxs = list(self._mins), list(self._maxs)
        if self._pending_n:
            lo, hi, rest = self._blocks(np.concatenate(self._pending))
            mins += [lo, rest.min(keepdims=True, initial=32767)] if rest.size else [lo]
            maxs += [hi, rest.max(keepdims=True, initial=-32768)] if rest.size else [hi]
        if not mins:
            return np.zeros(0, dtype=np.int16), np.zeros(0, dtype=np.int16)
        return np.concatenate(mins), np.concatenate(maxs)

    def pieces(self, start: int, end: int) -> list[tuple[int, int, int]]:
        """The pieces overlapping samples ``[start, end)``: ``(seq, piece_start, samples)``."""
        first = max(0, bisect.bisect_right(self.starts, start) - 1)
        last = bisect.bisect_left(self.starts, end)
        return [(self.seqs[i], self.starts[i], self.counts[i]) for i in range(first, min(last, len(self.seqs)))]

    def cut(self, events: dict[int, Event], start: int, end: int) -> np.ndarray:
        """The lane's int16 samples ``[start, end)``, cut from ``events`` (by seq: at least
        those :meth:`pieces` names). Raises KeyError if one is missing."""
        out = np.zeros(max(0, end - start), dtype=np.int16)
        for seq, at, n in self.pieces(start, end):
            pcm = self.decode(events[seq])
            lo, hi = max(start, at), min(end, at + n)
            if hi > lo:
                out[lo - start : hi - start] = pcm[lo - at : hi - at]
        return out

    def decode(self, event: Event) -> np.ndarray:
        """The int16 samples an event of this lane logged (G.711 decoded)."""
        return decode_to_pcm16(audio_bytes(event), self.type)


def peaks_of(mins: np.ndarray, maxs: np.ndarray, edges: Iterable[int]) -> tuple[list[int], list[int]]:
    """Reduce peaks (or samples, as both ``mins`` and ``maxs``) to buckets: ``edges`` are the
    bucket starts as indices into the arrays, each bucket running to the next edge (at least
    one element wide); buckets past the end are 0. Returns ``(mins, maxs)`` per bucket."""
    idx = np.asarray(list(edges), dtype=np.int64)
    n = mins.size
    lo_out, hi_out = [], []
    for a, b in zip(idx[:-1], idx[1:]):
        a, b = max(0, int(a)), min(n, max(int(b), int(a) + 1))
        if a >= n or b <= a:
            lo_out.append(0)
            hi_out.append(0)
        else:
            lo_out.append(int(mins[a:b].min()))
            hi_out.append(int(maxs[a:b].max()))
    return lo_out, hi_out


def wav_bytes(pcm: np.ndarray, rate: int) -> bytes:
    """A mono PCM16 WAV file of ``pcm`` (int16 samples) at ``rate`` Hz."""
    buf = io.BytesIO()
    with wave.open(buf, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(rate)
        w.writeframes(pcm.astype("<i2").tobytes())
    return buf.getvalue()

