"""Verdicts on engine outputs: accepted, discarded (stale) or rejected (identity mismatch).

Workers append outputs without asking the session; whether an output counts is decided here,
purely from the state it meets, so replay always reaches the same verdict (DESIGN I5, I7).
"""

from __future__ import annotations

from typing import Union

import attrs

from duplex_es.domain.state import SessionState
from duplex_es.events import TickFailed, TickOutput

__all__ = ["Verdict", "ACCEPTED", "classify_output"]


@attrs.frozen
class Verdict:
    """``kind`` is ``accepted``, ``discarded`` (logged, never sent) or ``rejected`` (the
    output does not echo its tick; the response fails). ``reason`` says why."""

    kind: str
    reason: str = ""

    @property
    def accepted(self) -> bool:
        """True for an output that counts."""
        return self.kind == "accepted"


ACCEPTED = Verdict("accepted")


def classify_output(state: SessionState, ev: Union[TickOutput, TickFailed]) -> Verdict:
    """Judge an engine output against the live ticks of ``state``.

    * discarded ``stale_epoch``: its tick belongs to an epoch the session left (cancel,
      barge-in, close) — DESIGN I7;
    * discarded ``unknown_tick``: no live tick has its ``request_id``;
    * rejected ``identity_mismatch``: the live tick exists but the output's ``session_id``,
      ``response_id``, ``epoch``, ``chunk_index`` or ``applied_event_ids`` differ from it;
    * accepted otherwise.
    """
    tick = state.ticks.get(ev.request_id)
    if tick is None or tick.status != "issued":
        if ev.epoch < state.epoch:
            return Verdict("discarded", "stale_epoch")
        return Verdict("discarded", "unknown_tick")
    if tick.epoch != state.epoch:
        return Verdict("discarded", "stale_epoch")
    echo = (ev.session_id, ev.response_id, ev.epoch, ev.chunk_index, tuple(ev.applied_event_ids))
    want = (state.session_id, tick.response_id, tick.epoch, tick.chunk_index, tick.applied_event_ids)
    if echo != want:
        return Verdict("rejected", "identity_mismatch")
    return ACCEPTED
