"""The ASGI application: ``/v1/realtime`` (OpenAI Realtime over WebSocket, GA or beta names),
``/v1/world`` (interactive world sessions), session state for debugging, health and Prometheus
metrics.

The WebSocket handler is a thin layer over :class:`~duplex_es.server.sessions.DuplexSessions`:
frames become commands (:func:`~duplex_es.protocol.parse_frame`), the session's server events
become frames.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import logging
from typing import AsyncIterator

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route, WebSocketRoute
from starlette.websockets import WebSocket, WebSocketDisconnect

from duplex_es.domain import Code, Invalid, fold
from duplex_es.domain.world import CloseWorld, StartWorld
from duplex_es.events import to_plain
from duplex_es.protocol import encode_wire, parse_frame, wire_to_beta
from duplex_es.protocol.world import parse_world_frame
from duplex_es.server.host import SessionHost, new_id, now_ms
from duplex_es.server.sessions import DEFAULT_MODEL, DuplexSessions
from duplex_es.store import Database

__all__ = ["create_app", "DEFAULT_MODEL"]

log = logging.getLogger(__name__)


def create_app(
    db: Database,
    *,
    api_key: str | None = None,
    poll_ms: int = 5,
    idle_ttl_ms: int = 300_000,
    disconnect_grace_ms: int = 30_000,
    reaper_interval_ms: int = 1000,
) -> Starlette:
    """Build the server for one database.

    Args:
        db: the log's database (already migrated).
        api_key: if set, clients must send ``Authorization: Bearer <api_key>``.
        poll_ms: how often the log follower polls for worker outputs while idle.
        idle_ttl_ms, disconnect_grace_ms, reaper_interval_ms: session leases (DESIGN §4).
    """
    sessions = DuplexSessions(
        db,
        idle_ttl_ms=idle_ttl_ms,
        disconnect_grace_ms=disconnect_grace_ms,
        reaper_interval_ms=reaper_interval_ms,
        poll_ms=poll_ms,
    )

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        await sessions.start()
        log.info("serving on %s", db.describe())
        try:
            yield
        finally:
            await sessions.stop()

    async def realtime(ws: WebSocket) -> None:
        if api_key is not None and ws.headers.get("authorization") != f"Bearer {api_key}":
            await ws.close(code=1008, reason="invalid API key")
            return
        dialect = "beta" if "realtime=v1" in ws.headers.get("openai-beta", "") else "ga"
        await ws.accept()
        host = await sessions.open_session(ws.query_params.get("model") or DEFAULT_MODEL)
        me = host.listener
        log.info("session %s opened (%s dialect)", host.session_id, dialect)
        writer = asyncio.create_task(_write(ws, host, dialect, me))
        clean = False
        try:
            while not host.ended.is_set() and host.listener == me:
                message = await ws.receive()
                if message["type"] == "websocket.disconnect" or host.listener != me:
                    break
                frame = message.get("text")
                if frame is None:
                    frame = message.get("bytes") or b""
                await host.submit(parse_frame(frame, new_id, dialect=dialect))
            # Replaced by a resume elsewhere: this connection no longer speaks for the session.
            clean = host.ended.is_set() or host.listener != me
        except WebSocketDisconnect:
            pass
        except Exception:
            # The log could not be written (database down, ...): nothing unlogged may reach the
            # client, so end the connection; what was committed is safe in the log.
            log.exception("session %s: internal error; closing the connection", host.session_id)
            with contextlib.suppress(Exception):
                await ws.close(code=1011, reason="internal error; the session is safe in the log")
        finally:
            if clean:
                await writer  # every queued event, session.closed last
                with contextlib.suppress(Exception):
                    await ws.close(code=1000)
            else:
                writer.cancel()
                with contextlib.suppress(Exception):
                    await host.detach()
            log.info("session %s: connection ended", host.session_id)

    async def world(ws: WebSocket) -> None:
        if api_key is not None and ws.headers.get("authorization") != f"Bearer {api_key}":
            await ws.close(code=1008, reason="invalid API key")
            return
        await ws.accept()
        session_id = new_id("world")
        host: SessionHost | None = None
        writer: asyncio.Task | None = None
        clean = False
        try:
            while host is None or not host.ended.is_set():
                message = await ws.receive()
                if message["type"] == "websocket.disconnect":
                    break
                frame = message.get("text")
                if frame is None:
                    frame = message.get("bytes") or b""
                command = parse_world_frame(frame, new_id, now_ms(), started=host is not None, session_id=session_id)
                if host is None:
                    if not isinstance(command, StartWorld):
                        # No session exists yet, so there is no log to record this in.
                        await ws.send_text(encode_wire(_pre_start_error(command)))
                        continue
                    host = await sessions.open_world(command)
                    writer = asyncio.create_task(_write_world(ws, host, command.config.binary))
                    log.info("world session %s started", session_id)
                    continue
                await host.submit(command)
            clean = host is not None and host.ended.is_set()
        except WebSocketDisconnect:
            pass
        except Exception:
            log.exception("world session %s: internal error; closing the connection", session_id)
            with contextlib.suppress(Exception):
                await ws.close(code=1011, reason="internal error; the session is safe in the log")
        finally:
            if host is not None and writer is not None:
                if clean:
                    await writer
                else:
                    writer.cancel()
                    with contextlib.suppress(Exception):
                        await host.submit(CloseWorld(reason="connection_closed"))
            log.info("world session %s: connection ended", session_id)

    async def session_state(request: Request) -> Response:
        session_id = request.path_params["session_id"]
        host = sessions.get(session_id)
        if host is not None:
            state, live = host.state, True
        else:
            records = await asyncio.to_thread(sessions.log.read_session, session_id)
            if not records:
                return JSONResponse({"error": {"code": "session_not_found", "message": f"no session {session_id}"}}, status_code=404)
            state, live = fold((r.seq, r.event) for r in records), False
        return JSONResponse({"session_id": session_id, "live": live, "seq": state.seq, "state": to_plain(state)})

    async def healthz(request: Request) -> Response:
        return JSONResponse({"status": "ok", "sessions": len(sessions.hosts), "database": db.describe()})

    async def metrics(request: Request) -> Response:
        return Response(generate_latest(), media_type=CONTENT_TYPE_LATEST)

    app = Starlette(
        routes=[
            WebSocketRoute("/v1/realtime", realtime),
            WebSocketRoute("/v1/world", world),
            Route("/v1/sessions/{session_id}", session_state),
            Route("/healthz", healthz),
            Route("/metrics", metrics),
        ],
        lifespan=lifespan,
    )
    app.state.sessions = sessions
    return app


def _pre_start_error(command: object) -> dict:
    code = getattr(command, "code", Code.SESSION_NOT_STARTED)
    message = getattr(command, "message", "send session.start first")
    if not isinstance(command, Invalid) or code == Code.UNKNOWN_TYPE:
        code, message = Code.SESSION_NOT_STARTED, "send session.start first"
    error = {"type": "invalid_request_error", "code": code, "message": message, "param": getattr(command, "param", None), "event_id": getattr(command, "event_id", None)}
    return {"type": "error", "error": error}


async def _write_world(ws: WebSocket, host: SessionHost, binary: bool) -> None:
    """Send a world session's events; with ``binary``, each chunk's frames follow its JSON as
    binary WebSocket frames (PNG bytes) instead of base64 inside it."""
    try:
        async for wire in host.events():
            if binary and wire["type"] == "world.chunk":
                frames = wire["frames"]
                await ws.send_text(encode_wire({**wire, "frames": None, "binary_frames": len(frames)}))
                for f in frames:
                    await ws.send_bytes(base64.b64decode(f))
            else:
                await ws.send_text(encode_wire(wire))
        if host.ended.is_set():
            await ws.close(code=1000)
    except Exception as exc:
        log.info("world session %s: client gone while sending (%s)", host.session_id, exc)


async def _write(ws: WebSocket, host: SessionHost, dialect: str, me: int) -> None:
    """Send the session's server events to the socket, in order, in the client's dialect; close
    it when the session ends (1000) or another client took it over (4000, ``session_replaced``)."""
    try:
        async for wire in host.events():
            if dialect == "beta":
                wire = wire_to_beta(wire)
                if wire is None:
                    continue
            await ws.send_text(encode_wire(wire))
        if host.ended.is_set():  # closed or expired: say goodbye after the last event
            await ws.close(code=1000)
        elif host.listener != me:
            await ws.close(code=4000, reason="session_replaced")
    except Exception as exc:  # the socket went away mid-send; the log has everything
        log.info("session %s: client gone while sending (%s)", host.session_id, exc)
