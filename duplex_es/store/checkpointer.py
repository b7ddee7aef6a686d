"""SQLite's WAL checkpoints, taken off the commit path.

By default SQLite checkpoints inside the commit that makes the write-ahead log pass 1,000 pages
(``wal_autocheckpoint``): that one commit copies the WAL back into the database file and fsyncs
it, tens of milliseconds during which the committing thread — a server's event loop, where the
server commits — serves nobody (docs/security.md, "No global stalls"; a bare server that commits
on its loop showed append → ack p99 40 ms at 10 sessions with checkpoints in its commits, 3 ms
without). While a :class:`Checkpointer` runs, the database's connections do not checkpoint on
commit; its own thread checkpoints on its own connection every interval:

1. ``PASSIVE``: copies what the WAL holds into the database file without taking the write lock,
   so commits go on meanwhile. This is all it does most of the time.
2. Once the WAL file has grown past :data:`~duplex_es.store.sqlite.WAL_SIZE_LIMIT`, ``RESTART``
   with a 5 ms busy timeout: copies the few frames committed during step 1 while holding the
   write lock (a few milliseconds; commits wait on a timer meanwhile, see
   :class:`~duplex_es.store.writer.GroupCommitWriter`), so the WAL is wholly copied back and
   the next commit writes it from its start again, and ``journal_size_limit`` truncates the
   file. Under steady load step 1 alone never copies *everything* back — something new always
   arrived during the checkpoint — so the WAL would grow without end (415 MB in a minute of 10
   real-time sessions, measured); doing step 2 at every checkpoint instead cost the append →
   ack p99 (36 ms against 8 ms at 10 sessions, ``duplex-es loadgen``), so it runs only when the
   WAL is big.

Other processes on the same file (workers) keep SQLite's own autocheckpoint (docs/sources.md,
"SQLite: WAL and the write lock").
"""

from __future__ import annotations

import logging
import os
import sqlite3
import threading
from typing import Optional

from sqlalchemy.engine import Engine

from duplex_es.store.backend import driver_connection

__all__ = ["Checkpointer", "RESTART_WAIT_MS"]

#: How long the ``RESTART`` step waits for the write lock and for readers (ms): short, since it
#: holds the write lock while it waits for readers.
RESTART_WAIT_MS = 5

log = logging.getLogger(__name__)


class Checkpointer:
    """A background thread checkpointing one SQLite database's WAL.

    Args:
        engine: the database's engine (a connection of its own is taken from it).
        backend: the database's :class:`~duplex_es.store.sqlite.SqliteBackend`; its
            ``autocheckpoint`` is turned off while this runs (and the pool emptied, so every
            connection opened from now on has the setting).
        interval_ms: time between checkpoints (ms).
        wal_limit: the WAL file size (bytes) past which a checkpoint also restarts the WAL.

    Attributes:
        checkpoints: checkpoints run (for tests and operators).
    """

    def __init__(self, engine: Engine, backend: object, *, interval_ms: int = 500, wal_limit: int = 64 * 2**20) -> None:
        self.engine = engine
        self.backend = backend
        self.interval_ms = interval_ms
        self.checkpoints = 0
        self.restarts = 0  #: checkpoints that also restarted the WAL (for tests and operators)
        database = engine.url.database
        self.wal_path = f"{database}-wal" if database and database != ":memory:" else None
        self.wal_limit = wal_limit
        self.busy_timeout_ms = getattr(backend, "busy_timeout_ms", 30_000)
        self._stop = threading.Event()
        backend.autocheckpoint = False  # type: ignore[attr-defined]
        engine.dispose()  # pooled connections were opened with autocheckpoint on
        self._thread = threading.Thread(target=self._run, name="wal-checkpoint", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        with self.engine.connect() as conn:
            raw = driver_connection(conn)
            while not self._stop.wait(self.interval_ms / 1000):
                self.checkpoint(raw)
            self.checkpoint(raw, restart=True)

    def checkpoint(self, raw: sqlite3.Connection, *, restart: Optional[bool] = None) -> None:
        """One checkpoint: ``PASSIVE``, then, if the WAL file is over the size limit (or
        ``restart`` says so), ``RESTART`` for what arrived meanwhile (see the module). A busy or
        failing file is tried again next interval."""
        try:
            raw.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
            if restart if restart is not None else self._wal_bytes() > self.wal_limit:
                raw.execute(f"PRAGMA busy_timeout={RESTART_WAIT_MS}")
                try:
                    raw.execute("PRAGMA wal_checkpoint(RESTART)").fetchone()
                    self.restarts += 1
                finally:
                    raw.execute(f"PRAGMA busy_timeout={self.busy_timeout_ms}")
            self.checkpoints += 1
        except sqlite3.Error as exc:
            log.warning("WAL checkpoint failed: %s", exc)

    def _wal_bytes(self) -> int:
        try:
            return os.path.getsize(self.wal_path) if self.wal_path else 0
        except OSError:
            return 0

    def close(self, timeout_s: float = 10.0) -> None:
        """Run a last checkpoint, stop the thread, and let commits checkpoint again."""
        self._stop.set()
        self._thread.join(timeout_s)
        self.backend.autocheckpoint = True  # type: ignore[attr-defined]
        self.engine.dispose()
