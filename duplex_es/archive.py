"""Archiving ended sessions: their events, as written, moved from the log into compressed files
that ``replay``, ``audit`` and the inspector read (issue 17; docs/privacy.md, "Archives").

``duplex-es archive`` takes ended sessions (their ``session.closed``, ``session.expired`` or
``world.session.closed`` logged), writes each to ``DIR/<session>.dxa`` (:mod:`duplex_es.store.archives`
holds the format), reads the file back and checks it against the rows, and only then, in one
transaction, records it in ``archived_sessions`` and deletes the session's rows. The hot
database keeps one small row per archived session, and the session's data key: an archived
session is erased, by ``erase`` or retention, as any other — its key is destroyed and its
``session.erased`` continues its chain in the log, after the archived head.

To read an archived session, :func:`open_archive` puts the file's rows (and any the log holds
after them, its erasure) into a private SQLite database in a temporary directory, with the
session's key row from the log it came from; every reader of the log then works on it
unchanged, and the chain ``audit`` walks is the one that was written.
"""

from __future__ import annotations

import contextlib
import os
import re
import tempfile
import time
from typing import Callable, Iterator, Optional

import attrs
import sqlalchemy as sa

from duplex_es.domain.kinds import ENDED_BY
from duplex_es.errors import OperationRefused
from duplex_es.events import decode
from duplex_es.events.codec import has_content
from duplex_es.store import Database, EventLog, KeyRing, WrongExpectedSeq, upgrade
from duplex_es.store.archives import (
    ArchiveError,
    ArchiveHeader,
    ArchivedSession,
    archived_records,
    commit_archive,
    file_sha256,
    locate,
    pending_ticks,
    read_archive,
    write_archive,
)
from duplex_es.store.database import driver_connection
from duplex_es.store.datakeys import MasterKeys, key_row

__all__ = ["ArchiveRefused", "Archived", "OpenedArchive", "archive_session", "archive_ended", "open_archive", "locate", "archive_file_name"]

#: The file name's suffix: a Zstandard stream of MessagePack frames (duplex_es.store.archives).
SUFFIX = ".dxa"

_ENDED = frozenset(t.TYPE for t in ENDED_BY)
_ENDED_TYPES = tuple(sorted(_ENDED))
_SAFE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,127}")


class ArchiveRefused(OperationRefused):
    """A session that was not archived; nothing changed.

    Attributes:
        code: ``session_not_found``, ``session_live`` (not ended), ``session_archived``
            (archived before), ``ticks_pending`` (a tick not answered yet), ``session_moved``
            (an event was appended while it was being written), ``archive_exists`` (a file of
            the archive's name exists: another run, or a copy of the database, wrote it),
            ``archive_failed`` (the file could not be written, or did not read back as
            written).
        session_id: the session.
    """


@attrs.frozen
class Archived:
    """A session moved to a file.

    Attributes:
        session_id: the session.
        path: the file (absolute).
        events: how many events moved.
        file_bytes: the file's size (bytes); ``stored_bytes``: what the rows' data and payloads
            took in the database (bytes).
    """

    session_id: str
    path: str
    events: int
    file_bytes: int
    stored_bytes: int


def archive_file_name(session_id: str) -> str:
    """The file name a session's archive gets: ``<session_id>.dxa`` for ids of letters, digits,
    ``_ . -`` (every id a server makes), else ``session-<sha256 of the id>.dxa``, so no id can
    name a path."""
    if _SAFE_NAME.fullmatch(session_id):
        return session_id + SUFFIX
    import hashlib

    return f"session-{hashlib.sha256(session_id.encode()).hexdigest()[:32]}{SUFFIX}"


