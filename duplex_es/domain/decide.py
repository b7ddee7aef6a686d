"""``decide(state, command) -> events``: what a command means, given the session's state.

Pure (DESIGN I2). An accepted command returns the events that record it; a refused one returns
exactly one ``command.rejected`` carrying the error code, message, offending ``param`` and the
client's ``event_id`` (DESIGN I3). Commands that could target several things must name their
target or have exactly one candidate; the resolved target is written into the event (DESIGN §4,
"no guessing").
"""

from __future__ import annotations

from functools import singledispatch
from typing import Optional

import attrs

from duplex_es.domain.audio import is_supported, samples_of
from duplex_es.domain.commands import (
    UNSET,
    AckPlayback,
    AppendAudio,
    AppendText,
    CancelResponse,
    ClearInput,
    CloseSession,
    CommitInput,
    CreateResponse,
    Invalid,
    OpenSession,
    Pump,
    TruncateItem,
    UpdateSession,
)
from duplex_es.domain.errors import ERROR_TYPES, Code
from duplex_es.domain.limits import MAX_BUFFER_MS, MAX_INPUT_TEXT_CHARS, MAX_INSTRUCTIONS_CHARS, MIN_COMMIT_MS, VOICES
from duplex_es.domain.state import Response, SessionState
from duplex_es.events import (
    AudioAppended,
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
    SessionConfig,
    SessionOpened,
    SessionUpdated,
    SpeechInputs,
    TextAppended,
    TickIssued,
)

__all__ = ["decide", "COMMAND_TYPES"]

#: Wire name of each command, recorded in ``command.rejected.command_type``.
COMMAND_TYPES: dict[type, str] = {
    OpenSession: "session.open",
    UpdateSession: "session.update",
    AppendAudio: "input_audio_buffer.append",
    AppendText: "input.text.append",
    CommitInput: "input_audio_buffer.commit",
    ClearInput: "input_audio_buffer.clear",
    CreateResponse: "response.create",
    CancelResponse: "response.cancel",
    AckPlayback: "playback.ack",
    TruncateItem: "conversation.item.truncate",
    CloseSession: "session.close",
    Pump: "session.pump",
}

_MODEL_FIELDS = ("instructions", "voice", "output_modalities", "output_format")


def decide(state: SessionState, command: object) -> list[Event]:
    """The events that record ``command`` against ``state``; ``[]`` when there is nothing to do
    (only :class:`~duplex_es.domain.commands.Pump` can decide nothing).

    Raises:
        TypeError: for an object that is not a known command.
    """
    if isinstance(command, Invalid):
        return [_rejected(command.event_id, command.command_type, command.code, command.message, command.param, command.excerpt)]
    if isinstance(command, OpenSession):
        if state.status != "new":
            return _reject(command, Code.SESSION_ALREADY_OPEN, f"session {state.session_id} already exists")
        return [SessionOpened(session_id=command.session_id, config=SessionConfig(model=command.model))]
    if state.status != "open":
        if isinstance(command, Pump):
            return []
        return _reject(command, Code.SESSION_CLOSED, "the session is closed")
    return _decide(command, state)


def _rejected(
    event_id: Optional[str],
    command_type: Optional[str],
    code: str,
    message: str,
    param: Optional[str] = None,
    excerpt: Optional[str] = None,
) -> CommandRejected:
    return CommandRejected(
        client_event_id=event_id,
        command_type=command_type,
        code=code,
        message=message,
        param=param,
        error_type=ERROR_TYPES.get(code, "invalid_request_error"),
        excerpt=excerpt,
    )


def _reject(command: object, code: str, message: str, param: Optional[str] = None) -> list[Event]:
    return [_rejected(getattr(command, "event_id", None), COMMAND_TYPES.get(type(command)), code, message, param)]


@singledispatch
def _decide(command: object, state: SessionState) -> list[Event]:
    raise TypeError(f"not a command: {command!r}")


# ------------------------------------------------------------------------------------ session


