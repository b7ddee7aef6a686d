"""Realtime client frames → commands.

Shape checks that need no session state happen here: the frame is JSON, has a ``type`` this
server knows, fields have the right JSON types, audio is strict base64. Anything wrong becomes an
:class:`~duplex_es.domain.commands.Invalid` command carrying a specific code, which the session
logs as rejected like every other refusal (DESIGN I3). Rules that need state (buffer length,
active response, audio length) are the domain's.

Names follow OpenAI Realtime GA (``reference/realtime-protocol.md`` §1.2) plus vLLM-Omni's
duplex extensions (``input.text.append``, ``playback.ack``, ``session.close``).
"""

from __future__ import annotations

import base64
import binascii
import json
from typing import Any, Callable, Optional

from duplex_es.domain.commands import (
    AckPlayback,
    AppendAudio,
    AppendText,
    CancelResponse,
    ClearInput,
    CloseSession,
    Command,
    CommitInput,
    CreateResponse,
    Invalid,
    ResponseOptions,
    SessionPatch,
    TruncateItem,
    UpdateSession,
)
from duplex_es.domain.errors import Code
from duplex_es.events import AudioFormat, TurnDetection

__all__ = ["parse_frame", "MAX_FRAME_BYTES", "IdFactory", "CLIENT_EVENT_TYPES"]

#: Largest client frame accepted: OpenAI's 15 MiB audio cap plus room for the JSON envelope.
MAX_FRAME_BYTES = 16 * 1024 * 1024

#: The largest magnitude an integer field may have (JSON's safe integer range).
MAX_INT = 2**53 - 1

#: ``new_id(prefix)`` returns a fresh id such as ``item_3f2a...``; supplied by the server.
IdFactory = Callable[[str], str]

def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _optional(check: Callable[[Any], bool]) -> Callable[[Any], bool]:
    return lambda v: v is None or check(v)


#: GA fields duplex_es accepts and ignores (documented in docs/protocol.md), each with the JSON
#: type it must have: ignoring a field is no reason to accept junk in it.
_IGNORED_FIELDS: dict[str, tuple[Callable[[Any], bool], str]] = {
    "tools": (lambda v: isinstance(v, list) and all(isinstance(t, dict) for t in v), "a list of tool objects"),
    "tool_choice": (lambda v: isinstance(v, (str, dict)), "a string or an object"),
    "max_output_tokens": (lambda v: v == "inf" or (isinstance(v, int) and not isinstance(v, bool) and 1 <= v <= 4096), '"inf" or 1..4096'),
    "tracing": (_optional(lambda v: v == "auto" or isinstance(v, dict)), '"auto", an object or null'),
    "truncation": (lambda v: isinstance(v, (str, dict)), "a string or an object"),
    "include": (lambda v: isinstance(v, list) and all(isinstance(x, str) for x in v), "a list of strings"),
    "prompt": (_optional(lambda v: isinstance(v, dict)), "an object or null"),
    "temperature": (lambda v: _is_number(v) and 0 <= v <= 2, "a number in [0, 2]"),
    "reasoning": (_optional(lambda v: isinstance(v, dict)), "an object or null"),
    "parallel_tool_calls": (lambda v: isinstance(v, bool), "a boolean"),
    "metadata": (
        _optional(lambda v: isinstance(v, dict) and all(isinstance(x, str) for x in v.values())),
        "an object of strings or null",
    ),
    "transcription": (_optional(lambda v: isinstance(v, dict)), "an object or null"),
    "noise_reduction": (_optional(lambda v: isinstance(v, dict)), "an object or null"),
    "speed": (lambda v: _is_number(v) and 0.25 <= v <= 1.5, "a number in [0.25, 1.5]"),
}
_IGNORED_SESSION_FIELDS = frozenset(
    {"tools", "tool_choice", "max_output_tokens", "tracing", "truncation", "include", "prompt", "temperature", "reasoning", "parallel_tool_calls"}
)
_IGNORED_RESPONSE_FIELDS = frozenset({"metadata", "tools", "tool_choice", "max_output_tokens", "prompt", "temperature"})


