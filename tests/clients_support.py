"""What the client tests share: fixture speech, a microphone's timing, the log's verdict on a
session, and a net for every warning or error a client library logs."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import logging
import time
import wave
from typing import Iterator

from duplex_es.audit import audit_session
from duplex_es.events import CommandRejected
from duplex_es.store import Database, EventLog

from conftest import FIXTURES

RATE = 24000
FRAME_BYTES = 960  # 20 ms of PCM16 mono at 24 kHz: what a microphone callback hands a client

#: A text turn long enough that its spoken reply is still being generated when the user talks
#: over it (the echo agent reads it back).
LONG_TEXT = (
    "Please read this back to me slowly. Once upon a time a small robot lived in a lighthouse by the sea. "
    "Every night it counted the ships that passed, one, two, three, four, five, six, seven, eight. "
    "When the fog came in it sang a quiet song to the gulls so that nobody would feel alone in the dark."
)


def speech(name: str) -> bytes:
    """A fixture recording as PCM16 24 kHz mono bytes."""
    with wave.open(str(FIXTURES / "audio" / name)) as w:
        assert (w.getnchannels(), w.getsampwidth(), w.getframerate()) == (1, 2, RATE)
        return w.readframes(w.getnframes())


def silence(seconds: float) -> bytes:
    return bytes(int(RATE * seconds) * 2)


async def at_real_time(pcm: bytes, send) -> None:  # noqa: ANN001
    """Hand ``pcm`` to ``send`` in 20 ms frames on a real-time schedule, as a microphone does."""
    start = time.monotonic()
    for i, at in enumerate(range(0, len(pcm), FRAME_BYTES)):
        await send(pcm[at : at + FRAME_BYTES].ljust(FRAME_BYTES, b"\0"))
        delay = start + (i + 1) * 0.020 - time.monotonic()
        if delay > 0:
            await asyncio.sleep(delay)


def stream(c, pcm: bytes, stop=None) -> int:  # noqa: ANN001
    """Send ``pcm`` on ``c`` (a :class:`wsclient.WsClient`) as a microphone would: 20 ms appends
    at real time, until ``stop`` (a ``threading.Event``) is set. Returns how many."""
    start, n = time.monotonic(), 0
    for at in range(0, len(pcm), FRAME_BYTES):
        if stop is not None and stop.is_set():
            break
        c.send({"type": "input_audio_buffer.append", "audio": base64.b64encode(pcm[at : at + FRAME_BYTES].ljust(FRAME_BYTES, b"\0")).decode()})
        n += 1
        time.sleep(max(0.0, start + n * 0.020 - time.monotonic()))
    return n


class MicBuffer:
    """What a microphone hears: speech once some is queued with :meth:`say`, silence otherwise,
    in 20 ms frames on a real-time schedule (:meth:`frames`)."""

    def __init__(self) -> None:
        self._pending = bytearray()

    def say(self, pcm: bytes) -> None:
        self._pending.extend(pcm)

    @property
    def speaking(self) -> bool:
        return bool(self._pending)

    async def frames(self):  # noqa: ANN201 - an async iterator of 20 ms frames (bytes)
        start, i = time.monotonic(), 0
        while True:
            chunk = bytes(self._pending[:FRAME_BYTES]).ljust(FRAME_BYTES, b"\0")
            del self._pending[:FRAME_BYTES]
            yield chunk
            i += 1
            await asyncio.sleep(max(0.0, start + i * 0.020 - time.monotonic()))


async def until(predicate, timeout: float, what: str) -> None:  # noqa: ANN001
    """Wait until ``predicate()`` holds; fail the test naming ``what`` otherwise."""
    end = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > end:
            raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")
        await asyncio.sleep(0.02)


class LogNet(logging.Handler):
    """Every record at WARNING or above that any library logs while it is installed."""

    def __init__(self) -> None:
        super().__init__(level=logging.WARNING)
        self.records: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        text = f"{record.name} {record.levelname}: {record.getMessage()}"
        if record.exc_info and record.exc_info[1] is not None:
            text += f" ({record.exc_info[1]!r})"
        self.records.append(text[:1000])


@contextlib.contextmanager
def log_net() -> Iterator[LogNet]:
    net = LogNet()
    root = logging.getLogger()
    level = root.level
    root.addHandler(net)
    root.setLevel(min(level or logging.WARNING, logging.WARNING))
    try:
        yield net
    finally:
        root.removeHandler(net)
        root.setLevel(level)


def sessions_of(db_url: str) -> set[str]:
    log = EventLog(Database(db_url))
    try:
        return set(log.session_ids())
    finally:
        log.db.dispose()


def verdict(db_url: str, session_id: str) -> tuple[list[CommandRejected], list[str]]:
    """What the log says of a client's session: every command it refused, and every audit
    violation (hash chain, ticks applied once, outputs, responses, transcriptions)."""
    log = EventLog(Database(db_url))
    try:
        rejected = [r.event for r in log.read_session(session_id) if isinstance(r.event, CommandRejected)]
        audit = audit_session(log, session_id)
        return rejected, [f"{v.check} at {v.seq}: {v.message}" for v in audit.violations]
    finally:
        log.db.dispose()


def events_of(db_url: str, session_id: str) -> list:
    log = EventLog(Database(db_url))
    try:
        return [r.event for r in log.read_session(session_id)]
    finally:
        log.db.dispose()
