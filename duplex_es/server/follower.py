"""Learning of other processes' appends: the server tails the global log and wakes the hosts of
sessions that have new events. Workers never talk to servers; the log is the only channel.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Callable

from duplex_es.server.host import SessionHost
from duplex_es.store import EventLog

__all__ = ["LogFollower"]

log = logging.getLogger(__name__)


class LogFollower:
    """Polls the global log for new positions and calls ``catch_up`` on the affected hosts.

    Positions follow commit order, so remembering the last position seen never skips an event
    (DESIGN I8). A host reads its own events by seq; the follower only says "look".

    Args:
        log: the event log.
        hosts: returns the hosts currently live in this process, by session id.
        poll_ms: the polling interval while idle.
    """

    def __init__(self, log: EventLog, hosts: Callable[[], dict[str, SessionHost]], poll_ms: int = 5) -> None:
        self.log = log
        self.hosts = hosts
        self.poll_ms = poll_ms
        self.position = 0
        self._task: asyncio.Task | None = None

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

    async def _run(self) -> None:
        while True:
            if not self.hosts():
                # Nobody to wake; hosts read their own events by seq when they start.
                await asyncio.sleep(max(self.poll_ms, 50) / 1000)
                continue
            try:
                rows = await asyncio.to_thread(self.log.tail_sessions, self.position)
            except Exception:
                log.exception("log tail failed; retrying")
                await asyncio.sleep(0.5)
                continue
            if rows:
                self.position = rows[-1][0]
                live = self.hosts()
                for sid in dict.fromkeys(s for _, s in rows):
                    host = live.get(sid)
                    if host is not None:
                        asyncio.create_task(self._wake(host))
            else:
                await asyncio.sleep(self.poll_ms / 1000)

    @staticmethod
    async def _wake(host: SessionHost) -> None:
        try:
            await host.catch_up()
        except Exception:
            log.exception("session %s: catch-up failed", host.session_id)
