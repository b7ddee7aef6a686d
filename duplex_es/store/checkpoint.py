"""Signed checkpoints of the whole log's head, kept outside the database (docs/security.md,
"Tamper evidence").

The keyed chain (:mod:`duplex_es.store.chain`) proves each stored event was written by someone
holding the key, but not that nothing is missing: cutting a session's newest events, or deleting
a whole session, leaves chains that verify. A checkpoint pins what the log held at one moment —
the global head position, how many events lie at or below it, and for every session its last
seq, that event's position, hash and key id — signed with the chain key, and is appended as one
JSON line to a file the database's writers cannot write. Each checkpoint names the signature of
the one before, so removing or editing one in the middle shows too.

:func:`verify_checkpoints` compares every checkpoint in a file with the log: a session pinned
there must still exist, reach at least the pinned seq, and hold the pinned event there (same
hash, position and key). Events appended after the latest checkpoint are not covered: how much
can be cut unseen is bounded by how often checkpoints are written.

An HMAC checkpoint can be verified only by holders of the secret; an asymmetric signature
(Ed25519) would let auditors verify without it, at the price of a second key to manage.
"""

from __future__ import annotations

import hmac
import json
import os
import time
from pathlib import Path
from typing import Any, Optional, Sequence

import attrs
import sqlalchemy as sa

from duplex_es.errors import LogError
from duplex_es.store.chain import KeyRing
from duplex_es.store.archives import ArchiveError, archived_records_in as _records, locate, read_archive
from duplex_es.store.log import EventLog
from duplex_es.store.schema import archived_sessions as archived_t
from duplex_es.store.schema import events as events_t

__all__ = ["FORMAT", "CHECKPOINT_FILE", "Checkpoint", "CheckpointError", "Finding", "checkpoint_path", "write_checkpoint", "read_checkpoints", "verify_checkpoints"]

#: The ``format`` of a checkpoint line.
FORMAT = "duplex-es/checkpoint/1"

#: The file name used when a checkpoint destination is a directory.
CHECKPOINT_FILE = "checkpoints.jsonl"


class CheckpointError(LogError):
    """A checkpoint file cannot be written or read (the message names the file and line)."""


@attrs.frozen
class Checkpoint:
    """One checkpoint as written.

    Attributes:
        head_position: the log's last position when it was taken.
        events: how many events lie at positions ``<= head_position``.
        sessions: ``(session_id, last_seq, position, hash, key_id)`` of every session's last
            event, sorted by session id.
        mac: its signature (hex HMAC-SHA256 under the chain key ``key_id``).
    """

    created_at_us: int
    head_position: int
    events: int
    sessions: tuple[tuple[str, int, int, str, Optional[str]], ...]
    prev: Optional[str]
    key_id: str
    mac: str


@attrs.frozen
class Finding:
    """Something a checkpoint says the log held and it no longer does (``seq`` 0: not one event)."""

    session_id: str
    seq: int
    message: str


def checkpoint_path(dest: str | os.PathLike[str]) -> Path:
    """The JSON-lines file for ``dest``: the file itself, or :data:`CHECKPOINT_FILE` inside it
    if it is a directory (or ends with a path separator)."""
    p = Path(dest)
    if p.is_dir() or str(dest).endswith(("/", os.sep)):
        return p / CHECKPOINT_FILE
    return p


def _canonical(body: dict[str, Any]) -> bytes:
    return json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=True).encode()


def _sign(key: bytes, body: dict[str, Any]) -> str:
    return hmac.digest(key, _canonical(body), "sha256").hex()


def _body(cp: Checkpoint) -> dict[str, Any]:
    return {
        "format": FORMAT,
        "created_at_us": cp.created_at_us,
        "head_position": cp.head_position,
        "events": cp.events,
        "sessions": [list(s) for s in cp.sessions],
        "prev": cp.prev,
        "key_id": cp.key_id,
    }


def _last_position(conn: sa.Connection) -> int:
    """The log's last position, archived sessions' last rows included: archiving the newest
    session moves the log's highest position into a file, not out of the log's history."""
    events = conn.execute(sa.select(sa.func.coalesce(sa.func.max(events_t.c.position), 0))).scalar_one()
    archived = conn.execute(sa.select(sa.func.coalesce(sa.func.max(archived_t.c.last_position), 0))).scalar_one()
    return max(int(events), int(archived))


def _heads(conn: sa.Connection) -> tuple[int, int, tuple]:
    """The head position, the event count and every session's last event, archived sessions
    included (their rows are counted and their heads pinned from their ``archived_sessions``
    record, docs/privacy.md "Archives", unless the log holds events after them: an erasure)."""
    head = _last_position(conn)
    count = conn.execute(sa.select(sa.func.count()).select_from(events_t)).scalar_one()
    last = sa.select(events_t.c.session_id, sa.func.max(events_t.c.seq).label("seq")).group_by(events_t.c.session_id).subquery()
    rows = conn.execute(
        sa.select(events_t.c.session_id, events_t.c.seq, events_t.c.position, events_t.c.hash, events_t.c.key_id)
        .join(last, sa.and_(events_t.c.session_id == last.c.session_id, events_t.c.seq == last.c.seq))
        .order_by(events_t.c.session_id)
    )
    pins = {r[0]: (r[0], int(r[1]), int(r[2]), r[3], r[4]) for r in rows}
    a = archived_t.c
    for sid, n, seq, position, digest, key_id in conn.execute(sa.select(a.session_id, a.events, a.last_seq, a.last_position, a.head_hash, a.head_key_id)):
        count += n
        pins.setdefault(sid, (sid, int(seq), int(position), digest, key_id))
    return head, count, tuple(pins[sid] for sid in sorted(pins))


