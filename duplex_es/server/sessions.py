"""The in-process session engine: open, find, resume and expire sessions on one log.

This is the Python API (``duplex_es.api``): the WebSocket transport is a thin layer over it. It
owns the hosts of the sessions this process serves, the :class:`LogFollower` that wakes them when
workers append outputs, and the lease reaper that expires sessions whose disconnect grace or idle
TTL ran out, appending the time it used (DESIGN I11).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Optional

from duplex_es.domain import Expire, OpenSession, Resume, fold
from duplex_es.domain.world import StartWorld
from duplex_es.events import CommandRejected, SessionResumed
from duplex_es.server.follower import LogFollower
from duplex_es.server.host import SessionHost, new_id, now_ms
from duplex_es.store import Database, EventLog

__all__ = ["DuplexSessions", "ResumeRefused", "DEFAULT_MODEL"]

log = logging.getLogger(__name__)

#: The model name a session gets when the client names none.
DEFAULT_MODEL = "duplex-es-echo"


class ResumeRefused(Exception):
    """A resume was refused: ``code`` is ``session_resume_conflict`` (the lease moved on),
    ``session_not_found`` or ``session_closed``."""

    def __init__(self, code: str, message: str) -> None:
        self.code, self.message = code, message
        super().__init__(f"{code}: {message}")


class DuplexSessions:
    """Sessions served by this process.

    Args:
        db: the log's database (migrated).
        idle_ttl_ms: a session with no client activity for this long expires (DESIGN §4: 300 s).
        disconnect_grace_ms: a detached session not resumed within this expires (30 s).
        reaper_interval_ms: how often leases are checked.
        poll_ms: how often the log follower polls for worker outputs while idle.
    """

    def __init__(
        self,
        db: Database,
        *,
        idle_ttl_ms: int = 300_000,
        disconnect_grace_ms: int = 30_000,
        reaper_interval_ms: int = 1000,
        poll_ms: int = 5,
    ) -> None:
        self.log = EventLog(db)
        self.idle_ttl_ms = idle_ttl_ms
        self.disconnect_grace_ms = disconnect_grace_ms
        self.reaper_interval_ms = reaper_interval_ms
        self.hosts: dict[str, SessionHost] = {}
        self._follower = LogFollower(self.log, lambda: self.hosts, poll_ms=poll_ms)
        self._reaper: Optional[asyncio.Task] = None

    async def start(self) -> None:
        """Start following the log and reaping leases."""
        await self._follower.start()
        self._reaper = asyncio.create_task(self._reap_forever(), name="lease-reaper")

    async def stop(self) -> None:
        """Stop background work (sessions stay in the log)."""
        await self._follower.stop()
        if self._reaper is not None:
            self._reaper.cancel()
            try:
                await self._reaper
            except asyncio.CancelledError:
                pass

    async def open_session(self, model: str = DEFAULT_MODEL) -> SessionHost:
        """Create a session and return its handle, with a listener attached."""
        host = SessionHost(self.log, new_id("sess"))
        host.attach()
        self.hosts[host.session_id] = host
        await host.submit(OpenSession(session_id=host.session_id, model=model))
        return host

    async def open_world(self, start: StartWorld) -> SessionHost:
        """Create a world session from its ``session.start`` and return its handle."""
        host = SessionHost(self.log, start.session_id)
        host.attach()
        self.hosts[host.session_id] = host
        await host.submit(start)
        return host

    def get(self, session_id: str) -> Optional[SessionHost]:
        """The handle of a session this process hosts, if any."""
        return self.hosts.get(session_id)

    async def resume_session(self, session_id: str, expected_generation: int, event_id: Optional[str] = None) -> SessionHost:
        """Take a session over: a compare-and-swap on its lease generation.

        Raises:
            ResumeRefused: the session does not exist or ended, or its lease is no longer at
                ``expected_generation`` (another client resumed it first).
        """
        host = self.hosts.get(session_id)
        if host is None:
            records = await asyncio.to_thread(self.log.read_session, session_id)
            if not records:
                raise ResumeRefused("session_not_found", f"no session {session_id}")
            host = SessionHost(self.log, session_id)
            host.state = fold((r.seq, r.event) for r in records)
            self.hosts[session_id] = host
        if not host.state.open:
            raise ResumeRefused("session_closed", f"session {session_id} is {host.state.status}")
        before = host.state.seq
        await host.submit(Resume(event_id=event_id, expected_generation=expected_generation, at_ms=now_ms()))
        records = await asyncio.to_thread(self.log.read_session, session_id, after_seq=before)
        outcome = next((r.event for r in records if isinstance(r.event, (SessionResumed, CommandRejected))), None)
        if not isinstance(outcome, SessionResumed):
            message = outcome.message if isinstance(outcome, CommandRejected) else "resume was not recorded"
            raise ResumeRefused("session_resume_conflict", message)
        host.attach()  # the previous listener's stream ends here
        return host

    async def reap(self, now: Optional[int] = None) -> list[str]:
        """Expire every hosted session whose lease ran out at ``now`` (Unix ms); returns their ids."""
        now = now_ms() if now is None else now
        expired = []
        for host in list(self.hosts.values()):
            state = host.state
            if state.status in ("closed", "expired"):
                self.hosts.pop(host.session_id, None)
                continue
            if not state.open:
                continue  # still opening: its first event is being written
            detached = state.lease.detached_at_ms
            if detached is not None and now - detached >= self.disconnect_grace_ms:
                command = Expire(reason="disconnect_grace_expired", now_ms=now, since_ms=detached)
            elif now - host.last_activity_ms >= self.idle_ttl_ms:
                command = Expire(reason="idle_ttl_expired", now_ms=now, since_ms=host.last_activity_ms)
            else:
                continue
            try:
                await host.submit(command)
            except Exception:
                log.exception("session %s: expiry failed", host.session_id)
                continue
            log.info("session %s expired (%s)", host.session_id, command.reason)
            expired.append(host.session_id)
            self.hosts.pop(host.session_id, None)
        return expired

    async def _reap_forever(self) -> None:
        while True:
            await asyncio.sleep(self.reaper_interval_ms / 1000)
            try:
                await self.reap()
            except Exception:
                log.exception("lease reaper failed; retrying")