def archive_session(log: EventLog, session_id: str, directory: str, *, now_us: Optional[int] = None) -> Archived:
    """Archive the ended session ``session_id`` into ``directory`` (see the module).

    Raises:
        ArchiveRefused: see its codes; the log is unchanged and no file is left behind (a file
            already at the archive's name is left as it is: ``archive_exists``).
    """
    if archived_records(log.db, [session_id]):
        raise ArchiveRefused("session_archived", session_id, f"session {session_id} is archived already")
    rows = log.read_raw(session_id)
    if not rows:
        raise ArchiveRefused("session_not_found", session_id, f"no session {session_id!r} in this log")
    ended = next((r for r in rows if r.type in _ENDED), None)
    if ended is None:
        raise ArchiveRefused(
            "session_live", session_id,
            f"session {session_id} has not ended (last event {rows[-1].type} at seq {rows[-1].seq}): only ended sessions are archived",
        )
    with log.db.read() as conn:
        pending = pending_ticks(driver_connection(conn), log.db.backend.sql, session_id)
    if pending:  # refused before any file is written (commit_archive checks again, in its transaction)
        raise ArchiveRefused("ticks_pending", session_id, f"session {session_id} has {pending} tick(s) pending or claimed; archive it once they are answered")
    first = decode(rows[0].type, rows[0].version, rows[0].data)  # its clear fields: the principal
    clear = sum(1 for r in rows if r.sealed is None and has_content(decode(r.type, r.version, r.data, r.payload)))
    with log.db.read() as conn:
        key = key_row(driver_connection(conn), log.db.backend.sql, session_id)
    now = time.time_ns() // 1000 if now_us is None else now_us
    header = ArchiveHeader(
        session_id=session_id,
        events=len(rows),
        first_seq=rows[0].seq,
        last_seq=rows[-1].seq,
        head_hash=rows[-1].hash,
        principal=getattr(first, "principal", None),
        sealed_events=sum(1 for r in rows if r.sealed is not None),
        clear_content=clear,
        ended_at_us=ended.recorded_at_us,
        archived_at_us=now,
        source=log.db.describe(),
        key_created_at_us=None if key is None else key[1],
    )
    path = os.path.abspath(os.path.join(directory, archive_file_name(session_id)))
    try:
        digest, size = write_archive(path, header, rows)
    except ArchiveError as exc:  # archive_exists: nothing written
        raise ArchiveRefused(exc.code, session_id, str(exc)) from None
    except OSError as exc:
        raise ArchiveRefused("archive_failed", session_id, f"session {session_id}: writing {path} failed ({exc.strerror or exc}); nothing deleted") from None
    try:
        return _commit(log, session_id, path, digest, size, header, rows)
    except ArchiveRefused:
        # Refused, so surely not committed, and the file is ours (published under a name that
        # did not exist): no archive that looks complete stays beside the log that still
        # holds the session. Any other failure may have committed (a lost COMMIT reply): the
        # file stays, it may be the only copy.
        os.unlink(path)
        raise


def _commit(log: EventLog, session_id: str, path: str, digest: str, size: int, header: ArchiveHeader, rows: list) -> Archived:
    """Check the written file and move the session out of the log (:func:`archive_session`)."""
    # Read back what is on disk before deleting anything: the rows must be the ones just read.
    try:
        _, again = read_archive(path)
    except ArchiveError as exc:
        raise ArchiveRefused("archive_failed", session_id, f"session {session_id}: {exc}; nothing deleted") from None
    if again != rows:
        raise ArchiveRefused("archive_failed", session_id, f"session {session_id}: the file {path} does not read back as written; nothing deleted")
    clear = header.clear_content
    now = header.archived_at_us
    record = ArchivedSession(
        session_id=session_id,
        location=path,
        file_sha256=digest,
        file_bytes=size,
        stored_bytes=sum(len(r.data.encode()) + len(r.payload or b"") for r in rows),
        events=len(rows),
        last_seq=header.last_seq,
        head_hash=header.head_hash,
        last_position=rows[-1].position,
        head_key_id=rows[-1].key_id,
        principal=header.principal,
        sealed_events=header.sealed_events,
        clear_content=clear,
        ended_at_us=header.ended_at_us,
        archived_at_us=now,
    )
    try:
        commit_archive(log, record)
    except WrongExpectedSeq as exc:
        raise ArchiveRefused("session_moved", session_id, f"session {session_id}: {exc} while it was archived; nothing deleted (try again)") from None
    except ArchiveError as exc:
        raise ArchiveRefused(exc.code, session_id, str(exc)) from None
    except sa.exc.IntegrityError:  # another run (to another directory) recorded it first
        raise ArchiveRefused("session_archived", session_id, f"session {session_id} was archived by another run meanwhile") from None
    return Archived(session_id, path, len(rows), size, record.stored_bytes)


def archive_ended(
    log: EventLog,
    directory: str,
    *,
    ended_before_us: int,
    limit: Optional[int] = None,
    on_archived: Optional[Callable[[Archived], None]] = None,
    on_refused: Optional[Callable[[ArchiveRefused], None]] = None,
) -> tuple[list[Archived], list[ArchiveRefused]]:
    """Archive every session that ended before ``ended_before_us`` (Unix µs), oldest end first,
    at most ``limit``. Returns what was archived and what was refused (a session still with a
    pending tick, or one that moved on: the next run takes it); ``on_archived`` and
    ``on_refused`` hear of each as it happens."""
    done: list[Archived] = []
    refused: list[ArchiveRefused] = []
    for sid, _ended in log.sessions_ended_before(_ENDED_TYPES, ended_before_us, limit or 1_000_000):
        try:
            a = archive_session(log, sid, directory)
        except ArchiveRefused as exc:
            refused.append(exc)
            if on_refused is not None:
                on_refused(exc)
        else:
            done.append(a)
            if on_archived is not None:
                on_archived(a)
    return done, refused