@_decide.register
def _(cmd: UpdateSession, state: SessionState) -> list[Event]:
    cfg = state.config
    assert cfg is not None
    p = cmd.patch
    if p.model is not UNSET and p.model != cfg.model:
        return _reject(cmd, Code.MODEL_UPDATE_UNSUPPORTED, "the model cannot change within a session", "session.model")
    for name, param in (("input_format", "session.audio.input.format"), ("output_format", "session.audio.output.format")):
        fmt = getattr(p, name)
        if fmt is not UNSET and not is_supported(fmt):
            return _reject(
                cmd,
                Code.UNSUPPORTED_AUDIO_FORMAT,
                f"unsupported audio format {fmt.type} at {fmt.rate} Hz; supported: audio/pcm at 24000 Hz",
                param,
            )
    if p.turn_detection is not UNSET and p.turn_detection is not None:
        return _reject(
            cmd,
            Code.UNSUPPORTED_TURN_DETECTION,
            "server turn detection is not available yet; set turn_detection to null and commit explicitly",
            "session.audio.input.turn_detection",
        )
    if p.output_modalities is not UNSET and p.output_modalities not in (("audio",), ("text",)):
        return _reject(
            cmd, Code.UNSUPPORTED_MODALITIES, 'output_modalities must be ["audio"] or ["text"]', "session.output_modalities"
        )
    if p.voice is not UNSET and p.voice not in VOICES:
        return _reject(
            cmd, Code.UNSUPPORTED_VOICE, f"unknown voice {str(p.voice)[:64]!r}; choose one of {', '.join(sorted(VOICES))}", "session.audio.output.voice"
        )
    if p.instructions is not UNSET and len(p.instructions) > MAX_INSTRUCTIONS_CHARS:
        return _reject(cmd, Code.INSTRUCTIONS_TOO_LONG, f"instructions exceed {MAX_INSTRUCTIONS_CHARS} characters", "session.instructions")
    if p.voice is not UNSET and p.voice != cfg.voice and state.audio_output_started:
        return _reject(
            cmd, Code.VOICE_UPDATE_AFTER_AUDIO, "the voice cannot change after the session produced audio", "session.audio.output.voice"
        )
    changes = {f.name: getattr(p, f.name) for f in attrs.fields(type(p)) if getattr(p, f.name) is not UNSET and f.name != "model"}
    new = attrs.evolve(cfg, **changes)
    relevant = any(getattr(new, f) != getattr(cfg, f) for f in _MODEL_FIELDS)
    return [SessionUpdated(client_event_id=cmd.event_id, config=new, model_relevant=relevant)]


@_decide.register
def _(cmd: CloseSession, state: SessionState) -> list[Event]:
    # Everything still waiting to feed the model is discarded explicitly (DESIGN I5).
    live = list(state.ticks.values())
    events: list[Event] = [
        EpochAdvanced(
            epoch=state.epoch + 1,
            reason="session_closed",
            cancelled_request_ids=tuple(t.request_id for t in live),
            discarded_event_ids=tuple(sorted({s for t in live for s in t.applied_event_ids} | set(state.unapplied))),
        )
    ]
    resp = state.active_response
    if resp is not None:
        events.append(_done_cancelled(resp, "client_cancelled", cmd.event_id))
    return events + [SessionClosed(client_event_id=cmd.event_id, reason=cmd.reason)]


# -------------------------------------------------------------------------------------- input


@_decide.register
def _(cmd: AppendAudio, state: SessionState) -> list[Event]:
    fmt = state.config.input_format  # type: ignore[union-attr]
    if cmd.nbytes == 0:
        return _reject(cmd, Code.INVALID_AUDIO_LENGTH, "audio is empty", "audio")
    if fmt.type == "audio/pcm" and cmd.nbytes % 2:
        return _reject(
            cmd,
            Code.INVALID_AUDIO_LENGTH,
            f"PCM16 audio needs an even number of bytes; got {cmd.nbytes}",
            "audio",
        )
    samples = samples_of(cmd.nbytes, fmt)
    if (state.buffer.samples + samples) * 1000 > MAX_BUFFER_MS * fmt.rate:
        return _reject(
            cmd,
            Code.BUFFER_FULL,
            f"the input buffer holds at most {MAX_BUFFER_MS // 1000} s of audio; commit or clear it first",
            "audio",
        )
    return [
        AudioAppended(
            client_event_id=cmd.event_id,
            audio=cmd.audio,
            samples=samples,
            start_sample=state.input_clock,
        )
    ]


