"""Responses, ticks and epochs (docs/architecture.md, I5–I7, §4).

At most one response holds the default conversation; out-of-band responses
(``conversation: "none"``) run beside it and never join the conversation. Each response advances
one tick at a time: the host's ``Pump`` issues the next tick after an accepted output, or ends
the response. Every cancel path raises the epoch, names the ticks it kills and the model-feeding
events they would have applied, and ends the response ``cancelled`` exactly once.
"""

from __future__ import annotations

from typing import Any, Optional, Union

from duplex_es.audio import is_supported
from duplex_es.domain.calls import apply_chunk, chunk_problem, end_calls, history_entry
from duplex_es.domain.commands import BargeIn, CancelResponse, ClearOutputAudio, CreateResponse, Pump, ResponseOptions
from duplex_es.domain.duplex import request_turn, requeue, unit_due
from duplex_es.domain.content import content_problem, size_problem, tool_choice_problem
from duplex_es.domain.errors import Code
from duplex_es.domain.limits import MAX_INSTRUCTIONS_CHARS, MAX_OUT_OF_BAND_RESPONSES, VOICES
from duplex_es.domain.playback import may_still_play, maybe_release, refresh_transcripts
from duplex_es.domain.replace import replace
from duplex_es.domain.rules import b64_len, grow_item, open_output_item, put_item, put_response, reject
from duplex_es.domain.state import Item, Response, ResponseStatus, SessionState, Tick, TickStatus
from duplex_es.domain.ticks import ACCEPTED, Verdict, judge_echo
from duplex_es.events import (
    AudioSegment,
    EpochAdvanced,
    Event,
    HistoryEntry,
    OutputAudioCleared,
    ResponseInput,
    ResponseCreated,
    ResponseDone,
    SpeechInputs,
    TickFailed,
    TickIssued,
    TickOutput,
)

__all__ = ["Verdict", "ACCEPTED", "classify_output", "speech_inputs", "cancel_events", "start_response", "retire_frozen"]


# -------------------------------------------------------------------------------- verdicts




def classify_output(state: SessionState, ev: Union[TickOutput, TickFailed]) -> Verdict:
    """Judge an engine output against the live ticks of ``state``.

    * discarded ``stale_epoch``: its tick was cancelled when the epoch moved (cancel, barge-in,
      close, expiry) — docs/architecture.md, I7;
    * discarded ``unknown_tick``: no live tick has its ``request_id``;
    * rejected ``identity_mismatch``: the live tick exists but the output's ``session_id``,
      ``response_id``, ``epoch``, ``chunk_index`` or ``applied_event_ids`` differ from it, or it
      opens an item with an id already in use;
    * rejected ``invalid_function_call``: it breaks the function-calling rules
      (:func:`~duplex_es.domain.calls.chunk_problem`);
    * accepted otherwise.
    """
    tick = state.ticks.get(ev.request_id)
    live = tick.identity(state.session_id) if tick is not None and tick.status == TickStatus.ISSUED else None
    verdict = judge_echo(live, ev, epoch=state.epoch)
    if not verdict.accepted:
        return verdict
    if isinstance(ev, TickOutput):
        if ev.new_item_id is not None and ev.new_item_id in state.items:
            return Verdict("rejected", "identity_mismatch")
        current = state.items.get(state.responses[ev.response_id].item_id)
        calling = ev.function_call is not None or (current is not None and current.type == "function_call")
        if calling and chunk_problem(state, ev):
            return Verdict("rejected", "invalid_function_call")
    return ACCEPTED


# ---------------------------------------------------------------------------------- inputs


def retire_frozen(state: SessionState) -> SessionState:
    """Drop the ledger of every ended, never-acknowledged response that a newer user turn made
    final (``playback_ack_too_late``): only its id is kept, so a session whose client never
    acks does not grow with every response."""
    frozen = [
        r.id
        for r in state.responses.values()
        if not r.active and not r.slot_reserved and r.conversation == "auto" and r.answers_commit_seq < state.last_commit_seq
    ]
    if not frozen:
        return state
    return replace(
        state,
        responses={k: v for k, v in state.responses.items() if k not in frozen},
        retired_response_ids=state.retired_response_ids + tuple(frozen),
    )


