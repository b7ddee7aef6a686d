"""``semantic_vad`` where the engine judges the end of the user's turn (docs/protocol.md, "Turn
detection"; issue 14).

In a turn-based session on a full-duplex engine (:func:`~duplex_es.domain.vad.engine_judges`)
the engine, which hears the words and the pauses, decides when the user has finished:

* while server VAD reports the user speaking, the session issues *judge units*
  (``duplex.unit.issued`` with ``purpose: "judge"``): one in flight at a time, each once another
  ``duplex.chunk_period_ms`` of input audio came (on the input clock, so every replay issues
  the same ones), carrying the utterance so far — the input buffer's audio from where its
  speech started — and the eagerness's pause (``pause_ms``,
  :data:`~duplex_es.events.SEMANTIC_VAD_SILENCE_MS`). They apply no appends: in turn-based mode
  the buffer's commit takes the audio, so the full-duplex exactly-once rule does not concern them;
* an answer whose listen reason is :data:`~duplex_es.events.USER_TURN_ENDED` ends the turn: the
  next pump ends the utterance as server VAD's stop does (:func:`~duplex_es.domain.input.turn_end_events`:
  ``speech_stopped`` where the audio the engine heard ends, the commit, the response);
* server VAD itself waits ``semantic_vad``'s max wait instead of the pause
  (:func:`~duplex_es.domain.vad.stop_silence_ms`), so a slow, failing or missing engine never
  holds a turn longer than that;
* a judge unit whose utterance ended before its answer came (committed, cleared, stopped by the
  max wait) is dead: its answer is logged and discarded (``utterance_ended``).
"""

from __future__ import annotations

from typing import Optional

from duplex_es.domain.commands import Pump, VadIds
from duplex_es.domain.duplex import evolve_unit_failed as evolve_stream_failed
from duplex_es.domain.duplex import evolve_unit_issued as evolve_stream_issued
from duplex_es.domain.duplex import evolve_unit_output as evolve_stream_output
from duplex_es.domain.duplex import unit_inputs, unit_verdict
from duplex_es.domain.input import split_segments, turn_end_events
from duplex_es.domain.replace import replace
from duplex_es.domain.responses import decide_pump as decide_response_pump
from duplex_es.domain.rules import Fold
from duplex_es.domain.state import SessionState
from duplex_es.domain.ticks import Verdict, judge_echo
from duplex_es.domain.vad import engine_judges
from duplex_es.events import (
    JUDGE_UNIT,
    SEMANTIC_VAD_SILENCE_MS,
    USER_TURN_ENDED,
    Event,
    TickIdentity,
    TickRequest,
    UnitFailed,
    UnitIssued,
    UnitOutput,
)

__all__ = [
    "answer_verdict",
    "decide_pump",
    "evolve_unit_failed",
    "evolve_unit_issued",
    "evolve_unit_output",
    "judge_due",
    "judged_turn_end",
]


def _live(state: SessionState) -> Optional[TickIdentity]:
    """The judge unit in flight, if its utterance is still the one server VAD hears."""
    j, vad = state.judge, state.vad
    if j.unit is None or j.item_id is None or not vad.speaking or vad.item_id != j.item_id:
        return None
    return TickIdentity(session_id=state.session_id, request_id=j.unit, epoch=j.epoch, chunk_index=j.chunk_index, applied_event_ids=())


def _judges(state: SessionState, answer: UnitOutput | UnitFailed) -> bool:
    """Whether ``answer`` answers the session's last judge unit (not a full-duplex unit)."""
    return state.judge.unit is not None and answer.request_id == state.judge.unit


def answer_verdict(state: SessionState, answer: UnitOutput | UnitFailed) -> Verdict:
    """The verdict on an answer to any unit: a judge unit's is accepted while its utterance goes
    on (discarded ``utterance_ended`` after; rejected if it does not echo the unit), a
    full-duplex unit's as :func:`~duplex_es.domain.duplex.unit_verdict` says."""
    if _judges(state, answer):
        return judge_echo(_live(state), answer, epoch=state.epoch, gone="utterance_ended")
    return unit_verdict(state, answer)