@_decide.register
def _(cmd: AppendText, state: SessionState) -> list[Event]:
    if not cmd.text:
        return _reject(cmd, Code.INPUT_TEXT_EMPTY, "text is empty", "text")
    if len(state.buffer.text) + len(cmd.text) > MAX_INPUT_TEXT_CHARS:
        return _reject(
            cmd, Code.INPUT_TEXT_TOO_LONG, f"a user item holds at most {MAX_INPUT_TEXT_CHARS} characters of text", "text"
        )
    return [TextAppended(client_event_id=cmd.event_id, text=cmd.text)]


@_decide.register
def _(cmd: CommitInput, state: SessionState) -> list[Event]:
    buf = state.buffer
    rate = state.config.input_format.rate  # type: ignore[union-attr]
    if not buf.text and buf.samples * 1000 < MIN_COMMIT_MS * rate:
        have = buf.samples * 1000 / rate
        return _reject(
            cmd,
            Code.COMMIT_EMPTY,
            f"Error committing input audio buffer: buffer too small. Expected at least {MIN_COMMIT_MS}ms of audio, "
            f"but buffer only has {have:.2f}ms of audio.",
        )
    return [
        InputCommitted(
            client_event_id=cmd.event_id,
            item_id=cmd.item_id,
            previous_item_id=state.last_item_id,
            append_seqs=buf.append_seqs,
            text_seqs=buf.text_seqs,
            samples=buf.samples,
            text=buf.text,
        )
    ]


@_decide.register
def _(cmd: ClearInput, state: SessionState) -> list[Event]:
    buf = state.buffer
    return [InputCleared(client_event_id=cmd.event_id, discarded_seqs=tuple(sorted(buf.append_seqs + buf.text_seqs)))]


# ---------------------------------------------------------------------------------- responses


@_decide.register
def _(cmd: CreateResponse, state: SessionState) -> list[Event]:
    active = state.active_response
    if active is not None:
        return _reject(
            cmd,
            Code.ACTIVE_RESPONSE,
            f"Conversation already has an active response in progress: {active.id}. "
            "Wait until the response is finished before creating a new one.",
        )
    cfg = state.config
    assert cfg is not None
    o = cmd.options
    if o.conversation != "auto":
        return _reject(
            cmd, Code.UNSUPPORTED_RESPONSE_OPTION, 'only conversation "auto" is supported', "response.conversation"
        )
    modalities = cfg.output_modalities if o.output_modalities is None else o.output_modalities
    if modalities not in (("audio",), ("text",)):
        return _reject(
            cmd, Code.UNSUPPORTED_MODALITIES, 'output_modalities must be ["audio"] or ["text"]', "response.output_modalities"
        )
    out_fmt = o.output_format or cfg.output_format
    if not is_supported(out_fmt):
        return _reject(cmd, Code.UNSUPPORTED_AUDIO_FORMAT, "unsupported output audio format", "response.audio.output.format")
    voice = cfg.voice if o.voice is None else o.voice
    if voice not in VOICES:
        return _reject(cmd, Code.UNSUPPORTED_VOICE, f"unknown voice {voice[:64]!r}", "response.audio.output.voice")
    instructions = cfg.instructions if o.instructions is None else o.instructions
    if len(instructions) > MAX_INSTRUCTIONS_CHARS:
        return _reject(cmd, Code.INSTRUCTIONS_TOO_LONG, f"instructions exceed {MAX_INSTRUCTIONS_CHARS} characters", "response.instructions")
    user = state.last_user_item()
    inputs = SpeechInputs(
        reply_to_item_id=user.id if user else None,
        user_audio_seqs=user.append_seqs if user else (),
        user_text=user.input_text if user else "",
        input_format=cfg.input_format,
        output_format=out_fmt,
        instructions=instructions,
        voice=voice,
        output_modalities=modalities,
    )
    return [
        ResponseCreated(
            client_event_id=cmd.event_id,
            response_id=cmd.response_id,
            item_id=cmd.item_id,
            previous_item_id=state.last_item_id,
            output_modalities=modalities,
            voice=voice,
            instructions=instructions,
            output_format=out_fmt,
            conversation=o.conversation,
        ),
        TickIssued(
            request_id=cmd.request_id,
            response_id=cmd.response_id,
            epoch=state.epoch,
            chunk_index=0,
            applied_event_ids=state.unapplied,
            inputs=inputs,
        ),
    ]


