"""Learning of other processes' appends: the server tails the global log and wakes the hosts of
sessions that have new events. Workers never talk to servers; the log is the only channel.

On PostgreSQL an idle follower sleeps on ``LISTEN`` (woken at the commit of any append, then
re-reading from its position); on SQLite it polls.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Callable

from duplex_es.server.host import SessionHost
from duplex_es.server.trouble import log_failure
from duplex_es.store import EVENTS_CHANNEL, EventLog, Wakeup

__all__ = ["LogFollower"]

log = logging.getLogger(__name__)


#: How many times a host whose catch-up failed is woken again (backing off up to 2 s).
WAKE_RETRIES = 10

#: How long an idle follower that listens for notifications (PostgreSQL) waits at most, in ms.
PG_FALLBACK_POLL_MS = 100


class LogFollower:
    """Polls the global log for new positions and calls ``catch_up`` on the affected hosts.

    Positions follow commit order, so remembering the last position seen never skips an event
    (docs/architecture.md, I8). A host reads its own events by seq; the follower only says "look", and only to
    hosts that have not folded those events yet (most events are a host's own appends).

    Args:
        log: the event log.
        hosts: returns the hosts currently live in this process, by session id.
        poll_ms: the polling interval while idle (on PostgreSQL the fallback interval after
            a missed notification, at least :data:`PG_FALLBACK_POLL_MS`).
    """

    def __init__(self, log: EventLog, hosts: Callable[[], dict[str, SessionHost]], poll_ms: int = 5) -> None:
        self.log = log
        self.hosts = hosts
        self.poll_ms = poll_ms
        self.position = 0
        self._task: asyncio.Task | None = None
        self._wakeup = Wakeup(log.db, EVENTS_CHANNEL)

    async def start(self) -> None:
        """Start following from the current end of the log."""
        self.position = await asyncio.to_thread(self.log.last_position)
        self._task = asyncio.create_task(self._run(), name="log-follower")

    async def stop(self) -> None:
        """Stop following."""
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass
        self._wakeup.close()

    async def _run(self) -> None:
        while True:
            if not self.hosts():
                # Nobody to wake; hosts read their own events by seq when they start.
                await asyncio.sleep(max(self.poll_ms, 50) / 1000)
                continue
            try:
                rows = await asyncio.to_thread(self.log.tail_sessions, self.position)
            except Exception as exc:
                log_failure(log, exc, "log tail failed; retrying")
                await asyncio.sleep(0.5)
                continue
            if rows:
                self.position = rows[-1][0]
                live = self.hosts()
                newest: dict[str, int] = {}
                for _, sid, seq in rows:
                    newest[sid] = seq
                for sid, seq in newest.items():
                    host = live.get(sid)
                    if host is not None and seq > max(host.state.seq, host.appending_through):
                        asyncio.create_task(self._wake(host))
                # Most rows are this server's own appends: under load, polling back to back
                # would spend a core re-reading them. One look per interval is enough.
                await asyncio.sleep(self.poll_ms / 1000)
            elif self._wakeup.listens:
                await asyncio.to_thread(self._wakeup.wait, max(self.poll_ms, PG_FALLBACK_POLL_MS) / 1000)
            else:
                await asyncio.sleep(self.poll_ms / 1000)

    @staticmethod
    async def _wake(host: SessionHost) -> None:
        # The follower has moved past these events, so a failed catch-up (the database
        # dropped the connection while the host appended its next tick, say) is retried here:
        # otherwise the session would sit still until its client sent something.
        for attempt in range(WAKE_RETRIES):
            try:
                await host.catch_up()
                return
            except Exception as exc:
                log_failure(log, exc, "session %s: catch-up failed (attempt %d of %d)", host.session_id, attempt + 1, WAKE_RETRIES)
                if host.ended.is_set() or host.moved is not None:
                    return
                await asyncio.sleep(min(0.05 * 2**attempt, 2.0))