def speech_inputs(state: SessionState, o: ResponseOptions, **fields: Any) -> SpeechInputs:
    """What the engine reads for a new response: the newest user item and the conversation as
    heard so far (assistant items hold only their heard prefix) — or, when the response has its
    own ``input``, those items (inline ones with ``item_id`` ``""``; an inline function item
    an entry of its type); ``fields`` are the response's effective settings."""
    cfg = state.config
    assert cfg is not None
    if o.input is None:
        user = state.last_user_item()
        history = tuple(history_entry(state.items[x]) for x in state.item_order)
        reply_to, user_audio, user_text = (user.id, user.audio, user.input_text) if user else (None, (), "")
    else:
        entries: list[HistoryEntry] = []
        reply_to, user_audio, user_text = None, (), ""
        offset = 0  # samples of inline audio before the entry, as logged by response.created
        per_sample = 2 if cfg.input_format.type == "audio/pcm" else 1
        for entry in o.input:
            if entry.item_id is not None:
                item = state.items[entry.item_id]
                entries.append(history_entry(item))
                if item.role == "user":
                    reply_to, user_audio, user_text = item.id, item.audio, item.input_text
                continue
            if entry.type == "function_call":
                entries.append(HistoryEntry(item_id="", role="assistant", text="", type="function_call", call_id=entry.call_id, name=entry.name, arguments=entry.arguments))
                continue
            if entry.type == "function_call_output":
                entries.append(HistoryEntry(item_id="", role="tool", text="", type="function_call_output", call_id=entry.call_id, output=entry.output))
                continue
            text = "".join(p.text for p in entry.content)
            samples = sum(b64_len(p.audio) for p in entry.content) // per_sample
            entries.append(HistoryEntry(item_id="", role=entry.role or "user", text=text, audio_ms=samples * 1000 // cfg.input_format.rate))
            if entry.role == "user":
                # Inline audio is logged by the response.created about to be appended.
                audio = (AudioSegment(seq=state.seq + 1, offset=offset, samples=samples),) if samples else ()
                reply_to, user_audio, user_text = None, audio, text
            offset += samples
        history = tuple(entries)
    return SpeechInputs(
        reply_to_item_id=reply_to,
        user_audio=user_audio,
        user_text=user_text,
        input_format=cfg.input_format,
        history=history,
        engine=cfg.engine or cfg.model,
        model=cfg.model,
        **fields,
    )


# ------------------------------------------------------------------------------------ create


def _input_problem(state: SessionState, entries: tuple[ResponseInput, ...]) -> Optional[tuple[str, str, str]]:
    """Why a ``response.input`` cannot be the response's context: ``(code, message, param)``."""
    for i, entry in enumerate(entries):
        path = f"response.input[{i}]"
        if entry.item_id is not None:
            if entry.item_id not in state.items:
                return Code.INPUT_ITEM_NOT_FOUND, f"response.input[{i}] names item {entry.item_id[:64]!r}, which does not exist", f"{path}.id"
            continue
        if entry.type in ("function_call", "function_call_output"):
            # Checked when parsed; inline, it is only context: no call of the session is
            # made or answered (so no call state is checked).
            continue
        problem = content_problem(entry.role or "", entry.content, path)
        if problem is None:
            nbytes = sum(b64_len(p.audio) for p in entry.content)
            problem = size_problem(state.config.input_format, entry.content, nbytes, path, f"{path}.content")  # type: ignore[union-attr]
        if problem is not None:
            return problem
    return None


def start_response(state: SessionState, cmd: CreateResponse) -> list[Event]:
    """The events of an accepted ``response.create`` (also used by server VAD), or its refusal."""
    o = cmd.options
    cfg = state.config
    assert cfg is not None
    if cfg.session_type == "transcription":
        return reject(cmd, Code.TRANSCRIPTION_SESSION, "a transcription session creates no responses; set session.type to 'realtime' first")
    if o.conversation not in ("auto", "none"):
        return reject(
            cmd, Code.UNSUPPORTED_RESPONSE_OPTION, f'conversation must be "auto" or "none"; got {o.conversation[:64]!r}', "response.conversation"
        )
    active = state.active_response
    if o.conversation == "auto" and active is not None:
        return reject(
            cmd,
            Code.ACTIVE_RESPONSE,
            f"Conversation already has an active response in progress: {active.id}. "
            "Wait until the response is finished before creating a new one.",
        )
    out_of_band = [r for r in state.live_responses() if r.conversation == "none"]
    if o.conversation == "none" and len(out_of_band) >= MAX_OUT_OF_BAND_RESPONSES:
        return reject(
            cmd,
            Code.TOO_MANY_RESPONSES,
            f"at most {MAX_OUT_OF_BAND_RESPONSES} out-of-band responses may run at once; in progress: {', '.join(r.id for r in out_of_band)}",
        )
    modalities = cfg.output_modalities if o.output_modalities is None else o.output_modalities
    if modalities not in (("audio",), ("text",)):
        return reject(
            cmd, Code.UNSUPPORTED_MODALITIES, f'output_modalities must be ["audio"] or ["text"]; got {list(modalities)}', "response.output_modalities"
        )
    out_fmt = o.output_format or cfg.output_format
    if not is_supported(out_fmt.type, out_fmt.rate):
        return reject(
            cmd, Code.UNSUPPORTED_AUDIO_FORMAT, f"unsupported output audio format {out_fmt.type} at {out_fmt.rate} Hz", "response.audio.output.format"
        )
    voice = cfg.voice if o.voice is None else o.voice
    if voice not in VOICES:
        return reject(cmd, Code.UNSUPPORTED_VOICE, f"unknown voice {voice[:64]!r}; choose one of {', '.join(sorted(VOICES))}", "response.audio.output.voice")
    if voice != cfg.voice and state.audio_output_started:
        return reject(
            cmd,
            Code.VOICE_UPDATE_AFTER_AUDIO,
            f"the voice cannot change from {cfg.voice!r} to {voice!r}: the session already produced audio",
            "response.audio.output.voice",
        )
    instructions = cfg.instructions if o.instructions is None else o.instructions
    if len(instructions) > MAX_INSTRUCTIONS_CHARS:
        return reject(
            cmd,
            Code.INSTRUCTIONS_TOO_LONG,
            f"instructions of {len(instructions)} characters exceed the limit of {MAX_INSTRUCTIONS_CHARS}",
            "response.instructions",
        )
    if o.input is not None:
        problem = _input_problem(state, o.input)
        if problem is not None:
            return reject(cmd, *problem)
    tools = cfg.tools if o.tools is None else o.tools
    tool_choice = cfg.tool_choice if o.tool_choice is None else o.tool_choice
    unknown_choice = tool_choice_problem(tools, tool_choice)
    if unknown_choice is not None:
        return reject(cmd, Code.INVALID_EVENT, unknown_choice, "response.tool_choice")
    in_conversation = o.conversation == "auto"
    max_tokens = cfg.max_output_tokens if o.max_output_tokens is None else o.max_output_tokens
    inputs = speech_inputs(
        state,
        o,
        output_format=out_fmt,
        instructions=instructions,
        voice=voice,
        output_modalities=modalities,
        max_output_tokens=max_tokens,
        speed=cfg.speed if o.speed is None else o.speed,
        temperature=cfg.temperature if o.temperature is None else o.temperature,
        tools=tools,
        tool_choice=tool_choice,
        parallel_tool_calls=cfg.parallel_tool_calls if o.parallel_tool_calls is None else o.parallel_tool_calls,
    )
    return [
        ResponseCreated(
            client_event_id=cmd.event_id,
            response_id=cmd.response_id,
            item_id=cmd.item_id,
            previous_item_id=state.last_item_id if in_conversation else None,
            output_modalities=modalities,
            voice=voice,
            instructions=instructions,
            output_format=out_fmt,
            conversation=o.conversation,
            answers_commit_seq=state.last_commit_seq,
            metadata=o.metadata,
            max_output_tokens=max_tokens,
            input=o.input,
            not_applied=o.not_applied,
        ),
        TickIssued(
            request_id=cmd.request_id,
            response_id=cmd.response_id,
            epoch=state.epoch,
            chunk_index=0,
            # Out-of-band responses read the conversation but do not consume its updates.
            applied_event_ids=state.unapplied if in_conversation else (),
            inputs=inputs,
        ),
    ]


def decide_create_response(cmd: CreateResponse, state: SessionState) -> list[Event]:
    if state.full_duplex and cmd.options.conversation == "auto":
        return request_turn(state, cmd)  # the model takes its turn itself (docs/duplex.md)
    return start_response(state, cmd)


# ------------------------------------------------------------------------------------ cancel


def cancel_events(
    state: SessionState,
    resps: list[Response],
    *,
    cause: str,
    reason: Optional[str],
    event_id: Optional[str] = None,
    discard_pending: bool = False,
    extra: tuple[Event, ...] = (),
    error_code: Optional[str] = None,
    error_message: Optional[str] = None,
) -> list[Event]:
    """Raise the epoch (fencing the ticks of ``resps``), then end each response ``cancelled``.

    ``cause`` is recorded on the epoch change; ``reason`` is the Realtime
    ``status_details.reason``. With ``discard_pending``, model-feeding events no tick took yet
    are discarded too (the session is ending). ``extra`` events go between the two.
    ``error_code`` / ``error_message``: the real cause when ``reason`` (one of GA's) cannot say
    it (``session_closed``, ``session_expired``); the wire's ``status_details.error``.
    """
    ids = {r.id for r in resps}
    live = [t for t in state.ticks.values() if t.response_id in ids]
    discarded = {s for t in live for s in t.applied_event_ids}
    cancelled = tuple(t.request_id for t in live)
    if state.duplex.unit is not None:
        # A full-duplex unit in flight is fenced too; its appends wait for the next unit.
        cancelled += (state.duplex.unit,)
    if discard_pending:
        discarded |= set(state.unapplied)
        cancelled += tuple(state.transcriptions)  # the session ends: nobody will read them
    events: list[Event] = [
        EpochAdvanced(
            epoch=state.epoch + 1,
            reason=cause,
            cancelled_request_ids=cancelled,
            discarded_event_ids=tuple(sorted(discarded)),
        ),
        *extra,
    ]
    for r in resps:
        events.append(
            ResponseDone(
                client_event_id=event_id,
                response_id=r.id,
                status="cancelled",
                reason=reason,
                error_code=error_code,
                error_message=error_message,
                heard_ms=r.committed_ms if r.acked else None,
            )
        )
    return events


def _named_or_active(state: SessionState, response_id: Optional[str]) -> Optional[Response]:
    if response_id is None:
        return state.active_response
    resp = state.responses.get(response_id)
    return resp if resp is not None and resp.active else None


def decide_cancel_response(cmd: CancelResponse, state: SessionState) -> list[Event]:
    resp = _named_or_active(state, cmd.response_id)
    if resp is None:
        if cmd.response_id is not None:
            return reject(cmd, Code.CANCEL_NOT_ACTIVE, f"Cancellation failed: response {cmd.response_id[:64]} is not active", "response_id")
        return reject(cmd, Code.CANCEL_NOT_ACTIVE, "Cancellation failed: no active response found")
    return cancel_events(state, [resp], cause=cmd.cause, reason="client_cancelled", event_id=cmd.event_id)


def decide_barge_in(cmd: BargeIn, state: SessionState) -> list[Event]:
    resp = state.active_response
    if resp is None:
        return reject(cmd, Code.CANCEL_NOT_ACTIVE, "barge_in: no active response to interrupt")
    return cancel_events(state, [resp], cause="barge_in", reason="turn_detected", event_id=cmd.event_id)


def decide_clear_output_audio(cmd: ClearOutputAudio, state: SessionState) -> list[Event]:
    if cmd.response_id is not None:
        resp = state.responses.get(cmd.response_id)
    else:
        resp = state.active_response or next((r for r in reversed(list(state.responses.values())) if may_still_play(state, r)), None)
    if resp is None or not may_still_play(state, resp):
        param = "response_id" if cmd.response_id is not None else None
        what = f"response {cmd.response_id[:64]} has no audio left to clear" if cmd.response_id is not None else "no response has audio to clear"
        return reject(cmd, Code.CANCEL_NOT_ACTIVE, f"output_audio_buffer.clear: {what}", param)
    cleared = OutputAudioCleared(client_event_id=cmd.event_id, response_id=resp.id)
    if not resp.active:
        return [cleared]
    return cancel_events(
        # The reason must be one of GA's (clients validate it); the cause is kept on the epoch change.
        state, [resp], cause="output_audio_buffer_clear", reason="client_cancelled", event_id=cmd.event_id, extra=(cleared,)
    )


# -------------------------------------------------------------------------------------- pump


def decide_pump(cmd: Pump, state: SessionState) -> list[Event]:
    events: list[Event] = []
    deferred = state.deferred_response
    if deferred is not None and state.active_response is None:
        # A server VAD turn waited for the previous response to end.
        return start_response(state, CreateResponse(response_id=deferred.response_id, item_id=deferred.item_id, request_id=deferred.request_id))
    ids = iter(cmd.request_ids)
    epoch = state.epoch
    for resp in state.live_responses():
        if resp.failure_code is not None:
            live = [t for t in state.ticks.values() if t.response_id == resp.id]
            epoch += 1
            events += [
                EpochAdvanced(
                    epoch=epoch,
                    reason="response_failed",
                    cancelled_request_ids=tuple(t.request_id for t in live),
                    discarded_event_ids=tuple(sorted(s for t in live for s in t.applied_event_ids)),
                ),
                ResponseDone(
                    response_id=resp.id, status="failed", error_code=resp.failure_code, error_message=resp.failure_message
                ),
            ]
        elif resp.final_seen:
            status = "incomplete" if resp.incomplete_reason else "completed"
            events.append(ResponseDone(response_id=resp.id, status=status, reason=resp.incomplete_reason))
        elif resp.tick_in_flight is None and not resp.by_units:
            request_id = next(ids, None)
            if request_id is None:
                break  # the host pumps again after this batch
            events.append(
                TickIssued(
                    request_id=request_id,
                    response_id=resp.id,
                    epoch=epoch,
                    chunk_index=resp.next_chunk,
                    applied_event_ids=(),
                    inputs=resp.inputs,
                )
            )
    if state.full_duplex:
        events += unit_due(state, next(ids, None), epoch=epoch, now_ms=cmd.now_ms)
    return events


# ---------------------------------------------------------------------------------- evolvers


def evolve_response_created(ev: ResponseCreated, state: SessionState, seq: int) -> SessionState:
    in_conversation = ev.conversation == "auto"
    resp = Response(
        id=ev.response_id,
        item_ids=(ev.item_id,),
        epoch=state.epoch,
        output_modalities=ev.output_modalities,
        voice=ev.voice,
        instructions=ev.instructions,
        output_format=ev.output_format,
        conversation=ev.conversation,
        answers_commit_seq=ev.answers_commit_seq,
        metadata=ev.metadata,
        max_output_tokens=ev.max_output_tokens,
        started_at_sample=state.input_clock,
    )
    item = Item(
        id=ev.item_id,
        role="assistant",
        status="in_progress",
        content_type="output_audio" if "audio" in ev.output_modalities else "output_text",
        in_conversation=in_conversation,
        response_id=ev.response_id,
        audio_format=ev.output_format,
    )
    state = put_response(state, resp)
    if in_conversation:
        deferred = state.deferred_response
        state = replace(
            state,
            active_response_id=ev.response_id,
            deferred_response=None if deferred and deferred.response_id == ev.response_id else deferred,
            idle_since_sample=None,
        )
    return put_item(state, item)


def evolve_tick_issued(ev: TickIssued, state: SessionState, seq: int) -> SessionState:
    applied = set(ev.applied_event_ids)
    tick = Tick(
        request_id=ev.request_id,
        response_id=ev.response_id,
        epoch=ev.epoch,
        chunk_index=ev.chunk_index,
        applied_event_ids=ev.applied_event_ids,
    )
    resp = state.responses[ev.response_id]
    if ev.chunk_index == 0:
        fmt = ev.inputs.input_format
        resp = replace(
            resp,
            tick_in_flight=ev.request_id,
            inputs=ev.inputs,
            input_audio_ms=sum(seg.samples for seg in ev.inputs.user_audio) * 1000 // fmt.rate,
            input_text_chars=len(ev.inputs.user_text),
        )
    else:
        resp = replace(resp, tick_in_flight=ev.request_id)
    state = put_response(state, resp)
    return replace(
        state,
        ticks={**state.ticks, ev.request_id: tick},
        unapplied=tuple(s for s in state.unapplied if s not in applied),
    )


def evolve_tick_output(ev: TickOutput, state: SessionState, seq: int) -> SessionState:
    verdict = classify_output(state, ev)
    if verdict.kind == "discarded":
        return state
    if verdict.kind == "rejected":
        if verdict.reason == "invalid_function_call":
            return _fail_tick(state, ev.request_id, Code.INVALID_FUNCTION_CALL, chunk_problem(state, ev) or "")
        return _fail_tick(state, ev.request_id, Code.TICK_IDENTITY_MISMATCH, "engine output does not echo its tick")
    ticks = {k: v for k, v in state.ticks.items() if k != ev.request_id}
    resp = state.responses[ev.response_id]
    for t in ev.input_transcripts:
        user = state.items.get(t.item_id)
        # What the engine heard, once per item, unless the session's own transcription answers
        # for it ("heard": a later response answering the same item does not report it again).
        if user is not None and user.role == "user" and user.transcription is None:
            state = put_item(state, replace(user, transcript=t.transcript, transcription="heard"))
    if ev.function_call is not None:
        state, resp, _ = apply_chunk(state, resp, ev.function_call, ev.new_item_id)
        return put_response(replace(state, ticks=ticks), _advanced(resp, ev))
    if ev.new_item_id is not None:
        content_type = "output_audio" if "audio" in resp.output_modalities else "output_text"
        state, resp, item = open_output_item(state, resp, ev.new_item_id, content_type)
    else:
        item = state.items[resp.item_id]
    item, new_samples = grow_item(item, seq, ev.audio, ev.text_delta, ev.marks, ev.final)
    resp = replace(_advanced(resp, ev), generated_ms=item.offset_ms + item.generated_ms)
    state = replace(state, ticks=ticks, audio_output_started=state.audio_output_started or new_samples > 0)
    state = put_response(put_item(state, item), resp)
    return refresh_transcripts(state, resp.id)


def _advanced(resp: Response, ev: TickOutput) -> Response:
    """``resp`` after an accepted output: its tick answered, the next chunk due, the engine's
    usage added, and the end (``final``, an incomplete reason) noted."""
    return replace(
        resp,
        usage=resp.usage if ev.usage is None else resp.usage + ev.usage,
        tick_in_flight=None,
        next_chunk=resp.next_chunk + 1,
        final_seen=resp.final_seen or ev.final,
        incomplete_reason=ev.incomplete_reason or resp.incomplete_reason,
    )


def evolve_tick_failed(ev: TickFailed, state: SessionState, seq: int) -> SessionState:
    verdict = classify_output(state, ev)
    if verdict.kind == "discarded":
        return state
    if verdict.kind == "rejected":
        return _fail_tick(state, ev.request_id, Code.TICK_IDENTITY_MISMATCH, "engine failure does not echo its tick")
    return _fail_tick(state, ev.request_id, ev.code, ev.message)


def _fail_tick(state: SessionState, request_id: str, code: str, message: str) -> SessionState:
    tick = replace(state.ticks[request_id], status=TickStatus.FAILED)
    resp = state.responses[tick.response_id]
    resp = replace(resp, tick_in_flight=None, failure_code=code, failure_message=message)
    return put_response(replace(state, ticks={**state.ticks, request_id: tick}), resp)


def evolve_epoch_advanced(ev: EpochAdvanced, state: SessionState, seq: int) -> SessionState:
    dead = set(ev.cancelled_request_ids)
    responses = dict(state.responses)
    for rid in dead:
        tick = state.ticks.get(rid)
        if tick is not None and tick.response_id in responses:
            responses[tick.response_id] = replace(responses[tick.response_id], tick_in_flight=None)
    discarded = set(ev.discarded_event_ids)
    transcriptions = state.transcriptions
    if dead & transcriptions.keys():
        transcriptions = {k: v for k, v in transcriptions.items() if k not in dead}
    state = replace(
        state,
        epoch=ev.epoch,
        ticks={k: v for k, v in state.ticks.items() if k not in dead},
        responses=responses,
        unapplied=tuple(s for s in state.unapplied if s not in discarded),
        transcriptions=transcriptions,
    )
    # A full-duplex unit of an older epoch is dead whether or not it was named.
    return requeue(state) if state.duplex.unit is not None else state


def evolve_output_audio_cleared(ev: OutputAudioCleared, state: SessionState, seq: int) -> SessionState:
    resp = state.responses.get(ev.response_id)
    return state if resp is None else put_response(state, replace(resp, playback_cleared=True))


def evolve_response_done(ev: ResponseDone, state: SessionState, seq: int) -> SessionState:
    resp = state.responses[ev.response_id]
    # Its inputs (a copy of the conversation) are only needed to issue ticks.
    resp = replace(
        resp,
        status=ResponseStatus(ev.status),
        status_reason=ev.reason,
        status_error_code=ev.error_code,
        tick_in_flight=None,
        inputs=SpeechInputs(),
    )
    if ev.heard_ms is not None:
        resp = replace(resp, acked=True, committed_ms=ev.heard_ms)
    item = state.items.get(resp.item_id)
    if item is not None:
        # A call whose arguments were done stays completed: the client was told so.
        finished = ev.status == "completed" or (item.type == "function_call" and item.complete)
        state = put_item(state, replace(item, status="completed" if finished else "incomplete"))
    state = end_calls(state, resp, ev.status)
    active = None if state.active_response_id == ev.response_id else state.active_response_id
    if state.duplex.response_id == ev.response_id:
        # A full-duplex model's turn ended (cancelled, failed): its next unit tells it so.
        state = replace(state, duplex=replace(state.duplex, response_id=None))
    idle_since = state.idle_since_sample
    if resp.conversation == "auto" and state.config is not None:
        # Server VAD's idle timeout counts from when the response's audio has played out, on
        # the input clock (its audio's length after the response started, or now if later).
        rate = state.config.input_format.rate
        idle_since = max(state.input_clock, resp.started_at_sample + resp.generated_ms * rate // 1000)
    state = put_response(replace(state, active_response_id=active, idle_since_sample=idle_since), resp)
    state = refresh_transcripts(state, resp.id)
    return maybe_release(state, resp.id)
