"""Speech recognition for the reference engine: pocketsphinx with the en-US model its wheel ships,
decoded in a child process.

Why a child process: pocketsphinx's Python binding keeps the GIL for a whole decode (seconds for
a spoken question on a slow core). In the worker's own process that starves the claim heartbeat
thread, the claim expires mid-step, and another worker takes the tick over and over (a livelock
under load). In a child process the decode runs beside the worker, which only waits on a pipe.
"""

from __future__ import annotations

import hashlib
import logging
import os
import struct
import subprocess
import sys
import threading
from collections import OrderedDict
from typing import Any, BinaryIO, Optional

from duplex_es.audio.resample import resample_pcm16

__all__ = ["Recognizer", "ASR_RATE"]

#: The rate the pocketsphinx en-US acoustic model expects (Hz).
ASR_RATE = 16000

_decoder: Any = None  # the child process's decoder, loaded by _serve before the first frame


def _load() -> None:
    global _decoder
    from pocketsphinx import Decoder  # imported here: loading it prints to stderr

    # pocketsphinx logs model loading at INFO to stderr; keep worker logs readable.
    _decoder = Decoder(samprate=ASR_RATE, logfn=os.devnull)


def _decode(audio16k: bytes) -> str:
    """Decode mono PCM16 LE audio at :data:`ASR_RATE` with the child's decoder; ``""`` when
    nothing is recognized."""
    d = _decoder
    d.start_utt()
    d.process_raw(audio16k, full_utt=True)
    d.end_utt()
    hyp = d.hyp()
    return hyp.hypstr.strip() if hyp is not None else ""


class Recognizer:
    """One pocketsphinx decoder in one child process, started once per worker (about 0.5 s).

    Decoding is deterministic: the same audio always gives the same transcript. The child is a
    fresh interpreter (``python -m duplex_es.worker.speech.asr``), not a fork: the worker has
    threads and database connections. It talks over its stdin/stdout with length-prefixed frames
    and exits when the worker does, even on SIGKILL, because its stdin then reads EOF. A child that
    died is replaced on the next call.
    """

    #: Transcripts kept (by audio digest): a user turn is decoded once per worker, though the
    #: session's input transcription and the response that answers it both need it.
    CACHE_SIZE = 32

    def __init__(self) -> None:
        self._child: Optional[subprocess.Popen] = None
        self._lock = threading.Lock()
        self._cache: OrderedDict[bytes, str] = OrderedDict()
        self._start()
        logging.getLogger(__name__).info("pocketsphinx en-US model loaded (child process %d)", self._child.pid if self._child else -1)

    def _start(self) -> None:
        self._child = subprocess.Popen([sys.executable, "-m", __name__], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        self._call(b"")  # waits for the model, so the first step is not slower

    def _call(self, audio16k: bytes) -> str:
        child = self._child
        assert child is not None and child.stdin is not None and child.stdout is not None
        child.stdin.write(_HEADER.pack(len(audio16k)) + audio16k)
        child.stdin.flush()
        return _read_frame(child.stdout).decode()

    def transcribe(self, pcm16: bytes, rate: int) -> str:
        """Transcribe mono PCM16 LE audio at ``rate`` Hz; ``""`` when nothing is recognized.

        The calling thread waits on a pipe, without the GIL. Raises ``RuntimeError`` if the child
        dies twice in a row on the same audio."""
        if len(pcm16) < 2:
            return ""
        key = hashlib.blake2b(pcm16, digest_size=16, person=rate.to_bytes(4, "little")).digest()
        with self._lock:
            if key in self._cache:
                self._cache.move_to_end(key)
                return self._cache[key]
        text = self._decode(resample_pcm16(pcm16, rate, ASR_RATE))
        with self._lock:
            self._cache[key] = text
            while len(self._cache) > self.CACHE_SIZE:
                self._cache.popitem(last=False)
        return text

    def _decode(self, audio: bytes) -> str:
        """Decode 16 kHz PCM16 in the child process (started again if it died)."""
        with self._lock:
            for attempt in (1, 2):
                try:
                    if self._child is None or self._child.poll() is not None:
                        if self._child is not None:
                            logging.getLogger(__name__).warning(
                                "the pocketsphinx child process %d exited with %s; starting another", self._child.pid, self._child.returncode
                            )
                        self._start()
                    return self._call(audio)
                except (OSError, EOFError) as exc:
                    logging.getLogger(__name__).warning("the pocketsphinx child process died mid-decode (%s); %s", exc, "retrying" if attempt == 1 else "giving up")
                    self._discard()
                    if attempt == 2:
                        raise RuntimeError(f"the pocketsphinx child process died: {exc}") from exc
        raise AssertionError("unreachable")

    def _discard(self) -> None:
        if self._child is not None:
            self._child.kill()
            self._child.wait()
            self._child = None

    def close(self) -> None:
        """Stop the child process (it exits on the closed stdin)."""
        with self._lock:
            if self._child is not None:
                assert self._child.stdin is not None
                self._child.stdin.close()
                try:
                    self._child.wait(timeout=5)
                except subprocess.TimeoutExpired:
                    self._child.kill()
                self._child = None


_HEADER = struct.Struct("<I")


def _read_frame(stream: BinaryIO) -> bytes:
    head = stream.read(_HEADER.size)
    if len(head) < _HEADER.size:
        raise EOFError("the other side closed the pipe")
    (size,) = _HEADER.unpack(head)
    body = stream.read(size)
    if len(body) < size:
        raise EOFError("the other side closed the pipe mid-frame")
    return body


def _serve() -> None:
    """The child's loop: a frame of 16 kHz PCM16 in, a frame of UTF-8 transcript out, until EOF.
    An empty frame is a ping (the reply waits for the model)."""
    out = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)  # whatever the C library prints must not corrupt the frames
    _load()
    inp = sys.stdin.buffer
    while True:
        try:
            audio = _read_frame(inp)
        except EOFError:
            return
        text = _decode(audio) if audio else ""
        data = text.encode()
        out.write(_HEADER.pack(len(data)) + data)
        out.flush()


if __name__ == "__main__":
    _serve()
