"""Committed log events → Realtime GA server events (DESIGN I13: the wire is a projection).

:func:`project` is pure: the same log event, met in the same state, always gives the same wire
events. Each wire event is stamped with ``event_id = "event_<seq>_<k>"`` and
``server_event_seq = seq * 1000 + k``, where ``seq`` is the session seq of the log event and
``k`` the index of the wire event among those it projects to, so a resumed client can be re-sent
exactly what it missed, byte for byte.

Shapes follow the GA types of the official ``openai`` SDK (``openai.types.realtime``). Duplex
extensions (``playback.acknowledged``, ``session.closed``) are named as vLLM-Omni names them.
"""

from __future__ import annotations

import base64
import json
from functools import singledispatch
from typing import Any

from duplex_es.domain.state import Item, Response, SessionState
from duplex_es.domain.verdicts import classify_output
from duplex_es.events import (
    AudioFormat,
    CommandRejected,
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
    TickOutput,
)

__all__ = [
    "project",
    "stamp",
    "encode_wire",
    "server_event_seq",
    "split_server_event_seq",
    "session_json",
    "item_json",
    "EXTENSION_EVENT_TYPES",
    "MAX_AUDIO_DELTA_BYTES",
]

#: Wire events duplex_es sends that are not in the OpenAI GA vocabulary.
EXTENSION_EVENT_TYPES = frozenset({"playback.acknowledged", "session.closed"})

#: Largest audio payload per ``response.output_audio.delta`` (raw bytes), keeping every frame
#: far below the 1 MiB that older ``websockets`` clients accept (``realtime-protocol.md`` §2.6).
MAX_AUDIO_DELTA_BYTES = 192_000

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
        out.append({"event_id": f"event_{seq}_{k}", "server_event_seq": server_event_seq(seq, k), **w})
    return out


def encode_wire(wire: dict[str, Any]) -> str:
    """The JSON text sent for a wire event (stable key order, so re-sends are byte-identical)."""
    return json.dumps(wire, separators=(",", ":"), ensure_ascii=False)


def project(before: SessionState, seq: int, event: Event, after: SessionState) -> list[dict[str, Any]]:
    """The wire events a committed log event produces, already stamped.

    Args:
        before: the session state before the event.
        seq: the event's session seq.
        event: the event.
        after: ``evolve(before, seq, event)``.
    """
    return stamp(seq, _project(event, before, after))


# ------------------------------------------------------------------------------------- shapes


def _format_json(fmt: AudioFormat) -> dict[str, Any]:
    return {"type": fmt.type, "rate": fmt.rate} if fmt.type == "audio/pcm" else {"type": fmt.type}


def session_json(session_id: str, cfg: SessionConfig) -> dict[str, Any]:
    """The GA ``session`` object for a configuration: always the full effective config."""
    td = cfg.turn_detection
    return {
        "type": "realtime",
        "object": "realtime.session",
        "id": session_id,
        "model": cfg.model,
        "instructions": cfg.instructions,
        "output_modalities": list(cfg.output_modalities),
        "audio": {
            "input": {
                "format": _format_json(cfg.input_format),
                "transcription": None,
                "noise_reduction": None,
                "turn_detection": None
                if td is None
                else {
                    "type": td.type,
                    "threshold": td.threshold,
                    "prefix_padding_ms": td.prefix_padding_ms,
                    "silence_duration_ms": td.silence_duration_ms,
                    "create_response": td.create_response,
                    "interrupt_response": td.interrupt_response,
                },
            },
            "output": {"format": _format_json(cfg.output_format), "voice": cfg.voice, "speed": 1.0},
        },
        "tools": [],
        "tool_choice": "auto",
        "max_output_tokens": "inf",
    }


def item_json(item: Item) -> dict[str, Any]:
    """The GA ``realtime.item`` for an item, without audio bytes (as ``conversation.item.*`` send it)."""
    if item.role == "user":
        content: list[dict[str, Any]] = []
        if item.append_seqs:
            content.append({"type": "input_audio", "transcript": item.transcript or None})
        if item.input_text:
            content.append({"type": "input_text", "text": item.input_text})
    elif item.content_type == "output_audio":
        content = [{"type": "output_audio", "transcript": item.transcript}]
    else:
        content = [{"type": "output_text", "text": item.transcript}]
    if item.role == "assistant" and item.status == "in_progress" and not item.full_text and not item.audio_samples:
        content = []
    return {
        "id": item.id,
        "object": "realtime.item",
        "type": "message",
        "role": item.role,
        "status": item.status,
        "content": content,
    }


def _response_json(state: SessionState, resp: Response, *, error: dict | None = None) -> dict[str, Any]:
    item = state.items[resp.item_id]
    done = resp.status != "in_progress"
    details = None
    if done:
        details = {"type": resp.status, "reason": resp.status_reason}
        if error is not None:
            details["error"] = error
    return {
        "id": resp.id,
        "object": "realtime.response",
        "status": resp.status,
        "status_details": details,
        "output": [item_json(item)] if done else [],
        "conversation_id": "conv_" + state.session_id if resp.conversation == "auto" else None,
        "output_modalities": list(resp.output_modalities),
        "audio": {"output": {"format": _format_json(resp.output_format), "voice": resp.voice}},
        "max_output_tokens": "inf",
        "metadata": None,
        "usage": None,
    }


def _ids(resp: Response) -> dict[str, Any]:
    return {"response_id": resp.id, "item_id": resp.item_id, "output_index": 0, "content_index": 0}


# ---------------------------------------------------------------------------------- projection


@singledispatch
def _project(event: Event, before: SessionState, after: SessionState) -> list[dict[str, Any]]:
    return []  # appends, ticks and epoch changes are not on the wire


