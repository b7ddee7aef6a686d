"""Archive files: a session's stored rows, exactly as written, moved out of the log into one
compressed file (issue 17; docs/privacy.md, "Archives").

An archive holds what the database held: every column of every row (sealed payloads stay
ciphertext, hashes and chain key ids as signed), so the chain that ``audit`` walks is the same
one, and nothing is decoded or re-encoded on the way. The session's data key does *not* go
into the file: it stays in ``session_keys`` of the database the session came from, so erasing
an archived session destroys its content in every copy of the file (crypto-shredding).

File format (``FORMAT``, version 1): a Zstandard stream (frame checksums on) of frames, each a
4-byte big-endian length and a MessagePack object: first the header (:class:`ArchiveHeader` as a
map), then lists of at most :data:`ROWS_PER_FRAME` rows, each row the list
``[position, seq, type, version, data, recorded_at_us, prev_hash, hash, key_id, payload, sealed]``
(``payload`` as MessagePack bytes, so ciphertext and audio are not inflated by base64).

This module knows rows, never the domain: which sessions may be archived (ended ones) is the
caller's (:mod:`duplex_es.archive`).
"""

from __future__ import annotations

import hashlib
import os
import struct
import tempfile
from typing import IO, Any, Iterable, Optional, Sequence

import attrs
import msgspec
import sqlalchemy as sa
import zstandard

from duplex_es.errors import LogError
from duplex_es.store.backend import driver_connection
from duplex_es.store.chain import GENESIS
from duplex_es.store.database import Database
from duplex_es.store.log import EventLog, RawRecord, SessionArchivedError, WrongExpectedSeq
from duplex_es.store.schema import archived_sessions as archived_t

__all__ = [
    "FORMAT",
    "ArchiveError",
    "ArchiveHeader",
    "ArchivedSession",
    "SessionArchivedError",
    "write_archive",
    "read_archive",
    "file_sha256",
    "commit_archive",
    "archived_records",
    "archived_records_in",
    "locate",
    "archived_sealed_ended_before",
    "compact",
]

#: The ``format`` field of every archive's header.
FORMAT = "duplex-es-archive"
#: The version this code writes and reads.
VERSION = 1
#: Rows per frame: bounded memory when writing and reading an hour-long session.
ROWS_PER_FRAME = 1000
#: Zstandard level: 3, its default — archiving an hour of speech (~260 MB) takes seconds; sealed
#: payloads are ciphertext, which no level compresses.
LEVEL = 3
#: The largest frame a reader accepts (bytes): a corrupt length cannot make it allocate more.
MAX_FRAME = 1 << 30

_LENGTH = struct.Struct(">I")


class ArchiveError(LogError):
    """An archive that cannot be written, read or trusted; nothing was changed.

    Attributes:
        code: ``archive_exists`` (a file is where one would be written),
            ``archive_unreadable`` (not an archive, truncated, corrupt compression or
            MessagePack), ``archive_mismatch`` (the file is not the one the database recorded:
            its digest, events or head hash differ), ``archive_missing`` (no file at the
            recorded location), ``session_archived`` (the session was archived already),
            ``ticks_pending`` (the session still has ticks a worker may answer).
        path: the file, when there is one.
    """

    def __init__(self, code: str, message: str, path: Optional[str] = None) -> None:
        self.code = code
        self.path = path
        super().__init__(message)


@attrs.frozen
class ArchiveHeader:
    """What an archive file says of itself (its first frame).

    Attributes:
        session_id: the session.
        events: how many rows follow.
        first_seq, last_seq: the first and last row's seq (1 and ``events`` for a whole session).
        head_hash: the last row's ``hash``: binds the file to the chain the database recorded.
        principal: who opened the session (``None``: anonymous).
        sealed_events: rows whose content is sealed; ``clear_content``: rows whose content is in
            the clear (docs/privacy.md).
        ended_at_us: when the session ended (Unix µs); ``archived_at_us``: when it was archived.
        source: the database it came from (its description, never credentials).
        key_created_at_us: when its data key was made (``None``: not sealed); the key itself
            is not in the file.
    """

    session_id: str
    events: int
    first_seq: int
    last_seq: int
    head_hash: str
    principal: Optional[str]
    sealed_events: int
    clear_content: int
    ended_at_us: int
    archived_at_us: int
    source: str
    key_created_at_us: Optional[int] = None
    format: str = FORMAT
    version: int = VERSION


