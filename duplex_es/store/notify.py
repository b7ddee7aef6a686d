"""Wake-ups for idle readers: PostgreSQL ``LISTEN/NOTIFY``, polling on SQLite.

A notification is only a hint to re-read from the reader's own position, never the data and
never a checkpoint (``reference/event-store-anchors.md`` §C.2): PostgreSQL does not store it, a
dropped listener connection misses it, and identical notifications in one transaction are
folded. So every wait has a timeout and the caller re-reads after it whether or not a
notification came; a broken listener connection only degrades wake-ups to that polling.

The notifications themselves are sent by statement-level triggers on ``events`` and ``ticks``
(migration 0003), delivered at commit, so a woken reader always finds the rows committed.
"""

from __future__ import annotations

import logging
import time
import sqlalchemy as sa

from duplex_es.store.database import Database

__all__ = ["Wakeup", "EVENTS_CHANNEL", "TICKS_CHANNEL"]

log = logging.getLogger(__name__)

#: Notified at the commit of every transaction that appended events.
EVENTS_CHANNEL = "duplex_es_events"
#: Notified at the commit of every transaction that issued a tick.
TICKS_CHANNEL = "duplex_es_ticks"


class Wakeup:
    """Waits until ``channel`` is notified or a timeout passes.

    On PostgreSQL one dedicated autocommit psycopg connection listens; on SQLite there is no
    cross-process signal, so :meth:`wait` sleeps its timeout (the caller's poll interval).

    Args:
        db: the database.
        channel: :data:`EVENTS_CHANNEL` or :data:`TICKS_CHANNEL`.
    """

    def __init__(self, db: Database, channel: str) -> None:
        self.db = db
        self.channel = channel
        self._conn = None  # psycopg.Connection, opened lazily and again after a failure
        self._retry_at = 0.0

    @property
    def listens(self) -> bool:
        """True when notifications can cut a wait short (PostgreSQL)."""
        return not self.db.is_sqlite

    def _connect(self):  # noqa: ANN202
        import psycopg

        url = sa.engine.make_url(self.db.url).set(drivername="postgresql")
        conn = psycopg.connect(url.render_as_string(hide_password=False), autocommit=True)
        conn.execute(f'LISTEN "{self.channel}"')
        return conn

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
                self._conn = self._connect()
            except Exception as exc:  # the database is down or restarting: poll meanwhile
                log.warning("LISTEN %s failed (%s); polling until it works", self.channel, exc)
                self._retry_at = time.monotonic() + 1.0
                time.sleep(timeout_s)
                return False
        try:
            got = False
            for _ in self._conn.notifies(timeout=timeout_s, stop_after=1):
                got = True
            if got:  # drain what else is queued, so the next wait does not return at once
                for _ in self._conn.notifies(timeout=0):
                    pass
            return got
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

