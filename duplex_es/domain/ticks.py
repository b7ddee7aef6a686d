"""Judging a worker's answer to a tick: the rule every session kind shares (docs/architecture.md,
I5 and I7). The tick's identity is :class:`~duplex_es.events.TickIdentity`; each kind keeps its
live ticks in its own state and asks :func:`judge_echo`.
"""

from __future__ import annotations

from typing import Any, Optional

import attrs

from duplex_es.events import TickIdentity

__all__ = ["Verdict", "ACCEPTED", "judge_echo"]


@attrs.frozen
class Verdict:
    """``kind`` is ``accepted``, ``discarded`` (logged, never sent, changes nothing) or
    ``rejected`` (it answers a live tick but does not echo it: the response, or the world
    session, fails). ``reason`` says why (``stale_epoch``, ``unknown_tick``,
    ``cancelled_tick``, ``identity_mismatch``, ...)."""

    kind: str
    reason: str = ""

    @property
    def accepted(self) -> bool:
        """True for an output that counts."""
        return self.kind == "accepted"


ACCEPTED = Verdict("accepted")


def judge_echo(live: Optional[TickIdentity], answer: Any, *, epoch: int, gone: Optional[str] = None) -> Verdict:
    """Judge ``answer`` (a :class:`~duplex_es.events.TickAnswer` of a fenced tick) against the
    live tick with its ``request_id`` (``None``: there is none).

    * discarded: no live tick has its ``request_id`` — ``gone`` when the kind names one cause
      for that, else ``stale_epoch`` when the answer's epoch is older than the session's
      ``epoch`` (cancelled when the epoch moved) and ``unknown_tick`` otherwise;
    * rejected ``identity_mismatch``: the live tick exists but the answer does not echo its
      identity field for field;
    * accepted otherwise.
    """
    if live is None or live.request_id != answer.request_id:
        return Verdict("discarded", gone or ("stale_epoch" if answer.epoch < epoch else "unknown_tick"))
    if not live.echoed_by(answer):
        return Verdict("rejected", "identity_mismatch")
    return ACCEPTED
