"""The ASGI application: the routes, the lifespan of the sessions, and the HTTP endpoints
(session state for debugging, health, Prometheus metrics) and the session inspector under
``/inspect`` (:mod:`duplex_es.inspect.web`). The WebSocket endpoints,
``/v1/realtime`` and ``/v1/world``, are in :mod:`duplex_es.server.endpoints`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import AsyncIterator, Sequence

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Mount, Route, WebSocketRoute

from duplex_es.events import to_plain
from duplex_es.inspect import Inspector
from duplex_es.inspect.web import create_inspector_app
from duplex_es.server.endpoints import Server, realtime, world
from duplex_es.server.models import ModelMap
from duplex_es.server.principals import Keyring, Principal
from duplex_es.server.sessions import DEFAULT_MODEL, DuplexSessions
from duplex_es.server.throttle import ResumeThrottle
from duplex_es.snapshots import load_state
from duplex_es.erasure import ErasureRefused, erase_session
from duplex_es.retention import RetentionPolicy
from duplex_es.store import Database, EventLog, KeyRing
from duplex_es.store.datakeys import MasterKeys

__all__ = ["create_app", "DEFAULT_MODEL"]

log = logging.getLogger(__name__)


def create_app(
    db: Database,
    *,
    api_key: str | None = None,
    keyring: Keyring | None = None,
    resume_throttle: ResumeThrottle | None = None,
    poll_ms: int = 5,
    idle_ttl_ms: int = 300_000,
    disconnect_grace_ms: int = 30_000,
    reaper_interval_ms: int = 1000,
    snapshot_every: int = 1000,
    server_id: str | None = None,
    owner_ttl_ms: int = 10_000,
    group_commit_window_ms: float = 0.0,
    models: ModelMap | None = None,
    commit_timeout_ms: float = 2000.0,
    chain_keys: KeyRing | None = None,
    master_keys: MasterKeys | None = None,
    retain_days: float | None = None,
    retention_interval_ms: int = 3_600_000,
    url_token_leeway_ms: int = 0,
    archive_dirs: Sequence[str] = (),
) -> Starlette:
    """Build the server for one database.

    Args:
        db: the log's database (already migrated).
        api_key: if set, clients must send ``Authorization: Bearer <api_key>``: shorthand for
            a keyring of one operator principal named ``default``.
        keyring: the API keys, each a named principal (``serve --api-keys``); give this or
            ``api_key``. Neither: every request is anonymous and sessions have no owner.
        resume_throttle: the throttle of failed resumes (default: 60 s window, see
            :class:`~duplex_es.server.throttle.ResumeThrottle`).
        poll_ms: how often the log follower polls for worker outputs while idle.
        idle_ttl_ms, disconnect_grace_ms, reaper_interval_ms: session leases (docs/protocol.md).
        snapshot_every: snapshot each session's state every this many events (0: never).
        server_id, owner_ttl_ms, group_commit_window_ms: session ownership among servers
            sharing the database, and group commit (see
            :class:`~duplex_es.server.sessions.DuplexSessions`).
        models: the model names served and their engines (default: any name, one engine).
        commit_timeout_ms: the longest a command waits for the log's write lock before it is
            refused with ``log_unavailable`` (ms).
        chain_keys: the chain key ring the log's hashes are signed with (``None``: unkeyed).
        master_keys: the master key ring that wraps sessions' data keys (``None``: content
            stored in the clear; docs/privacy.md).
        retain_days: days ended sessions keep their content before retention erases it
            (``None``: for ever), unless their principal's key sets ``retain_days``; swept every
            ``retention_interval_ms`` (docs/privacy.md, "Retention").
        url_token_leeway_ms: how long a resume token that came in a URL may retry a lost reply
            after the resume that used it (ms; docs/security.md).
        archive_dirs: where the inspector looks for archive files moved from where
            ``duplex-es archive`` wrote them (by name; docs/privacy.md, "Archives").

    Raises:
        ValueError: both ``api_key`` and ``keyring`` given, or an empty ``api_key``.
    """
    if api_key is not None and keyring is not None:
        raise ValueError("give api_key or keyring, not both")
    keys = keyring if keyring is not None else Keyring.single(api_key) if api_key is not None else Keyring()
    sessions = DuplexSessions(
        db,
        idle_ttl_ms=idle_ttl_ms,
        disconnect_grace_ms=disconnect_grace_ms,
        reaper_interval_ms=reaper_interval_ms,
        poll_ms=poll_ms,
        snapshot_every=snapshot_every,
        server_id=server_id,
        owner_ttl_ms=owner_ttl_ms,
        group_commit_window_ms=group_commit_window_ms,
        models=models,
        commit_timeout_ms=commit_timeout_ms,
        chain_keys=chain_keys,
        master_keys=master_keys,
        retention=RetentionPolicy(retain_days, keys.retention()),
        retention_interval_ms=retention_interval_ms,
        url_token_leeway_ms=url_token_leeway_ms,
    )

    # The inspector (docs/inspector.md): the same principals and ownership as the API; its
    # reads run in a thread pool, never on the loop that serves sessions.
    inspector = Inspector(EventLog(db, keys=chain_keys, master_keys=master_keys), archive_dirs=tuple(archive_dirs))

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        await sessions.start()
        log.info("serving on %s", db.describe())
        try:
            yield
        finally:
            await sessions.stop()
            inspector.close()

    app = Starlette(
        routes=[
            WebSocketRoute("/v1/realtime", realtime),
            WebSocketRoute("/v1/world", world),
            Route("/v1/sessions/{session_id}", session_state, methods=["GET"]),
            Route("/v1/sessions/{session_id}", erase_session_content, methods=["DELETE"]),
            Route("/healthz", healthz),
            Route("/metrics", metrics),
        ],
        lifespan=lifespan,
    )
    app.state.sessions = sessions
    server = Server(sessions=sessions, db=db, keyring=keys, throttle=resume_throttle or ResumeThrottle())
    app.state.server = server
    app.router.routes.append(Mount("/inspect", app=create_inspector_app(inspector, authenticate=server.authenticate)))
    return app


def _not_found(session_id: str) -> JSONResponse:
    return JSONResponse({"error": {"code": "session_not_found", "message": f"no session {session_id}"}}, status_code=404)


async def _readable(request: Request, session_id: str, what: str) -> Principal | Response:
    """The request's principal if it may read ``session_id``, else the answer to send: 401
    without a valid key; 404 ``session_not_found`` for a session that is not there or not
    theirs, alike."""
    server: Server = request.app.state.server
    principal = server.authenticate(request.headers)
    if principal is None:
        return JSONResponse({"error": {"code": "invalid_api_key", "message": "send Authorization: Bearer <key>"}}, status_code=401)
    # The owner first, by one read whatever the session's state: the same work, and so the same
    # time, for "not yours" as for "not there" (docs/security.md, "Ownership").
    exists, owner = await server.sessions.owner_of(session_id)
    if not exists or not principal.may_read(owner):
        log.info("%s of %.64r refused to principal %s (not found or not theirs)", what, session_id, principal.name)
        return _not_found(session_id)
    return principal


async def session_state(request: Request) -> Response:
    """``GET /v1/sessions/{session_id}``: the session's state (live, or rebuilt from the log).
    A session the caller's principal may not read (another principal's, unless an operator
    asks) gets exactly the answer of one that does not exist: 404 ``session_not_found``."""
    server: Server = request.app.state.server
    sessions = server.sessions
    session_id = request.path_params["session_id"]
    principal = await _readable(request, session_id, "session state")
    if not isinstance(principal, Principal):
        return principal
    not_found = _not_found(session_id)
    archived = await sessions.archived(session_id)
    if archived is not None:  # its events are in a file (docs/privacy.md, "Archives"): what the log knows of it
        return JSONResponse(
            {
                "session_id": session_id, "live": False, "seq": archived.last_seq,
                "archived": {"events": archived.events, "ended_at_us": archived.ended_at_us, "archived_at_us": archived.archived_at_us},
            }
        )
    host = sessions.get(session_id)
    # An ended session's host lingers until the reaper's next round; read it from the log, which
    # an erasure (here or in another process) has already changed (docs/privacy.md).
    if host is not None and not host.state.ended:
        state, live = host.state, True
    else:
        loaded = await asyncio.to_thread(load_state, sessions.log, sessions.snapshots, session_id, resnapshot=False)
        state, live = loaded.state, False
    if state.seq == 0:
        return not_found
    # The lease shows resume-token digests: a digest of a 256-bit random token gives nothing away.
    return JSONResponse({"session_id": session_id, "live": live, "seq": state.seq, "state": to_plain(state)})

async def erase_session_content(request: Request) -> Response:
    """``DELETE /v1/sessions/{session_id}``: erase an ended session's content (docs/privacy.md,
    "Erasure") for its owner (or an operator): its data key and snapshots destroyed, a
    ``session.erased`` logged with the principal's name. 200 with what was done (``already``:
    erased before); 404 ``session_not_found`` as for reads (another's session included); 409
    ``session_live`` (end it first) or ``not_sealed`` (recorded without a master key)."""
    sessions = request.app.state.server.sessions
    session_id = request.path_params["session_id"]
    principal = await _readable(request, session_id, "erasure")
    if not isinstance(principal, Principal):
        return principal
    try:
        done = await asyncio.to_thread(erase_session, sessions.log, session_id, by=principal.name, reason="request")
    except ErasureRefused as err:
        status = 404 if err.code == "session_not_found" else 409
        return JSONResponse({"error": {"code": err.code, "message": str(err)}}, status_code=status)
    if not done.already:
        log.info("session %s: content erased by principal %s (%d sealed events)", session_id, principal.name, done.sealed_events)
    return JSONResponse(
        {"session_id": session_id, "erased": True, "already": done.already, "seq": done.seq, "at_us": done.at_us, "sealed_events": done.sealed_events}
    )


async def healthz(request: Request) -> Response:
    """``GET /healthz``: up, how many sessions it hosts, which kind of database (never its URL),
    and how the log is doing (``log``, :meth:`DuplexSessions.log_health`). ``status`` is
    ``degraded`` while the log is; the answer is always HTTP 200 (the server itself is up and
    serving what does not need the database) and never waits for the database."""
    server: Server = request.app.state.server
    log_health = server.sessions.log_health()
    return JSONResponse(
        {"status": log_health["status"], "sessions": len(server.sessions.hosts), "database": server.db.backend.name, "log": log_health}
    )

async def metrics(request: Request) -> Response:
    """``GET /metrics``: Prometheus metrics."""
    return Response(generate_latest(), media_type=CONTENT_TYPE_LATEST)
