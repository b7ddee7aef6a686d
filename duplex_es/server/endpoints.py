"""The WebSocket endpoints: ``/v1/realtime`` (OpenAI Realtime over WebSocket, GA or beta
names) and ``/v1/world`` (interactive world sessions).

Each is a thin loop over :class:`~duplex_es.server.sessions.DuplexSessions`: frames become
commands (:func:`~duplex_es.protocol.parse_frame`, :func:`~duplex_es.protocol.world.parse_world_frame`),
the session's server events become frames, written by a task of their own. A connection either
opens a session or resumes one; when it drops without ``session.close`` the session is detached
and waits for a resume until its disconnect grace runs out.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import logging
from typing import Callable, Mapping, Optional

import attrs
from starlette.websockets import WebSocket, WebSocketDisconnect

from duplex_es.domain import CloseSession, Code, Invalid
from duplex_es.domain.errors import ERROR_TYPES
from duplex_es.domain.rules import COMMAND_TYPES, MAX_FIELD_CHARS, MAX_MESSAGE_CHARS, clip
from duplex_es.domain.world import StartWorld, WorldState
from duplex_es.protocol import CommandError, ResumeRequest, encode_wire, parse_frame, resume_from_query, wire_to_beta
from duplex_es.protocol.world import parse_world_frame
from duplex_es.server.host import SessionHost, new_id, now_ms
from duplex_es.server.principals import Keyring, Principal
from duplex_es.server.sessions import DuplexSessions, ModelNotServed, ResumeRefused, SessionOpenFailed
from duplex_es.store import Database, LogUnavailable
from duplex_es.server.throttle import RESUME_FAILURES, ResumeThrottle, Throttled

__all__ = ["Server", "realtime", "world"]

log = logging.getLogger(__name__)


@attrs.frozen
class Server:
    """What the endpoints share, kept in ``app.state.server``: the sessions, the database, the
    API keys (an empty :class:`~duplex_es.server.principals.Keyring`: no authentication) and
    the throttle of failed resumes."""

    sessions: DuplexSessions
    db: Database
    keyring: Keyring = Keyring()
    throttle: ResumeThrottle = attrs.field(factory=ResumeThrottle)

    def authenticate(self, headers: Mapping[str, str]) -> Optional[Principal]:
        """The principal ``Authorization: Bearer <key>`` names (the anonymous one without
        keys); ``None``: refuse the request."""
        return self.keyring.authenticate(headers)


@attrs.define
class _Connection:
    """One WebSocket connection's identity for resumes: who it speaks for, from where, and how
    many of its resumes failed."""

    principal: Principal
    peer: Optional[str]
    failures: int = 0

    @property
    def source(self) -> Optional[str]:
        """``principal@address``: whom the throttle counts failures against besides the session."""
        return None if self.peer is None else f"{self.principal.name or 'anonymous'}@{self.peer}"


async def _resume(
    server: "Server", request: ResumeRequest, kind: str, conn: _Connection, *, in_url: bool = False
) -> tuple[SessionHost | None, dict | None]:
    """Take over the session a ``session.resume`` names: its handle, or the refusal to send.

    A refusal is told to this connection only — never logged in the session it named, so
    guessing writes nothing into anyone's log — and counted for the throttle, the
    ``duplex_es_resume_failures_total`` counter and a log line (never with the token)."""
    try:
        server.throttle.check((conn.principal.name, request.session_id), conn.source, conn.failures)
    except Throttled as throttled:
        RESUME_FAILURES.labels(Code.RATE_LIMITED, kind).inc()
        log.warning("resume of %.64r from %s throttled (%s)", request.session_id, conn.source, throttled.scope)
        refusal = _error(Code.RATE_LIMITED, str(throttled), "session_id", request.event_id)
        refusal["error"]["retry_after_ms"] = throttled.retry_after_ms
        return None, refusal
    try:
        host = await server.sessions.resume_session(
            request.session_id,
            event_id=request.event_id,
            resume_token=request.resume_token,
            last_server_event_seq=request.last_server_event_seq,
            kind=kind,
            principal=conn.principal,
            token_in_url=in_url,
        )
    except ResumeRefused as refused:
        conn.failures += 1
        # A session this principal cannot see is counted against the source only: counting it
        # per session would let anyone lock out an id, and would keep state for made-up ids.
        # Sessions are counted per principal too, so a lock shown to another principal cannot
        # tell it that the id exists (it gets session_not_found, as for any id it cannot see).
        visible = refused.code != Code.SESSION_NOT_FOUND
        server.throttle.failed((conn.principal.name, request.session_id) if visible else None, conn.source)
        RESUME_FAILURES.labels(refused.code, kind).inc()
        log.warning("resume of %.64r from %s refused: %s", request.session_id, conn.source, refused.code)
        return None, _error(refused.code, refused.message, refused.param, request.event_id)
    except Exception as exc:  # the log could not be read or written: a server fault, said with a code
        log.error("resume of %s failed: %s: %s", request.session_id, type(exc).__name__, str(exc)[:300])
        message = f"the event log could not record the resume ({type(exc).__name__}); try again later"
        return None, _error(Code.SESSION_RESUME_FAILED, message, None, request.event_id)
    log.info("session %s resumed (lease generation %d)", host.session_id, host.state.lease.generation)
    return host, None

async def _resume_by_url(server: "Server", ws: WebSocket, kind: str, conn: _Connection) -> SessionHost | None:
    """Resume the session the connection URL names (``resume_session`` & co), if any;
    a malformed or refused one is answered with an ``error`` and gives ``None``. The token
    came in a URL, so once rotated away its leeway is short (docs/protocol.md, Resume)."""
    try:
        request = resume_from_query(ws.query_params)
    except CommandError as err:
        await ws.send_text(encode_wire(_error(err.code, err.message, err.param, None)))
        return None
    if request is None:
        return None
    host, refusal = await _resume(server, request, kind, conn, in_url=True)
    if refusal is not None:
        await ws.send_text(encode_wire(refusal))
    return host


def _connection(server: "Server", ws: WebSocket) -> Optional[_Connection]:
    principal = server.authenticate(ws.headers)
    if principal is None:
        return None
    return _Connection(principal=principal, peer=ws.client.host if ws.client is not None else None)

async def realtime(ws: WebSocket) -> None:
    """``/v1/realtime``: one Realtime connection. It opens a session (``?model=`` names its model)
    or resumes one (``session.resume`` as its first message, or ``resume_session`` in the URL);
    frames become commands, the session's server events become frames in the connection's
    dialect (GA, or beta for ``OpenAI-Beta: realtime=v1``)."""
    server: Server = ws.app.state.server
    conn = _connection(server, ws)
    if conn is None:
        await ws.close(code=1008, reason="invalid API key")
        return
    dialect = "beta" if "realtime=v1" in ws.headers.get("openai-beta", "") else "ga"
    await ws.accept()
    host = await _resume_by_url(server, ws, "speech", conn)  # refused or not asked: a new session follows
    # A session this connection opened and the client has not used yet: a session.resume
    # as the first message leaves it for the session named.
    unused = host is None
    if host is None:
        try:
            host = await server.sessions.open_session(ws.query_params.get("model") or None, principal=conn.principal.name)
        except ModelNotServed as err:
            # No session exists to log this in: say why, then close (as for a bad key).
            log.info("connection refused: %s", err)
            await ws.send_text(encode_wire(_error(Code.MODEL_NOT_FOUND, str(err), "model", None)))
            await ws.close(code=1008, reason="model_not_found")
            return
        except SessionOpenFailed as err:
            await _refuse_open(ws, err)
            return
        log.info("session %s opened (%s dialect)", host.session_id, dialect)
    me = host.listener
    writer = asyncio.create_task(_write(ws, host, me, _realtime_frames(dialect)))
    clean = False
    try:
        while not host.ended.is_set() and host.listener == me:
            message = await ws.receive()
            if message["type"] == "websocket.disconnect" or host.listener != me:
                break
            frame = message.get("text")
            if frame is None:
                frame = message.get("bytes") or b""
            command = parse_frame(frame, new_id, dialect=dialect)
            if isinstance(command, ResumeRequest):
                if unused and command.session_id == host.session_id:
                    host.tell(_error(Code.RESUME_CONFLICT, "this connection already holds this session", "session_id", command.event_id))
                    continue
                if unused:
                    resumed, refusal = await _resume(server, command, "speech", conn)
                    if resumed is None:
                        host.tell(refusal)  # type: ignore[arg-type]
                        continue
                    host.release()
                    await writer
                    await host.submit(CloseSession(reason="superseded_by_resume"))
                    host, me = resumed, resumed.listener
                    writer = asyncio.create_task(_write(ws, host, me, _realtime_frames(dialect)))
                    unused = False
                    continue
                command = _resume_not_first(command)
            # A malformed session.resume is refused like any bad input, and a corrected one
            # may follow.
            unused = unused and getattr(command, "command_type", None) == "session.resume"
            if not await _submit(host, command, me):
                break  # replaced: the command came after another client took the session
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
        await _finish(ws, host, writer, clean, me)
        log.info("session %s: connection ended", host.session_id)

async def world(ws: WebSocket) -> None:
    """``/v1/world``: one world connection. Nothing is logged before ``session.start`` (or a
    ``session.resume``): until then there is no session to log into, and other messages are
    answered on the connection only."""
    server: Server = ws.app.state.server
    conn = _connection(server, ws)
    if conn is None:
        await ws.close(code=1008, reason="invalid API key")
        return
    await ws.accept()
    session_id = new_id("world")
    writer: asyncio.Task | None = None
    me = 0
    clean = False
    host = await _resume_by_url(server, ws, "world", conn)
    if host is not None:
        me = host.listener
        assert isinstance(host.state, WorldState) and host.state.config is not None
        writer = asyncio.create_task(_write(ws, host, me, _world_frames(host.state.config.binary)))
    try:
        while host is None or (not host.ended.is_set() and host.listener == me):
            message = await ws.receive()
            if message["type"] == "websocket.disconnect":
                break
            frame = message.get("text")
            if frame is None:
                frame = message.get("bytes") or b""
            command = parse_world_frame(frame, new_id, now_ms(), started=host is not None, session_id=session_id)
            if host is None:
                if isinstance(command, ResumeRequest):
                    host, refusal = await _resume(server, command, "world", conn)
                    if host is None:
                        await ws.send_text(encode_wire(refusal))  # type: ignore[arg-type]
                        continue
                elif isinstance(command, StartWorld):
                    try:
                        host = await server.sessions.open_world(command, principal=conn.principal.name)
                    except SessionOpenFailed as err:
                        await _refuse_open(ws, err, command.event_id)
                        return
                    log.info("world session %s started", session_id)
                else:
                    # No session exists yet, so there is no log to record this in.
                    await ws.send_text(encode_wire(_pre_start_error(command)))
                    continue
                me = host.listener
                assert isinstance(host.state, WorldState) and host.state.config is not None
                writer = asyncio.create_task(_write(ws, host, me, _world_frames(host.state.config.binary)))
                continue
            if isinstance(command, ResumeRequest):
                command = _resume_not_first(command)
            if not await _submit(host, command, me):
                break
        clean = host is not None and (host.ended.is_set() or host.listener != me)
    except WebSocketDisconnect:
        pass
    except Exception:
        log.exception("world session %s: internal error; closing the connection", session_id)
        with contextlib.suppress(Exception):
            await ws.close(code=1011, reason="internal error; the session is safe in the log")
    finally:
        if host is not None and writer is not None:
            await _finish(ws, host, writer, clean, me)
        log.info("world session %s: connection ended", host.session_id if host is not None else session_id)


async def _submit(host: SessionHost, command: object, me: int) -> bool:
    """``host.submit`` for a connection's loop: a command the log could not store (busy past
    the writer's bound, or failing) is answered with a ``log_unavailable`` error and the
    connection goes on — nothing of the command was applied, so the client may send it again
    (docs/security.md, "No global stalls"). Returns ``False`` when ``me`` was replaced."""
    try:
        return await host.submit(command, listener=me)  # type: ignore[arg-type]
    except LogUnavailable as exc:
        what = getattr(command, "command_type", None) or COMMAND_TYPES.get(type(command), type(command).__name__)
        event_id = getattr(command, "event_id", None)
        log.warning("session %s: %s (event_id %s) not stored: %s", host.session_id, what, str(event_id)[:64], exc)
        message = f"{what} (event_id {str(event_id)[:64]}) was not applied: {exc}; send it again"
        host.tell(_error(Code.LOG_UNAVAILABLE, message, None, event_id))
        return True


async def _refuse_open(ws: WebSocket, err: SessionOpenFailed, event_id: str | None = None) -> None:
    """A new session could not be logged: say so with a coded ``error`` (a ``server_error``),
    then close with 1011 — a connection without a session is of no use to a client, which may
    reconnect once the log is back. Nothing of the session was kept (see ``SessionOpenFailed``)."""
    with contextlib.suppress(Exception):
        await ws.send_text(encode_wire(_error(err.code, err.message, None, event_id)))
        await ws.close(code=1011, reason=err.code)


def _error(code: str, message: str, param: str | None, event_id: str | int | None) -> dict:
    """An ``error`` told to this connection only (it belongs to no session's log stream), of
    the code's Realtime type (:data:`~duplex_es.domain.errors.ERROR_TYPES`). Its fields may
    quote what the client sent, so each is cut to a bounded excerpt
    (:func:`~duplex_es.domain.rules.clip`)."""
    error = {
        "type": ERROR_TYPES.get(code, "invalid_request_error"),
        "code": code,
        "message": clip(message, MAX_MESSAGE_CHARS),
        "param": None if param is None else clip(param, MAX_FIELD_CHARS),
        "event_id": clip(event_id, MAX_FIELD_CHARS) if isinstance(event_id, str) else event_id,  # a world interaction's is an int
    }
    return {"type": "error", "event_id": new_id("event"), "error": error}


def _resume_not_first(request: ResumeRequest) -> Invalid:
    return Invalid(
        event_id=request.event_id,
        command_type="session.resume",
        code=Code.RESUME_NOT_FIRST,
        message="session.resume must be the first message on a new connection",
        param="type",
    )


def _pre_start_error(command: object) -> dict:
    code = getattr(command, "code", Code.SESSION_NOT_STARTED)
    message = getattr(command, "message", "send session.start first")
    if not isinstance(command, Invalid) or code == Code.UNKNOWN_TYPE:
        code, message = Code.SESSION_NOT_STARTED, "send session.start or session.resume first"
    return _error(code, message, getattr(command, "param", None), getattr(command, "event_id", None))


Frames = Callable[[dict], list]


def _realtime_frames(dialect: str) -> Frames:
    """Wire events as Realtime text frames, in the connection's dialect."""

    def frames(wire: dict) -> list:
        if dialect == "beta":
            wire = wire_to_beta(wire)  # type: ignore[assignment]
            if wire is None:
                return []
        return [encode_wire(wire)]

    return frames


def _world_frames(binary: bool) -> Frames:
    """World events as text frames; with ``binary``, each chunk's frames follow its JSON as
    binary WebSocket frames (PNG bytes) instead of base64 inside it."""

    def frames(wire: dict) -> list:
        if binary and wire["type"] == "world.chunk":
            pngs = wire["frames"]
            return [encode_wire({**wire, "frames": None, "binary_frames": len(pngs)})] + [base64.b64decode(f) for f in pngs]
        return [encode_wire(wire)]

    return frames


async def _write(ws: WebSocket, host: SessionHost, me: int, frames: Frames) -> None:
    """Send the session's server events to the socket, in order; close it when the session
    ends (1000) or another client took it over (4000, ``session_replaced``, after the
    ``session.replaced`` event). A released stream just ends."""
    try:
        async for wire in host.events():
            for f in frames(wire):
                if isinstance(f, bytes):
                    await ws.send_bytes(f)
                else:
                    await ws.send_text(f)
        if host.ended.is_set():  # closed or expired: say goodbye after the last event
            await ws.close(code=1000)
        elif host.listener != me:
            await ws.close(code=4000, reason="session_replaced")
    except Exception as exc:  # the socket went away mid-send; the log has everything
        log.info("session %s: client gone while sending (%s)", host.session_id, exc)


async def _finish(ws: WebSocket, host: SessionHost, writer: asyncio.Task, clean: bool, me: int) -> None:
    """End a connection: after a close, expiry or takeover, let the writer send what is queued
    and close; otherwise the client vanished, so detach the session (it waits for a resume) —
    unless a resume took it over meanwhile (the detach is fenced by the listener)."""
    if clean or host.listener != me:
        await writer
        with contextlib.suppress(Exception):
            await ws.close(code=1000)
    else:
        writer.cancel()
        with contextlib.suppress(Exception):
            await host.detach(listener=me)
