"""Session ownership across server processes: a lease with a fencing generation in the database.

Any number of ``serve`` processes may share one database. Each session is owned by at most one
of them at a time, recorded in ``session_owners``:

* a server **acquires** a session when it opens, resumes or recovers it; every acquisition by
  a different holder (or by the same holder after a restart) raises the session's
  ``generation`` by one and returns a :class:`Fence` carrying it;
* every append of a command passes its fence, and the log checks it in the append's own
  transaction (``AppendSql.owners`` in ``duplex_es/store/appendsql.py``, locked to its commit by the backend), so a server that lost the session — a client
  resumed it elsewhere, or its lease ran out while it was stalled — cannot write, whatever it
  still believes (the fencing token of Kleppmann, *Designing Data-Intensive Applications*
  ch. 8, "Fencing tokens");
* the owner **renews** its leases while alive (one statement for all of its sessions); a
  session whose lease ran out is an orphan another server may take up (:meth:`orphans`).

A resume always takes the session, even from a live owner: the client holding the resume token
decides where the session lives. Workers never own sessions; their appends are fenced by tick
claims instead (:mod:`duplex_es.store.ticks`).
"""

from __future__ import annotations

import time
from typing import Optional

import attrs
import sqlalchemy as sa

from duplex_es.errors import LogError
from duplex_es.store.database import Database
from duplex_es.store.schema import session_owners as owners_t

__all__ = ["Fence", "OwnershipLost", "SessionOwned", "SessionOwners", "DEFAULT_OWNER_TTL_MS"]

#: How long an owner's lease lasts without renewal (ms). A server renews about every third of it.
DEFAULT_OWNER_TTL_MS = 10_000


def _now_us() -> int:
    return time.time_ns() // 1000


@attrs.frozen
class Fence:
    """Proof of ownership: appends carrying it succeed only while ``generation`` is still the
    session's current one and ``owner_id`` its owner."""

    session_id: str
    owner_id: str
    generation: int


class OwnershipLost(LogError):
    """An append carried a fence that is no longer current: the session moved to another
    owner (``owner_id``, ``generation`` are the current ones; ``None`` if it has none).
    Nothing was written."""

    def __init__(self, fence: Fence, owner_id: Optional[str], generation: Optional[int]) -> None:
        self.fence, self.owner_id, self.generation = fence, owner_id, generation
        super().__init__(
            f"session {fence.session_id}: owned by {owner_id!r} at generation {generation}, "
            f"not by {fence.owner_id!r} at generation {fence.generation}"
        )


class SessionOwned(LogError):
    """A session is owned by another live server (its lease runs until ``expires_at_us``)."""

    def __init__(self, session_id: str, owner_id: str, expires_at_us: int) -> None:
        self.session_id, self.owner_id, self.expires_at_us = session_id, owner_id, expires_at_us
        super().__init__(f"session {session_id} is owned by {owner_id!r} until {expires_at_us} µs")


