"""Row 3's correctness half: are the global log's positions in commit order?

Two checks, on the log the concurrent writers produced:

* :func:`static_order` — read back by position: the positions have no gaps, and every session's
  seqs go up by one in position order;
* :class:`TailWatcher` — a reader tailing by position *while* the writers run (as a server's
  follower does) remembers each position it saw and the highest one; a position that was
  missing when a higher one was visible, and exists at the end, is a late fill — the event a
  tailing reader would have skipped.
"""

from __future__ import annotations

import threading
from typing import Any

from duplex_es.store import EventLog

__all__ = ["static_order", "TailWatcher"]


def static_order(log: EventLog, page: int = 5000) -> dict[str, Any]:
    """``{"events", "gaps", "seq_breaks"}`` over the whole log, read by position."""
    last_pos = 0
    seqs: dict[str, int] = {}
    events = gaps = breaks = 0
    while True:
        rows = log.tail_raw(last_pos, page)
        if not rows:
            break
        for r in rows:
            if last_pos and r.position != last_pos + 1:
                gaps += 1
            if r.seq != seqs.get(r.session_id, 0) + 1:
                breaks += 1
            seqs[r.session_id] = r.seq
            last_pos = r.position
            events += 1
    return {"events": events, "gaps": gaps, "seq_breaks": breaks}


class TailWatcher:
    """A thread tailing ``log`` by position with ``tail_sessions`` until :meth:`stop`; then
    :meth:`late_fills` counts the positions that committed behind a higher one it had seen."""

    def __init__(self, log: EventLog) -> None:
        self.log = log
        self.seen: set[int] = set()
        self.high = 0
        self.skipped: list[int] = []
        self.polls = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="bench-tail", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            rows = self.log.tail_sessions(self.high, 5000)
            self.polls += 1
            for row in rows:  # (position, session_id, ...)
                pos = row[0]
                if pos != self.high + 1:
                    self.skipped.extend(range(self.high + 1, pos))
                self.seen.add(pos)
                self.high = pos
            if not rows:
                self._stop.wait(0.0005)

    def stop(self) -> None:
        """Stop tailing (after one last read)."""
        self._stop.set()
        self._thread.join(timeout=10)
        for row in self.log.tail_sessions(self.high, 1_000_000):
            self.seen.add(row[0])
            self.high = row[0]

    def late_fills(self) -> int:
        """Positions the reader passed over that exist in the log now (each one an event a
        tailing reader would have lost)."""
        if not self.skipped:
            return 0
        exist = {r.position for r in self.log.tail_raw(min(self.skipped) - 1, len(self.skipped) + self.high)}
        return sum(1 for p in self.skipped if p in exist)
