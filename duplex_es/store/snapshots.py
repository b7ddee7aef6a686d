"""Snapshot rows: folded session states, stored as opaque text with a digest.

The store does not know what a state is (docs/architecture.md: the store never imports the domain); it keeps
``(session, seq, reducer version) -> data`` and the SHA-256 of ``data``, so a row changed or cut
after it was written is reported as corrupt instead of being trusted. Snapshots are a cache of the
log: deleting any of them loses nothing.
"""

from __future__ import annotations

import hashlib
import time
from typing import Optional

import attrs
import sqlalchemy as sa

from duplex_es.store.database import Database
from duplex_es.store.schema import snapshots as snapshots_t

__all__ = ["SnapshotStore", "StoredSnapshot"]


@attrs.frozen
class StoredSnapshot:
    """One snapshot row: the state after ``seq`` under ``reducer_version``. ``intact`` is false
    when ``data`` no longer matches the digest written with it."""

    session_id: str
    seq: int
    reducer_version: int
    data: str
    intact: bool


def _digest(data: str) -> str:
    return hashlib.sha256(data.encode("utf-8", "surrogatepass")).hexdigest()


class SnapshotStore:
    """Snapshots on one database.

    Args:
        db: the database (migrated to revision 0002 or later).
        keep: how many snapshots per session to keep; older ones are deleted on save.
    """

    def __init__(self, db: Database, *, keep: int = 2) -> None:
        self.db = db
        self.keep = keep

    def save(self, session_id: str, seq: int, reducer_version: int, data: str) -> None:
        """Store the state after ``seq`` (replacing a snapshot at the same key) and prune all
        but the newest :attr:`keep` of the session."""
        t = snapshots_t
        row = {"session_id": session_id, "seq": seq, "reducer_version": reducer_version, "data": data, "digest": _digest(data), "created_at_us": time.time_ns() // 1000}
        with self.db.transaction() as conn:
            conn.execute(sa.delete(t).where(t.c.session_id == session_id, t.c.seq == seq, t.c.reducer_version == reducer_version))
            conn.execute(sa.insert(t).values(**row))
            newest = sa.select(t.c.seq).where(t.c.session_id == session_id).order_by(t.c.seq.desc()).limit(self.keep)
            conn.execute(sa.delete(t).where(t.c.session_id == session_id, t.c.seq.not_in(sa.select(newest.subquery().c.seq))))

    def recent(self, session_id: str, *, max_seq: Optional[int] = None, limit: int = 4) -> list[StoredSnapshot]:
        """The session's newest snapshots at or before ``max_seq``, newest first, whatever
        their reducer version (the caller picks one it can use)."""
        t = snapshots_t
        q = sa.select(t.c.session_id, t.c.seq, t.c.reducer_version, t.c.data, t.c.digest).where(t.c.session_id == session_id)
        if max_seq is not None:
            q = q.where(t.c.seq <= max_seq)
        with self.db.read() as conn:
            rows = conn.execute(q.order_by(t.c.seq.desc(), t.c.reducer_version.desc()).limit(limit)).all()
        return [StoredSnapshot(r[0], r[1], r[2], r[3], _digest(r[3]) == r[4]) for r in rows]

    def all_of(self, session_id: str) -> list[StoredSnapshot]:
        """Every snapshot of the session, oldest first (for audits)."""
        t = snapshots_t
        with self.db.read() as conn:
            rows = conn.execute(
                sa.select(t.c.session_id, t.c.seq, t.c.reducer_version, t.c.data, t.c.digest)
                .where(t.c.session_id == session_id)
                .order_by(t.c.seq, t.c.reducer_version)
            ).all()
        return [StoredSnapshot(r[0], r[1], r[2], r[3], _digest(r[3]) == r[4]) for r in rows]
