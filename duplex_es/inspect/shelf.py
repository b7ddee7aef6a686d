"""Archived sessions opened for the inspector: a session ``duplex-es archive`` moved out of the
log is read from its file (docs/privacy.md, "Archives") when the inspector is asked for it, and
kept open for the next request.

An opened archive is a private SQLite copy of the session's rows
(:func:`duplex_es.archive.open_archive`); at most :data:`OPEN_ARCHIVES` stay open, the least
recently used closed first, but never while a request reads it (the caller holds the session's
lock, and a shelf closes an archive only when it can take that lock without waiting).
"""

from __future__ import annotations

import contextlib
import threading
from collections import OrderedDict
from typing import Callable, Optional, Sequence

from duplex_es.archive import OpenedArchive, locate, open_archive
from duplex_es.store import EventLog
from duplex_es.store.archives import ArchivedSession, ArchiveError, archived_records

__all__ = ["OPEN_ARCHIVES", "Shelf"]

#: Archives kept open at once (each a private SQLite file of one session's rows).
OPEN_ARCHIVES = 4


class Shelf:
    """The archives of ``log``'s archived sessions, opened on demand.

    Args:
        log: the log the sessions were archived from (its ``archived_sessions`` rows say where
            each file was written; its key rows open sealed content).
        archive_dirs: where files moved from where they were written may be found (by name).
        lock_of: ``session_id -> lock`` held by every reader of that session (the inspector's
            session lock): an archive is closed only when its lock is free.
    """

    def __init__(self, log: EventLog, archive_dirs: Sequence[str], lock_of: Callable[[str], threading.RLock]) -> None:
        self.log = log
        self.archive_dirs = tuple(archive_dirs)
        self._lock_of = lock_of
        self._lock = threading.Lock()
        self._open: OrderedDict[str, tuple[contextlib.ExitStack, OpenedArchive]] = OrderedDict()

    def record(self, session_id: str) -> Optional[ArchivedSession]:
        """The session's ``archived_sessions`` row (``None``: not archived)."""
        return archived_records(self.log.db, [session_id]).get(session_id)

    def records(self) -> list[ArchivedSession]:
        """Every archived session's row, oldest archive first."""
        return list(archived_records(self.log.db).values())

    def opened(self, session_id: str) -> Optional[OpenedArchive]:
        """The session's archive, opened (``None``: the session is not archived, its events are
        in the log). Call with the session's lock held, and use the answer only while holding it.

        Raises:
            ArchiveError: the file is missing (``archive_missing``), unreadable
                (``archive_unreadable``) or another session's (``archive_mismatch``); a file of
                this session that is not the one recorded opens, and its ``mismatches`` say how
                (the audit reports them).
        """
        with self._lock:
            entry = self._open.get(session_id)
            if entry is not None:
                self._open.move_to_end(session_id)
                return entry[1]
        record = self.record(session_id)
        if record is None:
            return None
        stack = contextlib.ExitStack()
        master = self.log.data_keys.master if self.log.data_keys else None
        opened = stack.enter_context(
            open_archive(locate(record, self.archive_dirs), hot=self.log, keys=self.log.keys, master_keys=master, session_id=session_id)
        )
        if opened.header.session_id != session_id:  # another session's file under its name
            stack.close()
            raise ArchiveError("archive_mismatch", f"archive {opened.path} holds session {opened.header.session_id}, not {session_id}", opened.path)
        with self._lock:
            self._open[session_id] = (stack, opened)
            victims = [sid for sid in self._open if sid != session_id][: max(0, len(self._open) - OPEN_ARCHIVES)]
        for sid in victims:
            self._close(sid)
        return opened

    def _close(self, session_id: str) -> None:
        """Close ``session_id``'s archive if no request reads it now (else it stays open, over
        the bound, until the next archive opened)."""
        lock = self._lock_of(session_id)
        if not lock.acquire(blocking=False):
            return
        try:
            with self._lock:
                entry = self._open.pop(session_id, None)
            if entry is not None:
                entry[0].close()
        finally:
            lock.release()

    def close(self) -> None:
        """Close every open archive (their private files are deleted)."""
        with self._lock:
            entries, self._open = list(self._open.values()), OrderedDict()
        for stack, _ in entries:
            stack.close()


def archive_error_status(exc: ArchiveError) -> int:
    """The HTTP status an archive that cannot be read maps to: 404 when its file is gone, 500
    when it is unreadable."""
    return 404 if exc.code == "archive_missing" else 500