class _ArchivedRows:
    """The rows of archived sessions, for checking checkpoints: from the ``archived_sessions``
    record when it says enough, else read from the file (found by :func:`locate`), once."""

    def __init__(self, conn: sa.Connection, directories: Sequence[str]) -> None:
        self.records = {r.session_id: r for r in _records(conn)}
        self.directories = directories
        self._rows: dict[str, Any] = {}

    def rows(self, sid: str) -> tuple[Optional[list], Optional[str]]:
        """``(rows, None)``, or ``(None, why the file cannot be read)``."""
        if sid not in self._rows:
            try:
                self._rows[sid] = (read_archive(locate(self.records[sid], self.directories))[1], None)
            except ArchiveError as exc:
                self._rows[sid] = (None, str(exc))
        return self._rows[sid]

    def count_up_to(self, position: int) -> tuple[int, list[str]]:
        """Archived events at positions ``<= position``, and the files that could not be read."""
        total, unread = 0, []
        for sid, rec in self.records.items():
            if rec.last_position <= position:
                total += rec.events
                continue
            rows, why = self.rows(sid)
            if rows is None:
                unread.append(why or sid)
                continue
            total += sum(1 for r in rows if r.position <= position)
        return total, unread


def read_checkpoints(path: str | os.PathLike[str]) -> list[Checkpoint]:
    """The checkpoints in a JSON-lines file (or directory), oldest first; ``[]`` if it does not exist.

    Raises:
        CheckpointError: it cannot be read, or a line is not a checkpoint (named by line number).
    """
    p = checkpoint_path(path)
    if not p.exists():
        return []
    try:
        lines = p.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise CheckpointError(f"checkpoint file {p}: cannot read it: {exc}") from exc
    out: list[Checkpoint] = []
    for n, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            d = json.loads(line)
            if d.get("format") != FORMAT:
                raise ValueError(f"format {d.get('format')!r}, expected {FORMAT!r}")
            out.append(
                Checkpoint(
                    int(d["created_at_us"]), int(d["head_position"]), int(d["events"]),
                    tuple((str(s[0]), int(s[1]), int(s[2]), str(s[3]), s[4]) for s in d["sessions"]),
                    d["prev"], str(d["key_id"]), str(d["mac"]),
                )
            )
        except (ValueError, KeyError, TypeError, IndexError, AttributeError) as exc:
            raise CheckpointError(f"checkpoint file {p}, line {n}: not a checkpoint: {exc}") from exc
    return out


