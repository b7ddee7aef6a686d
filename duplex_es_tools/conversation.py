"""A spoken turn through the official ``openai`` SDK's realtime client (demo, chaos, bench and
tests), WAV files, and the shared fixture audio the tools speak.

The SDK is the client users have; driving duplex_es with it proves the server speaks the
Realtime protocol as the SDK understands it.
"""

from __future__ import annotations

import asyncio
import base64
import json
import time
import wave
from pathlib import Path
from typing import Any, Awaitable, Callable, Optional

import attrs

__all__ = ["Turn", "default_audio", "read_wav_pcm16", "write_wav_pcm16", "speak_and_listen"]


@attrs.define
class Turn:
    """What the client saw during one spoken turn."""

    session_id: str = ""
    frames: list[str] = attrs.Factory(list)
    events: list[dict[str, Any]] = attrs.Factory(list)
    user_transcript: str = ""
    reply_transcript: str = ""
    reply_audio: bytes = b""
    response_status: str = ""
    #: Seconds from sending ``response.create`` to the first audio delta (``first_audio_s``)
    #: and to ``response.done`` (``done_s``), on the client's clock.
    timings: dict[str, float] = attrs.Factory(dict)

    def of_type(self, type_: str) -> list[dict[str, Any]]:
        """The received server events of one type, in order."""
        return [e for e in self.events if e.get("type") == type_]


def default_audio() -> Path:
    """The shared fixture: "Hi there. Can you tell me what the weather will be like in Lisbon
    tomorrow afternoon?" (24 kHz PCM16), found in the ``shared`` folder beside the checkout."""
    root = Path(__file__).resolve().parents[1]
    for base in (root.parent / "shared", root / "shared", Path.cwd().parent / "shared"):
        path = base / "fixtures" / "audio" / "weather_question_24k.wav"
        if path.exists():
            return path
    raise FileNotFoundError("shared/fixtures/audio/weather_question_24k.wav not found beside the checkout (nor in it); pass --audio FILE.wav")


def read_wav_pcm16(path: Path, rate: int = 24000) -> bytes:
    """Read a mono PCM16 WAV file, resampled to ``rate`` Hz if needed.

    Raises:
        ValueError: the file is not a WAV file of mono 16-bit PCM.
        OSError: the file cannot be read.
    """
    from duplex_es.audio.resample import resample_pcm16

    try:
        with wave.open(str(path), "rb") as w:
            if w.getnchannels() != 1 or w.getsampwidth() != 2:
                raise ValueError(f"{path}: need mono 16-bit PCM, got {w.getnchannels()} channels of {w.getsampwidth() * 8} bits")
            pcm = w.readframes(w.getnframes())
            return resample_pcm16(pcm, w.getframerate(), rate)
    except (wave.Error, EOFError) as exc:
        raise ValueError(f"{path} is not a WAV file ({exc})") from exc


def write_wav_pcm16(path: Path, pcm: bytes, rate: int = 24000) -> None:
    """Write mono PCM16 audio as a WAV file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with wave.open(str(path), "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(rate)
        w.writeframes(pcm)


async def speak_and_listen(
    base_url: str,
    pcm: bytes,
    *,
    model: str = "duplex-es-echo",
    instructions: str = "Repeat what you heard.",
    chunk_ms: int = 100,
    close: bool = True,
    timeout: float = 60.0,
    on_reply: Optional[Callable[[Turn], Awaitable[None]]] = None,
) -> Turn:
    """Open a Realtime session with the SDK, send ``pcm`` (24 kHz PCM16) in ``chunk_ms`` appends,
    commit, ask for a response and collect every server event until ``response.done``.

    Args:
        base_url: ``ws://HOST:PORT/v1``.
        close: send ``session.close`` afterwards and wait for ``session.closed``.
        on_reply: awaited after ``response.done`` while the connection is still open.
    """
    from openai import AsyncOpenAI

    client = AsyncOpenAI(api_key="duplex-es-demo", websocket_base_url=base_url)
    turn = Turn()
    created_at = 0.0
    async with client.realtime.connect(model=model) as conn:

        async def recv_until(kind: str) -> None:
            while True:
                # The raw frame, exactly as the server sent it; conn.parse_event(raw) is what
                # conn.recv() would have returned.
                raw = await conn.recv_bytes()
                data = json.loads(raw)
                turn.frames.append(raw.decode("utf-8"))
                turn.events.append(data)
                t = data.get("type")
                if t == "session.created":
                    turn.session_id = data["session"]["id"]
                elif t == "conversation.item.input_audio_transcription.completed":
                    turn.user_transcript = data["transcript"]
                elif t == "response.output_audio_transcript.delta":
                    turn.reply_transcript += data["delta"]
                elif t == "response.output_audio.delta":
                    turn.reply_audio += base64.b64decode(data["delta"])
                    turn.timings.setdefault("first_audio_s", time.perf_counter() - created_at)
                elif t == "response.done":
                    turn.response_status = data["response"]["status"]
                    turn.timings["done_s"] = time.perf_counter() - created_at
                if t == kind:
                    return

        async def run() -> None:
            await recv_until("session.created")
            await conn.session.update(
                session={
                    "type": "realtime",
                    "instructions": instructions,
                    "output_modalities": ["audio"],
                    "audio": {
                        "input": {"format": {"type": "audio/pcm", "rate": 24000}, "turn_detection": None},
                        "output": {"format": {"type": "audio/pcm", "rate": 24000}, "voice": "alloy"},
                    },
                }
            )
            await recv_until("session.updated")
            step = 24000 * 2 * chunk_ms // 1000
            for i in range(0, len(pcm), step):
                await conn.input_audio_buffer.append(audio=base64.b64encode(pcm[i : i + step]).decode("ascii"))
            await conn.input_audio_buffer.commit()
            nonlocal created_at
            created_at = time.perf_counter()
            await conn.response.create()
            await recv_until("response.done")
            if on_reply is not None:
                await on_reply(turn)
            if close:
                await conn.send({"type": "session.close"})
                await recv_until("session.closed")

        await asyncio.wait_for(run(), timeout)
    return turn