@attrs.frozen
class OpenedArchive:
    """An archive opened for reading (:func:`open_archive`).

    Attributes:
        log: a log holding only the archived session's events (and those after them in the
            log it came from: its erasure), on a private SQLite file; ``replay``, ``audit``,
            ``export`` and the inspector read it as any log.
        header: the file's header.
        path: the file.
        record: the ``archived_sessions`` row of the log it came from (``None``: read
            without that log).
        key_known: whether the session's key row came with it (read with its log): without
            it, sealed content reads as withheld and audit cannot check the key's rules.
        mismatches: how the file differs from ``record`` (digest, events, head), for audit.
    """

    log: EventLog
    header: ArchiveHeader
    path: str
    record: Optional[ArchivedSession]
    key_known: bool
    mismatches: tuple[str, ...]


@contextlib.contextmanager
def open_archive(
    path: str,
    *,
    hot: Optional[EventLog] = None,
    keys: Optional[KeyRing] = None,
    master_keys: Optional[MasterKeys] = None,
    session_id: Optional[str] = None,
) -> Iterator[OpenedArchive]:
    """Open the archive file ``path`` as a log (see :class:`OpenedArchive`); the private
    database is deleted on exit.

    Args:
        hot: the log the session was archived from: its key row (so ``master_keys`` opens the
            content, and an erasure shows), its record (the file is checked against it) and
            any events after the archived ones come from it.
        keys, master_keys: the chain key ring (audit verifies keyed hashes) and master key ring.
        session_id: the session the file should hold (its record in ``hot`` is the one the
            file is checked against; another session's file is a mismatch).

    Raises:
        ArchiveError: the file is missing or unreadable (duplex_es.store.archives).
    """
    header, rows = read_archive(path)
    mismatches: list[str] = []
    if session_id is not None and header.session_id != session_id:
        mismatches.append(f"the file holds session {header.session_id}, not {session_id}")
    sid = session_id or header.session_id
    record = None
    tail: list = []
    key = None
    if hot is not None:
        record = archived_records(hot.db, [sid]).get(sid)
        if record is None:
            mismatches.append(f"{hot.db.describe()} has no record of archiving session {sid}")
        else:
            if file_sha256(path) != record.file_sha256:
                mismatches.append(f"the file's SHA-256 is not the one recorded when it was written ({record.file_sha256[:16]}…): edited or replaced")
            if (header.events, header.last_seq, header.head_hash) != (record.events, record.last_seq, record.head_hash):
                mismatches.append(
                    f"the file holds {header.events} events up to seq {header.last_seq} with head hash {header.head_hash[:16]}…, the log recorded "
                    f"{record.events} up to seq {record.last_seq} with head hash {record.head_hash[:16]}…: not this session's archive"
                )
            tail = [r for r in hot.read_raw(sid) if r.seq > header.last_seq]
        with hot.db.read() as conn:
            key = driver_connection(conn).execute(
                hot.db.backend.sql("SELECT session_id, master_key_id, wrapped, created_at_us, erased_at_us FROM session_keys WHERE session_id = ?"),
                (sid,),
            ).fetchone()
    with tempfile.TemporaryDirectory(prefix="duplex-es-archive-") as tmp:
        db = Database(f"sqlite:///{os.path.join(tmp, 'archive.db')}", synchronous="OFF")
        try:
            upgrade(db)
            with db.write() as conn:
                raw = driver_connection(conn)
                raw.executemany(
                    "INSERT INTO events (position, session_id, seq, type, version, data, recorded_at_us, prev_hash, hash, key_id, payload, sealed) "
                    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    [(r.position, r.session_id, r.seq, r.type, r.version, r.data, r.recorded_at_us, r.prev_hash, r.hash, r.key_id, r.payload, r.sealed) for r in rows + tail],
                )
                if key is not None:
                    raw.execute("INSERT INTO session_keys (session_id, master_key_id, wrapped, created_at_us, erased_at_us) VALUES (?, ?, ?, ?, ?)", tuple(key))
            yield OpenedArchive(
                EventLog(db, keys=keys, master_keys=master_keys), header, path, record,
                key_known=hot is not None or header.key_created_at_us is None, mismatches=tuple(mismatches),
            )
        finally:
            db.engine.dispose()
