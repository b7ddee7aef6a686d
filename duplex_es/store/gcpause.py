"""Building many objects at once without the cyclic garbage collector running over them.

Decoding a long session makes a few objects per event (a ``Recorded``, its event, the event's
nested values), all kept, none in a reference cycle. CPython's collector runs every 700 new
container objects and, as the heap grows by a quarter, over the whole heap: for a one-hour
session (180,000 events) that was 1.1 s of a 3.0 s ``read_session``, for nothing
(docs/performance.md, "Read path"). :func:`collector_paused` turns it off around such a build.

The switch is the interpreter's, shared by every thread: overlapping pauses are counted, the
collector comes back when the last one ends (and only if it was on when the first began), and
callers pause only for builds of thousands of objects, so a server's ordinary short reads never
hold it off. Garbage made meanwhile is collected after, as the collector would have.
"""

from __future__ import annotations

import contextlib
import gc
import threading
from typing import Iterator

__all__ = ["collector_paused"]

_lock = threading.Lock()
_pausers = 0
_was_enabled = False


@contextlib.contextmanager
def collector_paused(when: bool = True) -> Iterator[None]:
    """Run the block with the cyclic garbage collector off (``when`` false: as it is).

    Reference counting still frees everything not in a cycle; cycles made meanwhile wait for
    the collector's next run after the last overlapping pause ends."""
    global _pausers, _was_enabled
    if not when:
        yield
        return
    with _lock:
        if _pausers == 0:
            _was_enabled = gc.isenabled()
            gc.disable()
        _pausers += 1
    try:
        yield
    finally:
        with _lock:
            _pausers -= 1
            if _pausers == 0 and _was_enabled:
                gc.enable()