@_decide.register
def _(cmd: CancelResponse, state: SessionState) -> list[Event]:
    resp = state.active_response
    if resp is None:
        return _reject(cmd, Code.CANCEL_NOT_ACTIVE, "Cancellation failed: no active response found")
    if cmd.response_id is not None and cmd.response_id != resp.id:
        return _reject(
            cmd, Code.CANCEL_NOT_ACTIVE, f"Cancellation failed: response {cmd.response_id} is not active", "response_id"
        )
    return _cancel(state, resp, cmd.cause, cmd.event_id)


def _cancel(state: SessionState, resp: Response, cause: str, event_id: Optional[str]) -> list[Event]:
    """Cancel ``resp``: raise the epoch (fencing its ticks, recording ``cause``) and end it
    ``cancelled`` with the Realtime reason ``client_cancelled``."""
    live = [t for t in state.ticks.values() if t.response_id == resp.id]
    return [
        EpochAdvanced(
            epoch=state.epoch + 1,
            reason=cause,
            cancelled_request_ids=tuple(t.request_id for t in live),
            discarded_event_ids=tuple(sorted(s for t in live for s in t.applied_event_ids)),
        ),
        _done_cancelled(resp, "client_cancelled", event_id),
    ]


def _done_cancelled(resp: Response, reason: str, event_id: Optional[str]) -> ResponseDone:
    """``response.done`` for a cancelled response, keeping the heard prefix when the client
    reports playback (DESIGN §4, barge-in / cancel)."""
    return ResponseDone(
        client_event_id=event_id,
        response_id=resp.id,
        status="cancelled",
        reason=reason,
        heard_ms=resp.committed_ms if resp.acked else None,
    )


@_decide.register
def _(cmd: Pump, state: SessionState) -> list[Event]:
    resp = state.active_response
    if resp is None:
        return []
    if resp.failure_code is not None:
        live = [t for t in state.ticks.values() if t.response_id == resp.id]
        return [
            EpochAdvanced(
                epoch=state.epoch + 1,
                reason="response_failed",
                cancelled_request_ids=tuple(t.request_id for t in live),
                discarded_event_ids=tuple(sorted(s for t in live for s in t.applied_event_ids)),
            ),
            ResponseDone(
                response_id=resp.id, status="failed", error_code=resp.failure_code, error_message=resp.failure_message
            ),
        ]
    if resp.final_seen:
        return [ResponseDone(response_id=resp.id, status="completed")]
    if resp.tick_in_flight is not None:
        return []
    return [
        TickIssued(
            request_id=cmd.request_id,
            response_id=resp.id,
            epoch=state.epoch,
            chunk_index=resp.next_chunk,
            applied_event_ids=(),
            inputs=resp.inputs,
        )
    ]


# --------------------------------------------------------------------------- playback / items