def _check_ignored(obj: dict, names: frozenset[str] | set[str], path: str) -> None:
    for name in names:
        if name in obj:
            ok, want = _IGNORED_FIELDS[name]
            if not ok(obj[name]):
                raise _Bad(Code.INVALID_EVENT, f"{path}.{name} must be {want}", f"{path}.{name}")


class _Bad(Exception):
    def __init__(self, code: str, message: str, param: Optional[str] = None) -> None:
        self.code, self.message, self.param = code, message, param


def _printable(text: str, limit: int = 200) -> str:
    """``text`` cut to ``limit`` characters and made storable: no NUL (PostgreSQL text cannot
    hold it) and no lone surrogate (not encodable as UTF-8)."""
    text = text[:limit].replace("\x00", "\\x00")
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


def _excerpt(raw: str) -> str:
    return _printable(raw)


def _bad_string(obj: Any) -> Optional[str]:
    """Why a parsed frame cannot be stored as given: a string (or key) with a NUL or a lone
    UTF-16 surrogate (JSON escapes such as ``\\udc00`` decode to one)."""
    stack = [obj]
    while stack:
        v = stack.pop()
        if isinstance(v, str):
            if v.isascii():
                if "\x00" in v:
                    return "strings must not contain NUL (\\u0000)"
                continue
            try:
                v.encode("utf-8")
            except UnicodeEncodeError:
                return "strings must be valid Unicode (a lone UTF-16 surrogate was found)"
            if "\x00" in v:
                return "strings must not contain NUL (\\u0000)"
        elif isinstance(v, dict):
            stack.extend(v.keys())
            stack.extend(v.values())
        elif isinstance(v, list):
            stack.extend(v)
    return None


def parse_frame(raw: str | bytes, new_id: IdFactory) -> Command:
    """Turn one WebSocket frame into a command.

    Args:
        raw: the frame; ``bytes`` for a binary frame, which the Realtime protocol does not use.
        new_id: makes the ids a command creates (items, responses, requests).

    Returns:
        A command; :class:`Invalid` for a frame that is not a well-formed client event.
    """
    if isinstance(raw, bytes):
        return Invalid(code=Code.BINARY_FRAME, message="binary frames are not part of the Realtime protocol; send JSON text")
    # Count UTF-8 bytes, as the transport does; characters are a cheap lower bound.
    size = len(raw) if len(raw) * 4 <= MAX_FRAME_BYTES else len(raw.encode("utf-8", "surrogatepass"))
    if size > MAX_FRAME_BYTES:
        return Invalid(code=Code.FRAME_TOO_LARGE, message=f"frame of {size} bytes exceeds the limit of {MAX_FRAME_BYTES}")
    try:
        msg = json.loads(raw)
    except json.JSONDecodeError as exc:
        return Invalid(code=Code.INVALID_JSON, message=f"frame is not valid JSON: {exc}", excerpt=_excerpt(raw))
    except RecursionError:
        return Invalid(code=Code.INVALID_JSON, message="frame nests JSON values too deeply to parse", excerpt=_excerpt(raw))
    except ValueError as exc:  # e.g. an integer literal of thousands of digits
        return Invalid(code=Code.INVALID_JSON, message=f"frame holds a value that cannot be parsed: {exc}", excerpt=_excerpt(raw))
    if not isinstance(msg, dict):
        return Invalid(code=Code.INVALID_EVENT, message="a client event must be a JSON object", excerpt=_excerpt(raw))
    event_id = msg.get("event_id")
    why = _bad_string(msg)
    if why is not None:
        echo = event_id if isinstance(event_id, str) and _bad_string(event_id) is None and len(event_id) <= 256 else None
        return Invalid(event_id=echo, code=Code.INVALID_EVENT, message=why, excerpt=_excerpt(raw))
    if event_id is not None and (not isinstance(event_id, str) or not 0 < len(event_id) <= 256):
        return Invalid(code=Code.INVALID_EVENT, message="event_id must be a string of 1-256 characters", param="event_id")
    type_ = msg.get("type")
    if not isinstance(type_, str) or not type_:
        return Invalid(event_id=event_id, code=Code.MISSING_TYPE, message="the event has no string 'type'", param="type")
    parser = _PARSERS.get(type_)
    if parser is None:
        return Invalid(
            event_id=event_id,
            command_type=_printable(type_, 128),
            code=Code.UNKNOWN_TYPE,
            message=f"unknown event type {type_[:128]!r}",
            param="type",
        )
    try:
        return parser(msg, event_id, new_id)
    except _Bad as bad:
        return Invalid(event_id=event_id, command_type=type_, code=bad.code, message=bad.message, param=bad.param)