def judge_due(state: SessionState, request_id: Optional[str], now_ms: Optional[int] = None) -> list[Event]:
    """The next judge unit, if one is due: the engine judges the turn (:func:`engine_judges`),
    server VAD hears the user's utterance, no judge unit of it is in flight, the engine has not
    judged it over nor failed on it, and at least ``chunk_period_ms`` of input audio came since
    the audio the last unit carried (``request_id`` ``None``: nothing can be issued). ``now_ms``
    (the host's clock, Unix ms) is recorded in the unit."""
    cfg, vad, j = state.config, state.vad, state.judge
    if request_id is None or cfg is None or not engine_judges(cfg) or not vad.speaking or vad.item_id is None:
        return []
    if _live(state) is not None or vad.item_id in (j.ended_item, j.failed_item):
        return []
    buf = state.buffer
    start = max(vad.start_sample, buf.start_sample)
    heard = j.heard_to if j.item_id == vad.item_id else start
    if (state.input_clock - heard) * 1000 < cfg.chunk_period_ms * cfg.input_format.rate:
        return []
    _, utterance = split_segments(buf.segments, start - buf.start_sample)
    td = cfg.turn_detection
    assert td is not None
    return [
        UnitIssued(
            request_id=request_id,
            epoch=state.epoch,
            chunk_index=state.duplex.next_unit,
            audio=utterance,
            start_sample=start,
            purpose=JUDGE_UNIT,
            pause_ms=SEMANTIC_VAD_SILENCE_MS[td.eagerness or "auto"],
            inputs=unit_inputs(state),
            issued_at_ms=now_ms,
        )
    ]


def judged_turn_end(state: SessionState, request_id: Optional[str], fold: Fold) -> list[Event]:
    """The end of the user's turn the engine judged over, if server VAD still hears that
    utterance: ended as server VAD's stop ends one, where the audio the engine judged ends. The
    response (with ``create_response``) takes its ids from ``request_id`` (its first tick's),
    as a full-duplex model's turn takes them from its unit."""
    j, vad = state.judge, state.vad
    if request_id is None or j.ended_item is None or not vad.speaking or vad.item_id != j.ended_item:
        return []
    suffix = request_id.removeprefix("req_")
    ids = VadIds(item_id=j.ended_item, response_id="resp_" + suffix, response_item_id="item_r" + suffix, request_id=request_id)
    return turn_end_events(state, j.ended_item, j.ended_at, vad.start_sample, ids, fold)


def decide_pump(cmd: Pump, state: SessionState, *, fold: Fold) -> list[Event]:
    """The host's pump (:func:`~duplex_es.domain.responses.decide_pump`), then, where the engine
    judges the turn, the turn it judged over or the next judge unit (with the first of the
    pump's request ids the responses left)."""
    events = decide_response_pump(cmd, state)
    if not engine_judges(state.config):
        return events
    after = fold(state, events) if events else state
    used = {e.request_id for e in events if isinstance(e, TickRequest)}
    request_id = next((r for r in cmd.request_ids if r not in used), None)
    return events + (judged_turn_end(after, request_id, fold) or judge_due(after, request_id, cmd.now_ms))


def pump_idle(state: SessionState) -> bool:
    """Whether the pump (:func:`decide_pump`) would decide nothing whatever the time: an open
    session with no response in progress or deferred, not full duplex and with no engine
    judging the turn. The host skips the pump then (after most audio appends of a turn-based
    session: issue 16, "no pump decision when nothing can follow"). ``False`` whenever the pump
    might emit; ``tests/unit/test_domain.py`` checks it against :func:`decide_pump` on random
    command sequences."""
    cfg = state.config
    if cfg is None or state.full_duplex or state.deferred_response is not None or engine_judges(cfg):
        return False
    return not state.live_responses()


# ---------------------------------------------------------------------------------- evolvers


def evolve_unit_issued(ev: UnitIssued, state: SessionState, seq: int) -> SessionState:
    """A judge unit is in flight for the utterance server VAD hears; any other unit is a
    full-duplex session's (:func:`~duplex_es.domain.duplex.evolve_unit_issued`)."""
    if ev.purpose != JUDGE_UNIT:
        return evolve_stream_issued(ev, state, seq)
    heard_to = ev.start_sample + sum(s.samples for s in ev.audio)
    j = replace(state.judge, unit=ev.request_id, epoch=ev.epoch, chunk_index=ev.chunk_index, item_id=state.vad.item_id, heard_to=heard_to)
    return replace(state, judge=j, duplex=replace(state.duplex, next_unit=ev.chunk_index + 1))


def evolve_unit_output(ev: UnitOutput, state: SessionState, seq: int) -> SessionState:
    """A judge unit's answer: read for its listen reason only (a judge never speaks); an answer
    that does not echo its unit is void (the next unit asks again)."""
    if not _judges(state, ev):
        return evolve_stream_output(ev, state, seq)
    verdict = answer_verdict(state, ev)
    if verdict.kind == "discarded":
        return state
    j = replace(state.judge, unit=None)
    if verdict.accepted and ev.listen_reason == USER_TURN_ENDED:
        j = replace(j, ended_item=j.item_id, ended_at=j.heard_to)
    return replace(state, judge=j)


def evolve_unit_failed(ev: UnitFailed, state: SessionState, seq: int) -> SessionState:
    """A judge unit failed: no more units for this utterance (a failing engine would fail
    again); server VAD's max wait ends it."""
    if not _judges(state, ev):
        return evolve_stream_failed(ev, state, seq)
    if answer_verdict(state, ev).kind == "discarded":
        return state
    return replace(state, judge=replace(state.judge, unit=None, failed_item=state.judge.item_id))
