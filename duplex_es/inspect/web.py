"""The inspector on HTTP: a Starlette app serving the single-page UI (``static/``) and its JSON,
WAV and image API (docs/inspector.md, "HTTP API").

``duplex-es inspect`` runs it alone (local use: no authentication, like ``replay``, anyone with
the database file reads it all); ``duplex-es serve`` mounts it under ``/inspect`` with
``authenticate``: then every API request needs ``Authorization: Bearer <key>`` (the page asks for
the key once, keeps it in the tab's ``sessionStorage`` and sends it with ``fetch``; audio and
frames are fetched as blobs the same way), and a session the key's principal may not read is
``404 session_not_found``, exactly like ``GET /v1/sessions/{id}``. The page itself (HTML, JS,
CSS) holds no data and is served to anyone.
"""

from __future__ import annotations

import logging
from importlib import resources
from typing import Any, Callable, Mapping, Optional, Protocol

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, Response
from starlette.routing import Route

from duplex_es.inspect.service import InspectError, Inspector
from duplex_es.store import StoredEventError

__all__ = ["Reader", "STATIC", "create_inspector_app", "static_text"]

log = logging.getLogger(__name__)

#: The UI's files, shipped as package data.
STATIC = ("index.html", "inspector.js", "inspector.css")
_TYPES = {"html": "text/html; charset=utf-8", "js": "text/javascript; charset=utf-8", "css": "text/css; charset=utf-8"}


class Reader(Protocol):
    """Who a request speaks for, as the inspector needs it (a server principal is one)."""

    def may_read(self, owner: Optional[str]) -> bool:
        """Whether sessions opened by principal ``owner`` may be read."""


def static_text(name: str) -> str:
    """The text of one of the UI's files (:data:`STATIC`)."""
    return resources.files("duplex_es.inspect").joinpath("static", name).read_text(encoding="utf-8")


def _int(request: Request, name: str, default: Optional[int] = None) -> Optional[int]:
    raw = request.query_params.get(name)
    if raw is None or raw == "":
        return default
    try:
        return int(raw)
    except ValueError:
        raise InspectError("invalid_parameter", f"{name} must be an integer, got {raw[:32]!r}", param=name) from None


def create_inspector_app(inspector: Inspector, *, authenticate: Optional[Callable[[Mapping[str, str]], Optional[Reader]]] = None) -> Starlette:
    """The inspector's ASGI app over ``inspector``.

    Args:
        authenticate: ``headers -> reader`` (``None``: refused, 401 ``invalid_api_key``); when
            not given, every request reads every session (local use).
    """

    def reader_of(request: Request) -> Optional[Reader]:
        if authenticate is None:
            return None
        reader = authenticate(request.headers)
        if reader is None:
            raise InspectError("invalid_api_key", "send Authorization: Bearer <key>", status=401)
        return reader

    def readable(request: Request) -> str:
        """The path's session id, once the caller may read it (404 as for a missing one)."""
        session_id = request.path_params["session_id"]
        reader = reader_of(request)
        if reader is not None:
            exists, owner = inspector.owner(session_id)
            if not exists or not reader.may_read(owner):
                log.info("inspector: session %.64r refused (not found or not the caller's)", session_id)
                raise InspectError("session_not_found", f"no session {session_id}", status=404, param="session_id")
        return session_id

    def api(fn: Callable[[Request], Any]) -> Callable[[Request], Any]:
        async def endpoint(request: Request) -> Response:
            try:
                out = await run_in_threadpool(fn, request)
            except InspectError as err:
                log.info("inspector: %s %s refused: %s %s", request.method, request.url.path, err.code, err.message)
                return JSONResponse(err.json(), status_code=err.status)
            except StoredEventError as err:
                # A row the current catalogue cannot decode (tampered, or from a newer version):
                # named, so `duplex-es audit` can be pointed at it; the audit endpoint still works.
                log.warning("inspector: %s %s: %s", request.method, request.url.path, err)
                body = {"error": {"code": "stored_event_unreadable", "message": str(err), "param": None}}
                return JSONResponse(body, status_code=500)
            return out if isinstance(out, Response) else JSONResponse(out)

        return endpoint

    def config(request: Request) -> dict[str, Any]:
        return {"auth": authenticate is not None, "export": False}

    def sessions(request: Request) -> dict[str, Any]:
        reader = reader_of(request)
        errors = request.query_params.get("errors")
        has_errors = None if errors in (None, "") else errors in ("1", "true", "yes")
        rows = inspector.sessions(
            kind=request.query_params.get("kind") or None,
            status=request.query_params.get("status") or None,
            text=request.query_params.get("q") or None,
            has_errors=has_errors,
            may_read=reader.may_read if reader is not None else None,
        )
        return {"sessions": rows}

    def overview(request: Request) -> dict[str, Any]:
        return inspector.overview(readable(request))

    def peaks(request: Request) -> dict[str, Any]:
        sid = readable(request)
        return inspector.peaks(sid, request.query_params.get("lane", "user"), _int(request, "from_ms"), _int(request, "to_ms"), _int(request, "buckets", 1000) or 0)

    def audio(request: Request) -> Response:
        sid = readable(request)
        data = inspector.wav(sid, request.query_params.get("lane", "user"), _int(request, "from_ms"), _int(request, "to_ms"))
        return Response(data, media_type="audio/wav")

    def events(request: Request) -> dict[str, Any]:
        sid = readable(request)
        return inspector.events(sid, _int(request, "from_seq", 1) or 0, _int(request, "limit", 200) or 0)

    def state(request: Request) -> dict[str, Any]:
        sid = readable(request)
        seq = _int(request, "seq")
        if seq is None:
            ms = _int(request, "ms")
            if ms is None:
                raise InspectError("invalid_parameter", "give seq (an event) or ms (a point on the clock)", param="seq")
            seq = inspector.seq_at(sid, ms)
        return inspector.state_at(sid, seq)

    def audit(request: Request) -> dict[str, Any]:
        return inspector.audit(readable(request))

    def frame(request: Request) -> Response:
        sid = readable(request)
        data, mime = inspector.frame(sid, _int(request, "seq") or 0, _int(request, "index", 0) or 0)
        return Response(data, media_type=mime)

    async def page(request: Request) -> Response:
        return HTMLResponse(static_text("index.html"))

    async def static(request: Request) -> Response:
        name = request.path_params["name"]
        if name not in STATIC:
            return JSONResponse({"error": {"code": "not_found", "message": f"no file {name[:64]}", "param": None}}, status_code=404)
        return Response(static_text(name), media_type=_TYPES[name.rsplit(".", 1)[1]])

    routes = [
        Route("/", page),
        Route("/static/{name}", static),
        Route("/api/config", api(config)),
        Route("/api/sessions", api(sessions)),
        Route("/api/sessions/{session_id}/overview", api(overview)),
        Route("/api/sessions/{session_id}/peaks", api(peaks)),
        Route("/api/sessions/{session_id}/audio.wav", api(audio)),
        Route("/api/sessions/{session_id}/events", api(events)),
        Route("/api/sessions/{session_id}/state", api(state)),
        Route("/api/sessions/{session_id}/audit", api(audit)),
        Route("/api/sessions/{session_id}/frame", api(frame)),
    ]
    return Starlette(routes=routes)
