"""Committed log events → Realtime GA server events (docs/architecture.md, I13: the wire is a projection).

:func:`project` is a pure function of the log: the same log event, met in the same state (and,
for ``conversation.item.retrieved``, the same logged audio), always gives the same wire events.
Each wire event is stamped with ``event_id = "event_<seq>_<k>"`` and
``server_event_seq = seq * 1000 + k``, where ``seq`` is the session seq of the log event and
``k`` the index of the wire event among those it projects to, so a resumed client can be re-sent
exactly what it missed, byte for byte.

Shapes follow the GA types of the official ``openai`` SDK (``openai.types.realtime``). Duplex
extensions are named as vLLM-Omni names them (:data:`EXTENSION_EVENT_TYPES`).
"""

from __future__ import annotations

import base64
import json
from typing import Any, Callable, Optional

import attrs

from duplex_es.domain.audio import ms_of
from duplex_es.domain.errors import Code
from duplex_es.domain.responses import classify_output
from duplex_es.domain.transcription import transcription_verdict
from duplex_es.domain.state import Item, Response, SessionState
from duplex_es.events import (
    AudioAppended,
    AudioFormat,
    CommandRejected,
    FunctionCallChunk,
    HeartbeatReceived,
    InputCleared,
    InputCommitted,
    ItemCreated,
    ItemDeleted,
    ItemRetrieved,
    ItemTruncated,
    OutputAudioCleared,
    PlaybackAcked,
    ResponseCreated,
    ResponseDone,
    SessionClosed,
    SessionConfig,
    SessionExpired,
    SessionOpened,
    SessionResumed,
    SessionUpdated,
    SpeechStarted,
    SpeechStopped,
    TickOutput,
    TimeoutTriggered,
    TokenUsage,
    TranscriptionCompleted,
    TranscriptionFailed,
    TurnDetection,
    TurnSignaled,
    CommandDeduplicated,
)

__all__ = [
    "AudioReader",
    "Ctx",
    "Projection",
    "PROJECTIONS",
    "stamp",
    "encode_wire",
    "server_event_seq",
    "split_server_event_seq",
    "session_json",
    "item_json",
    "output_deltas",
    "chunk_events",
    "usage_json",
    "turn_detection_json",
    "EXTENSION_EVENT_TYPES",
    "SILENT_EVENT_TYPES",
    "MAX_AUDIO_DELTA_BYTES",
    "MAX_RETRIEVED_AUDIO_BYTES",
]

#: Wire events duplex_es sends that are not in the OpenAI GA vocabulary.
EXTENSION_EVENT_TYPES = frozenset(
    {
        "input_audio_buffer.appended",
        "playback.acknowledged",
        "session.closed",
        "session.expired",
        "session.resumed",
        "session.replaced",
        "session.resync_required",
        "session.heartbeat_ack",
        "turn.event",
        "command.deduplicated",
        # full duplex (docs/duplex.md)
        "response.listen",
        "response.speak",
        "overlap.decision",
        "input_audio_buffer.processed",
    }
)

#: Speech log events that are deliberately not on the wire (every other event type has a
#: projection; ``tests/unit/test_tables.py`` checks both): ticks and their failures are between the session and
#: its workers (a failure reaches the client as its response's ``response.done``), an epoch
#: change is seen through the ``response.done`` it causes, typed text and a deferred response
#: through the commit and ``response.created`` that use them, a detach has nobody to tell, and
#: an erasure comes after the session ended (docs/privacy.md).
SILENT_EVENT_TYPES = frozenset(
    {
        "session.erased",
        "tick.issued",
        "tick.failed",
        "transcription.requested",
        "epoch.advanced",
        "input.text.appended",
        "response.deferred",
        "session.detached",
    }
)

#: Largest audio payload per ``response.output_audio.delta`` (raw bytes), keeping every frame
#: far below the 1 MiB that older ``websockets`` clients accept (docs/sources.md, "Client frame size").
MAX_AUDIO_DELTA_BYTES = 192_000