# ---------------------------------------------------------------------------------- helpers


def _check_keys(obj: dict, allowed: set[str] | frozenset[str], path: str) -> None:
    for key in obj:
        if key not in allowed:
            where = _printable(f"{path}.{key}" if path else key, 120)
            raise _Bad(Code.INVALID_EVENT, f"unknown parameter {where!r}", where)


def _str(obj: dict, key: str, path: str, *, required: bool = False) -> Optional[str]:
    if key not in obj or (obj[key] is None and not required):
        if required:
            raise _Bad(Code.INVALID_EVENT, f"missing required parameter {path + key!r}", path + key)
        return None
    v = obj[key]
    if not isinstance(v, str):
        raise _Bad(Code.INVALID_EVENT, f"{path + key} must be a string", path + key)
    return v


def _int(obj: dict, key: str, path: str, *, required: bool = False) -> Optional[int]:
    if key not in obj or obj[key] is None:
        if required:
            raise _Bad(Code.INVALID_EVENT, f"missing required parameter {path + key!r}", path + key)
        return None
    v = obj[key]
    if isinstance(v, bool) or not isinstance(v, (int, float)) or (isinstance(v, float) and not v.is_integer()):
        raise _Bad(Code.INVALID_EVENT, f"{path + key} must be an integer", path + key)
    if not -MAX_INT <= v <= MAX_INT:
        raise _Bad(Code.INVALID_EVENT, f"{path + key} is out of range (|value| <= {MAX_INT})", path + key)
    return int(v)


def _obj(obj: dict, key: str, path: str) -> Optional[dict]:
    if key not in obj or obj[key] is None:
        return None
    v = obj[key]
    if not isinstance(v, dict):
        raise _Bad(Code.INVALID_EVENT, f"{path + key} must be an object", path + key)
    return v


def _format(obj: dict, path: str) -> AudioFormat:
    _check_keys(obj, {"type", "rate"}, path)
    t = _str(obj, "type", path + ".", required=True)
    rate = _int(obj, "rate", path + ".")
    default_rate = 24000 if t == "audio/pcm" else 8000
    return AudioFormat(type=t, rate=default_rate if rate is None else rate)  # type: ignore[arg-type]


def _modalities(v: Any, path: str) -> tuple[str, ...]:
    if not isinstance(v, list) or not all(isinstance(m, str) for m in v):
        raise _Bad(Code.INVALID_EVENT, f"{path} must be a list of strings", path)
    return tuple(v)


def _voice(v: Any, path: str) -> str:
    if isinstance(v, dict) and isinstance(v.get("id"), str):
        return v["id"]
    if not isinstance(v, str) or not v:
        raise _Bad(Code.INVALID_EVENT, f"{path} must be a voice name", path)
    return v


def _turn_detection(v: Any, path: str) -> Optional[TurnDetection]:
    if v is None:
        return None
    if not isinstance(v, dict):
        raise _Bad(Code.INVALID_EVENT, f"{path} must be an object or null", path)
    _check_keys(v, {"type", "threshold", "prefix_padding_ms", "silence_duration_ms", "create_response", "interrupt_response", "idle_timeout_ms", "eagerness"}, path)
    return TurnDetection(type=str(v.get("type", "server_vad")))