@attrs.frozen
class ArchivedSession:
    """A row of ``archived_sessions``: a session the database moved to a file.

    Attributes:
        location: the path the file was written to (absolute).
        file_sha256, file_bytes: the file's digest and size as written.
        stored_bytes: what its rows' ``data`` and ``payload`` took in the database (bytes).
        events, last_seq, head_hash: as in :class:`ArchiveHeader`.
        last_position, head_key_id: the last archived row's position and chain key id.
    """

    session_id: str
    location: str
    file_sha256: str
    file_bytes: int
    stored_bytes: int
    events: int
    last_seq: int
    head_hash: str
    last_position: int
    head_key_id: Optional[str]
    principal: Optional[str]
    sealed_events: int
    clear_content: int
    ended_at_us: int
    archived_at_us: int


def _frame(out: IO[bytes], obj: Any) -> None:
    body = msgspec.msgpack.encode(obj)
    out.write(_LENGTH.pack(len(body)))
    out.write(body)


def write_archive(path: str, header: ArchiveHeader, rows: Iterable[RawRecord], *, replace: bool = False) -> tuple[str, int]:
    """Write the archive ``path`` atomically: into a ``.part`` file of its own beside it,
    fsynced, then published under ``path`` (a hard link, which refuses an existing name), its
    directory fsynced — a crash leaves no file or the whole file, never half of one, and two
    writers of one name never mix their bytes.

    Args:
        replace: overwrite a file already at ``path`` (tests and repair tools; ``archive``
            never does: an existing archive may be the only copy of its events).

    Returns:
        ``(SHA-256 hex of the file, its size in bytes)``.

    Raises:
        ArchiveError: ``archive_exists``: a file is at ``path`` already (another run of
            ``archive``, or a copy of this database, wrote it); nothing was written.
        OSError: the file cannot be written (its directory missing, the disk full, ...).
        ValueError: a row belongs to another session.
    """
    directory, name = os.path.split(os.path.abspath(path))
    fd, part = tempfile.mkstemp(prefix=f".{name}.", suffix=".part", dir=directory)
    try:
        _write_rows(fd, header, rows)
        if replace:
            os.replace(part, path)
        else:
            try:
                os.link(part, path)
            except FileExistsError:
                raise ArchiveError(
                    "archive_exists",
                    f"archive {path}: a file of that name exists already (written by another run of `archive`, or from a copy of "
                    "this database); it is left as it is: move it away if no database records it",
                    path,
                ) from None
    finally:
        if os.path.exists(part):
            os.unlink(part)
    dir_fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)
    return file_sha256(path), os.path.getsize(path)


def _write_rows(fd: int, header: ArchiveHeader, rows: Iterable[RawRecord]) -> None:
    """The archive's bytes into the open file ``fd`` (closed after), fsynced."""
    compressor = zstandard.ZstdCompressor(level=LEVEL, write_checksum=True)
    with open(fd, "wb") as raw:
        with compressor.stream_writer(raw, closefd=False) as out:
            _frame(out, attrs.asdict(header))
            frame: list[list] = []
            for r in rows:
                if r.session_id != header.session_id:
                    raise ValueError(f"row at position {r.position} belongs to session {r.session_id}, not {header.session_id}")
                frame.append([r.position, r.seq, r.type, r.version, r.data, r.recorded_at_us, r.prev_hash, r.hash, r.key_id, r.payload, r.sealed])
                if len(frame) == ROWS_PER_FRAME:
                    _frame(out, frame)
                    frame = []
            if frame:
                _frame(out, frame)
        raw.flush()
        os.fsync(raw.fileno())


