"""The tick queue: workers claim ticks under a lease and commit outputs fenced by the claim token.

Delivery is at least once; effects are exactly once (docs/architecture.md, I6):

* a claim gives a fresh random token and an expiry; a tick whose claim expired can be claimed
  again by any worker, which changes the token;
* an output commit checks, in the same transaction that appends the output, that the token is
  still the tick's and the claim has not expired, and uses the tick's ``request_id`` as the
  idempotency key — so a worker that lost its claim cannot commit, and a tick committed before
  is only acknowledged.

Ticks cancelled by ``epoch.advanced`` are never handed out again; an output for one that a
worker was already running is still logged (the reducer marks it discarded, docs/architecture.md, I7).
"""

from __future__ import annotations

import secrets
import time
from typing import Literal, Sequence

import attrs
import sqlalchemy as sa

from duplex_es.errors import LogError
from duplex_es.events import Event, TickRequest, decode
from duplex_es.store.log import ANY_SEQ, EventLog, Recorded
from duplex_es.store.schema import ticks as ticks_t

__all__ = ["Claim", "ClaimLost", "CommitResult", "TickQueue"]


def _now_us() -> int:
    return time.time_ns() // 1000


@attrs.frozen
class Claim:
    """A worker's hold on one tick until ``claimed_until_us`` (µs since the Unix epoch)."""

    request_id: str
    session_id: str
    seq: int
    kind: str
    token: str
    claimed_until_us: int
    attempts: int
    tick: TickRequest


class ClaimLost(LogError):
    """The worker no longer holds the tick: another worker re-claimed it, or the claim expired."""

    def __init__(self, request_id: str, reason: str) -> None:
        self.request_id, self.reason = request_id, reason
        super().__init__(f"tick {request_id}: claim lost ({reason})")


@attrs.frozen
class CommitResult:
    """``committed``: the output is now in the log. ``already_committed``: a previous delivery
    of the same tick committed it; ``records`` are that earlier commit's events."""

    status: Literal["committed", "already_committed"]
    records: tuple[Recorded, ...]


class TickQueue:
    """Claims and output commits for the ticks in one log."""

    def __init__(self, log: EventLog) -> None:
        self.log = log
        self.db = log.db

    def claim(self, worker_id: str, *, ttl_ms: int, kinds: Sequence[str] = ("speech",), now_us: int | None = None) -> Claim | None:
        """Claim the oldest tick that is pending or whose claim expired, or return ``None``.

        Args:
            worker_id: recorded as ``claimed_by`` (for operators).
            ttl_ms: the lease; the worker must commit or :meth:`extend` before it runs out.
            kinds: the tick kinds this worker's engines can run.
            now_us: the current time (µs); defaults to the wall clock.
        """
        now = _now_us() if now_us is None else now_us
        token = secrets.token_hex(16)
        until = now + ttl_ms * 1000
        # How a claim is taken atomically is the backend's (BEGIN IMMEDIATE + UPDATE … RETURNING
        # on SQLite, FOR UPDATE SKIP LOCKED on PostgreSQL); which tick is next is the same for all.
        row = self.db.backend.claim_tick(self.db, kinds=tuple(kinds), now_us=now, token=token, worker_id=worker_id, until_us=until)
        if row is None:
            return None
        request_id, session_id, seq, kind, attempts, type_, version, data = row
        tick = decode(type_, version, data)
        assert isinstance(tick, TickRequest), f"ticks row {request_id} points at a {tick.TYPE}"
        return Claim(request_id, session_id, seq, kind, token, until, attempts, tick)

    def extend(self, claim: Claim, *, ttl_ms: int, now_us: int | None = None) -> Claim:
        """Push the claim's expiry to ``now + ttl_ms``.

        Raises:
            ClaimLost: the token is no longer the tick's, the tick left ``claimed``, or the claim
                already expired.
        """
        now = _now_us() if now_us is None else now_us
        until = now + ttl_ms * 1000
        with self.db.transaction() as conn:
            done = conn.execute(
                ticks_t.update()
                .where(
                    ticks_t.c.request_id == claim.request_id,
                    ticks_t.c.claim_token == claim.token,
                    ticks_t.c.status == "claimed",
                    ticks_t.c.claimed_until_us >= now,
                )
                .values(claimed_until_us=until)
            ).rowcount
        if done != 1:
            raise ClaimLost(claim.request_id, "expired or taken over")
        return attrs.evolve(claim, claimed_until_us=until)

    def commit(self, claim: Claim, events: Sequence[Event], *, now_us: int | None = None) -> CommitResult:
        """Append a tick's output events and mark the tick done, in one transaction.

        Raises:
            ClaimLost: another worker holds the tick, or this claim expired before the commit.
        """
        now = _now_us() if now_us is None else now_us
        with self.db.write() as conn:
            q = sa.select(ticks_t.c.status, ticks_t.c.claim_token, ticks_t.c.claimed_until_us).where(
                ticks_t.c.request_id == claim.request_id
            )
            row = conn.execute(self.db.backend.lock_rows(q)).one()
            if row.status == "done":
                prior = self.log.append_in(conn, claim.session_id, (), expected_seq=ANY_SEQ, idempotency_key=claim.request_id)
                return CommitResult("already_committed", prior.records)
            if row.claim_token != claim.token:
                raise ClaimLost(claim.request_id, "re-claimed by another worker")
            if row.claimed_until_us is None or row.claimed_until_us < now:
                raise ClaimLost(claim.request_id, "claim expired")
            result = self.log.append_in(
                conn, claim.session_id, events, expected_seq=ANY_SEQ, idempotency_key=claim.request_id
            )
            if row.status == "claimed":
                conn.execute(ticks_t.update().where(ticks_t.c.request_id == claim.request_id).values(status="done"))
        return CommitResult("already_committed" if result.duplicate else "committed", result.records)

    def status(self, request_id: str) -> dict | None:
        """The queue row of a tick as a dict (``status``, ``attempts``, ``claimed_by``, ...)."""
        with self.db.read() as conn:
            row = conn.execute(sa.select(ticks_t).where(ticks_t.c.request_id == request_id)).first()
            return dict(row._mapping) if row is not None else None

    def count(self, status: str | None = None) -> int:
        """How many ticks have ``status`` (all ticks if ``None``)."""
        q = sa.select(sa.func.count()).select_from(ticks_t)
        if status is not None:
            q = q.where(ticks_t.c.status == status)
        with self.db.read() as conn:
            return conn.execute(q).scalar_one()