# ---------------------------------------------------------------------------------- parsers


def _session_update(msg: dict, event_id: Optional[str], new_id: IdFactory) -> Command:
    _check_keys(msg, {"type", "event_id", "session"}, "")
    s = _obj(msg, "session", "")
    if s is None:
        raise _Bad(Code.INVALID_EVENT, "missing required parameter 'session'", "session")
    _check_keys(s, {"type", "model", "instructions", "output_modalities", "audio"} | _IGNORED_SESSION_FIELDS, "session")
    _check_ignored(s, _IGNORED_SESSION_FIELDS, "session")
    stype = s.get("type", "realtime")
    if stype != "realtime":
        raise _Bad(Code.INVALID_EVENT, f"session.type {stype!r} is not supported; use 'realtime'", "session.type")
    fields: dict[str, Any] = {}
    if "model" in s:
        fields["model"] = _str(s, "model", "session.", required=True)
    if "instructions" in s:
        fields["instructions"] = _str(s, "instructions", "session.", required=True)
    if "output_modalities" in s:
        fields["output_modalities"] = _modalities(s["output_modalities"], "session.output_modalities")
    audio = _obj(s, "audio", "session.")
    if audio is not None:
        _check_keys(audio, {"input", "output"}, "session.audio")
        inp = _obj(audio, "input", "session.audio.")
        if inp is not None:
            _check_keys(inp, {"format", "turn_detection", "transcription", "noise_reduction"}, "session.audio.input")
            _check_ignored(inp, {"transcription", "noise_reduction"}, "session.audio.input")
            fmt = _obj(inp, "format", "session.audio.input.")
            if fmt is not None:
                fields["input_format"] = _format(fmt, "session.audio.input.format")
            if "turn_detection" in inp:
                fields["turn_detection"] = _turn_detection(inp["turn_detection"], "session.audio.input.turn_detection")
        out = _obj(audio, "output", "session.audio.")
        if out is not None:
            _check_keys(out, {"format", "voice", "speed"}, "session.audio.output")
            _check_ignored(out, {"speed"}, "session.audio.output")
            fmt = _obj(out, "format", "session.audio.output.")
            if fmt is not None:
                fields["output_format"] = _format(fmt, "session.audio.output.format")
            if out.get("voice") is not None:
                fields["voice"] = _voice(out["voice"], "session.audio.output.voice")
    return UpdateSession(event_id=event_id, patch=SessionPatch(**fields))


def _append(msg: dict, event_id: Optional[str], new_id: IdFactory) -> Command:
    _check_keys(msg, {"type", "event_id", "audio"}, "")
    audio = _str(msg, "audio", "", required=True)
    assert audio is not None
    try:
        raw = base64.b64decode(audio, validate=True)
    except (binascii.Error, ValueError):
        raw = None
    # Strict: the text must be the canonical encoding of its bytes (padding, no stray bits).
    if raw is None or base64.b64encode(raw).decode("ascii") != audio:
        raise _Bad(Code.INVALID_AUDIO_BASE64, "audio is not strict base64 (RFC 4648, padded, no line breaks)", "audio")
    return AppendAudio(event_id=event_id, audio=audio, nbytes=len(raw))


def _text_append(msg: dict, event_id: Optional[str], new_id: IdFactory) -> Command:
    _check_keys(msg, {"type", "event_id", "text"}, "")
    return AppendText(event_id=event_id, text=_str(msg, "text", "", required=True) or "")


def _commit(msg: dict, event_id: Optional[str], new_id: IdFactory) -> Command:
    _check_keys(msg, {"type", "event_id"}, "")
    return CommitInput(event_id=event_id, item_id=new_id("item"))


def _clear(msg: dict, event_id: Optional[str], new_id: IdFactory) -> Command:
    _check_keys(msg, {"type", "event_id"}, "")
    return ClearInput(event_id=event_id)


