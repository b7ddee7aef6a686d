"""Replay: rebuild a session's state at any event from the log, with a timeline of verdicts."""

from __future__ import annotations

from typing import Optional

import attrs

from duplex_es.domain import SessionState, classify_output, evolve
from duplex_es.events import (
    AudioAppended,
    HeartbeatReceived,
    ResponseDeferred,
    ItemCreated,
    ItemDeleted,
    ItemRetrieved,
    OutputAudioCleared,
    SessionDetached,
    SessionExpired,
    SessionResumed,
    SpeechStarted,
    SpeechStopped,
    TurnSignaled,
    CommandRejected,
    EpochAdvanced,
    Event,
    InputCleared,
    InputCommitted,
    ItemTruncated,
    PlaybackAcked,
    ResponseCreated,
    ResponseDone,
    SessionClosed,
    SessionOpened,
    SessionUpdated,
    TextAppended,
    TickFailed,
    TickIssued,
    TickOutput,
)
from duplex_es.store import EventLog

__all__ = ["TimelineRow", "Replay", "replay", "verdict_of", "summarize"]


@attrs.frozen
class TimelineRow:
    """One log event as the timeline shows it."""

    seq: int
    position: int
    recorded_at_us: int
    type: str
    verdict: str
    summary: str


@attrs.frozen
class Replay:
    """A session rebuilt up to ``state.seq``: the state and the timeline that led to it."""

    session_id: str
    state: SessionState
    timeline: tuple[TimelineRow, ...]
    head: int


def verdict_of(before: SessionState, ev: Event) -> str:
    """``accepted``, ``rejected: <code>``, ``discarded: <reason>`` or ``decided`` (session reactions)."""
    if isinstance(ev, CommandRejected):
        return f"rejected: {ev.code}"
    if isinstance(ev, (TickOutput, TickFailed)):
        v = classify_output(before, ev)
        return v.kind if v.accepted else f"{v.kind}: {v.reason}"
    decided = (TickIssued, EpochAdvanced, SpeechStarted, SpeechStopped, SessionDetached, SessionExpired, ResponseDeferred)
    if isinstance(ev, decided) or (isinstance(ev, (ResponseDone, InputCommitted, ResponseCreated)) and ev.client_event_id is None):
        return "decided"
    return "accepted"


def _ms(samples: int, rate: int = 24000) -> str:
    return f"{samples * 1000 // rate} ms"


def summarize(ev: Event) -> str:
    """The key fields of an event, in one line."""
    cid = f" [{ev.client_event_id}]" if getattr(ev, "client_event_id", None) else ""
    if isinstance(ev, SessionOpened):
        return f"model={ev.config.model}"
    if isinstance(ev, SessionUpdated):
        c = ev.config
        return f"voice={c.voice} modalities={','.join(c.output_modalities)} model_relevant={ev.model_relevant}{cid}"
    if isinstance(ev, CommandRejected):
        return f"{ev.command_type or '?'}: {ev.message}" + (f" (param {ev.param})" if ev.param else "") + cid
    if isinstance(ev, AudioAppended):
        return f"{_ms(ev.samples)} at {_ms(ev.start_sample)}{cid}"
    if isinstance(ev, TextAppended):
        return f"{ev.text[:40]!r}{cid}"
    if isinstance(ev, InputCommitted):
        return f"item={ev.item_id} appends={list(ev.append_seqs)} audio={_ms(ev.samples)}{cid}"
    if isinstance(ev, InputCleared):
        return f"discarded={list(ev.discarded_seqs)}{cid}"
    if isinstance(ev, ResponseCreated):
        return f"response={ev.response_id} item={ev.item_id} modalities={','.join(ev.output_modalities)}{cid}"
    if isinstance(ev, TickIssued):
        return f"request={ev.request_id} epoch={ev.epoch} chunk={ev.chunk_index} applied={list(ev.applied_event_ids)}"
    if isinstance(ev, TickOutput):
        nbytes = len(ev.audio) * 3 // 4
        return (
            f"request={ev.request_id} chunk={ev.chunk_index} audio={nbytes} bytes text={ev.text_delta[:30]!r}"
            + (f" new_item={ev.new_item_id}" if ev.new_item_id else "")
            + (" final" if ev.final else "")
            + (f" incomplete={ev.incomplete_reason}" if ev.incomplete_reason else "")
        )
    if isinstance(ev, TickFailed):
        return f"request={ev.request_id} chunk={ev.chunk_index} {ev.code}: {ev.message[:60]}"
    if isinstance(ev, EpochAdvanced):
        return f"epoch={ev.epoch} reason={ev.reason} cancelled={list(ev.cancelled_request_ids)} discarded={list(ev.discarded_event_ids)}"
    if isinstance(ev, ResponseDone):
        extra = f" heard_ms={ev.heard_ms}" if ev.heard_ms is not None else ""
        err = f" {ev.error_code}" if ev.error_code else ""
        return f"response={ev.response_id} status={ev.status}" + (f" reason={ev.reason}" if ev.reason else "") + err + extra + cid
    if isinstance(ev, PlaybackAcked):
        return f"response={ev.response_id} played={ev.played_ms} committed={ev.committed_ms}{cid}"
    if isinstance(ev, ItemTruncated):
        return f"item={ev.item_id} audio_end_ms={ev.audio_end_ms}{cid}"
    if isinstance(ev, SessionClosed):
        return f"reason={ev.reason}{cid}"
    if isinstance(ev, SpeechStarted):
        return f"item={ev.item_id} audio_start_ms={ev.audio_start_ms}"
    if isinstance(ev, SpeechStopped):
        return f"item={ev.item_id} audio_end_ms={ev.audio_end_ms}"
    if isinstance(ev, ItemCreated):
        return f"item={ev.item_id} role={ev.role} after={ev.previous_item_id} parts={[p.type for p in ev.content]}{cid}"
    if isinstance(ev, (ItemDeleted, ItemRetrieved)):
        return f"item={ev.item_id}{cid}"
    if isinstance(ev, ResponseDeferred):
        return f"response={ev.response_id} waits for the active response"
    if isinstance(ev, OutputAudioCleared):
        return f"response={ev.response_id}{cid}"
    if isinstance(ev, SessionDetached):
        return f"at_ms={ev.at_ms} reason={ev.reason}"
    if isinstance(ev, SessionResumed):
        return f"lease_generation={ev.lease_generation} at_ms={ev.at_ms}{cid}"
    if isinstance(ev, SessionExpired):
        return f"reason={ev.reason} decided_at_ms={ev.decided_at_ms} since_ms={ev.since_ms}"
    if isinstance(ev, TurnSignaled):
        return f"signal={ev.signal}{cid}"
    if isinstance(ev, HeartbeatReceived):
        return cid.strip()
    return ""


def replay(log: EventLog, session_id: str, *, at: Optional[int] = None) -> Replay:
    """Rebuild ``session_id`` from its events up to seq ``at`` (all events if ``None``).

    Raises:
        KeyError: the session has no events.
        duplex_es.store.StoredEventError: an event cannot be decoded.
    """
    records = log.read_session(session_id)
    if not records:
        raise KeyError(session_id)
    state = SessionState()
    rows = []
    for r in records:
        if at is not None and r.seq > at:
            break
        verdict = verdict_of(state, r.event)
        state = evolve(state, r.seq, r.event)
        rows.append(TimelineRow(r.seq, r.position, r.recorded_at_us, r.event.TYPE, verdict, summarize(r.event)))
    return Replay(session_id, state, tuple(rows), records[-1].seq)
