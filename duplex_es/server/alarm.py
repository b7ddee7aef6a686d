"""A session host's one pending wake-up on the wall clock (a realtime world's next tick, a
full-duplex session's silence unit: docs/architecture.md, "Session kinds").

Whether the wake-up is still to come is kept here, not read back from the event loop's clock:
under uvloop (uvicorn's loop when it is installed) ``loop.time()`` is the loop's cached,
millisecond-granular clock, so a timer that has just fired can still look due in the future —
a host that asked the loop would keep that spent timer as "an earlier wake-up already set" and
never be woken again (a full-duplex reply stopped once its client stopped streaming).
"""

from __future__ import annotations

import asyncio
from typing import Awaitable, Callable, Optional

__all__ = ["Alarm"]


class Alarm:
    """At most one pending call of ``action`` at a Unix-ms time, the earliest asked for.

    Args:
        action: the coroutine function run (as a task of its own) when the alarm goes off.
        clock: ``() -> Unix ms``, the clock the due times are on (the host's wall clock).
    """

    def __init__(self, action: Callable[[], Awaitable[None]], clock: Callable[[], int]) -> None:
        self._action = action
        self._clock = clock
        self._handle: Optional[asyncio.TimerHandle] = None
        self._due_ms: Optional[int] = None
        # The loop keeps only weak references to tasks: a running wake-up is held here.
        self._running: set[asyncio.Task] = set()

    @property
    def due_ms(self) -> Optional[int]:
        """When the pending wake-up goes off (Unix ms), or ``None`` when none is pending."""
        return self._due_ms

    def at(self, due_ms: int) -> None:
        """Go off at ``due_ms`` (Unix ms; one already past goes off at once), unless a pending
        wake-up goes off no later. Must be called from the event loop's thread."""
        if self._due_ms is not None and self._due_ms <= due_ms:
            return  # an earlier wake-up is pending: its action decides again then
        self.cancel()
        delay_s = max(0.001, (due_ms - self._clock()) / 1000)
        self._due_ms = due_ms
        self._handle = asyncio.get_running_loop().call_later(delay_s, self._fire)

    def cancel(self) -> None:
        """Drop the pending wake-up, if any (one already running goes on)."""
        if self._handle is not None:
            self._handle.cancel()
        self._handle, self._due_ms = None, None

    def _fire(self) -> None:
        self._handle, self._due_ms = None, None  # spent before its action runs: the action may set the next
        task = asyncio.get_running_loop().create_task(self._action())
        self._running.add(task)
        task.add_done_callback(self._running.discard)
