"""``evolve(state, seq, event) -> state``: the one writer of session state.

Pure: no clock, no randomness, no I/O (DESIGN I2). A live session's state is always
``fold(evolve, its events)`` (DESIGN I1); :func:`fold` is that fold.
"""

from __future__ import annotations

from functools import singledispatch
from typing import Iterable

import attrs

from duplex_es.domain.audio import samples_of
from duplex_es.domain.errors import Code
from duplex_es.domain.heard import heard_prefix
from duplex_es.domain.state import InputBuffer, Item, Response, SessionState, Tick
from duplex_es.domain.verdicts import classify_output
from duplex_es.events import (
    AudioAppended,
    CommandRejected,
    EpochAdvanced,
    Event,
    InputCleared,
    InputCommitted,
    ItemTruncated,
    Mark,
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

__all__ = ["evolve", "fold", "history_transcript"]


def evolve(state: SessionState, seq: int, event: Event) -> SessionState:
    """Apply the event logged at ``seq`` to ``state`` and return the new state.

    Raises:
        TypeError: for an event type the speech reducer does not know.
    """
    return attrs.evolve(_apply(event, state, seq), seq=seq)


def fold(events: Iterable[tuple[int, Event]], state: SessionState | None = None) -> SessionState:
    """Fold ``(seq, event)`` pairs into a state, starting from ``state`` or an empty one."""
    s = state if state is not None else SessionState()
    for seq, ev in events:
        s = evolve(s, seq, ev)
    return s


def history_transcript(item: Item, response: Response | None) -> str:
    """What the conversation history keeps of an assistant item's transcript.

    The whole generated text while nothing limits it; once the client acks playback, the prefix
    heard by ``committed_ms``; never beyond a truncation cap (DESIGN §4, playback ledger).
    """
    cutoff = None
    if response is not None and response.acked:
        cutoff = response.committed_ms
    if item.truncated_ms is not None:
        cutoff = item.truncated_ms if cutoff is None else min(cutoff, item.truncated_ms)
    if cutoff is None:
        return item.full_text
    complete = response is not None and response.final_seen
    return heard_prefix(item.full_text, item.marks, cutoff, item.generated_ms, complete)


def _put_item(state: SessionState, item: Item) -> SessionState:
    order = state.item_order if item.id in state.items else state.item_order + (item.id,)
    return attrs.evolve(state, items={**state.items, item.id: item}, item_order=order)


def _put_response(state: SessionState, resp: Response) -> SessionState:
    return attrs.evolve(state, responses={**state.responses, resp.id: resp})


def _refresh_transcript(state: SessionState, item_id: str) -> SessionState:
    item = state.items[item_id]
    resp = state.responses.get(item.response_id) if item.response_id else None
    text = history_transcript(item, resp)
    return state if text == item.transcript else _put_item(state, attrs.evolve(item, transcript=text))


@singledispatch
def _apply(event: Event, state: SessionState, seq: int) -> SessionState:
    raise TypeError(f"the speech reducer does not handle {type(event).__name__} ({event.TYPE})")


@_apply.register
def _(ev: SessionOpened, state: SessionState, seq: int) -> SessionState:
    return attrs.evolve(state, session_id=ev.session_id, status="open", config=ev.config)


@_apply.register
def _(ev: SessionUpdated, state: SessionState, seq: int) -> SessionState:
    unapplied = state.unapplied + (seq,) if ev.model_relevant else state.unapplied
    return attrs.evolve(state, config=ev.config, unapplied=unapplied)


@_apply.register
def _(ev: SessionClosed, state: SessionState, seq: int) -> SessionState:
    return attrs.evolve(state, status="closed", close_reason=ev.reason)


@_apply.register
def _(ev: CommandRejected, state: SessionState, seq: int) -> SessionState:
    return state  # DESIGN I3: a refusal changes no derived state.


@_apply.register
def _(ev: AudioAppended, state: SessionState, seq: int) -> SessionState:
    buf = state.buffer
    buf = attrs.evolve(buf, append_seqs=buf.append_seqs + (seq,), samples=buf.samples + ev.samples)
    return attrs.evolve(state, buffer=buf, input_clock=state.input_clock + ev.samples)


@_apply.register
def _(ev: TextAppended, state: SessionState, seq: int) -> SessionState:
    buf = state.buffer
    return attrs.evolve(state, buffer=attrs.evolve(buf, text_seqs=buf.text_seqs + (seq,), text=buf.text + ev.text))


@_apply.register
def _(ev: InputCommitted, state: SessionState, seq: int) -> SessionState:
    item = Item(
        id=ev.item_id,
        role="user",
        previous_item_id=ev.previous_item_id,
        status="completed",
        content_type="input_audio" if ev.append_seqs else "input_text",
        append_seqs=ev.append_seqs,
        input_samples=ev.samples,
        input_text=ev.text,
        audio_rate=state.config.input_format.rate if state.config else 24000,
    )
    state = attrs.evolve(state, buffer=InputBuffer(), unapplied=state.unapplied + (seq,))
    return _put_item(state, item)


@_apply.register
def _(ev: InputCleared, state: SessionState, seq: int) -> SessionState:
    return attrs.evolve(state, buffer=InputBuffer())


@_apply.register
def _(ev: ResponseCreated, state: SessionState, seq: int) -> SessionState:
    resp = Response(
        id=ev.response_id,
        item_id=ev.item_id,
        epoch=state.epoch,
        output_modalities=ev.output_modalities,
        voice=ev.voice,
        instructions=ev.instructions,
        output_format=ev.output_format,
        conversation=ev.conversation,
    )
    item = Item(
        id=ev.item_id,
        role="assistant",
        previous_item_id=ev.previous_item_id,
        status="in_progress",
        content_type="output_audio" if "audio" in ev.output_modalities else "output_text",
        response_id=ev.response_id,
        audio_rate=ev.output_format.rate,
    )
    state = _put_response(state, resp)
    state = attrs.evolve(state, active_response_id=ev.response_id)
    return _put_item(state, item)


@_apply.register
def _(ev: TickIssued, state: SessionState, seq: int) -> SessionState:
    applied = set(ev.applied_event_ids)
    tick = Tick(
        request_id=ev.request_id,
        response_id=ev.response_id,
        epoch=ev.epoch,
        chunk_index=ev.chunk_index,
        applied_event_ids=ev.applied_event_ids,
    )
    resp = state.responses[ev.response_id]
    resp = attrs.evolve(resp, tick_in_flight=ev.request_id, inputs=ev.inputs if ev.chunk_index == 0 else resp.inputs)
    state = _put_response(state, resp)
    return attrs.evolve(
        state,
        ticks={**state.ticks, ev.request_id: tick},
        unapplied=tuple(s for s in state.unapplied if s not in applied),
    )


@_apply.register
def _(ev: TickOutput, state: SessionState, seq: int) -> SessionState:
    verdict = classify_output(state, ev)
    if verdict.kind == "discarded":
        return state
    if verdict.kind == "rejected":
        return _fail_tick(state, ev.request_id, Code.TICK_IDENTITY_MISMATCH, "engine output does not echo its tick")
    ticks = {k: v for k, v in state.ticks.items() if k != ev.request_id}
    resp = state.responses[ev.response_id]
    item = state.items[resp.item_id]
    for t in ev.input_transcripts:
        user = state.items.get(t.item_id)
        if user is not None:
            state = _put_item(state, attrs.evolve(user, transcript=t.transcript))
    fmt = resp.output_format
    new_samples = samples_of(_b64_len(ev.audio), fmt)
    item = attrs.evolve(
        item,
        full_text=item.full_text + ev.text_delta,
        audio_samples=item.audio_samples + new_samples,
        marks=_merge_marks(item.marks, ev.marks),
    )
    resp = attrs.evolve(
        resp,
        tick_in_flight=None,
        next_chunk=resp.next_chunk + 1,
        final_seen=resp.final_seen or ev.final,
        generated_ms=item.generated_ms,
    )
    state = attrs.evolve(state, ticks=ticks, audio_output_started=state.audio_output_started or new_samples > 0)
    state = _put_response(_put_item(state, item), resp)
    return _refresh_transcript(state, item.id)


@_apply.register
def _(ev: TickFailed, state: SessionState, seq: int) -> SessionState:
    verdict = classify_output(state, ev)
    if verdict.kind == "discarded":
        return state
    if verdict.kind == "rejected":
        return _fail_tick(state, ev.request_id, Code.TICK_IDENTITY_MISMATCH, "engine failure does not echo its tick")
    return _fail_tick(state, ev.request_id, ev.code, ev.message)


def _fail_tick(state: SessionState, request_id: str, code: str, message: str) -> SessionState:
    tick = attrs.evolve(state.ticks[request_id], status="failed")
    resp = state.responses[tick.response_id]
    resp = attrs.evolve(resp, tick_in_flight=None, failure_code=code, failure_message=message)
    return _put_response(attrs.evolve(state, ticks={**state.ticks, request_id: tick}), resp)


@_apply.register
def _(ev: EpochAdvanced, state: SessionState, seq: int) -> SessionState:
    dead = set(ev.cancelled_request_ids)
    responses = dict(state.responses)
    for rid in dead:
        tick = state.ticks.get(rid)
        if tick is not None and tick.response_id in responses:
            responses[tick.response_id] = attrs.evolve(responses[tick.response_id], tick_in_flight=None)
    ticks = {k: v for k, v in state.ticks.items() if k not in dead}
    discarded = set(ev.discarded_event_ids)
    unapplied = tuple(s for s in state.unapplied if s not in discarded)
    return attrs.evolve(state, epoch=ev.epoch, ticks=ticks, responses=responses, unapplied=unapplied)


@_apply.register
def _(ev: ResponseDone, state: SessionState, seq: int) -> SessionState:
    resp = state.responses[ev.response_id]
    resp = attrs.evolve(resp, status=ev.status, status_reason=ev.reason, tick_in_flight=None)
    if ev.heard_ms is not None:
        resp = attrs.evolve(resp, acked=True, committed_ms=ev.heard_ms)
    item = state.items[resp.item_id]
    item = attrs.evolve(item, status="completed" if ev.status == "completed" else "incomplete")
    active = None if state.active_response_id == ev.response_id else state.active_response_id
    state = _put_response(_put_item(attrs.evolve(state, active_response_id=active), item), resp)
    return _refresh_transcript(state, item.id)


@_apply.register
def _(ev: PlaybackAcked, state: SessionState, seq: int) -> SessionState:
    resp = attrs.evolve(
        state.responses[ev.response_id], played_ms=ev.played_ms, committed_ms=ev.committed_ms, acked=True
    )
    return _refresh_transcript(_put_response(state, resp), ev.item_id)


@_apply.register
def _(ev: ItemTruncated, state: SessionState, seq: int) -> SessionState:
    item = state.items[ev.item_id]
    cap = ev.audio_end_ms if item.truncated_ms is None else min(item.truncated_ms, ev.audio_end_ms)
    state = _put_item(state, attrs.evolve(item, truncated_ms=cap))
    if item.response_id is not None:
        resp = state.responses[item.response_id]
        state = _put_response(state, attrs.evolve(resp, committed_ms=min(resp.committed_ms, cap)))
    state = attrs.evolve(state, unapplied=state.unapplied + (seq,))
    return _refresh_transcript(state, ev.item_id)


def _b64_len(b64: str) -> int:
    """Decoded length of a base64 string without decoding it."""
    if not b64:
        return 0
    return len(b64) * 3 // 4 - b64[-2:].count("=")


def _merge_marks(old: tuple[Mark, ...], new: tuple[Mark, ...]) -> tuple[Mark, ...]:
    if not new:
        return old
    return old + tuple(m for m in new if not old or (m.audio_ms, m.text_chars) > (old[-1].audio_ms, old[-1].text_chars))
