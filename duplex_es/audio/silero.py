"""Silero VAD, the neural voice-activity model, run on the CPU by onnxruntime alone.

The model is the ONNX file the ``silero-vad`` wheel ships (``silero_vad/data/silero_vad.onnx``,
MIT licence). That wheel declares a dependency on torch, which nothing here needs: it is
installed with ``pip install --no-deps silero-vad`` beside ``onnxruntime`` (the extra ``vad``;
``make install`` does both), and the file is found through the wheel's installed metadata, so
the ``silero_vad`` package itself (which imports torch) is never imported.

The scorer is streaming and append-size independent. Input audio is cut into frames of
:data:`FRAME_MS` ms of the input clock counted from the session's start (768 samples at
24 kHz, 512 at 16 kHz, 256 at 8 kHz); each complete frame is resampled on its own to the
model's rate (16 kHz; 8 kHz input stays at 8 kHz, which the model also takes) with the
project's resampler, prefixed with the last :func:`context_samples` samples of the frame
before it, and scored by the network with the recurrent state the previous frame left. What a
next append needs to go on — that state, the context and the samples of the unfinished frame —
is one opaque base64 text (:func:`advance`), logged with the append, so a speech probability
is a pure function of the audio before it, whoever computes it and however the client sized
its appends.

Determinism: one ``InferenceSession`` per process, on the CPU provider, one thread for
operators and one between them, sequential execution: the same inputs give the same bits on a
machine. The model file is read once per process, on first use.
"""

from __future__ import annotations

import base64
import functools
import importlib.metadata
import threading
from pathlib import Path
from typing import Optional

import numpy as np

from duplex_es.audio.resample import resample_pcm16
from duplex_es.errors import DuplexError

__all__ = [
    "FRAME_MS",
    "MODEL_FILE",
    "SileroUnavailable",
    "advance",
    "context_samples",
    "frame_samples",
    "model_path",
    "model_rate",
    "unavailable",
]

#: One analysis frame: the model's window (512 samples at 16 kHz, 256 at 8 kHz).
FRAME_MS = 32

#: Where the ``silero-vad`` wheel keeps the model, relative to its install location.
MODEL_FILE = "silero_vad/data/silero_vad.onnx"

#: The recurrent state the network carries from frame to frame: shape (2, 1, 128), float32.
_STATE_SHAPE = (2, 1, 128)
_STATE_BYTES = 2 * 128 * 4


class SileroUnavailable(DuplexError, RuntimeError):
    """The Silero model cannot be run here (onnxruntime or the ``silero-vad`` wheel missing, or
    the model file unreadable); ``str()`` says which."""


def model_rate(rate: int) -> int:
    """The rate (Hz) the network runs at for input at ``rate`` Hz: 8000 stays, the rest → 16000."""
    return 8000 if rate == 8000 else 16000


def frame_samples(rate: int) -> int:
    """Input samples per frame at ``rate`` Hz (:data:`FRAME_MS` ms of the input clock)."""
    return rate * FRAME_MS // 1000


def context_samples(rate: int) -> int:
    """Model-rate samples of the previous frame the network sees before each frame (64 at
    16 kHz, 32 at 8 kHz, as the model was trained)."""
    return 32 if model_rate(rate) == 8000 else 64


def model_path() -> Optional[Path]:
    """The installed model file, or ``None`` when the ``silero-vad`` wheel is not installed."""
    try:
        dist = importlib.metadata.distribution("silero-vad")
    except importlib.metadata.PackageNotFoundError:
        return None
    return Path(str(dist.locate_file(MODEL_FILE)))


@functools.cache
def unavailable() -> Optional[str]:
    """Why the model cannot run in this process, or ``None`` when it can (loads it: the answer
    is the same for the life of the process)."""
    try:
        _model()
    except SileroUnavailable as e:
        return str(e)
    return None


class _Model:
    """The loaded network: one single-threaded CPU session; ``run`` is safe from any thread."""

    def __init__(self, path: Path) -> None:
        import onnxruntime as ort  # optional: only a session that selects Silero needs it

        opts = ort.SessionOptions()
        opts.intra_op_num_threads = 1
        opts.inter_op_num_threads = 1
        opts.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        self._session = ort.InferenceSession(str(path), sess_options=opts, providers=["CPUExecutionProvider"])
        self._lock = threading.Lock()  # a session is thread-safe; the lock keeps CPU use to one core

    def run(self, window: np.ndarray, state: np.ndarray, rate: int) -> tuple[float, np.ndarray]:
        """Score one frame. ``window``: float32 (1, context + frame) in [-1, 1); ``state``:
        float32 (2, 1, 128). Returns the speech probability and the next state."""
        with self._lock:
            prob, nxt = self._session.run(None, {"input": window, "state": state, "sr": np.array(rate, dtype=np.int64)})
        return float(prob[0, 0]), np.asarray(nxt, dtype=np.float32).reshape(_STATE_SHAPE)


