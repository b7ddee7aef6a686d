"""Throttling failed resumes, per session, per source (a principal at a client address) and
per connection.

A resume token has 256 bits, so guessing one is hopeless; the throttle is there so a flood of
guesses costs the server little, cannot write into anyone's log, and shows up for an operator
(the ``duplex_es_resume_failures_total`` counter and a bounded log line). Figures and the
reasoning behind them: docs/security.md, "Principals, ownership and resume tokens".

Throttled attempts are refused before the token is checked (so a throttled guesser learns
nothing), and are not counted themselves: a session or address is refused for at most one
window after the last failure that counted, however long the flood goes on.
"""

from __future__ import annotations

import collections
import time
from typing import Callable, Deque, Hashable, Optional

from prometheus_client import Counter

__all__ = ["RESUME_FAILURES", "ResumeThrottle", "Throttled"]

#: Failed resumes by reason (the refusal's code, or ``rate_limited``) and endpoint.
RESUME_FAILURES = Counter("duplex_es_resume_failures_total", "Refused session resumes", ["reason", "endpoint"])

#: Above this many tracked keys, keys whose failures all left the window are dropped.
_PRUNE_AT = 4096


class Throttled(Exception):
    """A resume refused by the throttle; ``scope`` is ``"connection"``, ``"session"`` or
    ``"source"``, ``retry_after_ms`` how long until one more attempt is allowed (``None``: not
    on this connection — open a new one)."""

    def __init__(self, scope: str, retry_after_ms: Optional[int]) -> None:
        self.scope, self.retry_after_ms = scope, retry_after_ms
        if retry_after_ms is None:
            message = "too many failed resumes on this connection; open a new connection to try again"
        else:
            message = f"too many failed resumes of this {scope}; retry after {retry_after_ms} ms"
        super().__init__(message)


class ResumeThrottle:
    """Sliding windows of failed resumes.

    Args:
        window_ms: the window (ms).
        per_session: failures of one session within the window after which its resumes are
            refused until the oldest of them leaves the window.
        per_source: the same for one source: a principal at one client address (a guesser
            spreading over sessions). Not the address alone: behind a proxy every client has
            the proxy's address, and one guesser would lock everyone out.
        per_connection: failures after which a connection may not try again at all.
        clock: monotonic ms (tests may pass their own).
    """

    def __init__(
        self,
        window_ms: int = 60_000,
        *,
        per_session: int = 10,
        per_source: int = 30,
        per_connection: int = 3,
        clock: Callable[[], float] = lambda: time.monotonic() * 1000,
    ) -> None:
        if window_ms <= 0 or min(per_session, per_source, per_connection) <= 0:
            raise ValueError(f"the resume throttle needs a positive window and limits; got {window_ms} ms, {per_session}/{per_source}/{per_connection}")
        self.window_ms = window_ms
        self.per_session, self.per_source, self.per_connection = per_session, per_source, per_connection
        self.clock = clock
        self._failures: dict[Hashable, Deque[float]] = {}

    def check(self, session: Hashable, source: Optional[str], connection_failures: int) -> None:
        """Refuse a resume attempt of ``session`` (any key: the endpoints use the principal's name
        and the session id) from ``source`` before anything else is done for it.

        Raises:
            Throttled: the connection, the session or the source failed too often.
        """
        if connection_failures >= self.per_connection:
            raise Throttled("connection", None)
        now = self.clock()
        for scope, key, limit in (("session", ("s", session), self.per_session), ("source", ("p", source), self.per_source)):
            if scope == "source" and source is None:
                continue
            recent = self._recent(key, now)
            if len(recent) >= limit:
                raise Throttled(scope, max(1, int(recent[len(recent) - limit] + self.window_ms - now) + 1))

    def failed(self, session: Optional[Hashable], source: Optional[str]) -> None:
        """Count a failed resume of ``session`` (``None``: one that names no session this
        principal may see, counted against the source only) from ``source``."""
        now = self.clock()
        if len(self._failures) > _PRUNE_AT:
            self._prune(now)
        if session is not None:
            self._failures.setdefault(("s", session), collections.deque(maxlen=self.per_session)).append(now)
        if source is not None:
            self._failures.setdefault(("p", source), collections.deque(maxlen=self.per_source)).append(now)

    def _recent(self, key: Hashable, now: float) -> Deque[float]:
        recent = self._failures.get(key)
        if recent is None:
            return collections.deque()
        while recent and recent[0] <= now - self.window_ms:
            recent.popleft()
        return recent

    def _prune(self, now: float) -> None:
        for key in [k for k, q in self._failures.items() if not q or q[-1] <= now - self.window_ms]:
            del self._failures[key]
