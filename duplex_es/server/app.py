"""The ASGI application: ``/v1/realtime`` (OpenAI Realtime GA over WebSocket), session state for
debugging, health and Prometheus metrics.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import AsyncIterator

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route, WebSocketRoute
from starlette.websockets import WebSocket, WebSocketDisconnect

from duplex_es.domain import CancelResponse, OpenSession, fold
from duplex_es.events import to_plain
from duplex_es.protocol import parse_frame
from duplex_es.server.follower import LogFollower
from duplex_es.server.host import SessionHost, new_id
from duplex_es.store import Database, EventLog

__all__ = ["create_app", "DEFAULT_MODEL"]

log = logging.getLogger(__name__)

#: The model name a session gets when the client does not pass ``?model=``.
DEFAULT_MODEL = "duplex-es-echo"


def create_app(db: Database, *, api_key: str | None = None, poll_ms: int = 5) -> Starlette:
    """Build the server for one database.

    Args:
        db: the log's database (already migrated).
        api_key: if set, clients must send ``Authorization: Bearer <api_key>``.
        poll_ms: how often the log follower polls for worker outputs while idle.
    """
    event_log = EventLog(db)
    hosts: dict[str, SessionHost] = {}
    follower = LogFollower(event_log, lambda: hosts, poll_ms=poll_ms)

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        await follower.start()
        log.info("serving on %s", db.describe())
        try:
            yield
        finally:
            await follower.stop()

    async def realtime(ws: WebSocket) -> None:
        if api_key is not None and ws.headers.get("authorization") != f"Bearer {api_key}":
            await ws.close(code=1008, reason="invalid API key")
            return
        await ws.accept()
        session_id = new_id("sess")
        model = ws.query_params.get("model") or DEFAULT_MODEL
        host = SessionHost(event_log, session_id, send=ws.send_text)
        hosts[session_id] = host
        log.info("session %s opened (model %s)", session_id, model)
        try:
            await host.handle(OpenSession(session_id=session_id, model=model))
            while not host.closed.is_set():
                message = await ws.receive()
                if message["type"] == "websocket.disconnect":
                    break
                frame = message.get("text")
                if frame is None:
                    frame = message.get("bytes") or b""
                await host.handle(parse_frame(frame, new_id))
            if host.closed.is_set():
                await ws.close(code=1000)
        except WebSocketDisconnect:
            pass
        except Exception:
            # The log could not be written (database down, ...): nothing unlogged may reach the
            # client, so end the connection; what was committed is safe in the log.
            log.exception("session %s: internal error; closing the connection", session_id)
            with contextlib.suppress(Exception):
                await ws.close(code=1011, reason="internal error; the session is safe in the log")
        finally:
            host.detach()
            if host.state.active_response is not None:
                # Nobody is listening: stop generating. The session itself stays in the log.
                try:
                    await host.handle(CancelResponse(cause="client_disconnected"))
                except Exception:
                    log.exception("session %s: could not cancel the response of a closed connection", session_id)
            hosts.pop(session_id, None)
            log.info("session %s: connection ended", session_id)

    async def session_state(request: Request) -> Response:
        session_id = request.path_params["session_id"]
        host = hosts.get(session_id)
        if host is not None:
            state, live = host.state, True
        else:
            records = await asyncio.to_thread(event_log.read_session, session_id)
            if not records:
                return JSONResponse({"error": {"code": "session_not_found", "message": f"no session {session_id}"}}, status_code=404)
            state, live = fold((r.seq, r.event) for r in records), False
        return JSONResponse({"session_id": session_id, "live": live, "seq": state.seq, "state": to_plain(state)})

    async def healthz(request: Request) -> Response:
        return JSONResponse({"status": "ok", "sessions": len(hosts), "database": db.describe()})

    async def metrics(request: Request) -> Response:
        return Response(generate_latest(), media_type=CONTENT_TYPE_LATEST)

    app = Starlette(
        routes=[
            WebSocketRoute("/v1/realtime", realtime),
            Route("/v1/sessions/{session_id}", session_state),
            Route("/healthz", healthz),
            Route("/metrics", metrics),
        ],
        lifespan=lifespan,
    )
    app.state.hosts = hosts
    app.state.log = event_log
    return app
