"""The in-process session engine: open, find, resume and expire sessions on one log.

This is the Python API (``duplex_es.api``): the WebSocket transport is a thin layer over it. It
owns the hosts of the sessions this process serves, the :class:`LogFollower` that wakes them when
workers append outputs, and the lease reaper that expires sessions whose disconnect grace or idle
TTL ran out, appending the time it used (docs/architecture.md, I11).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import hashlib
import logging
import os
import secrets
import socket
import time
from typing import Any, Optional

import attrs

from duplex_es.errors import SessionError
from duplex_es.domain import Code, Detach, OpenSession, Resume
from duplex_es.domain import kind_of
from duplex_es.domain.kinds import ENDED_BY
from duplex_es.domain.world import StartWorld
from duplex_es.server.follower import LogFollower
from duplex_es.server.host import ResumeDenied, SessionHost, SessionMoved, new_id, now_ms
from duplex_es.server.models import DEFAULT_ENGINE, ModelMap
from duplex_es.server.principals import Principal
from duplex_es.server.trouble import log_failure
from duplex_es.snapshots import load_state
from duplex_es.retention import RetentionPolicy, sweep
from duplex_es.store.archives import ArchivedSession, archived_records
from duplex_es.store.datakeys import MasterKeys
from duplex_es.store import (
    DEFAULT_OWNER_TTL_MS,
    Database,
    EventLog,
    Fence,
    GroupCommitWriter,
    KeyRing,
    SessionOwned,
    SessionOwners,
    SnapshotStore,
)

#: An append waiting longer than this (ms) makes ``/healthz`` report the log as degraded.
DEGRADED_WAIT_MS = 100

__all__ = ["DuplexSessions", "ModelNotServed", "ResumeRefused", "SessionOpenFailed", "DEFAULT_MODEL", "default_server_id", "new_resume_token", "token_digest"]

log = logging.getLogger(__name__)

#: The log events after which a session takes no more commands.
TERMINAL_EVENT_TYPES = tuple(t.TYPE for t in ENDED_BY)

#: Bounds of the ownership lease (ms): renewed every third of it, so it must outlast a few
#: database round trips; a day is longer than anyone waits for a dead server's sessions.
MIN_OWNER_TTL_MS, MAX_OWNER_TTL_MS = 300, 86_400_000

#: The model name a session gets when the client names none.
DEFAULT_MODEL = DEFAULT_ENGINE


class ModelNotServed(SessionError, ValueError):
    """A session was asked for a model name the server's model map does not serve."""

    def __init__(self, model: str, models: ModelMap) -> None:
        self.model = model
        super().__init__(f"model {model[:64]!r} is not served here; served: {models.describe() or 'none'}")


class ResumeRefused(SessionError):
    """A resume was refused: ``code`` is ``session_resume_conflict`` (the lease moved on or the
    token was rotated away), ``invalid_resume_token``, ``session_not_found`` or
    ``session_closed``; ``param`` the field to blame, if any."""

    def __init__(self, code: str, message: str, param: Optional[str] = None) -> None:
        self.code, self.message, self.param = code, message, param
        super().__init__(f"{code}: {message}")


class SessionOpenFailed(SessionError):
    """A new session could not be opened: the log (or the ownership table) refused its first
    write. Nothing of it is hosted or owned here any more; ``code`` is ``session_open_failed``
    and ``message`` names the cause briefly (the exception's class and the start of its text)."""

    code = Code.SESSION_OPEN_FAILED

    def __init__(self, session_id: str, cause: BaseException) -> None:
        self.session_id = session_id
        self.message = f"the event log could not record the new session ({type(cause).__name__}); try again later"
        self.detail = f"{type(cause).__name__}: {str(cause)[:300]}"
        super().__init__(f"session {session_id} could not be opened: {self.detail}")


def new_resume_token() -> str:
    """A fresh resume token: 256 random bits, URL-safe (it may ride in a query string)."""
    return secrets.token_urlsafe(32)


def token_digest(token: str) -> str:
    """The SHA-256 hex digest of a resume token: the only form in which it is stored."""
    return hashlib.sha256(token.encode("utf-8", "surrogatepass")).hexdigest()


def default_server_id() -> str:
    """``host:pid:random``: unique to this process. ``serve`` passes ``host:port`` instead, so a
    server restarted on the same port takes its sessions up at once."""
    return f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(3)}"