def _response_create(msg: dict, event_id: Optional[str], new_id: IdFactory) -> Command:
    _check_keys(msg, {"type", "event_id", "response"}, "")
    r = _obj(msg, "response", "") or {}
    _check_keys(r, {"output_modalities", "instructions", "audio", "conversation", "input"} | _IGNORED_RESPONSE_FIELDS, "response")
    _check_ignored(r, _IGNORED_RESPONSE_FIELDS, "response")
    if "input" in r:
        raise _Bad(Code.UNSUPPORTED_RESPONSE_OPTION, "response.input is not supported yet; the default conversation is used", "response.input")
    opts: dict[str, Any] = {}
    if r.get("output_modalities") is not None:
        opts["output_modalities"] = _modalities(r["output_modalities"], "response.output_modalities")
    if "instructions" in r:
        opts["instructions"] = _str(r, "instructions", "response.")
    conv = r.get("conversation", "auto")
    if not isinstance(conv, str):
        raise _Bad(Code.INVALID_EVENT, "response.conversation must be 'auto' or 'none'", "response.conversation")
    opts["conversation"] = conv
    audio = _obj(r, "audio", "response.")
    if audio is not None:
        _check_keys(audio, {"output"}, "response.audio")
        out = _obj(audio, "output", "response.audio.") or {}
        _check_keys(out, {"format", "voice"}, "response.audio.output")
        fmt = _obj(out, "format", "response.audio.output.")
        if fmt is not None:
            opts["output_format"] = _format(fmt, "response.audio.output.format")
        if out.get("voice") is not None:
            opts["voice"] = _voice(out["voice"], "response.audio.output.voice")
    return CreateResponse(
        event_id=event_id,
        response_id=new_id("resp"),
        item_id=new_id("item"),
        request_id=new_id("req"),
        options=ResponseOptions(**opts),
    )


def _response_cancel(msg: dict, event_id: Optional[str], new_id: IdFactory) -> Command:
    _check_keys(msg, {"type", "event_id", "response_id"}, "")
    return CancelResponse(event_id=event_id, response_id=_str(msg, "response_id", ""))


def _playback_ack(msg: dict, event_id: Optional[str], new_id: IdFactory) -> Command:
    _check_keys(msg, {"type", "event_id", "response_id", "item_id", "played_ms", "committed_ms"}, "")
    played = _int(msg, "played_ms", "", required=True)
    return AckPlayback(
        event_id=event_id,
        response_id=_str(msg, "response_id", ""),
        item_id=_str(msg, "item_id", ""),
        played_ms=played,  # type: ignore[arg-type]
        committed_ms=_int(msg, "committed_ms", ""),
    )


def _truncate(msg: dict, event_id: Optional[str], new_id: IdFactory) -> Command:
    _check_keys(msg, {"type", "event_id", "item_id", "content_index", "audio_end_ms"}, "")
    content_index = _int(msg, "content_index", "")
    return TruncateItem(
        event_id=event_id,
        item_id=_str(msg, "item_id", "", required=True),  # type: ignore[arg-type]
        content_index=0 if content_index is None else content_index,
        audio_end_ms=_int(msg, "audio_end_ms", "", required=True),  # type: ignore[arg-type]
    )


def _close(msg: dict, event_id: Optional[str], new_id: IdFactory) -> Command:
    _check_keys(msg, {"type", "event_id", "reason"}, "")
    return CloseSession(event_id=event_id, reason=_str(msg, "reason", "") or "client_close")


_PARSERS: dict[str, Callable[[dict, Optional[str], IdFactory], Command]] = {
    "session.update": _session_update,
    "input_audio_buffer.append": _append,
    "input.text.append": _text_append,
    "input_audio_buffer.commit": _commit,
    "input_audio_buffer.clear": _clear,
    "response.create": _response_create,
    "response.cancel": _response_cancel,
    "playback.ack": _playback_ack,
    "conversation.item.truncate": _truncate,
    "session.close": _close,
}

#: Every client event type this server understands.
CLIENT_EVENT_TYPES: frozenset[str] = frozenset(_PARSERS)