#: Largest audio ``conversation.item.retrieved`` carries inline; longer audio is omitted
#: (``audio: null`` with ``audio_omitted: "too_large"``) to keep the frame under 1 MiB.
MAX_RETRIEVED_AUDIO_BYTES = 700_000

#: ``audio_of(segments)``: the audio bytes of those segments of logged audio, concatenated.
AudioReader = Callable[[tuple[Any, ...]], bytes]

_K = 1000


def server_event_seq(seq: int, k: int) -> int:
    """The ``server_event_seq`` of the ``k``-th wire event projected from log event ``seq``."""
    if not 0 <= k < _K:
        raise ValueError(f"log event {seq} projects to more than {_K} wire events")
    return seq * _K + k


def split_server_event_seq(value: int) -> tuple[int, int]:
    """Inverse of :func:`server_event_seq`: ``(log seq, k)``."""
    return divmod(value, _K)


def stamp(seq: int, wires: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Give each wire event its log-derived ``event_id`` and ``server_event_seq``."""
    out = []
    for k, w in enumerate(wires):
        assert "event_id" not in w and "server_event_seq" not in w, f"{w['type']} would hide its stamped id"
        out.append({"event_id": f"event_{seq}_{k}", "server_event_seq": server_event_seq(seq, k), **w})
    return out


#: One encoder for every wire event: ``json.dumps`` with options builds a new one per call.
_WIRE_JSON = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False)


def encode_wire(wire: dict[str, Any]) -> str:
    """The JSON text sent for a wire event (stable key order, so re-sends are byte-identical)."""
    return _WIRE_JSON.encode(wire)


class Ctx:
    """What a projection sees besides its event: the state ``before`` it and ``after`` it, and
    ``audio_of``, which reads logged audio (``None``: not available)."""

    __slots__ = ("before", "after", "audio_of")

    def __init__(self, before: Any, after: Any, audio_of: Optional[AudioReader]) -> None:
        self.before, self.after, self.audio_of = before, after, audio_of


#: ``projection(event, ctx) -> wire events`` (unstamped) for one event class.
Projection = Callable[[Any, Ctx], list[dict[str, Any]]]


# ------------------------------------------------------------------------------------- shapes


def _format_json(fmt: AudioFormat) -> dict[str, Any]:
    return {"type": fmt.type, "rate": fmt.rate} if fmt.type == "audio/pcm" else {"type": fmt.type}


def turn_detection_json(td: Optional[TurnDetection]) -> Optional[dict[str, Any]]:
    """GA ``turn_detection``: ``server_vad`` with its detector settings, or ``semantic_vad`` with
    ``eagerness``; both with duplex_es's ``detector`` (``energy`` or ``silero``); ``None`` when off."""
    if td is None:
        return None
    if td.type == "semantic_vad":
        return {
            "type": "semantic_vad",
            "eagerness": td.eagerness or "auto",
            "create_response": td.create_response,
            "interrupt_response": td.interrupt_response,
            "detector": td.detector,
        }
    return {
        "type": td.type,
        "threshold": td.threshold,
        "prefix_padding_ms": td.prefix_padding_ms,
        "silence_duration_ms": td.silence_duration_ms,
        "create_response": td.create_response,
        "interrupt_response": td.interrupt_response,
        "idle_timeout_ms": td.idle_timeout_ms,
        "detector": td.detector,
    }


def session_json(session_id: str, cfg: SessionConfig) -> dict[str, Any]:
    """The GA ``session`` object for a configuration: always the full effective config, every
    setting as the client set it (those nothing applies included: docs/protocol.md)."""
    audio_input = {
        "format": _format_json(cfg.input_format),
        "transcription": cfg.transcription,
        "noise_reduction": cfg.noise_reduction,
        "turn_detection": turn_detection_json(cfg.turn_detection),
    }
    duplex = {
        "transcript_on_truncate": cfg.transcript_on_truncate,
        "acknowledge_appends": cfg.acknowledge_appends,
        "mode": cfg.turn_mode,
        "modes": list(cfg.turn_modes),
        "chunk_period_ms": cfg.chunk_period_ms,
        "overlap": cfg.overlap,
        "barge_in_ms": cfg.barge_in_ms,
        "extension_events": cfg.extension_events,
        "backchannels": cfg.backchannels,
    }
    if cfg.session_type == "transcription":
        return {
            "type": "transcription",
            "object": "realtime.transcription_session",
            "id": session_id,
            "audio": {"input": audio_input},
            "include": list(cfg.include) if cfg.include is not None else None,
            "duplex": duplex,
        }
    out: dict[str, Any] = {
        "type": "realtime",
        "object": "realtime.session",
        "id": session_id,
        "model": cfg.model,
        "instructions": cfg.instructions,
        "output_modalities": list(cfg.output_modalities),
        "audio": {
            "input": audio_input,
            "output": {"format": _format_json(cfg.output_format), "voice": cfg.voice, "speed": cfg.speed},
        },
        "tools": list(cfg.tools),
        "tool_choice": cfg.tool_choice,
        "max_output_tokens": cfg.max_output_tokens,
        "tracing": cfg.tracing,
        "truncation": cfg.truncation,
        "prompt": cfg.prompt,
        "include": list(cfg.include) if cfg.include is not None else None,
    }
    # Set only by a client (not GA session fields): echoed once set, never made up.
    for name in ("reasoning", "parallel_tool_calls", "temperature"):
        value = getattr(cfg, name)
        if value is not None:
            out[name] = value
    out["duplex"] = duplex
    return out


def item_json(item: Item, audio: Optional[bytes] = None, *, opening: bool = False) -> dict[str, Any]:
    """The GA ``realtime.item`` for an item; audio bytes only when given (``retrieve``); no
    content at all while it is being opened (``output_item.added``). Function items have no
    role or content: a ``function_call`` shows its ``call_id``, ``name`` and ``arguments``
    (``""`` while it is being opened), a ``function_call_output`` its ``call_id`` and
    ``output``."""
    if item.type == "function_call":
        status, arguments = ("in_progress", "") if opening else (item.status, item.arguments)
        return {
            "id": item.id,
            "object": "realtime.item",
            "type": "function_call",
            "status": status,
            "call_id": item.call_id,
            "name": item.name,
            "arguments": arguments,
        }
    if item.type == "function_call_output":
        return {"id": item.id, "object": "realtime.item", "type": "function_call_output", "status": item.status, "call_id": item.call_id, "output": item.output}
    content: list[dict[str, Any]] = []
    if opening:
        pass
    elif item.role == "assistant":
        if item.content_type == "output_audio":
            if item.status != "in_progress" or item.full_text or item.audio_samples:
                content = [{"type": "output_audio", "transcript": item.transcript}]
        elif item.status != "in_progress" or item.full_text:
            content = [{"type": "output_text", "text": item.transcript}]
    else:
        if item.audio:
            content.append({"type": "input_audio", "transcript": item.transcript or None})
        if item.input_text:
            content.append({"type": "input_text", "text": item.input_text})
    if audio is not None and content and content[0]["type"] in ("input_audio", "output_audio"):
        if len(audio) <= MAX_RETRIEVED_AUDIO_BYTES:
            content[0] = {**content[0], "audio": base64.b64encode(audio).decode("ascii")}
        else:
            content[0] = {**content[0], "audio": None, "audio_omitted": "too_large"}
    return {"id": item.id, "object": "realtime.item", "type": "message", "role": item.role, "status": item.status, "content": content}


def usage_json(state: SessionState, resp: Response) -> dict[str, Any]:
    """GA ``usage`` of a response, never ``null``: the tokens its engine reported (zeros from an
    engine that counts none), and under ``duplex`` the sizes the server measured itself —
    input audio ms and text characters the response read, output audio ms and text
    characters it produced."""
    u = resp.usage
    items = [state.items[i] for i in resp.item_ids if i in state.items]
    inputs = u.input_text_tokens + u.input_audio_tokens
    outputs = u.output_text_tokens + u.output_audio_tokens
    return {
        "total_tokens": inputs + outputs,
        "input_tokens": inputs,
        "output_tokens": outputs,
        "input_token_details": {
            "text_tokens": u.input_text_tokens,
            "audio_tokens": u.input_audio_tokens,
            "image_tokens": 0,
            "cached_tokens": u.cached_tokens,
            "cached_tokens_details": {"text_tokens": 0, "audio_tokens": 0, "image_tokens": 0},
        },
        "output_token_details": {"text_tokens": u.output_text_tokens, "audio_tokens": u.output_audio_tokens},
        "duplex": {
            "tokens_reported": u != TokenUsage(),
            "input_audio_ms": resp.input_audio_ms,
            "input_text_chars": resp.input_text_chars,
            "output_audio_ms": resp.generated_ms,
            "output_text_chars": sum(len(i.full_text) for i in items),
        },
    }


def _response_json(state: SessionState, resp: Response, *, error: dict | None = None) -> dict[str, Any]:
    done = resp.status != "in_progress"
    details = None
    if done:
        details = {"type": resp.status, "reason": resp.status_reason}
        if error is not None:
            details["error"] = error
    output = [item_json(state.items[i]) for i in resp.item_ids if i in state.items] if done else []
    return {
        "id": resp.id,
        "object": "realtime.response",
        "status": resp.status,
        "status_details": details,
        "output": output,
        "conversation_id": "conv_" + state.session_id if resp.conversation == "auto" else None,
        "output_modalities": list(resp.output_modalities),
        "audio": {"output": {"format": _format_json(resp.output_format), "voice": resp.voice}},
        "max_output_tokens": resp.max_output_tokens,
        "metadata": resp.metadata,
        "usage": usage_json(state, resp) if done else None,
    }


def _ids(resp: Response, item: Item) -> dict[str, Any]:
    return {"response_id": resp.id, "item_id": item.id, "output_index": item.output_index, "content_index": 0}


def _opening(state: SessionState, resp: Response, item: Item) -> list[dict[str, Any]]:
    """An output item appears: added to the response (and to the conversation), still empty
    (a message's content part follows; a function call has none)."""
    ij = item_json(item, opening=True)
    out = [{"type": "response.output_item.added", "response_id": resp.id, "output_index": item.output_index, "item": ij}]
    if item.in_conversation:
        out.append({"type": "conversation.item.added", "item": ij, "previous_item_id": state.previous_of(item.id)})
    if item.type == "message":
        part = {"type": "audio", "transcript": ""} if item.content_type == "output_audio" else {"type": "text", "text": ""}
        out.append({"type": "response.content_part.added", **_ids(resp, item), "part": part})
    return out


def _item_done(state: SessionState, resp: Response, item: Item) -> list[dict[str, Any]]:
    ij = item_json(item)
    out = [{"type": "response.output_item.done", "response_id": resp.id, "output_index": item.output_index, "item": ij}]
    if item.in_conversation:
        out.append({"type": "conversation.item.done", "item": ij, "previous_item_id": state.previous_of(item.id)})
    return out


def _call_closing(state: SessionState, resp: Response, item: Item) -> list[dict[str, Any]]:
    """A function call ends. Done: its complete arguments, then the item, completed (clients
    run the tool from here). Cut short (its response was cancelled mid-arguments): nothing —
    clients run tools on ``function_call_arguments.done`` (pipecat) or on any
    ``output_item.done`` of a call, whatever its status (LiveKit); ``response.done`` lists the
    item ``incomplete`` (docs/protocol.md, "Function calling")."""
    if not item.complete:
        return []
    done = {
        "type": "response.function_call_arguments.done",
        "response_id": resp.id,
        "item_id": item.id,
        "output_index": item.output_index,
        "call_id": item.call_id,
        "name": item.name,
        "arguments": item.arguments,
    }
    return [done] + _item_done(state, resp, item)


def _closing(state: SessionState, resp: Response, item: Item) -> list[dict[str, Any]]:
    """An output item ends: every ``.done`` of it, in order. The transcript / text ``.done``
    events carry everything generated (the deltas, joined); the item objects carry what the
    conversation history keeps of it (the heard prefix once the client acks playback)."""
    if item.type == "function_call":
        return _call_closing(state, resp, item)
    if item.content_type == "output_audio":
        out = [
            {"type": "response.output_audio.done", **_ids(resp, item)},
            {"type": "response.output_audio_transcript.done", **_ids(resp, item), "transcript": item.full_text},
        ]
        part = {"type": "audio", "transcript": item.full_text}
    else:
        out = [{"type": "response.output_text.done", **_ids(resp, item), "text": item.full_text}]
        part = {"type": "text", "text": item.full_text}
    out.append({"type": "response.content_part.done", **_ids(resp, item), "part": part})
    return out + _item_done(state, resp, item)


# ---------------------------------------------------------------------------------- projection


#: Refusals of a ``session.resume`` logged in the session it tried to take over.
_TAKEOVER_REFUSALS = frozenset({Code.RESUME_CONFLICT, Code.RESUME_TOKEN_INVALID, Code.SESSION_CLOSED})


def project_session_opened(ev: SessionOpened, ctx: Ctx) -> list[dict[str, Any]]:
    return [{"type": "session.created", "session": session_json(ev.session_id, ev.config)}]


def project_session_updated(ev: SessionUpdated, ctx: Ctx) -> list[dict[str, Any]]:
    return [{"type": "session.updated", "session": session_json(ctx.after.session_id, ev.config)}]


def project_session_closed(ev: SessionClosed, ctx: Ctx) -> list[dict[str, Any]]:
    return [{"type": "session.closed", "session_id": ctx.after.session_id, "reason": ev.reason}]


def project_session_expired(ev: SessionExpired, ctx: Ctx) -> list[dict[str, Any]]:
    return [{"type": "session.expired", "session_id": ctx.after.session_id, "reason": ev.reason}]


def project_session_resumed(ev: SessionResumed, ctx: Ctx) -> list[dict[str, Any]]:
    return [{"type": "session.resumed", "session_id": ctx.after.session_id, "lease_generation": ev.lease_generation}]


def project_heartbeat_received(ev: HeartbeatReceived, ctx: Ctx) -> list[dict[str, Any]]:
    return [{"type": "session.heartbeat_ack"}]


def project_turn_signaled(ev: TurnSignaled, ctx: Ctx) -> list[dict[str, Any]]:
    return [{"type": "turn.event", "event": ev.signal, "epoch": ctx.after.epoch}]


def project_command_rejected(ev: CommandRejected, ctx: Ctx) -> list[dict[str, Any]]:
    if ev.command_type == "session.resume" and ev.code in _TAKEOVER_REFUSALS:
        return []  # a refused takeover is told to the client that tried it, not the session's listener
    return [
        {
            "type": "error",
            "error": {"type": ev.error_type, "code": ev.code, "message": ev.message, "param": ev.param, "event_id": ev.client_event_id},
        }
    ]


def project_command_deduplicated(ev: CommandDeduplicated, ctx: Ctx) -> list[dict[str, Any]]:
    """A retried command (same ``event_id``, same content) was not applied again (extension):
    the first one's server events start at ``first_server_event_seq``."""
    return [
        {
            "type": "command.deduplicated",
            "client_event_id": ev.client_event_id,
            "command_type": ev.command_type,
            "first_server_event_seq": server_event_seq(ev.first_seq, 0),
        }
    ]


def project_timeout_triggered(ev: TimeoutTriggered, ctx: Ctx) -> list[dict[str, Any]]:
    return [
        {"type": "input_audio_buffer.timeout_triggered", "audio_start_ms": ev.audio_start_ms, "audio_end_ms": ev.audio_end_ms, "item_id": ev.item_id}
    ]


def project_transcription_completed(ev: TranscriptionCompleted, ctx: Ctx) -> list[dict[str, Any]]:
    if transcription_verdict(ctx.before, ev) != "accepted" or ev.item_id not in ctx.after.items:
        return []  # answered twice, cancelled, or its item was deleted meanwhile
    ids = {"item_id": ev.item_id, "content_index": 0}
    return [
        {"type": "conversation.item.input_audio_transcription.delta", **ids, "delta": ev.transcript},
        {
            "type": "conversation.item.input_audio_transcription.completed",
            **ids,
            "transcript": ev.transcript,
            "usage": {"type": "duration", "seconds": ev.seconds},
        },
    ]


def project_transcription_failed(ev: TranscriptionFailed, ctx: Ctx) -> list[dict[str, Any]]:
    if transcription_verdict(ctx.before, ev) != "accepted" or ev.item_id not in ctx.after.items:
        return []
    error = {"type": "server_error", "code": ev.code, "message": f"transcription of item {ev.item_id} failed: {ev.message}", "param": None}
    return [{"type": "conversation.item.input_audio_transcription.failed", "item_id": ev.item_id, "content_index": 0, "error": error}]


def project_audio_appended(ev: AudioAppended, ctx: Ctx) -> list[dict[str, Any]]:
    """With ``acknowledge_appends`` on, each logged append is acknowledged (duplex extension):
    the client's ``event_id`` and where its audio lies on the input clock, in ms since the
    session's first sample (``audio_end_ms`` is the buffer's end once it is appended)."""
    cfg = ctx.after.config
    if cfg is None or not cfg.acknowledge_appends:
        return []  # OpenAI does not acknowledge appends
    rate = cfg.input_format.rate
    return [
        {
            "type": "input_audio_buffer.appended",
            "client_event_id": ev.client_event_id,
            "audio_start_ms": ms_of(ev.start_sample, rate),
            "audio_end_ms": ms_of(ev.start_sample + ev.samples, rate),
        }
    ]


def project_speech_started(ev: SpeechStarted, ctx: Ctx) -> list[dict[str, Any]]:
    return [{"type": "input_audio_buffer.speech_started", "audio_start_ms": ev.audio_start_ms, "item_id": ev.item_id}]


def project_speech_stopped(ev: SpeechStopped, ctx: Ctx) -> list[dict[str, Any]]:
    return [{"type": "input_audio_buffer.speech_stopped", "audio_end_ms": ev.audio_end_ms, "item_id": ev.item_id}]


def project_input_committed(ev: InputCommitted, ctx: Ctx) -> list[dict[str, Any]]:
    item = item_json(ctx.after.items[ev.item_id])
    prev = ev.previous_item_id
    return [
        {"type": "input_audio_buffer.committed", "item_id": ev.item_id, "previous_item_id": prev},
        {"type": "conversation.item.added", "item": item, "previous_item_id": prev},
        {"type": "conversation.item.done", "item": item, "previous_item_id": prev},
    ]


def project_input_cleared(ev: InputCleared, ctx: Ctx) -> list[dict[str, Any]]:
    return [{"type": "input_audio_buffer.cleared"}]


def project_item_created(ev: ItemCreated, ctx: Ctx) -> list[dict[str, Any]]:
    item = item_json(ctx.after.items[ev.item_id])
    return [
        {"type": "conversation.item.added", "item": item, "previous_item_id": ev.previous_item_id},
        {"type": "conversation.item.done", "item": item, "previous_item_id": ev.previous_item_id},
    ]


def project_item_deleted(ev: ItemDeleted, ctx: Ctx) -> list[dict[str, Any]]:
    return [{"type": "conversation.item.deleted", "item_id": ev.item_id}]


def project_item_retrieved(ev: ItemRetrieved, ctx: Ctx) -> list[dict[str, Any]]:
    item = ctx.after.items[ev.item_id]
    audio = None
    if ctx.audio_of is not None and item.audio:
        # Byte for byte what was streamed (or appended), cut only by a truncation.
        audio = ctx.audio_of(item.audio)
        if item.truncated_ms is not None:
            width = 2 if item.audio_format.type == "audio/pcm" else 1
            audio = audio[: item.truncated_ms * item.audio_format.rate // 1000 * width]
    return [{"type": "conversation.item.retrieved", "item": item_json(item, audio)}]


def project_item_truncated(ev: ItemTruncated, ctx: Ctx) -> list[dict[str, Any]]:
    return [{"type": "conversation.item.truncated", "item_id": ev.item_id, "content_index": ev.content_index, "audio_end_ms": ev.audio_end_ms}]


def project_response_created(ev: ResponseCreated, ctx: Ctx) -> list[dict[str, Any]]:
    """``response.created`` only: its first item is shown with its first output (a message or
    a function call: the engine decides), or with ``response.done`` if none came."""
    resp = ctx.after.responses[ev.response_id]
    return [{"type": "response.created", "response": _response_json(ctx.after, resp)}]


def project_tick_output(ev: TickOutput, ctx: Ctx) -> list[dict[str, Any]]:
    if not classify_output(ctx.before, ev).accepted:
        return []  # docs/architecture.md, I7: discarded output is logged, never sent
    after = ctx.after
    resp = after.responses.get(ev.response_id)
    if resp is None:  # released within this very event cannot happen while active
        return []
    out: list[dict[str, Any]] = []
    for t in ev.input_transcripts:
        user, earlier = after.items.get(t.item_id), ctx.before.items.get(t.item_id)
        if user is None or earlier is None or earlier.transcription is not None:
            continue  # deleted meanwhile, already reported, or the session's transcription answers for it
        seconds = user.input_samples / user.audio_format.rate
        out.append(
            {
                "type": "conversation.item.input_audio_transcription.completed",
                "item_id": t.item_id,
                "content_index": 0,
                "transcript": t.transcript,
                "usage": {"type": "duration", "seconds": round(seconds, 3)},
            }
        )
    first = ctx.before.responses[ev.response_id].next_chunk == 0
    return out + chunk_events(after, resp, first, ev.new_item_id, ev.function_call, ev.audio, ev.text_delta)


def chunk_events(
    after: SessionState, resp: Response, first: bool, new_item_id: Optional[str], fc: Optional[FunctionCallChunk], audio_b64: str, text_delta: str
) -> list[dict[str, Any]]:
    """The wire events of one accepted engine output on ``resp`` (``after`` it was folded):
    the first item shown with the ``first`` output; the previous item closed and the new one
    shown when it opened ``new_item_id``; then the call's arguments (and its closing when
    ``done``), or the audio and text deltas."""
    out: list[dict[str, Any]] = []
    item = after.items[resp.item_id]
    if first:
        out += _opening(after, resp, after.items[resp.item_ids[0]])  # the first output shows the first item
    if new_item_id is not None:
        previous = after.items[resp.item_ids[-2]]
        if previous.type != "function_call":  # a call was closed when it was done
            out += _closing(after, resp, previous)
        out += _opening(after, resp, item)
    if fc is not None:
        ids = {"response_id": resp.id, "item_id": item.id, "output_index": item.output_index, "call_id": fc.call_id}
        if fc.arguments_delta:
            out.append({"type": "response.function_call_arguments.delta", **ids, "delta": fc.arguments_delta})
        if fc.done:
            out += _call_closing(after, resp, item)
        return out
    return out + output_deltas(resp, item, audio_b64, text_delta)


def output_deltas(resp: Response, item: Item, audio_b64: str, text_delta: str) -> list[dict[str, Any]]:
    """An engine output's deltas on ``item`` of ``resp``: its audio (cut into pieces of at most
    :data:`MAX_AUDIO_DELTA_BYTES`) and its transcript or text."""
    out: list[dict[str, Any]] = []
    audio_mode = item.content_type == "output_audio"
    if audio_mode and audio_b64:
        raw = base64.b64decode(audio_b64)
        for start in range(0, len(raw), MAX_AUDIO_DELTA_BYTES):
            piece = base64.b64encode(raw[start : start + MAX_AUDIO_DELTA_BYTES]).decode("ascii")
            out.append({"type": "response.output_audio.delta", **_ids(resp, item), "delta": piece})
    if text_delta:
        kind = "response.output_audio_transcript.delta" if audio_mode else "response.output_text.delta"
        out.append({"type": kind, **_ids(resp, item), "delta": text_delta})
    return out


def project_output_audio_cleared(ev: OutputAudioCleared, ctx: Ctx) -> list[dict[str, Any]]:
    return [{"type": "output_audio_buffer.cleared", "response_id": ev.response_id}]


def project_response_done(ev: ResponseDone, ctx: Ctx) -> list[dict[str, Any]]:
    after = ctx.after
    # A response fully played when it ends is released at once: read it from before.
    resp_before = ctx.before.responses[ev.response_id]
    resp = after.responses.get(ev.response_id) or _ended(resp_before, ev)
    out: list[dict[str, Any]] = []
    error = None
    if ev.status == "failed":
        error = {"type": "server_error", "code": ev.error_code, "message": ev.error_message}
        out.append({"type": "error", "error": {**error, "param": None, "event_id": None}})
    elif ev.error_code is not None:
        # Cut short by the session's end: GA's reason stays (clients accept no other), and the
        # real cause rides in status_details.error, which GA's schema has for every status.
        error = {"type": "session_ended", "code": ev.error_code, "message": ev.error_message}
    item = after.items.get(resp.item_id)
    if item is not None:
        if resp_before.next_chunk == 0:
            out += _opening(after, resp, item)  # nothing was output: the empty item is shown now
        if not (item.type == "function_call" and item.complete):  # a done call is closed already
            out += _closing(after, resp, item)
    out.append({"type": "response.done", "response": _response_json(after, resp, error=error)})
    return out


def _ended(resp: Response, ev: ResponseDone) -> Response:
    return attrs.evolve(resp, status=ev.status, status_reason=ev.reason)


def project_playback_acked(ev: PlaybackAcked, ctx: Ctx) -> list[dict[str, Any]]:
    item = ctx.after.items.get(ev.item_id)
    return [
        {
            "type": "playback.acknowledged",
            "response_id": ev.response_id,
            "item_id": ev.item_id,
            "played_ms": ev.played_ms,
            "committed_ms": ev.committed_ms,
            "truncate": ev.truncate,
            "transcript": item.transcript if item is not None else "",
        }
    ]


#: The speech kind's projections, and those of the events every kind logs (refusals,
#: deduplicated retries, resumes): event class → projection. An event class not here is either
#: another kind's or in :data:`SILENT_EVENT_TYPES`.
PROJECTIONS: dict[type, Projection] = {
    SessionOpened: project_session_opened,
    SessionUpdated: project_session_updated,
    SessionClosed: project_session_closed,
    SessionExpired: project_session_expired,
    SessionResumed: project_session_resumed,
    HeartbeatReceived: project_heartbeat_received,
    TurnSignaled: project_turn_signaled,
    CommandRejected: project_command_rejected,
    CommandDeduplicated: project_command_deduplicated,
    TimeoutTriggered: project_timeout_triggered,
    TranscriptionCompleted: project_transcription_completed,
    TranscriptionFailed: project_transcription_failed,
    AudioAppended: project_audio_appended,
    SpeechStarted: project_speech_started,
    SpeechStopped: project_speech_stopped,
    InputCommitted: project_input_committed,
    InputCleared: project_input_cleared,
    ItemCreated: project_item_created,
    ItemDeleted: project_item_deleted,
    ItemRetrieved: project_item_retrieved,
    ItemTruncated: project_item_truncated,
    ResponseCreated: project_response_created,
    TickOutput: project_tick_output,
    OutputAudioCleared: project_output_audio_cleared,
    ResponseDone: project_response_done,
    PlaybackAcked: project_playback_acked,
}