@attrs.frozen
class _Acquire:
    """:class:`~duplex_es.server.host.Acquirer` for one session of one :class:`DuplexSessions`."""

    sessions: "DuplexSessions"
    session_id: str

    async def observe(self) -> int:
        current = await asyncio.to_thread(self.sessions.owners.current, self.session_id)
        return 0 if current is None else current[0].generation

    async def take(self, observed: int) -> Fence:
        try:
            return await asyncio.to_thread(
                self.sessions.owners.acquire, self.session_id, self.sessions.server_id, take_over=True, expected_generation=observed
            )
        except SessionOwned as owned:
            raise SessionMoved(self.session_id, f"moved to {owned.owner_id or 'nobody'} while this resume was deciding") from owned


class DuplexSessions:
    """Sessions served by this process.

    Args:
        db: the log's database (migrated).
        idle_ttl_ms: a session with no client activity for this long expires (docs/protocol.md: 300 s).
        disconnect_grace_ms: a detached session not resumed within this expires (30 s).
        reaper_interval_ms: how often leases are checked.
        poll_ms: how often the log follower polls for worker outputs while idle.
        snapshot_every: snapshot a session's state every this many events (0: never); loads
            then fold only the events after the newest snapshot.
        server_id: this server's name in ``session_owners`` (:func:`default_server_id`).
        owner_ttl_ms: the ownership lease, renewed every third of it; a session whose owner
            stopped renewing for this long is taken up by another server.
        group_commit_window_ms: how long the group-commit writer waits for more commands
            before committing (0: it commits what is queued at once).
        models: which model names this server serves, by which engine (default: any name,
            by :data:`~duplex_es.server.models.DEFAULT_ENGINE`).
        commit_timeout_ms: how long a command may wait for the log's write lock before it is
            refused with ``log_unavailable`` (ms; docs/security.md, "No global stalls").
        chain_keys: the chain key ring the log's hashes are signed with (``None``: unkeyed;
            docs/security.md, "Tamper evidence").
        master_keys: the master key ring wrapping the sessions' data keys (``None``: content
            stored in the clear; docs/privacy.md).
        retention: how long ended sessions keep their content (:mod:`duplex_es.retention`);
            swept every ``retention_interval_ms`` (ms) while the server runs.
        url_token_leeway_ms: how long after a resume whose token came in a URL that token may
            still retry a lost reply (docs/security.md).
    """

    def __init__(
        self,
        db: Database,
        *,
        idle_ttl_ms: int = 300_000,
        disconnect_grace_ms: int = 30_000,
        reaper_interval_ms: int = 1000,
        poll_ms: int = 5,
        snapshot_every: int = 1000,
        server_id: Optional[str] = None,
        owner_ttl_ms: int = DEFAULT_OWNER_TTL_MS,
        group_commit_window_ms: float = 0.0,
        models: Optional[ModelMap] = None,
        commit_timeout_ms: float = 2000.0,
        chain_keys: Optional[KeyRing] = None,
        master_keys: Optional[MasterKeys] = None,
        retention: Optional[RetentionPolicy] = None,
        retention_interval_ms: int = 3_600_000,
        url_token_leeway_ms: int = 0,
    ) -> None:
        self.models = models or ModelMap()
        self.url_token_leeway_ms = url_token_leeway_ms
        if not MIN_OWNER_TTL_MS <= owner_ttl_ms <= MAX_OWNER_TTL_MS:
            raise ValueError(f"owner_ttl_ms must be {MIN_OWNER_TTL_MS}..{MAX_OWNER_TTL_MS}, got {owner_ttl_ms}")
        self.server_id = server_id or default_server_id()
        self.log = EventLog(db, keys=chain_keys, master_keys=master_keys)
        self.owners = SessionOwners(db, ttl_ms=owner_ttl_ms)
        # The backend says whether commits run on the event loop itself (GroupCommitWriter's ``inline``).
        self.writer = GroupCommitWriter(
            self.log, window_ms=group_commit_window_ms, inline=db.backend.group_commit_inline, timeout_ms=commit_timeout_ms
        )
        self._maintenance: Any = None
        # Blocking database calls run in threads; a database that stalls holds each for up to
        # its write timeout, so give them more than asyncio's default of cores + 4, lest the
        # reads of unaffected sessions (the log follower, loads) queue behind the stalled ones.
        self._executor = concurrent.futures.ThreadPoolExecutor(max_workers=32, thread_name_prefix="duplex-es-io")
        self.snapshots = SnapshotStore(db, data_keys=self.log.data_keys)
        self.snapshot_every = snapshot_every
        self.idle_ttl_ms = idle_ttl_ms
        self.disconnect_grace_ms = disconnect_grace_ms
        self.reaper_interval_ms = reaper_interval_ms
        self.hosts: dict[str, SessionHost] = {}
        self._follower = LogFollower(self.log, lambda: self.hosts, poll_ms=poll_ms)
        self._reaper: Optional[asyncio.Task] = None
        self._owner: Optional[asyncio.Task] = None
        self.retention = retention or RetentionPolicy()
        self.retention_interval_ms = retention_interval_ms
        self._retainer: Optional[asyncio.Task] = None
        self._retention_refused: set[str] = set()
        self._loading = asyncio.Lock()

    async def start(self) -> None:
        """Recover the sessions a previous server left open, then start following the log and
        reaping leases."""
        asyncio.get_running_loop().set_default_executor(self._executor)
        self._maintenance = self.log.db.backend.start_maintenance(self.log.db.engine)
        await asyncio.to_thread(self.owners.renew, self.server_id)
        # Follow from before the recovery: a worker output committed while a recovered session
        # was being rebuilt must still wake it, or a response generating for a detached client
        # would stall until the client resumed.
        await self._follower.start()
        await self.recover()
        self._reaper = asyncio.create_task(self._reap_forever(), name="lease-reaper")
        self._owner = asyncio.create_task(self._own_forever(), name="ownership")
        if self.retention.active:
            self._retainer = asyncio.create_task(self._retain_forever(), name="retention")

    async def stop(self) -> None:
        """Stop background work (sessions stay in the log)."""
        await self._follower.stop()
        for task in (self._reaper, self._owner, self._retainer):
            if task is not None:
                task.cancel()
                try:
                    await task
                except asyncio.CancelledError:
                    pass
        await asyncio.to_thread(self.writer.close)
        if self._maintenance is not None:
            await asyncio.to_thread(self._maintenance.close)
            self._maintenance = None

    def log_health(self) -> dict[str, Any]:
        """The log as this server saw it lately, for ``/healthz``: ``status`` is ``degraded``
        while an append has waited more than :data:`DEGRADED_WAIT_MS` or the latest append
        failed (busy or failing) with none committed since, else ``ok``. Touches no database,
        so it answers at once however the database is doing."""
        h = self.writer.health()
        now = time.monotonic()
        failing = h.last_failure_at is not None and (h.last_commit_at is None or h.last_commit_at < h.last_failure_at)
        status = "degraded" if failing or h.oldest_waiting_ms > DEGRADED_WAIT_MS else "ok"
        return {
            "status": status,
            "oldest_waiting_ms": round(h.oldest_waiting_ms, 1),
            "last_commit_s_ago": None if h.last_commit_at is None else round(now - h.last_commit_at, 3),
            "last_failure": h.last_failure,
            "last_failure_s_ago": None if h.last_failure_at is None else round(now - h.last_failure_at, 3),
        }

    async def open_session(self, model: Optional[str] = None, principal: Optional[str] = None) -> SessionHost:
        """Create a session for ``model`` (``None``: the model map's default name) and return
        its handle, with a listener attached. Its
        first event, ``session.created``, carries the ``resume_token`` a client needs to resume it,
        and its log records ``principal`` (a name, ``None``: anonymous) as its owner.

        Raises:
            ModelNotServed: the model map serves no such name (nothing was logged).
        """
        model = model or self.models.default_name
        engine = self.models.resolve(model)
        if engine is None:
            raise ModelNotServed(model, self.models)
        session_id = new_id("sess")
        token = new_resume_token()
        return await self._open(
            session_id,
            OpenSession(
                session_id=session_id,
                model=model,
                engine=engine,
                resume_token_hash=token_digest(token),
                principal=principal,
                full_duplex=self.models.is_full_duplex(engine),
            ),
            token,
        )

    async def open_world(self, start: StartWorld, principal: Optional[str] = None) -> SessionHost:
        """Create a world session from its ``session.start`` and return its handle; its
        ``session.started`` carries the ``resume_token``, and its log records ``principal``
        (a name, ``None``: anonymous) as its owner."""
        token = new_resume_token()
        return await self._open(start.session_id, attrs.evolve(start, resume_token_hash=token_digest(token), principal=principal), token)

    async def _open(self, session_id: str, first: OpenSession | StartWorld, token: str) -> SessionHost:
        """Own, host and log a new session whose first command is ``first`` (carrying the
        digest of ``token``).

        Raises:
            SessionOpenFailed: the ownership row or the first append could not be written; the
                host is dropped and its ownership row released (when the database still answers),
                so nothing of the half-opened session is left behind.
        """
        fence: Optional[Fence] = None
        host: Optional[SessionHost] = None
        try:
            fence = await asyncio.to_thread(self.owners.acquire, session_id, self.server_id)
            host = self._host(session_id, fence)
            host.attach()
            self.hosts[session_id] = host
            host.reveal_token(token_digest(token), token)
            await host.submit(first)
            return host
        except Exception as exc:
            failed = SessionOpenFailed(session_id, exc)
            log.error("%s", failed)
            await self._abandon(host, fence)
            raise failed from exc

    async def _abandon(self, host: Optional[SessionHost], fence: Optional[Fence]) -> None:
        """Forget a session whose opening failed: stop hosting it and release its ownership row.
        If its first events did commit (a later step failed), releasing ownership leaves it an
        orphan, which :meth:`adopt_orphans` recovers like any session of a vanished server."""
        if host is not None:
            host.release()
            self._forget(host)
        if fence is not None:
            try:
                await asyncio.to_thread(self.owners.release, fence)
            except Exception as exc:  # the database is down: the row expires with its lease
                log.warning("session %s: could not release its ownership row (%s); it expires with its lease", fence.session_id, type(exc).__name__)

    async def recover(self, session_ids: Optional[list[str]] = None) -> list[str]:
        """Take up the sessions the log says are still open but no live server owns (their
        server was killed, or stalled past its ownership lease): acquire each, rebuild it from
        the log and log ``session.detached`` (reason ``server_restart``) for those whose client
        was attached, so each waits one disconnect grace from now for a resume. A response in
        progress goes on: each recovered session is caught up and pumped, so a worker output
        committed while no server hosted it is folded and the next tick issued (or the response
        ended). A session detached before the crash keeps its logged detach time, so the reaper
        expires it at once if its grace ran out meanwhile. Sessions another live server owns
        are left to it.

        Args:
            session_ids: the candidates (``None``: every session the log holds open).

        Returns:
            the recovered session ids.
        """
        if session_ids is None:
            session_ids = await asyncio.to_thread(self.log.sessions_without, TERMINAL_EVENT_TYPES)
            busy = await asyncio.to_thread(self.owners.held_by_others, self.server_id)
            session_ids = [s for s in session_ids if s not in busy]
        recovered = []
        for session_id in session_ids:
            if session_id in self.hosts:
                continue
            try:
                fence = await asyncio.to_thread(self.owners.acquire, session_id, self.server_id)
            except SessionOwned:
                continue
            host = await self.load(session_id, fence)
            if host is None or not host.state.is_open:
                await asyncio.to_thread(self.owners.release, fence)
                continue
            try:
                if host.state.lease.detached_at_ms is None:
                    await host.submit(Detach(at_ms=now_ms(), reason="server_restart"))  # pumps too
                else:
                    await host.catch_up()
            except SessionMoved:
                continue  # resumed elsewhere in the meantime
            recovered.append(session_id)
        if recovered:
            log.info("recovered %d open sessions from the log", len(recovered))
        return recovered

    def _host(self, session_id: str, fence: Optional[Fence]) -> SessionHost:
        return SessionHost(
            self.log,
            session_id,
            snapshots=self.snapshots,
            snapshot_every=self.snapshot_every,
            writer=self.writer,
            fence=fence,
            on_moved=self._forget,
            resolve_model=self.models.resolve,
        )

    def _forget(self, host: SessionHost) -> None:
        """A hosted session moved to another server: stop hosting it here."""
        if self.hosts.get(host.session_id) is host:
            del self.hosts[host.session_id]

    def get(self, session_id: str) -> Optional[SessionHost]:
        """The handle of a session this process hosts, if any."""
        return self.hosts.get(session_id)

    async def owner_of(self, session_id: str) -> tuple[bool, Optional[str]]:
        """Whether the log holds ``session_id``, and the principal its first event names
        (``None``: anonymous). One indexed read of seq 1 whether the session is live here,
        stored, or absent, so that a refusal for "not yours" costs what one for "not there"
        costs: answering a live session from memory and rebuilding a stored one before
        checking its owner let response times tell which ids exist (docs/security.md,
        "Ownership"). An archived session's owner is in its archive record, read every time
        for the same reason (docs/privacy.md, "Archives")."""

        def read() -> tuple[bool, Optional[str]]:
            first = self.log.read_seqs(session_id, [1])
            archived = archived_records(self.log.db, [session_id]).get(session_id)
            if first:
                return True, getattr(first[0].event, "principal", None)
            if archived is not None:
                return True, archived.principal
            return False, None

        return await asyncio.to_thread(read)

    async def archived(self, session_id: str) -> Optional[ArchivedSession]:
        """The archive record of ``session_id`` if its events were moved to a file."""
        return (await asyncio.to_thread(archived_records, self.log.db, [session_id])).get(session_id)

    async def load(self, session_id: str, fence: Optional[Fence] = None) -> Optional[SessionHost]:
        """The handle of a session, rebuilt from the log if this process does not host it yet
        (after a restart, or when it lives on another server); ``None`` if the log holds no
        such session. A rebuilt session is hosted here only with ``fence`` (ownership)."""
        async with self._loading:
            host = self.hosts.get(session_id)
            if host is not None:
                if fence is not None:
                    host.fence = fence
                return host
            loaded = await asyncio.to_thread(load_state, self.log, self.snapshots, session_id)
            # An archived session is not here to host, even with its erasure in the log.
            if loaded.state.seq == 0 or await self.archived(session_id) is not None:
                return None
            host = self._host(session_id, fence)
            host.state, host.snapshot_seq = loaded.state, loaded.snapshot_seq
            last = loaded.records[-1] if loaded.records else None
            if last is not None:  # the idle TTL runs on from the log
                host.last_activity_ms = last.recorded_at_us // 1000
            if host.state.is_open and fence is not None:
                self.hosts[session_id] = host
            return host

    async def resume_session(
        self,
        session_id: str,
        expected_generation: Optional[int] = None,
        event_id: Optional[str] = None,
        *,
        resume_token: Optional[str] = None,
        last_server_event_seq: Optional[int] = None,
        kind: Optional[str] = None,
        principal: Optional[Principal] = None,
        token_in_url: bool = False,
    ) -> SessionHost:
        """Take a session over: a compare-and-swap on its lease generation, and (for wire
        clients) a check of its resume token, which is then rotated.

        The returned handle's :meth:`~SessionHost.events` stream starts with the wire events
        after ``last_server_event_seq`` (none when ``None``), then ``session.resumed`` carrying
        the new ``resume_token``; the previous listener gets ``session.replaced``.

        Args:
            session_id: the session.
            expected_generation: the lease generation the caller last saw (``None``: the
                current one; the token then guards the takeover).
            event_id: the client's ``event_id`` for the resume.
            resume_token: the token from ``session.created`` / ``session.resumed``; ``None``
                is allowed only to in-process callers, who need no proof.
            last_server_event_seq: the last wire event the client received.
            kind: ``"speech"`` or ``"world"`` to refuse the other kind (an endpoint's resume).
            principal: who asks (``None``: an in-process caller, who may resume any session).
                A session another principal owns is refused exactly as one that does not
                exist, so ids of other principals' sessions cannot be probed.
            token_in_url: the token came in the connection URL: once rotated away its leeway
                lasts only ``url_token_leeway_ms`` (docs/protocol.md, Resume).

        Raises:
            ResumeRefused: ``session_not_found`` (also for a session of the other ``kind``, or
                one another principal owns),
                ``session_closed``, ``invalid_resume_token``, or ``session_resume_conflict``
                (the token was rotated by a later resume, or the lease is no longer at
                ``expected_generation``).
        """
        if principal is not None:
            exists, owner = await self.owner_of(session_id)
            if not exists or not principal.owns(owner):  # decided before anything is rebuilt
                raise ResumeRefused(Code.SESSION_NOT_FOUND, f"no session {session_id}", "session_id")
        host = await self.load(session_id)
        if host is None:
            if await self.archived(session_id) is not None:  # ended, its events moved to a file
                raise ResumeRefused(Code.SESSION_CLOSED, f"session {session_id} ended and is archived", "session_id")
            raise ResumeRefused(Code.SESSION_NOT_FOUND, f"no session {session_id}", "session_id")
        if kind is not None and kind_of(host.state).name != kind:
            message = f"{session_id} is a {kind_of(host.state).name} session: resume it on its own endpoint"
            raise ResumeRefused(Code.SESSION_NOT_FOUND, message, "session_id")
        if not host.state.is_open:
            raise ResumeRefused(Code.SESSION_CLOSED, f"session {session_id} is {host.state.status}", "session_id")
        token = new_resume_token()
        command = Resume(
            event_id=event_id,
            expected_generation=host.state.lease.generation if expected_generation is None else expected_generation,
            at_ms=now_ms(),
            token_hash=token_digest(resume_token) if resume_token is not None else None,
            new_token_hash=token_digest(token),
            last_server_event_seq=last_server_event_seq,
            token_in_url=token_in_url,
            url_leeway_ms=self.url_token_leeway_ms,
        )
        # The session moves here only for a resume the domain accepts: a wrong token, or a
        # resume that lost a race, must not take a session away from the server its client is
        # attached to (take_over decides under the session's lock with a CAS on ownership).
        try:
            await host.take_over(command, last_server_event_seq, token, _Acquire(self, session_id))
        except SessionMoved as moved:
            raise ResumeRefused(Code.RESUME_CONFLICT, f"{moved}; resume again", "session_id") from moved
        except ResumeDenied as denied:
            if host.fence is not None and host.moved is None and host.state.is_open:
                self.hosts[session_id] = host  # owned here: never leave it unhosted
            raise ResumeRefused(denied.event.code, denied.event.message, denied.event.param) from None
        self.hosts[session_id] = host
        # A host rebuilt here was not in ``hosts`` while it resumed, so the log follower could
        # not wake it for a worker output committed meanwhile: fold whatever that was now, or the
        # response would wait for the client's next command (two servers, one session).
        await host.catch_up()
        return host

    async def reap(self, now: Optional[int] = None) -> list[str]:
        """Expire every hosted session whose lease ran out at ``now`` (Unix ms); returns their ids.
        Each host decides under its own lock, so a session resumed a moment ago is not expired."""
        now = now_ms() if now is None else now
        expired = []
        for host in list(self.hosts.values()):
            state = host.state
            if state.ended:
                self.hosts.pop(host.session_id, None)
                await self._release(host)
                continue
            if not state.is_open:
                continue  # still opening: its first event is being written
            try:
                reason = await host.expire_if_due(now, disconnect_grace_ms=self.disconnect_grace_ms, idle_ttl_ms=self.idle_ttl_ms)
            except Exception as exc:
                log_failure(log, exc, "session %s: expiry failed", host.session_id)
                continue
            if reason is None:
                continue
            log.info("session %s expired (%s)", host.session_id, reason)
            expired.append(host.session_id)
            self.hosts.pop(host.session_id, None)
            await self._release(host)
        return expired

    async def _release(self, host: SessionHost) -> None:
        """Give up the ownership of a session that ended (its row would otherwise look
        orphaned to other servers once its lease ran out)."""
        if host.fence is not None:
            try:
                await asyncio.to_thread(self.owners.release, host.fence)
            except Exception as exc:
                log_failure(log, exc, "session %s: releasing ownership failed", host.session_id)

    async def adopt_orphans(self) -> list[str]:
        """Take up sessions whose owning server stopped renewing its lease (it died, and no
        client resumed them elsewhere): the same as :meth:`recover` for those sessions."""
        orphans = await asyncio.to_thread(self.owners.orphans)
        return await self.recover([s for s in orphans if s not in self.hosts]) if orphans else []

    async def _reap_forever(self) -> None:
        while True:
            await asyncio.sleep(self.reaper_interval_ms / 1000)
            try:
                await self.reap()
            except Exception as exc:
                log_failure(log, exc, "lease reaper failed; retrying")

    async def _retain_forever(self) -> None:
        """Erase sessions past their retention (docs/privacy.md, "Retention"), in a thread, every
        :attr:`retention_interval_ms`; the first sweep right after start."""
        while True:
            try:
                await asyncio.to_thread(sweep, self.log, self.retention, refused=self._retention_refused)
            except Exception as exc:
                log_failure(log, exc, "retention sweep failed; retrying at the next interval")
            await asyncio.sleep(self.retention_interval_ms / 1000)

    async def _own_forever(self) -> None:
        """Renew this server's ownership leases and take up orphaned sessions, every third of
        the ownership TTL."""
        while True:
            await asyncio.sleep(self.owners.ttl_ms / 3000)
            try:
                await asyncio.to_thread(self.owners.renew, self.server_id)
                await self.adopt_orphans()
            except Exception as exc:
                log_failure(log, exc, "ownership renewal failed; retrying")
