"""Leases, for speech and world sessions alike: detach, and resume by compare-and-swap.

A resume succeeds only if the lease is still at the generation the resumer read and, for a wire
client, the presented resume token is the current one; it then bumps the generation and rotates
the token (docs/protocol.md, "Resume"; vLLM-Omni keeps the same rules in memory,
docs/sources.md, "vLLM-Omni's session resume"). Tokens are compared as SHA-256 digests, in constant time.
Time comes from the commands (docs/architecture.md, I11).
"""

from __future__ import annotations

import hmac
from typing import Any

from duplex_es.domain.commands import Expire, Resume
from duplex_es.domain.errors import Code
from duplex_es.domain.replace import replace
from duplex_es.domain.rules import reject
from duplex_es.domain.state import Lease
from duplex_es.events import Event, SessionDetached, SessionResumed

__all__ = ["resume_events", "with_token", "grace_still_running_out"]

#: A SessionState or a WorldState: both carry ``lease`` (typed loosely to keep this module
#: below both state modules).
HasLease = Any


def _same(a: str, b: str) -> bool:
    return hmac.compare_digest(a.encode(), b.encode())


def resume_events(cmd: Resume, state: HasLease) -> list[Event]:
    """The events of a resume against an open session: ``session.resumed``, or a refusal with
    ``invalid_resume_token`` (a token this session never issued), ``session_resume_conflict``
    (a token a later resume rotated away, or a lease generation that moved on).

    One rotated-away token is still good while the session is detached: the one the latest
    resume rotated away. The new token travels only in that resume's ``session.resumed``; when
    the connection or the server died before it arrived, the client holds nothing else and
    retries with the old one — the leeway refresh-token rotation (RFC 6819 §5.2.2.3) is commonly
    given for a lost reply. Every resume moves it on, so older tokens stay refused; while a
    client is attached it is refused too, so two clients racing with one token get one winner.
    A token that came in a URL (an access log may hold it) keeps that leeway only for
    ``cmd.url_leeway_ms`` after the resume that rotated it away: long enough to retry a lost
    reply, too short for whoever reads the log later (docs/sources.md, "Bearer credentials in
    URLs")."""
    lease: Lease = state.lease
    if cmd.token_hash is not None and not _retry_of_latest_resume(cmd, cmd.token_hash, lease):
        if lease.token_hash is None or not _same(cmd.token_hash, lease.token_hash):
            if any(_same(cmd.token_hash, old) for old in lease.retired_token_hashes):
                return reject(
                    cmd,
                    Code.RESUME_CONFLICT,
                    f"the resume token was rotated by a later resume (the lease is at generation {lease.generation})",
                    "resume_token",
                )
            return reject(cmd, Code.RESUME_TOKEN_INVALID, "the resume token is not one this session issued", "resume_token")
    if cmd.expected_generation != lease.generation:
        return reject(
            cmd,
            Code.RESUME_CONFLICT,
            f"the session's lease is at generation {lease.generation}, not {cmd.expected_generation}: another client resumed it",
            "expected_generation",
        )
    return [
        SessionResumed(
            client_event_id=cmd.event_id,
            lease_generation=lease.generation + 1,
            at_ms=cmd.at_ms,
            resume_token_hash=cmd.new_token_hash,
            last_server_event_seq=cmd.last_server_event_seq,
            token_in_url=cmd.token_in_url,
        )
    ]


def _retry_of_latest_resume(cmd: Resume, token_hash: str, lease: Lease) -> bool:
    in_url_at = lease.retired_in_url_at_ms
    return (
        lease.detached_at_ms is not None
        # A token that came in a URL may sit in an access log: it is never good again unless
        # the operator granted a leeway (0 by default: docs/security.md, "Resume tokens").
        and (in_url_at is None or (cmd.url_leeway_ms > 0 and cmd.at_ms - in_url_at <= cmd.url_leeway_ms))
        and bool(lease.retired_token_hashes)
        and _same(token_hash, lease.retired_token_hashes[-1])
    )


def grace_still_running_out(cmd: Expire, lease: Lease) -> bool:
    """False when a disconnect-grace expiry was decided from a detach the lease no longer has
    (a resume came first): such an expiry must do nothing."""
    return cmd.reason != "disconnect_grace_expired" or lease.detached_at_ms == cmd.since_ms


def with_token(state: HasLease, token_hash: str | None, principal: str | None = None) -> HasLease:
    """``state`` whose lease holds the resume token digest a session was opened with, and the
    name of the principal that opened it (``None``: anonymous)."""
    return replace(state, lease=replace(state.lease, token_hash=token_hash, principal=principal))


def evolve_session_detached(ev: SessionDetached, state: HasLease, seq: int) -> HasLease:
    return replace(state, lease=replace(state.lease, detached_at_ms=ev.at_ms))


def evolve_session_resumed(ev: SessionResumed, state: HasLease, seq: int) -> HasLease:
    old = state.lease
    away = max(0, ev.at_ms - old.detached_at_ms) if old.detached_at_ms is not None else 0
    token, retired, in_url_at = old.token_hash, old.retired_token_hashes, old.retired_in_url_at_ms
    if ev.resume_token_hash is not None:
        token = ev.resume_token_hash
        retired = retired + ((old.token_hash,) if old.token_hash is not None else ())
        in_url_at = ev.at_ms if ev.token_in_url else None
    lease = Lease(
        generation=ev.lease_generation,
        detached_at_ms=None,
        token_hash=token,
        retired_token_hashes=retired,
        detached_total_ms=old.detached_total_ms + away,
        principal=old.principal,
        retired_in_url_at_ms=in_url_at,
    )
    return replace(state, lease=lease)
