"""Snapshot rows: folded session states, stored as opaque text with a digest.

The store does not know what a state is (docs/architecture.md: the store never imports the domain); it keeps
``(session, seq, reducer version) -> data`` and the SHA-256 of ``data``, so a row changed or cut
after it was written is reported as corrupt instead of being trusted. Snapshots are a cache of the
log: deleting any of them loses nothing.
"""

from __future__ import annotations

import base64
import hashlib
import os
import time
from typing import Optional

from cryptography.exceptions import InvalidTag

import attrs
import sqlalchemy as sa

from duplex_es.store.database import Database
from duplex_es.store.datakeys import DataKeys
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


#: A sealed snapshot's stored text starts with this, then base64 of nonce + AES-GCM ciphertext.
_SEALED_PREFIX = "sealed1:"


def _snapshot_aad(session_id: str, seq: int, reducer_version: int) -> bytes:
    return f"duplex-es/snapshot/v1\0{session_id}\0{seq}\0{reducer_version}".encode("utf-8", "surrogatepass")


class SnapshotStore:
    """Snapshots on one database.

    A state holds the session's transcripts and text, so with ``data_keys`` (sealed sessions,
    docs/privacy.md) a snapshot is stored sealed under its session's data key, bound to
    (session, seq, reducer version); one that does not open reads as not intact (ignored and
    rebuilt from the log, I10), and an erased session gets none (erasure deletes them).

    Args:
        db: the database (migrated to revision 0002 or later).
        keep: how many snapshots per session to keep; older ones are deleted on save.
        data_keys: the sessions' data keys (:class:`~duplex_es.store.datakeys.DataKeys`), or
            ``None``: snapshots stored in the clear.
    """

    def __init__(self, db: Database, *, keep: int = 2, data_keys: Optional[DataKeys] = None) -> None:
        self.db = db
        self.keep = keep
        self.data_keys = data_keys

    def _seal(self, session_id: str, seq: int, reducer_version: int, data: str) -> Optional[str]:
        if self.data_keys is None:
            return data
        cipher = self.data_keys.states_now([session_id])[session_id].cipher
        if cipher is None:  # erased (or nothing of it sealed yet): no snapshot in the clear
            return None
        nonce = os.urandom(12)
        sealed = cipher.encrypt(nonce, data.encode("utf-8", "surrogatepass"), _snapshot_aad(session_id, seq, reducer_version))
        return _SEALED_PREFIX + base64.b64encode(nonce + sealed).decode("ascii")

    def _open(self, session_id: str, seq: int, reducer_version: int, stored: str) -> Optional[str]:
        if not stored.startswith(_SEALED_PREFIX):
            return stored
        cipher = self.data_keys.states_now([session_id])[session_id].cipher if self.data_keys is not None else None
        if cipher is None:
            return None
        try:
            blob = base64.b64decode(stored[len(_SEALED_PREFIX) :], validate=True)
            return cipher.decrypt(blob[:12], blob[12:], _snapshot_aad(session_id, seq, reducer_version)).decode("utf-8", "surrogatepass")
        except (ValueError, InvalidTag):
            return None

    def _stored(self, r: sa.Row) -> StoredSnapshot:
        opened = self._open(r[0], r[1], r[2], r[3])
        intact = opened is not None and _digest(r[3]) == r[4]
        return StoredSnapshot(r[0], r[1], r[2], opened if opened is not None else "", intact)

    def save(self, session_id: str, seq: int, reducer_version: int, data: str) -> None:
        """Store the state after ``seq`` (replacing a snapshot at the same key) and prune all
        but the newest :attr:`keep` of the session (nothing, for an erased sealed session)."""
        stored = self._seal(session_id, seq, reducer_version, data)
        if stored is None:
            return
        data = stored
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
        return [self._stored(r) for r in rows]

    def all_of(self, session_id: str) -> list[StoredSnapshot]:
        """Every snapshot of the session, oldest first (for audits)."""
        t = snapshots_t
        with self.db.read() as conn:
            rows = conn.execute(
                sa.select(t.c.session_id, t.c.seq, t.c.reducer_version, t.c.data, t.c.digest)
                .where(t.c.session_id == session_id)
                .order_by(t.c.seq, t.c.reducer_version)
            ).all()
        return [self._stored(r) for r in rows]

    def delete_in(self, conn: sa.Connection, session_id: str) -> int:
        """Delete every snapshot of the session in the caller's transaction (an erasure);
        returns how many there were."""
        return conn.execute(sa.delete(snapshots_t).where(snapshots_t.c.session_id == session_id)).rowcount or 0
