"""The tick queue: workers claim ticks under a lease and commit outputs fenced by the claim token.

Delivery is at least once; effects are exactly once (docs/architecture.md, I6):

* a claim gives a fresh random token and an expiry; a tick whose claim expired can be claimed
  again by any worker, which changes the token;
* an output commit checks, in the same transaction that appends the output, that the token is
  still the tick's and the claim has not expired, and uses the tick's ``request_id`` as the
  idempotency key — so a worker that lost its claim cannot commit, and a tick committed before
  is only acknowledged.

A worker may claim a *batch*: up to B ticks in one statement, at most one per session (the
oldest claimable tick of each session, sessions taken oldest first, so no session's backlog
fills a batch), and commit all their outputs in one transaction (:meth:`TickQueue.commit_batch`),
each still fenced by its own claim: a lost claim skips that output alone. The single-tick calls
are the batch of one.

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
from duplex_es.events import Event, TickRequest
from duplex_es.store.datakeys import SealingRequired, SessionErasedError, decode_stored
from duplex_es.store.log import ANY_SEQ, AppendRequest, EventLog, Recorded
from duplex_es.store.schema import ticks as ticks_t

__all__ = ["Claim", "ClaimLost", "CommitResult", "TickQueue"]

#: The most ticks one claim may take (a bound on the statement and on what one worker holds).
MAX_BATCH = 1024


def _now_us() -> int:
    return time.time_ns() // 1000


@attrs.frozen
class Claim:
    """A worker's hold on one tick until ``claimed_until_us`` (µs since the Unix epoch).

    The claims of one :meth:`TickQueue.claim_batch` share their ``token``; a claim is the pair
    (``request_id``, ``token``), so each tick of a batch is still fenced on its own."""

    request_id: str
    session_id: str
    seq: int
    kind: str
    token: str
    claimed_until_us: int
    attempts: int
    tick: TickRequest
    #: the tick's content is sealed and this worker holds no key for it (no master key, or the
    #: session was erased): its inputs read empty (docs/privacy.md)
    withheld: bool = False


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
        """Claim the oldest tick that is pending or whose claim expired, or return ``None``
        (:meth:`claim_batch` with ``max_ticks=1``).

        Args:
            worker_id: recorded as ``claimed_by`` (for operators).
            ttl_ms: the lease; the worker must commit or :meth:`extend` before it runs out.
            kinds: the tick kinds this worker's engines can run.
            now_us: the current time (µs); defaults to the wall clock.
        """
        claims = self.claim_batch(worker_id, ttl_ms=ttl_ms, kinds=kinds, max_ticks=1, now_us=now_us)
        return claims[0] if claims else None

    def claim_batch(
        self,
        worker_id: str,
        *,
        ttl_ms: int,
        kinds: Sequence[str] = ("speech",),
        max_ticks: int = 1,
        exclude_sessions: Sequence[str] = (),
        now_us: int | None = None,
    ) -> list[Claim]:
        """Claim up to ``max_ticks`` ticks across sessions in one statement, oldest first.

        A tick is claimable when it is pending or its claim expired; of each session only its
        oldest claimable tick may be taken, so the batch holds at most one tick per session and
        a session's ticks start in log order. Each claim gets the same fresh token and expiry
        (fencing checks the token together with the tick's ``request_id``).

        Args:
            worker_id: recorded as ``claimed_by`` (for operators).
            ttl_ms: the lease of every claim; the worker must commit or extend before it runs out.
            kinds: the tick kinds this worker's engines can run.
            max_ticks: the batch size B, 1 to :data:`MAX_BATCH`.
            exclude_sessions: sessions to take nothing of (a worker filling a batch it holds
                ticks of already names their sessions, keeping one tick per session per batch).
            now_us: the current time (µs); defaults to the wall clock.

        Returns:
            the claims in position order (empty: nothing was claimable).

        Raises:
            ValueError: ``max_ticks`` out of range, ``ttl_ms`` not positive or no ``kinds``.
        """
        if not 1 <= max_ticks <= MAX_BATCH:
            raise ValueError(f"max_ticks={max_ticks}: a claim takes 1 to {MAX_BATCH} ticks")
        if ttl_ms <= 0:
            raise ValueError(f"ttl_ms={ttl_ms}: a claim's lease must be positive")
        if not kinds:
            raise ValueError("kinds=(): a claim names at least one tick kind")
        now = _now_us() if now_us is None else now_us
        token = secrets.token_hex(16)
        until = now + ttl_ms * 1000
        # How claims are taken atomically is the backend's (BEGIN IMMEDIATE + UPDATE … RETURNING
        # on SQLite, FOR UPDATE SKIP LOCKED on PostgreSQL); which ticks are next is the same for all.
        rows = self.db.backend.claim_ticks(
            self.db, kinds=tuple(kinds), now_us=now, token=token, worker_id=worker_id, until_us=until, limit=max_ticks,
            exclude_sessions=tuple(exclude_sessions),
        )
        claims = []
        keys = self.log.data_keys.states_now([r[1] for r in rows if r[9] is not None]) if self.log.data_keys is not None else {}
        for request_id, session_id, seq, kind, attempts, type_, version, data, payload, sealed in rows:
            key = keys.get(session_id)
            tick, withheld = decode_stored(key.cipher if key is not None else None, session_id, seq, type_, version, data, payload, sealed)
            assert isinstance(tick, TickRequest), f"ticks row {request_id} points at a {tick.TYPE}"
            claims.append(Claim(request_id, session_id, seq, kind, token, until, attempts, tick, withheld))
        return claims

    def extend(self, claim: Claim, *, ttl_ms: int, now_us: int | None = None) -> Claim:
        """Push the claim's expiry to ``now + ttl_ms``.

        Raises:
            ClaimLost: the token is no longer the tick's, the tick left ``claimed``, or the claim
                already expired.
        """
        [out] = self.extend_batch([claim], ttl_ms=ttl_ms, now_us=now_us)
        if isinstance(out, ClaimLost):
            raise out
        return out

    def extend_batch(self, claims: Sequence[Claim], *, ttl_ms: int, now_us: int | None = None) -> list["Claim | ClaimLost"]:
        """Push every claim's expiry to ``now + ttl_ms`` in one transaction (a batch's heartbeat).

        Returns:
            per claim, in order: the extended :class:`Claim`, or :class:`ClaimLost` if its token
            is no longer the tick's, the tick left ``claimed`` (a cancel) or the claim expired.
        """
        if not claims:
            return []
        now = _now_us() if now_us is None else now_us
        until = now + ttl_ms * 1000
        ids = sorted({c.request_id for c in claims})
        with self.db.transaction() as conn:
            # Rows locked in one order (request_id) by every batch statement: two workers whose
            # batches overlap (one took over a tick of the other's) cannot deadlock.
            held = conn.execute(
                self.db.backend.lock_rows(
                    sa.select(ticks_t.c.request_id, ticks_t.c.claim_token).where(
                        ticks_t.c.request_id.in_(ids), ticks_t.c.status == "claimed", ticks_t.c.claimed_until_us >= now
                    ).order_by(ticks_t.c.request_id)
                )
            ).all()
            mine = {rid for rid, token in held if any(c.request_id == rid and c.token == token for c in claims)}
            if mine:
                conn.execute(ticks_t.update().where(ticks_t.c.request_id.in_(sorted(mine))).values(claimed_until_us=until))
        return [
            attrs.evolve(c, claimed_until_us=until) if c.request_id in mine else ClaimLost(c.request_id, "expired or taken over")
            for c in claims
        ]

    def commit(self, claim: Claim, events: Sequence[Event], *, now_us: int | None = None) -> CommitResult:
        """Append a tick's output events and mark the tick done, in one transaction.

        Raises:
            ClaimLost: another worker holds the tick, or this claim expired before the commit.
        """
        [out] = self.commit_batch([(claim, events)], now_us=now_us)
        if isinstance(out, ClaimLost):
            raise out
        return out

    def commit_batch(
        self, outputs: Sequence[tuple[Claim, Sequence[Event]]], *, now_us: int | None = None
    ) -> list["CommitResult | ClaimLost"]:
        """Append the output events of several claimed ticks and mark them done, all in one
        transaction, each fenced by its own claim as :meth:`commit` fences one.

        A claim that was lost (re-claimed by another worker, or expired before this commit)
        writes nothing: its outcome is the :class:`ClaimLost` and the other outputs commit.
        A tick committed before (a redelivery) is only acknowledged: ``already_committed``
        with that earlier commit's events. A tick cancelled while it ran still has its output
        logged (the reducer discards it, docs/architecture.md, I7) and stays ``cancelled``.

        Args:
            outputs: ``(claim, events)`` per tick, each tick at most once.
            now_us: the current time (µs) the expiries are checked against; the wall clock by default.

        Returns:
            one outcome per output, in order: a :class:`CommitResult` or a :class:`ClaimLost`.

        Raises:
            ValueError: a tick appears twice in ``outputs`` (nothing is written).
        """
        ids = [c.request_id for c, _ in outputs]
        twice = sorted({rid for rid in ids if ids.count(rid) > 1})
        if twice:
            raise ValueError(f"commit_batch: ticks {twice} appear more than once; each tick has one output")
        if not outputs:
            return []
        now = _now_us() if now_us is None else now_us
        with self.db.write() as conn:
            q = (
                sa.select(ticks_t.c.request_id, ticks_t.c.status, ticks_t.c.claim_token, ticks_t.c.claimed_until_us)
                .where(ticks_t.c.request_id.in_(sorted(ids)))
                .order_by(ticks_t.c.request_id)  # one lock order for every batch statement
            )
            rows = {r.request_id: r for r in conn.execute(self.db.backend.lock_rows(q))}
            outcomes: list[CommitResult | ClaimLost | None] = [None] * len(outputs)
            requests: list[AppendRequest] = []
            slots: list[int] = []
            for i, (claim, events) in enumerate(outputs):
                row = rows.get(claim.request_id)
                if row is None:
                    outcomes[i] = ClaimLost(claim.request_id, "no such tick")
                    continue
                if row.status == "done":  # a redelivery: the key finds the earlier commit
                    events = ()
                elif row.claim_token != claim.token:
                    outcomes[i] = ClaimLost(claim.request_id, "re-claimed by another worker")
                    continue
                elif row.claimed_until_us is None or row.claimed_until_us < now:
                    outcomes[i] = ClaimLost(claim.request_id, "claim expired")
                    continue
                requests.append(AppendRequest(claim.session_id, tuple(events), ANY_SEQ, claim.request_id))
                slots.append(i)
            # Workers append unfenced by ownership (their claim is their fence), at any head, so
            # only sealing can refuse a request here: the session was erased meanwhile, or this
            # worker cannot seal (docs/privacy.md) — its output is dropped and its tick
            # cancelled, the others commit; database errors roll all back.
            results = self.log.append_batch_in(conn, requests) if requests else []
            finished, refused = [], []
            for i, result in zip(slots, results):
                if isinstance(result, (SessionErasedError, SealingRequired)):
                    outcomes[i] = ClaimLost(outputs[i][0].request_id, f"refused: {result}")
                    refused.append(outputs[i][0].request_id)
                    continue
                if isinstance(result, Exception):  # not reachable without a fence or expected seq
                    raise result
                status = rows[outputs[i][0].request_id].status
                outcomes[i] = CommitResult("already_committed" if result.duplicate or status == "done" else "committed", result.records)
                if status == "claimed":
                    finished.append(outputs[i][0].request_id)
            if finished:
                conn.execute(ticks_t.update().where(ticks_t.c.request_id.in_(finished)).values(status="done"))
            if refused:
                conn.execute(ticks_t.update().where(ticks_t.c.request_id.in_(refused)).values(status="cancelled"))
        return outcomes  # type: ignore[return-value]

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
