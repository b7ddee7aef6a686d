"""Real sessions for the inspector's tests: a spoken turn the user barges in on, and a world
session, each made by real ``serve`` + ``worker`` processes from the speech fixtures."""

from __future__ import annotations

import base64
import contextlib
import json
import time
import urllib.request
from pathlib import Path
from typing import Any, Iterator, Optional

from websockets.sync.client import connect

from duplex_es_tools.processes import Proc, free_port

from conftest import FIXTURES
from wsclient import WsClient

CAMERA = "duplex_es.camera_keys.v1"

#: What the client played of the answer before the user cut in, and where it truncates it (ms).
CUT_MS = 200


def _stream(c: WsClient, data: bytes, bytes_per_chunk: int = 4800) -> None:
    """Append ``data`` (PCM16, 24 kHz) in 100 ms appends, as fast as the socket takes them."""
    for i in range(0, len(data), bytes_per_chunk):
        c.send({"type": "input_audio_buffer.append", "audio": base64.b64encode(data[i : i + bytes_per_chunk]).decode()})


def spoken_barge_in(port: int, headers: Optional[dict] = None) -> dict:
    """A server-VAD turn from the noisy spoken fixture; the assistant starts answering, the client
    acks ``CUT_MS`` of playback the user talks over the answer (the correction fixture), server VAD
    cancels the answer, and the client truncates the assistant item at what it played. Returns
    ``{"session_id", "response_id", "item_id", "cut_ms"}``."""
    from duplex_es_tools.conversation import read_wav_pcm16

    c = WsClient(port, headers=headers)
    try:
        c.update({"audio": {"input": {"turn_detection": {"type": "server_vad"}}}})
        _stream(c, read_wav_pcm16(FIXTURES / "audio" / "noise_speech_silence_24k.wav"))
        c.recv("input_audio_buffer.committed")
        rid = c.recv("response.created")["response"]["id"]
        c.recv("response.output_audio.delta")
        # No waiting between the ack and the user's new speech: the reference engine answers
        # faster than real time, so the answer must still be running when the user cuts in.
        c.send({"type": "playback.ack", "response_id": rid, "played_ms": CUT_MS})
        correction = read_wav_pcm16(FIXTURES / "audio" / "correction_24k.wav")
        _stream(c, correction[: 24000 * 2])
        c.recv("playback.acknowledged")
        done = c.recv("response.done", **{"response.id": rid})["response"]
        assert done["status"] == "cancelled", done
        item_id = done["output"][0]["id"]
        c.send({"type": "conversation.item.truncate", "item_id": item_id, "content_index": 0, "audio_end_ms": CUT_MS})
        c.recv("conversation.item.truncated")
        return {"session_id": c.session_id, "response_id": rid, "item_id": item_id, "cut_ms": CUT_MS}
    finally:
        c.close()


def world_session(port: int, headers: Optional[dict] = None) -> dict:
    """A world session of a few chunks: interactions 1 (camera keys) and 2 (a new prompt) are
    applied by one chunk. Returns ``{"session_id", "applied_chunk"}`` (that chunk's index)."""
    ws = connect(f"ws://127.0.0.1:{port}/v1/world", max_size=None, additional_headers=headers or {})
    events: list[dict] = []

    def recv(kind: str, **match: Any) -> dict:
        for ev in events:
            if ev["type"] == kind and all(ev.get(k) == v for k, v in match.items()):
                events.remove(ev)
                return ev
        while True:
            ev = json.loads(ws.recv(timeout=30))
            if ev["type"] == kind and all(ev.get(k) == v for k, v in match.items()):
                return ev
            events.append(ev)

    try:
        ws.send(json.dumps({"type": "session.start", "prompt": "green hills", "seed": 7, "width": 48, "height": 32, "frames_per_chunk": 3}))
        sid = recv("session.started")["session_id"]
        recv("world.chunk")
        ws.send(json.dumps({"type": "session.interaction", "event_id": 1, "controls": [{"track": "camera", "schema": CAMERA, "data": {"keys": ["W"]}}]}))
        ws.send(json.dumps({"type": "session.interaction", "event_id": 2, "prompt": "snowy hills"}))
        applied = recv("world.chunk", applied_event_ids=[1, 2])
        recv("world.chunk", chunk_index=applied["chunk_index"] + 1)
        ws.send(json.dumps({"type": "session.close"}))
        recv("session.closed")
        return {"session_id": sid, "applied_chunk": applied["chunk_index"]}
    finally:
        ws.close()


@contextlib.contextmanager
def serving_inspector(db_url: str, tmp: Path) -> Iterator[str]:
    """``duplex-es inspect --db db_url`` on a free local port; yields its base URL."""
    port = free_port()
    proc = Proc(["inspect", "--db", db_url, "--host", "127.0.0.1", "--port", str(port)], tmp / f"inspect-{port}.log")
    base = f"http://127.0.0.1:{port}/"
    try:
        deadline = time.monotonic() + 30
        while True:
            if not proc.alive():
                raise RuntimeError(f"inspect exited:\n{proc.output()[-3000:]}")
            try:
                with urllib.request.urlopen(base + "api/config", timeout=1):
                    break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)
        yield base
    finally:
        proc.stop()


def full_duplex_overlap(port: int) -> str:
    """A full-duplex session (``duplex-es-duplex``): the question streamed at real time in 20 ms
    appends, the model answers by itself; the correction, and one second of speech over the
    next reply, which the overlap policy cuts (barge_in). Returns the session id."""
    from duplex_es_tools.conversation import read_wav_pcm16

    def stream(c: WsClient, pcm: bytes) -> None:
        start = time.monotonic()
        for n, at in enumerate(range(0, len(pcm), 960), start=1):
            c.send({"type": "input_audio_buffer.append", "audio": base64.b64encode(pcm[at : at + 960].ljust(960, b"\0")).decode()})
            time.sleep(max(0.0, start + n * 0.020 - time.monotonic()))

    def silence(s: float) -> bytes:
        return bytes(int(24000 * s) * 2)

    c = WsClient(port, model="duplex-es-duplex")
    try:
        c.update({"duplex": {"extension_events": True}})  # response.speak: the model takes its turn
        stream(c, read_wav_pcm16(FIXTURES / "audio" / "weather_question_24k.wav") + silence(1.5))
        c.recv("response.speak", 30)
        c.recv("response.done", 30)
        correction = read_wav_pcm16(FIXTURES / "audio" / "correction_24k.wav")
        stream(c, correction + silence(1.2))
        c.recv("response.speak", 30)
        stream(c, correction[: 24000 * 2])
        c.recv("response.done", 10, **{"response.status": "cancelled"})
        stream(c, silence(1.0))
        return c.session_id
    finally:
        c.close()