def write_checkpoint(log: EventLog, dest: str | os.PathLike[str], keys: KeyRing) -> tuple[Path, Checkpoint]:
    """Take a checkpoint of ``log`` (one consistent read), sign it with the ring's signing key,
    chain it to the last one in ``dest`` and append it there, flushed to disk.

    Returns:
        the file written and the checkpoint.

    Raises:
        CheckpointError: ``dest`` cannot be read or written.
    """
    p = checkpoint_path(dest)
    earlier = read_checkpoints(p)
    with log.db.read() as conn:
        head, count, sessions = _heads(conn)
    unsigned = Checkpoint(time.time_ns() // 1000, head, count, sessions, earlier[-1].mac if earlier else None, keys.signing_id, "")
    cp = attrs.evolve(unsigned, mac=_sign(keys.signing_key, _body(unsigned)))
    line = json.dumps({**_body(cp), "mac": cp.mac}, separators=(",", ":")) + "\n"
    try:
        p.parent.mkdir(parents=True, exist_ok=True)
        with open(p, "a", encoding="utf-8") as f:
            f.write(line)
            f.flush()
            os.fsync(f.fileno())
    except OSError as exc:
        raise CheckpointError(f"checkpoint file {p}: cannot write it: {exc}") from exc
    return p, cp


def _verify_file(checkpoints: Sequence[Checkpoint], keys: KeyRing) -> list[Finding]:
    bad: list[Finding] = []
    for n, cp in enumerate(checkpoints, start=1):
        key = keys.get(cp.key_id)
        if key is None:
            bad.append(Finding("", 0, f"checkpoint {n} is signed with chain key {cp.key_id}, which the key ring (keys {sorted(keys.keys)}) does not hold"))
        elif not hmac.compare_digest(cp.mac, _sign(key, _body(cp))):
            bad.append(Finding("", 0, f"checkpoint {n}'s signature does not verify (the checkpoint was edited)"))
        want_prev = checkpoints[n - 2].mac if n > 1 else None
        if cp.prev != want_prev:
            bad.append(Finding("", 0, f"checkpoint {n} does not follow checkpoint {n - 1} (one was removed or edited)"))
    return bad


def verify_checkpoints(
    log: EventLog, path: str | os.PathLike[str], keys: KeyRing, *, session_id: Optional[str] = None, archive_dirs: Sequence[str] = ()
) -> list[Finding]:
    """Compare every checkpoint in ``path`` with the log.

    Checks each checkpoint's signature and link to the previous one; that the log still reaches
    each checkpoint's head position and holds as many events at or below it; and that every
    pinned session still exists, reaches the pinned seq and holds the pinned event there (same
    hash, position, key id). A session is reported once, for the newest checkpoint it fails.

    Args:
        session_id: check only this session's pins (and skip the log-wide counts; the file's
            signatures are checked all the same).
        archive_dirs: where archive files moved from where they were written may be: an
            archived session's events are checked in its file (docs/privacy.md, "Archives").

    Returns:
        what differs (empty: the log holds everything the checkpoints pinned).

    Raises:
        CheckpointError: the file cannot be read, or holds no checkpoint.
    """
    checkpoints = read_checkpoints(path)
    if not checkpoints:
        raise CheckpointError(f"checkpoint file {checkpoint_path(path)}: no checkpoint in it")
    bad = _verify_file(checkpoints, keys)
    failed: set[str] = set()
    with log.db.read() as conn:
        archived = _ArchivedRows(conn, archive_dirs)
        if session_id is None:
            last = _last_position(conn)
            for n, cp in reversed(list(enumerate(checkpoints, start=1))):
                if last < cp.head_position:
                    bad.append(Finding("", 0, f"the log ends at position {last}, before checkpoint {n}'s head {cp.head_position} (its newest events were cut)"))
                    break
            for n, cp in reversed(list(enumerate(checkpoints, start=1))):
                count = conn.execute(sa.select(sa.func.count()).select_from(events_t).where(events_t.c.position <= cp.head_position)).scalar_one()
                moved, unread = archived.count_up_to(cp.head_position)
                if unread:
                    bad.append(Finding("", 0, f"checkpoint {n}'s count cannot be checked: {'; '.join(unread[:3])}"))
                    break
                count += moved
                if count != cp.events:
                    bad.append(Finding("", 0, f"{count} events at positions <= {cp.head_position}, checkpoint {n} counted {cp.events} (events deleted, added or moved below it)"))
                    break
        for n, cp in reversed(list(enumerate(checkpoints, start=1))):
            for sid, seq, position, digest, key_id in cp.sessions:
                if sid in failed or (session_id is not None and sid != session_id):
                    continue
                problem = _check_pin(conn, n, sid, seq, position, digest, key_id, archived)
                if problem is not None:
                    failed.add(sid)
                    bad.append(problem)
    return bad


def _check_pin(
    conn: sa.Connection, n: int, sid: str, seq: int, position: int, digest: str, key_id: Optional[str], archived: _ArchivedRows
) -> Optional[Finding]:
    row = conn.execute(
        sa.select(events_t.c.position, events_t.c.hash, events_t.c.key_id).where(events_t.c.session_id == sid, events_t.c.seq == seq)
    ).first()
    record = archived.records.get(sid)
    if row is None and record is not None and seq <= record.last_seq:
        if seq == record.last_seq:
            row = (record.last_position, record.head_hash, record.head_key_id)
        else:
            rows, why = archived.rows(sid)
            if rows is None:
                return Finding(sid, seq, f"checkpoint {n} pinned seq {seq} of this archived session, and its file cannot be read: {why}")
            row = next(((r.position, r.hash, r.key_id) for r in rows if r.seq == seq), None)
            if row is None:
                return Finding(sid, seq, f"seq {seq} is missing from the session's archive (checkpoint {n} pinned it)")
    if row is None:
        head = conn.execute(sa.select(sa.func.max(events_t.c.seq)).where(events_t.c.session_id == sid)).scalar_one()
        if head is None:
            return Finding(sid, seq, f"session deleted: checkpoint {n} has it up to seq {seq}, the log holds no event of it")
        if head < seq:
            return Finding(sid, seq, f"tail cut: checkpoint {n} has the session up to seq {seq}, the log ends at seq {head}")
        return Finding(sid, seq, f"seq {seq} is missing (checkpoint {n} pinned it; the log has the session up to seq {head})")
    got_position, got_hash, got_key = row
    if got_hash != digest:
        return Finding(sid, seq, f"seq {seq} differs from checkpoint {n}: hash {got_hash[:16]}…, checkpointed {digest[:16]}… (edited below the checkpoint)")
    if got_position != position:
        return Finding(sid, seq, f"seq {seq} is at position {got_position}, checkpoint {n} has it at {position} (moved)")
    if got_key != key_id:
        return Finding(sid, seq, f"seq {seq} names chain key {got_key}, checkpoint {n} has {key_id}")
    return None