@_decide.register
def _(cmd: AckPlayback, state: SessionState) -> list[Event]:
    resp, err = _playback_target(state, cmd)
    if err is not None:
        return err
    assert resp is not None
    if cmd.played_ms < 0:
        return _reject(cmd, Code.PLAYBACK_OUT_OF_RANGE, "played_ms must be >= 0", "played_ms")
    committed = cmd.played_ms if cmd.committed_ms is None else cmd.committed_ms
    if committed < 0:
        return _reject(cmd, Code.PLAYBACK_OUT_OF_RANGE, "committed_ms must be >= 0", "committed_ms")
    if committed > cmd.played_ms:
        return _reject(cmd, Code.PLAYBACK_OUT_OF_RANGE, "committed_ms cannot exceed played_ms", "committed_ms")
    audio_ms = state.items[resp.item_id].audio_ms  # generated audio, cut at a truncation
    if cmd.played_ms > audio_ms:
        return _reject(
            cmd,
            Code.PLAYBACK_OUT_OF_RANGE,
            f"played_ms {cmd.played_ms} is past the {audio_ms} ms of audio of response {resp.id}",
            "played_ms",
        )
    return [
        PlaybackAcked(
            client_event_id=cmd.event_id,
            response_id=resp.id,
            item_id=resp.item_id,
            played_ms=max(resp.played_ms, cmd.played_ms),
            committed_ms=max(resp.committed_ms, committed),
        )
    ]


def _playback_target(state: SessionState, cmd: AckPlayback) -> tuple[Optional[Response], Optional[list[Event]]]:
    """Resolve the response an ack is for: named by id, or the only one with unplayed audio."""
    if cmd.response_id is not None:
        resp = state.responses.get(cmd.response_id)
        if resp is None:
            return None, _reject(cmd, Code.PLAYBACK_TARGET_NOT_FOUND, f"no response {cmd.response_id}", "response_id")
        if cmd.item_id is not None and cmd.item_id != resp.item_id:
            return None, _reject(
                cmd, Code.PLAYBACK_ITEM_MISMATCH, f"item {cmd.item_id} does not belong to response {resp.id}", "item_id"
            )
        return resp, None
    if cmd.item_id is not None:
        item = state.items.get(cmd.item_id)
        if item is None or item.response_id is None:
            return None, _reject(
                cmd, Code.PLAYBACK_TARGET_NOT_FOUND, f"no assistant item {cmd.item_id}", "item_id"
            )
        return state.responses[item.response_id], None
    candidates = [r for r in state.responses.values() if r.active or r.committed_ms < state.items[r.item_id].audio_ms]
    if not candidates:
        return None, _reject(cmd, Code.PLAYBACK_TARGET_NOT_FOUND, "no response is playing; name response_id")
    if len(candidates) > 1:
        ids = ", ".join(r.id for r in candidates)
        return None, _reject(cmd, Code.PLAYBACK_AMBIGUOUS, f"several responses may be playing ({ids}); name response_id")
    return candidates[0], None


@_decide.register
def _(cmd: TruncateItem, state: SessionState) -> list[Event]:
    item = state.items.get(cmd.item_id)
    if item is None:
        return _reject(
            cmd, Code.TRUNCATE_INVALID_ITEM, f"Error truncating item: the item with id '{cmd.item_id}' does not exist.", "item_id"
        )
    if item.role != "assistant" or item.content_type != "output_audio":
        return _reject(cmd, Code.TRUNCATE_UNSUPPORTED_CONTENT, "Only model output audio messages can be truncated", "item_id")
    if cmd.content_index != 0:
        return _reject(cmd, Code.INVALID_CONTENT_INDEX, "an audio item has one content part: content_index must be 0", "content_index")
    if cmd.audio_end_ms < 0:
        return _reject(cmd, Code.TRUNCATE_OUT_OF_RANGE, "audio_end_ms must be >= 0", "audio_end_ms")
    if cmd.audio_end_ms > item.audio_ms:
        return _reject(
            cmd,
            Code.TRUNCATE_OUT_OF_RANGE,
            f"Audio content of {item.audio_ms}ms is already shorter than {cmd.audio_end_ms}ms",
            "audio_end_ms",
        )
    return [ItemTruncated(client_event_id=cmd.event_id, item_id=item.id, content_index=0, audio_end_ms=cmd.audio_end_ms)]