def file_sha256(path: str) -> str:
    """The SHA-256 (hex) of the file ``path``, read in 1 MiB blocks."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _read_exact(stream: IO[bytes], n: int) -> bytes:
    out = bytearray()
    while len(out) < n:
        got = stream.read(n - len(out))
        if not got:
            break
        out += got
    return bytes(out)


#: One row in a frame: position, seq, type, version, data, recorded_at_us, prev_hash, hash,
#: key_id, payload, sealed (RawRecord's fields but the session id, in the header).
_Row = tuple[int, int, str, int, str, int, str, str, Optional[str], Optional[bytes], Optional[int]]


def read_archive(path: str) -> tuple[ArchiveHeader, list[RawRecord]]:
    """Read the archive ``path``: its header and rows, checked to be whole (the header's count,
    seqs and head hash against the rows; the chain's hashes are ``audit``'s to check).

    Raises:
        ArchiveError: ``archive_missing`` (no such file), ``archive_unreadable`` (anything
            else wrong with it: named with what was found).
    """

    def bad(why: str) -> ArchiveError:
        return ArchiveError("archive_unreadable", f"archive {path}: {why}", path)

    try:
        f = open(path, "rb")
    except FileNotFoundError:
        raise ArchiveError("archive_missing", f"archive {path}: no such file", path) from None
    rows: list[RawRecord] = []
    try:
        with f, zstandard.ZstdDecompressor().stream_reader(f) as stream:
            head = _read_exact(stream, 4)
            if len(head) < 4:
                raise bad("empty, or not a Zstandard stream of this format")
            (n,) = _LENGTH.unpack(head)
            if n > MAX_FRAME:
                raise bad(f"header frame of {n} bytes (not an archive of this format)")
            fields = msgspec.msgpack.decode(_read_exact(stream, n))
            if not isinstance(fields, dict) or fields.get("format") != FORMAT:
                raise bad(f"format {fields.get('format') if isinstance(fields, dict) else None!r}, not {FORMAT!r}")
            if fields.get("version") != VERSION:
                raise bad(f"version {fields.get('version')!r}; this duplex_es reads version {VERSION}")
            # Typed by ArchiveHeader's annotations: a field of the wrong type is unreadable.
            header = msgspec.convert(fields, ArchiveHeader)
            sid = header.session_id
            while True:
                head = _read_exact(stream, 4)
                if not head:
                    break
                if len(head) < 4:
                    raise bad(f"cut off after {len(rows)} rows")
                (n,) = _LENGTH.unpack(head)
                if n > MAX_FRAME:
                    raise bad(f"a frame of {n} bytes after {len(rows)} rows (corrupt)")
                body = _read_exact(stream, n)
                if len(body) < n:
                    raise bad(f"cut off after {len(rows)} rows")
                # Typed: a row of the wrong shape (a crafted file) is unreadable, not a
                # value the database or a reader chokes on later.
                for r in msgspec.msgpack.decode(body, type=list[_Row]):
                    rows.append(RawRecord(r[0], sid, *r[1:]))
    except ArchiveError:
        raise
    except (zstandard.ZstdError, msgspec.DecodeError, TypeError, ValueError, IndexError) as exc:
        raise bad(f"{type(exc).__name__}: {exc}") from None
    if header.events < 1:
        raise bad("its header says it holds no events (an archive holds a whole ended session)")
    if len(rows) != header.events:
        raise bad(f"the header says {header.events} events, the file holds {len(rows)} (cut off?)")
    if rows and (rows[-1].seq != header.last_seq or rows[-1].hash != header.head_hash):
        raise bad(f"its last row (seq {rows[-1].seq}) is not the head the header names (seq {header.last_seq})")
    return header, rows


# ---------------------------------------------------------------------------- in the database


def _record(row: Sequence[Any]) -> ArchivedSession:
    return ArchivedSession(*row)


_RECORD_COLUMNS = tuple(archived_t.c[name] for name in attrs.fields_dict(ArchivedSession))


def archived_records(db: Database, session_ids: Optional[Sequence[str]] = None) -> dict[str, ArchivedSession]:
    """The ``archived_sessions`` rows of ``session_ids`` (all, oldest archive first, when
    ``None``), by session id."""
    if session_ids is not None and not session_ids:
        return {}
    with db.read() as conn:
        return {r.session_id: r for r in archived_records_in(conn, session_ids)}


def archived_records_in(conn: sa.Connection, session_ids: Optional[Sequence[str]] = None) -> list[ArchivedSession]:
    """:func:`archived_records` in the read transaction ``conn``, as a list."""
    q = sa.select(*_RECORD_COLUMNS)
    if session_ids is not None:
        q = q.where(archived_t.c.session_id.in_(list(session_ids)))
    return [_record(r) for r in conn.execute(q.order_by(archived_t.c.archived_at_us, archived_t.c.session_id)).all()]


def locate(record: ArchivedSession, directories: Sequence[str] = ()) -> str:
    """Where ``record``'s file is now: its recorded location, or a file of the same name in one
    of ``directories`` (archives moved to other storage). The recorded location if neither
    exists (reading it then says ``archive_missing``)."""
    if os.path.exists(record.location):
        return record.location
    name = os.path.basename(record.location)
    for d in directories:
        candidate = os.path.join(d, name)
        if os.path.exists(candidate):
            return candidate
    return record.location


def archived_sealed_ended_before(db: Database, before_us: int) -> list[ArchivedSession]:
    """Archived sessions with sealed content whose data key is not destroyed and that ended
    before ``before_us`` (Unix µs), oldest end first: what retention may erase among them."""
    from duplex_es.store.schema import session_keys as keys_t

    q = (
        sa.select(*_RECORD_COLUMNS)
        .join(keys_t, keys_t.c.session_id == archived_t.c.session_id)
        .where(archived_t.c.ended_at_us < before_us, archived_t.c.sealed_events > 0, keys_t.c.wrapped.is_not(None))
        .order_by(archived_t.c.ended_at_us, archived_t.c.session_id)
    )
    with db.read() as conn:
        return [_record(r) for r in conn.execute(q).all()]


def pending_ticks(raw: Any, sql: Any, session_id: str) -> int:
    """How many of the session's ticks are pending or claimed (a worker may still answer
    them: the session is not archived), on the driver connection ``raw``."""
    return int(raw.execute(sql("SELECT count(*) FROM ticks WHERE session_id = ? AND status IN ('pending', 'claimed')"), (session_id,)).fetchone()[0])


def commit_archive(log: EventLog, record: ArchivedSession) -> int:
    """Move the session of ``record`` out of the log, in one transaction, once its file is
    written and read back: record it in ``archived_sessions``, then delete its events (the
    trigger allows it now), idempotency keys, snapshots, ticks and owner lease. Its data key
    stays (erasing the archived session destroys it).

    Returns:
        the number of events deleted.

    Raises:
        WrongExpectedSeq: the session moved on since its rows were read (its head is not
            ``record.last_seq`` / ``record.head_hash``); nothing was changed.
        ArchiveError: ``session_archived`` (already) or ``ticks_pending`` (a tick is pending
            or claimed); nothing was changed.
    """
    sql = log.db.backend.sql
    with log.db.write() as conn:
        raw = driver_connection(conn)
        if raw.execute(sql("SELECT 1 FROM archived_sessions WHERE session_id = ?"), (record.session_id,)).fetchone():
            raise ArchiveError("session_archived", f"session {record.session_id} is archived already")
        head = raw.execute(
            sql("SELECT seq, hash FROM events WHERE session_id = ? ORDER BY seq DESC LIMIT 1"), (record.session_id,)
        ).fetchone()
        seq, digest = head if head is not None else (0, GENESIS)
        if seq != record.last_seq or digest != record.head_hash:
            raise WrongExpectedSeq(record.session_id, record.last_seq, seq)
        pending = pending_ticks(raw, sql, record.session_id)
        if pending:
            raise ArchiveError("ticks_pending", f"session {record.session_id} has {pending} tick(s) pending or claimed; archive it once they are answered")
        conn.execute(archived_t.insert().values(**attrs.asdict(record)))
        deleted = raw.execute(sql("DELETE FROM events WHERE session_id = ? AND seq <= ?"), (record.session_id, record.last_seq)).rowcount
        for table in ("idempotency", "snapshots", "ticks", "session_owners"):
            raw.execute(sql(f"DELETE FROM {table} WHERE session_id = ?"), (record.session_id,))
    return deleted


def compact(db: Database) -> None:
    """Give the space of deleted rows back to the file system: SQLite ``VACUUM`` and a WAL
    checkpoint (TRUNCATE); PostgreSQL ``VACUUM FULL`` of the log's tables, which holds an
    ACCESS EXCLUSIVE lock on each while it rewrites it — appends wait (docs/privacy.md,
    "Archives": without it, PostgreSQL reuses the space for new rows but keeps the files).
    """
    with db.engine.connect() as conn:
        raw = driver_connection(conn)
        if db.backend.name == "sqlite":
            raw.execute("VACUUM")
            raw.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
            return
        raw.commit()  # VACUUM runs outside a transaction block
        previous = raw.autocommit
        raw.autocommit = True
        try:
            raw.execute("VACUUM FULL events, idempotency, snapshots, ticks, session_owners")
        finally:
            raw.autocommit = previous
