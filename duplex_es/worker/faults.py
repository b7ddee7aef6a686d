"""Crash points: let a test or the chaos harness kill a worker at an exact instant.

``DUPLEX_ES_CRASH_AT=after_claim|after_step|after_commit[:N]`` makes the worker SIGKILL itself
the N-th time (default: the first) it passes that point — after its claim is recorded, after
the engine's effect but before the commit, or right after the commit. Unset, the points cost a
dictionary lookup. Only for fault injection: nothing in normal operation sets it.
"""

from __future__ import annotations

import os
import signal

__all__ = ["crash_point", "POINTS"]

#: The instrumented instants of a tick, in order.
POINTS = ("after_claim", "after_step", "after_commit")

_passed: dict[str, int] = {}


def _target() -> tuple[str, int] | None:
    spec = os.environ.get("DUPLEX_ES_CRASH_AT")
    if not spec:
        return None
    name, _, count = spec.partition(":")
    if name not in POINTS:
        raise ValueError(f"DUPLEX_ES_CRASH_AT={spec!r}: the point must be one of {', '.join(POINTS)}")
    return name, int(count or 1)


def crash_point(name: str) -> None:
    """Die here (SIGKILL, no cleanup) if ``DUPLEX_ES_CRASH_AT`` names this point and count."""
    target = _target()
    if target is None or target[0] != name:
        return
    _passed[name] = _passed.get(name, 0) + 1
    if _passed[name] == target[1]:
        os.kill(os.getpid(), signal.SIGKILL)
