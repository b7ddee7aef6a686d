"""The bare transport ceiling (bench row 13, issue 16): duplex_es's serving stack with nothing
behind it.

What it is: a Starlette app run by uvicorn exactly as ``duplex-es serve`` runs its own (the same
WebSocket implementation ``websockets-sansio``, the same HTTP protocol with its handshake deadline,
the same frame size limit, uvicorn's default event loop, which is uvloop when installed), whose
``/v1/realtime`` endpoint answers just enough of the Realtime protocol for the load generator
(:mod:`duplex_es_tools.loadgen`) to run against it:

* on connect, a ``session.created`` shaped like duplex-es's;
* ``session.update`` → ``session.updated`` echoing ``turn_detection`` and
  ``duplex.acknowledge_appends`` from the request;
* ``input_audio_buffer.append`` → the JSON is parsed, its ``audio`` decoded as strict base64 (as
  duplex-es checks it), and ``input_audio_buffer.appended`` sent back with the client's
  ``event_id`` and the audio's place on the input clock (``audio_start_ms``, ``audio_end_ms``,
  PCM16 24 kHz), in the shape duplex-es acknowledges appends with ``acknowledge_appends`` on;
* ``session.close`` → ``session.closed``, then the socket closes (1000);
* ``GET /healthz`` → ``{"status": "ok", "sessions": N}`` (the ramp waits for ``sessions: 0``
  between its runs).

What it is not: a server. Nothing is logged, committed, folded, validated beyond parsing the JSON
and the base64, authenticated, resumed or projected; there is no session state but a sample
counter, and an answer is written inline by the reading task (duplex-es answers from a separate
writer task following the session's events). Any other client event gets an ``error`` event.
The difference between row 10 and this peer, measured in the same run with the same load
generator, is what duplex-es's session logic (and its log) costs on top of the transport.

Run as ``python -m duplex_es_tools.bare_transport --port N`` (the bench starts it with
:func:`duplex_es_tools.processes.start_bare_transport`); loopback only.
"""

from __future__ import annotations

import argparse
import binascii
import json
import secrets
from typing import Any, Optional, Sequence

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route, WebSocketRoute
from starlette.websockets import WebSocket, WebSocketDisconnect

__all__ = ["create_app", "main", "RATE_HZ"]

#: The input audio's sample rate (PCM16 mono), as duplex-es's default input format.
RATE_HZ = 24_000

#: The same encoder settings as duplex-es's ``encode_wire`` (compact, UTF-8 as is).
_JSON = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False)


def _session(session_id: str, turn_detection: Any, acknowledge_appends: bool) -> dict[str, Any]:
    """The session object of ``session.created`` / ``session.updated``: duplex-es's fields, fixed
    values (nothing here is configurable but what the load generator sets)."""
    return {
        "type": "realtime",
        "object": "realtime.session",
        "id": session_id,
        "model": "bare-transport",
        "instructions": "",
        "output_modalities": ["audio"],
        "audio": {
            "input": {"format": {"type": "audio/pcm", "rate": RATE_HZ}, "transcription": None, "noise_reduction": None, "turn_detection": turn_detection},
            "output": {"format": {"type": "audio/pcm", "rate": RATE_HZ}, "voice": "alloy", "speed": 1.0},
        },
        "tools": [],
        "tool_choice": "auto",
        "max_output_tokens": "inf",
        "duplex": {"acknowledge_appends": acknowledge_appends, "mode": "turn_based"},
    }