@_project.register
def _(ev: SessionOpened, before: SessionState, after: SessionState) -> list[dict[str, Any]]:
    return [{"type": "session.created", "session": session_json(ev.session_id, ev.config)}]


@_project.register
def _(ev: SessionUpdated, before: SessionState, after: SessionState) -> list[dict[str, Any]]:
    return [{"type": "session.updated", "session": session_json(after.session_id, ev.config)}]


@_project.register
def _(ev: SessionClosed, before: SessionState, after: SessionState) -> list[dict[str, Any]]:
    return [{"type": "session.closed", "session_id": after.session_id, "reason": ev.reason}]


@_project.register
def _(ev: CommandRejected, before: SessionState, after: SessionState) -> list[dict[str, Any]]:
    return [
        {
            "type": "error",
            "error": {
                "type": ev.error_type,
                "code": ev.code,
                "message": ev.message,
                "param": ev.param,
                "event_id": ev.client_event_id,
            },
        }
    ]


@_project.register
def _(ev: InputCommitted, before: SessionState, after: SessionState) -> list[dict[str, Any]]:
    item = item_json(after.items[ev.item_id])
    prev = ev.previous_item_id
    return [
        {"type": "input_audio_buffer.committed", "item_id": ev.item_id, "previous_item_id": prev},
        {"type": "conversation.item.added", "item": item, "previous_item_id": prev},
        {"type": "conversation.item.done", "item": item, "previous_item_id": prev},
    ]


@_project.register
def _(ev: InputCleared, before: SessionState, after: SessionState) -> list[dict[str, Any]]:
    return [{"type": "input_audio_buffer.cleared"}]


@_project.register
def _(ev: ResponseCreated, before: SessionState, after: SessionState) -> list[dict[str, Any]]:
    resp = after.responses[ev.response_id]
    item = item_json(after.items[ev.item_id])
    part = {"type": "audio", "transcript": ""} if "audio" in resp.output_modalities else {"type": "text", "text": ""}
    return [
        {"type": "response.created", "response": _response_json(after, resp)},
        {"type": "response.output_item.added", "response_id": resp.id, "output_index": 0, "item": item},
        {"type": "conversation.item.added", "item": item, "previous_item_id": ev.previous_item_id},
        {"type": "response.content_part.added", **_ids(resp), "part": part},
    ]


@_project.register
def _(ev: TickOutput, before: SessionState, after: SessionState) -> list[dict[str, Any]]:
    if not classify_output(before, ev).accepted:
        return []  # DESIGN I7: discarded output is logged, never sent
    resp = after.responses[ev.response_id]
    out: list[dict[str, Any]] = []
    for t in ev.input_transcripts:
        user = after.items.get(t.item_id)
        seconds = user.input_samples / user.audio_rate if user else 0.0
        out.append(
            {
                "type": "conversation.item.input_audio_transcription.completed",
                "item_id": t.item_id,
                "content_index": 0,
                "transcript": t.transcript,
                "usage": {"type": "duration", "seconds": round(seconds, 3)},
            }
        )
    audio_mode = "audio" in resp.output_modalities
    if audio_mode and ev.audio:
        raw = base64.b64decode(ev.audio)
        for start in range(0, len(raw), MAX_AUDIO_DELTA_BYTES):
            piece = base64.b64encode(raw[start : start + MAX_AUDIO_DELTA_BYTES]).decode("ascii")
            out.append({"type": "response.output_audio.delta", **_ids(resp), "delta": piece})
    if ev.text_delta:
        kind = "response.output_audio_transcript.delta" if audio_mode else "response.output_text.delta"
        out.append({"type": kind, **_ids(resp), "delta": ev.text_delta})
    return out


@_project.register
def _(ev: ResponseDone, before: SessionState, after: SessionState) -> list[dict[str, Any]]:
    resp = after.responses[ev.response_id]
    item = after.items[resp.item_id]
    out: list[dict[str, Any]] = []
    error = None
    if ev.status == "failed":
        error = {"type": "server_error", "code": ev.error_code, "message": ev.error_message}
        out.append({"type": "error", "error": {**error, "param": None, "event_id": None}})
    if "audio" in resp.output_modalities:
        out.append({"type": "response.output_audio.done", **_ids(resp)})
        out.append({"type": "response.output_audio_transcript.done", **_ids(resp), "transcript": item.transcript})
        part = {"type": "audio", "transcript": item.transcript}
    else:
        out.append({"type": "response.output_text.done", **_ids(resp), "text": item.transcript})
        part = {"type": "text", "text": item.transcript}
    ij = item_json(item)
    out += [
        {"type": "response.content_part.done", **_ids(resp), "part": part},
        {"type": "response.output_item.done", "response_id": resp.id, "output_index": 0, "item": ij},
        {"type": "conversation.item.done", "item": ij, "previous_item_id": item.previous_item_id},
        {"type": "response.done", "response": _response_json(after, resp, error=error)},
    ]
    return out


@_project.register
def _(ev: PlaybackAcked, before: SessionState, after: SessionState) -> list[dict[str, Any]]:
    item = after.items[ev.item_id]
    return [
        {
            "type": "playback.acknowledged",
            "response_id": ev.response_id,
            "item_id": ev.item_id,
            "played_ms": ev.played_ms,
            "committed_ms": ev.committed_ms,
            "transcript": item.transcript,
        }
    ]


@_project.register
def _(ev: ItemTruncated, before: SessionState, after: SessionState) -> list[dict[str, Any]]:
    return [
        {"type": "conversation.item.truncated", "item_id": ev.item_id, "content_index": ev.content_index, "audio_end_ms": ev.audio_end_ms}
    ]
