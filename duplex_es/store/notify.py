"""Wake-ups for idle readers: the backend's notifications where it has them (PostgreSQL
``LISTEN/NOTIFY``), timed polls where it has none (SQLite).

A notification is only a hint to re-read from the reader's own position, never the data and
never a checkpoint (docs/sources.md, "PostgreSQL: LISTEN/NOTIFY"): PostgreSQL does not store it, a
dropped listener connection misses it, and identical notifications in one transaction are
folded. So every wait has a timeout and the caller re-reads after it whether or not a
notification came; a broken listener connection only degrades wake-ups to that polling.

A backend's notifications must be sent at commit (PostgreSQL: statement-level triggers on
``events`` and ``ticks``, migration 0003), so a woken reader always finds the rows committed.
How to listen is the backend's (:meth:`~duplex_es.store.backend.Backend.open_listener`); the
timeouts, the reconnects and the fallback to polling are here, the same for every backend.
"""

from __future__ import annotations

import logging
import time
from typing import Optional

from duplex_es.store.backend import Listener
from duplex_es.store.database import Database

__all__ = ["Wakeup", "EVENTS_CHANNEL", "TICKS_CHANNEL"]

log = logging.getLogger(__name__)

#: Notified at the commit of every transaction that appended events.
EVENTS_CHANNEL = "duplex_es_events"
#: Notified at the commit of every transaction that issued a tick.
TICKS_CHANNEL = "duplex_es_ticks"


class Wakeup:
    """Waits until ``channel`` is notified or a timeout passes.

    Where the backend :attr:`~duplex_es.store.backend.Backend.listens`, one dedicated
    connection listens (opened lazily, and again after a failure); where it does not (SQLite
    has no cross-process signal), :meth:`wait` sleeps its timeout (the caller's poll interval).

    Args:
        db: the database.
        channel: :data:`EVENTS_CHANNEL` or :data:`TICKS_CHANNEL`.
    """

    def __init__(self, db: Database, channel: str) -> None:
        self.db = db
        self.channel = channel
        self._conn: Optional[Listener] = None  # opened lazily, and again after a failure
        self._retry_at = 0.0

    @property
    def listens(self) -> bool:
        """True when notifications can cut a wait short (the backend has them)."""
        return self.db.backend.listens

    def wait(self, timeout_s: float) -> bool:
        """Block until a notification arrives (``True``) or ``timeout_s`` seconds pass
        (``False``). Notifications that arrived since the last wait end it at once. Never
        raises for a database problem: it logs, sleeps the timeout and reconnects later."""
        if not self.listens:
            time.sleep(timeout_s)
            return False
        if self._conn is None:
            if time.monotonic() < self._retry_at:
                time.sleep(timeout_s)
                return False
            try:
                self._conn = self.db.backend.open_listener(self.db.url, self.channel)
            except Exception as exc:  # the database is down or restarting: poll meanwhile
                log.warning("LISTEN %s failed (%s); polling until it works", self.channel, exc)
                self._retry_at = time.monotonic() + 1.0
                time.sleep(timeout_s)
                return False
        try:
            return self._conn.wait(timeout_s)
        except Exception as exc:
            log.warning("LISTEN %s connection lost (%s); reconnecting", self.channel, exc)
            self.close()
            return False

    def close(self) -> None:
        """Close the listening connection (a later :meth:`wait` reconnects)."""
        conn, self._conn = self._conn, None
        if conn is not None:
            try:
                conn.close()
            except Exception:
                pass