class _Connection:
    """One connection's counters: the server event seq (numbering ``event_id`` and
    ``server_event_seq`` as duplex-es does, one log seq per answer) and the samples appended."""

    __slots__ = ("ws", "session_id", "seq", "samples", "turn_detection", "acknowledge")

    def __init__(self, ws: WebSocket) -> None:
        self.ws = ws
        self.session_id = f"sess_{secrets.token_hex(8)}"
        self.seq = 0
        self.samples = 0
        self.turn_detection: Any = {"type": "server_vad"}
        self.acknowledge = False

    async def send(self, wire: dict[str, Any]) -> None:
        self.seq += 1
        await self.ws.send_text(_JSON.encode({"event_id": f"event_{self.seq}_0", "server_event_seq": self.seq * 1000, **wire}))

    async def answer(self, event: Any) -> bool:
        """Answer one parsed client event; ``False`` once the session is closed."""
        kind = event.get("type") if isinstance(event, dict) else None
        if kind == "input_audio_buffer.append":
            try:
                audio = binascii.a2b_base64(event.get("audio") or "", strict_mode=True)
            except (binascii.Error, TypeError, ValueError):
                await self.error("invalid_audio_base64", "audio is not strict base64", event)
                return True
            start = self.samples
            self.samples += len(audio) // 2
            if self.acknowledge:
                await self.send(
                    {
                        "type": "input_audio_buffer.appended",
                        "client_event_id": event.get("event_id"),
                        "audio_start_ms": start * 1000 // RATE_HZ,
                        "audio_end_ms": self.samples * 1000 // RATE_HZ,
                    }
                )
            return True
        if kind == "session.update":
            session = event.get("session") or {}
            audio_in = (session.get("audio") or {}).get("input") or {}
            if "turn_detection" in audio_in:
                self.turn_detection = audio_in["turn_detection"]
            self.acknowledge = bool((session.get("duplex") or {}).get("acknowledge_appends", self.acknowledge))
            await self.send({"type": "session.updated", "session": _session(self.session_id, self.turn_detection, self.acknowledge)})
            return True
        if kind == "session.close":
            await self.send({"type": "session.closed", "session_id": self.session_id, "reason": "client_close"})
            return False
        await self.error("unknown_type", f"the bare transport answers append, session.update and session.close, not {kind!r}", event)
        return True

    async def error(self, code: str, message: str, event: Any) -> None:
        client_id = event.get("event_id") if isinstance(event, dict) else None
        await self.send({"type": "error", "error": {"type": "invalid_request_error", "code": code, "message": message, "param": None, "event_id": client_id}})


def create_app() -> Starlette:
    """The peer's ASGI app: ``/v1/realtime`` (WebSocket) and ``/healthz``."""
    open_sessions = 0

    async def realtime(ws: WebSocket) -> None:
        nonlocal open_sessions
        await ws.accept()
        conn = _Connection(ws)
        open_sessions += 1
        try:
            await conn.send({"type": "session.created", "session": _session(conn.session_id, conn.turn_detection, conn.acknowledge)})
            while True:
                message = await ws.receive()
                if message["type"] == "websocket.disconnect":
                    break
                frame = message.get("text")
                try:
                    event = json.loads(frame if frame is not None else (message.get("bytes") or b""))
                except ValueError:
                    await conn.error("invalid_json", "frame is not valid JSON", None)
                    continue
                if not await conn.answer(event):
                    await ws.close(code=1000)
                    break
        except WebSocketDisconnect:
            pass
        finally:
            open_sessions -= 1

    async def healthz(request: Request) -> Response:
        return JSONResponse({"status": "ok", "sessions": open_sessions, "database": None})

    return Starlette(routes=[WebSocketRoute("/v1/realtime", realtime), Route("/healthz", healthz)])


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Serve the peer on ``--host`` (loopback) and ``--port`` with ``duplex-es serve``'s uvicorn
    options until SIGTERM/SIGINT. Returns 0.

    Raises:
        SystemExit: bad arguments, or a ``--host`` that is not loopback (exit 2).
    """
    import uvicorn

    from duplex_es.protocol import MAX_FRAME_BYTES
    from duplex_es.server.handshake import DEFAULT_HANDSHAKE_TIMEOUT_MS, handshake_protocol

    p = argparse.ArgumentParser(prog="python -m duplex_es_tools.bare_transport", description="bench row 13's bare transport peer")
    p.add_argument("--host", default="127.0.0.1", choices=("127.0.0.1", "localhost", "::1"))
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--log-level", default="WARNING")
    args = p.parse_args(argv)
    # The options of ``duplex-es serve`` (duplex_es/cli/main.py, cmd_serve), so the two differ
    # only in what sits behind the socket.
    uvicorn.run(
        create_app(),
        host=args.host,
        port=args.port,
        ws="websockets-sansio",
        http=handshake_protocol(DEFAULT_HANDSHAKE_TIMEOUT_MS),
        ws_max_size=2 * MAX_FRAME_BYTES,
        log_level=args.log_level.lower(),
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