class SessionOwners:
    """The ``session_owners`` table of one database.

    Args:
        db: the database (migrated).
        ttl_ms: the lease an acquisition or renewal grants.
    """

    def __init__(self, db: Database, *, ttl_ms: int = DEFAULT_OWNER_TTL_MS) -> None:
        self.db = db
        self.ttl_ms = ttl_ms

    def acquire(
        self,
        session_id: str,
        owner_id: str,
        *,
        take_over: bool = False,
        expected_generation: Optional[int] = None,
        now_us: Optional[int] = None,
    ) -> Fence:
        """Make ``owner_id`` the session's owner and return its new fence.

        The generation rises by one on every call (a restarted server reusing its id fences out
        its own former incarnation too). A session owned by another holder whose lease has not
        run out is taken only with ``take_over`` (a resume).

        Args:
            expected_generation: take the session only if its generation is still this (0: it
                has no owner row) — a compare-and-swap, so a resume decided on what it read
                cannot overrule a move that happened since.

        Raises:
            SessionOwned: another live owner holds it and ``take_over`` is false, or the
                generation is no longer ``expected_generation``.
        """
        now = _now_us() if now_us is None else now_us
        until = now + self.ttl_ms * 1000
        backend = self.db.backend
        with self.db.transaction() as conn:
            if expected_generation not in (None, 0):
                created = None
            else:
                created = conn.execute(
                    backend.insert_or_nothing(
                        owners_t, ["session_id"], session_id=session_id, owner_id=owner_id, generation=1, expires_at_us=until
                    ).returning(owners_t.c.generation)
                ).first()
            if created is not None:
                return Fence(session_id, owner_id, 1)
            q = sa.select(owners_t.c.owner_id, owners_t.c.generation, owners_t.c.expires_at_us).where(
                owners_t.c.session_id == session_id
            )
            row = conn.execute(backend.lock_rows(q)).first()
            if row is None:  # released meanwhile (the session ended): nothing to take
                raise SessionOwned(session_id, "", 0)
            if expected_generation is not None and row.generation != expected_generation:
                raise SessionOwned(session_id, row.owner_id, row.expires_at_us)
            if row.owner_id != owner_id and row.expires_at_us >= now and not take_over:
                raise SessionOwned(session_id, row.owner_id, row.expires_at_us)
            generation = row.generation + 1
            conn.execute(
                owners_t.update()
                .where(owners_t.c.session_id == session_id)
                .values(owner_id=owner_id, generation=generation, expires_at_us=until)
            )
        return Fence(session_id, owner_id, generation)

    def renew(self, owner_id: str, *, now_us: Optional[int] = None) -> int:
        """Extend the lease of every session ``owner_id`` owns to now + ttl; returns how many.
        One statement, whatever the number of sessions."""
        now = _now_us() if now_us is None else now_us
        with self.db.transaction() as conn:
            return conn.execute(
                owners_t.update().where(owners_t.c.owner_id == owner_id).values(expires_at_us=now + self.ttl_ms * 1000)
            ).rowcount

    def release(self, fence: Fence) -> bool:
        """Give the session up (it ended, or this server stops): the row goes if ``fence`` is
        still current. Returns whether it was."""
        with self.db.transaction() as conn:
            return (
                conn.execute(
                    owners_t.delete().where(
                        owners_t.c.session_id == fence.session_id,
                        owners_t.c.owner_id == fence.owner_id,
                        owners_t.c.generation == fence.generation,
                    )
                ).rowcount
                == 1
            )

    def current(self, session_id: str) -> Optional[tuple[Fence, int]]:
        """The session's current owner as ``(fence, expires_at_us)``, or ``None``."""
        with self.db.read() as conn:
            row = conn.execute(
                sa.select(owners_t.c.owner_id, owners_t.c.generation, owners_t.c.expires_at_us).where(
                    owners_t.c.session_id == session_id
                )
            ).first()
        return None if row is None else (Fence(session_id, row.owner_id, row.generation), row.expires_at_us)

    def orphans(self, *, now_us: Optional[int] = None, limit: int = 100) -> list[str]:
        """Sessions whose owner's lease ran out (the owner died or stalled), oldest first: any
        server may take them up with :meth:`acquire`."""
        now = _now_us() if now_us is None else now_us
        with self.db.read() as conn:
            rows = conn.execute(
                sa.select(owners_t.c.session_id)
                .where(owners_t.c.expires_at_us < now)
                .order_by(owners_t.c.expires_at_us)
                .limit(limit)
            )
            return [r[0] for r in rows]

    def held_by_others(self, owner_id: str, *, now_us: Optional[int] = None) -> set[str]:
        """The sessions another owner holds under a lease still running (not to be taken up)."""
        now = _now_us() if now_us is None else now_us
        with self.db.read() as conn:
            rows = conn.execute(
                sa.select(owners_t.c.session_id).where(owners_t.c.owner_id != owner_id, owners_t.c.expires_at_us >= now)
            )
            return {r[0] for r in rows}