@functools.cache
def _model() -> _Model:
    try:
        import onnxruntime  # noqa: F401
    except ImportError as e:
        raise SileroUnavailable(f"onnxruntime is not installed ({e}): pip install 'duplex-es[vad]'") from None
    path = model_path()
    if path is None:
        raise SileroUnavailable("the silero-vad wheel is not installed: pip install --no-deps silero-vad")
    if not path.is_file():
        raise SileroUnavailable(f"the silero-vad wheel has no model at {path}")
    try:
        return _Model(path)
    except Exception as e:  # onnxruntime raises its own types for an unreadable model
        raise SileroUnavailable(f"onnxruntime cannot load {path}: {e}") from None


def _unpack(carried: Optional[str], rate: int, fill: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The carried text → (state, context, pending input samples). Missing or not matching
    ``fill`` (detection was off, or another detector ran): a fresh state, silent context and
    ``fill`` silent samples, so frames stay on the clock."""
    ctx = context_samples(rate)
    if carried:
        raw = base64.b64decode(carried)
        if len(raw) == _STATE_BYTES + 2 * (ctx + fill):
            state = np.frombuffer(raw[:_STATE_BYTES], dtype="<f4").reshape(_STATE_SHAPE).copy()
            rest = np.frombuffer(raw[_STATE_BYTES:], dtype="<i2")
            return state, rest[:ctx].copy(), rest[ctx:].copy()
    return np.zeros(_STATE_SHAPE, dtype=np.float32), np.zeros(ctx, dtype=np.int16), np.zeros(fill, dtype=np.int16)


def _pack(state: np.ndarray, context: np.ndarray, pending: np.ndarray) -> str:
    raw = state.astype("<f4").tobytes() + context.astype("<i2").tobytes() + pending.astype("<i2").tobytes()
    return base64.b64encode(raw).decode("ascii")


def advance(carried: Optional[str], samples: np.ndarray, rate: int, clock: int) -> tuple[list[tuple[int, float]], str]:
    """Score the frames one append completes.

    Args:
        carried: what the previous append's :func:`advance` returned (``None`` at the start, or
            after detection was off: the model starts fresh).
        samples: the append's audio, int16 PCM at ``rate`` Hz (8000, 16000 or 24000).
        rate: the input rate (Hz).
        clock: the append's first sample on the input clock (frames are counted from 0).

    Returns:
        ``(end, probability)`` per frame completed in this append, in order — ``end`` is the
        frame's end as an offset into ``samples`` — and the text the next append goes on from.

    Raises:
        SileroUnavailable: the model cannot be loaded.
    """
    model = _model()
    frame = frame_samples(rate)
    fill = clock % frame
    state, context, pending = _unpack(carried, rate, fill)
    mrate = model_rate(rate)
    ctx = len(context)
    out: list[tuple[int, float]] = []
    pos = 0  # next unused sample of ``samples``
    n = len(samples)
    while fill + (n - pos) >= frame:
        take = frame - fill
        chunk = np.concatenate([pending, samples[pos : pos + take]]) if fill else samples[pos : pos + take]
        pos += take
        fill, pending = 0, pending[:0]
        scaled = np.frombuffer(resample_pcm16(chunk.astype("<i2").tobytes(), rate, mrate), dtype="<i2")
        window = (np.concatenate([context, scaled]).astype(np.float32) / 32768.0).reshape(1, -1)
        prob, state = model.run(window, state, mrate)
        context = scaled[-ctx:]
        out.append((pos, prob))
    pending = np.concatenate([pending, samples[pos:]]).astype(np.int16)
    return out, _pack(state, context, pending)


if __name__ == "__main__":  # pragma: no cover - a debugging aid: python -m duplex_es.audio.silero FILE.wav
    import sys
    import wave

    with wave.open(sys.argv[1]) as w:
        rate, pcm = w.getframerate(), np.frombuffer(w.readframes(w.getnframes()), dtype="<i2")
    probs, _ = advance(None, pcm, rate, 0)
    for end, p in probs:
        print(f"{end * 1000 // rate:6d} ms  {p:.3f}  {'#' * int(p * 40)}")
