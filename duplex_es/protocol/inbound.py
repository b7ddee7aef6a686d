"""Realtime client events → commands.

Shape checks that need no session state happen here: the frame is JSON, has a ``type`` this
server knows, fields have the right JSON types, audio is strict base64, strings are storable.
:func:`command_from_realtime` raises :class:`CommandError` (code, message, param and the
client's ``event_id``); :func:`parse_frame`, for transports, turns any problem into an
:class:`~duplex_es.domain.commands.Invalid` command, which the session logs as rejected like every
other refusal (DESIGN I3). Rules that need state (buffer length, active response, audio length)
are the domain's.

Names follow OpenAI Realtime GA (``reference/realtime-protocol.md`` §1.2) plus vLLM-Omni's
duplex extensions (``input.text.append``, ``input.cancel``, ``barge_in``, ``playback.ack``,
``turn.signal``, ``session.heartbeat``, ``session.close``); every client event may carry an
``expected_epoch`` fence. Beta-named events are translated first (:mod:`duplex_es.protocol.beta`).
"""

from __future__ import annotations

import base64
import binascii
import json
import secrets
from typing import Any, Callable, Mapping, Optional

import attrs

from duplex_es.domain.commands import (
    AckPlayback,
    AppendAudio,
    AppendText,
    BargeIn,
    CancelInput,
    CancelResponse,
    ClearInput,
    ClearOutputAudio,
    CloseSession,
    Command,
    Commit,
    CreateItem,
    CreateResponse,
    DeleteItem,
    Heartbeat,
    Invalid,
    ResponseOptions,
    RetrieveItem,
    SessionPatch,
    TruncateItem,
    TurnSignal,
    UpdateSession,
    VadIds,
)
from duplex_es.domain.errors import Code
from duplex_es.events import AudioFormat, ContentPart

__all__ = [
    "CommandError",
    "command_from_realtime",
    "parse_frame",
    "MAX_FRAME_BYTES",
    "MAX_INT",
    "IdFactory",
    "CLIENT_EVENT_TYPES",
    "ResumeRequest",
    "resume_request",
    "resume_from_query",
]

#: Largest client frame accepted: OpenAI's 15 MiB audio cap plus room for the JSON envelope.
MAX_FRAME_BYTES = 16 * 1024 * 1024

#: The largest magnitude an integer field may have (JSON's safe integer range).
MAX_INT = 2**53 - 1

#: ``new_id(prefix)`` returns a fresh id such as ``item_3f2a...``; supplied by the server.
IdFactory = Callable[[str], str]


class CommandError(ValueError):
    """A client event that cannot become a command.

    Attributes:
        code: the error code (:class:`~duplex_es.domain.errors.Code`).
        message: what is wrong, for people.
        param: the offending field, if one is to blame.
        event_id: the client's ``event_id``, when it could be read.
        command_type: the event's ``type``, when it could be read.
        excerpt: the start of a frame that could not be parsed.
    """

    def __init__(
        self,
        code: str,
        message: str,
        param: Optional[str] = None,
        *,
        event_id: Optional[str] = None,
        command_type: Optional[str] = None,
        excerpt: Optional[str] = None,
    ) -> None:
        super().__init__(f"{code}: {message}")
        self.code, self.message, self.param = code, message, param
        self.event_id, self.command_type, self.excerpt = event_id, command_type, excerpt

    def as_command(self) -> Invalid:
        """The refusal as a command, so the session logs it."""
        return Invalid(
            event_id=self.event_id, command_type=self.command_type, code=self.code, message=self.message, param=self.param, excerpt=self.excerpt
        )


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
    "metadata": (_optional(lambda v: isinstance(v, dict) and all(isinstance(x, str) for x in v.values())), "an object of strings or null"),
    "transcription": (_optional(lambda v: isinstance(v, dict)), "an object or null"),
    "noise_reduction": (_optional(lambda v: isinstance(v, dict)), "an object or null"),
    "speed": (lambda v: _is_number(v) and 0.25 <= v <= 1.5, "a number in [0.25, 1.5]"),
}
_IGNORED_SESSION_FIELDS = frozenset(
    {"tools", "tool_choice", "max_output_tokens", "tracing", "truncation", "include", "prompt", "temperature", "reasoning", "parallel_tool_calls"}
)
_IGNORED_RESPONSE_FIELDS = frozenset({"metadata", "tools", "tool_choice", "max_output_tokens", "prompt", "temperature"})
_COMMON = {"type", "event_id", "expected_epoch"}


# ---------------------------------------------------------------------------------- strings


def _printable(text: str, limit: int = 200) -> str:
    """``text`` cut to ``limit`` characters and made storable: no NUL (PostgreSQL text cannot
    hold it) and no lone surrogate (not encodable as UTF-8)."""
    text = text[:limit].replace("\x00", "\\x00")
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


def _bad_string(obj: Any) -> Optional[str]:
    """Why a parsed frame cannot be stored as given: a string (or key) with a NUL or a lone
    UTF-16 surrogate (JSON escapes such as ``\\udc00`` decode to one)."""
    stack = [obj]
    while stack:
        v = stack.pop()
        if isinstance(v, str):
            if not v.isascii():
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


# ---------------------------------------------------------------------------------- entry points


def parse_frame(raw: str | bytes, new_id: IdFactory, *, dialect: str = "ga") -> Command | ResumeRequest:
    """Turn one WebSocket frame into a command (or a :class:`ResumeRequest`, which the
    transport handles); any problem becomes an ``Invalid`` command.

    Args:
        raw: the frame; ``bytes`` for a binary frame, which the Realtime protocol does not use.
        new_id: makes the ids a command creates (items, responses, requests).
        dialect: ``"ga"``, or ``"beta"`` for clients that sent ``OpenAI-Beta: realtime=v1``.
    """
    if isinstance(raw, bytes):
        return Invalid(code=Code.BINARY_FRAME, message="binary frames are not part of the Realtime protocol; send JSON text")
    # Count UTF-8 bytes, as the transport does; characters are a cheap lower bound.
    size = len(raw) if len(raw) * 4 <= MAX_FRAME_BYTES else len(raw.encode("utf-8", "surrogatepass"))
    if size > MAX_FRAME_BYTES:
        return Invalid(code=Code.FRAME_TOO_LARGE, message=f"frame of {size} bytes exceeds the limit of {MAX_FRAME_BYTES}")
    # The excerpt (for debugging a refusal) is only made when the frame is refused.
    try:
        msg = json.loads(raw)
    except json.JSONDecodeError as exc:
        return Invalid(code=Code.INVALID_JSON, message=f"frame is not valid JSON: {exc}", excerpt=_printable(raw))
    except RecursionError:
        return Invalid(code=Code.INVALID_JSON, message="frame nests JSON values too deeply to parse", excerpt=_printable(raw))
    except ValueError as exc:  # e.g. an integer literal of thousands of digits
        return Invalid(code=Code.INVALID_JSON, message=f"frame holds a value that cannot be parsed: {exc}", excerpt=_printable(raw))
    try:
        return command_from_realtime(msg, new_id, dialect=dialect)
    except CommandError as err:
        if err.code in (Code.INVALID_EVENT, Code.MISSING_TYPE) and err.param is None:
            err.excerpt = _printable(raw)
        return err.as_command()


def _random_id(prefix: str) -> str:
    return f"{prefix}_{secrets.token_hex(8)}"


def command_from_realtime(payload: Any, new_id: Optional[IdFactory] = None, *, dialect: str = "ga") -> Command | ResumeRequest:
    """Translate one parsed client event into a command; ``new_id`` makes the ids it creates
    (default: 64 random bits after the prefix, e.g. ``item_3f2a9c...``).

    Raises:
        CommandError: the event is not a well-formed client event; carries the error code, the
            offending ``param`` and the client's ``event_id``.
    """
    if not isinstance(payload, dict):
        raise CommandError(Code.INVALID_EVENT, "a client event must be a JSON object")
    event_id = payload.get("event_id")
    why = _bad_string(payload)
    if why is not None:
        clean = isinstance(event_id, str) and len(event_id) <= 256 and _bad_string(event_id) is None
        raise CommandError(Code.INVALID_EVENT, why, event_id=event_id if clean else None)
    if event_id is not None and (not isinstance(event_id, str) or not 0 < len(event_id) <= 256):
        raise CommandError(Code.INVALID_EVENT, "event_id must be a string of 1-256 characters", "event_id")
    type_ = payload.get("type")
    if not isinstance(type_, str) or not type_:
        raise CommandError(Code.MISSING_TYPE, "the event has no string 'type'", "type", event_id=event_id)
    if type_ == "turn.signal":
        payload = _unwrap_turn_signal(payload, event_id)
        type_ = payload["type"]
    if dialect == "beta":
        from duplex_es.protocol.beta import client_event_to_ga

        payload = client_event_to_ga(payload)
    parser = _PARSERS.get(type_)
    if parser is None:
        raise CommandError(
            Code.UNKNOWN_TYPE, f"unknown event type {type_[:128]!r}", "type", event_id=event_id, command_type=_printable(type_, 128)
        )
    p = _P(payload, event_id, new_id or _random_id)
    try:
        p.expected_epoch = p.int("expected_epoch")
        return parser(p)
    except _Bad as bad:
        raise CommandError(bad.code, bad.message, bad.param, event_id=event_id, command_type=type_) from None


def _unwrap_turn_signal(payload: dict, event_id: Optional[str]) -> dict:
    """``turn.signal`` carrying a command name (vLLM-Omni's generic channel) is that command;
    otherwise it is an informational signal."""
    def bad(message: str, param: str) -> CommandError:
        return CommandError(Code.INVALID_EVENT, message, param, event_id=event_id, command_type="turn.signal")

    event = payload.get("event")
    if not isinstance(event, str) or not event:
        raise bad("turn.signal needs a string 'event'", "event")
    for key in payload:
        if key not in ("type", "event", "payload", "event_id", "expected_epoch"):
            raise bad(f"unknown parameter {_printable(key, 60)!r}", _printable(key, 60))
    inner = payload.get("payload", {})
    if not isinstance(inner, dict):
        raise bad("turn.signal payload must be an object", "payload")
    if event in _SIGNAL_COMMANDS:
        out = {**inner, "type": event}
        for key in ("event_id", "expected_epoch"):
            if key in payload:
                out[key] = payload[key]
        return out
    return payload


# ---------------------------------------------------------------------------------- field access


class _Bad(Exception):
    def __init__(self, code: str, message: str, param: Optional[str] = None) -> None:
        self.code, self.message, self.param = code, message, param


class _P:
    """One event being parsed: typed field access that raises ``_Bad`` naming the field."""

    def __init__(self, msg: dict, event_id: Optional[str], new_id: IdFactory) -> None:
        self.msg, self.event_id, self.new_id = msg, event_id, new_id
        self.expected_epoch: Optional[int] = None

    def keys(self, allowed: set[str] | frozenset[str], obj: Optional[dict] = None, path: str = "") -> None:
        for key in obj if obj is not None else self.msg:
            if key not in allowed and (obj is not None or key not in _COMMON):
                where = _printable(f"{path}.{key}" if path else key, 120)
                raise _Bad(Code.INVALID_EVENT, f"unknown parameter {where!r}", where)

    def _field(self, key: str, obj: Optional[dict], path: str, required: bool) -> tuple[str, Any]:
        o = self.msg if obj is None else obj
        name = f"{path}.{key}" if path else key
        if (key not in o or o[key] is None) and required:
            raise _Bad(Code.INVALID_EVENT, f"missing required parameter {name!r}", name)
        return name, o.get(key)

    def str(self, key: str, obj: Optional[dict] = None, path: str = "", *, required: bool = False) -> Optional[str]:
        name, v = self._field(key, obj, path, required)
        if v is not None and not isinstance(v, str):
            raise _Bad(Code.INVALID_EVENT, f"{name} must be a string", name)
        return v

    def int(self, key: str, obj: Optional[dict] = None, path: str = "", *, required: bool = False) -> Optional[int]:
        name, v = self._field(key, obj, path, required)
        if v is None:
            return None
        if not _is_number(v) or (isinstance(v, float) and not v.is_integer()):
            raise _Bad(Code.INVALID_EVENT, f"{name} must be an integer", name)
        if not -MAX_INT <= v <= MAX_INT:
            raise _Bad(Code.INVALID_EVENT, f"{name} is out of range (|value| <= {MAX_INT})", name)
        return int(v)

    def bool(self, key: str, default: bool = False) -> bool:
        v = self.msg.get(key, default)
        if not isinstance(v, bool):
            raise _Bad(Code.INVALID_EVENT, f"{key} must be a boolean", key)
        return v

    def obj(self, key: str, obj: Optional[dict] = None, path: str = "") -> Optional[dict]:
        o = self.msg if obj is None else obj
        name = f"{path}.{key}" if path else key
        if key not in o or o[key] is None:
            return None
        v = o[key]
        if not isinstance(v, dict):
            raise _Bad(Code.INVALID_EVENT, f"{name} must be an object", name)
        return v

    def ignored(self, obj: dict, names: frozenset[str] | set[str], path: str) -> None:
        for name in names:
            if name in obj:
                ok, want = _IGNORED_FIELDS[name]
                if not ok(obj[name]):
                    raise _Bad(Code.INVALID_EVENT, f"{path}.{name} must be {want}", f"{path}.{name}")

    def common(self) -> dict[str, Any]:
        return {"event_id": self.event_id, "expected_epoch": self.expected_epoch}


def _format(p: _P, obj: dict, path: str) -> AudioFormat:
    p.keys({"type", "rate"}, obj, path)
    t = p.str("type", obj, path, required=True)
    rate = p.int("rate", obj, path)
    defaults = {"audio/pcm": 24000, "audio/pcmu": 8000, "audio/pcma": 8000}
    if t not in defaults:
        raise _Bad(Code.UNSUPPORTED_AUDIO_FORMAT, f"unsupported audio format {t[:40]!r}; use audio/pcm, audio/pcmu or audio/pcma", f"{path}.type")
    return AudioFormat(type=t, rate=defaults[t] if rate is None else rate)  # type: ignore[arg-type,index]


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


def strict_b64decode(text: str) -> Optional[bytes]:
    """The bytes of ``text`` if it is the canonical RFC 4648 base64 encoding of them (standard
    alphabet, padded, no whitespace or other characters, no stray bits in the last group),
    else ``None``.

    ``binascii.a2b_base64`` in strict mode checks the alphabet and the padding in C; only the
    last group's unused bits are left to check, by re-encoding that group (not the whole
    audio, which is what makes this cheap)."""
    if not text.isascii():
        return None
    try:
        raw = binascii.a2b_base64(text, strict_mode=True)
    except (binascii.Error, ValueError):
        return None
    if len(text) != (len(raw) + 2) // 3 * 4:
        return None  # e.g. unpadded text
    tail = len(raw) % 3
    if tail and base64.b64encode(raw[-tail:]) != text[-4:].encode("ascii"):
        return None  # stray bits in the padded last group
    return raw


def _strict_b64(text: str, param: str) -> bytes:
    raw = strict_b64decode(text)
    if raw is None:
        raise _Bad(Code.INVALID_AUDIO_BASE64, "audio is not strict base64 (RFC 4648, padded, no line breaks)", param)
    return raw


# ---------------------------------------------------------------------------------- parsers


def _session_update(p: _P) -> Command:
    p.keys({"session"})
    s = p.obj("session")
    if s is None:
        raise _Bad(Code.INVALID_EVENT, "missing required parameter 'session'", "session")
    p.keys({"type", "model", "instructions", "output_modalities", "audio", "duplex"} | _IGNORED_SESSION_FIELDS, s, "session")
    p.ignored(s, _IGNORED_SESSION_FIELDS, "session")
    stype = s.get("type", "realtime")
    if stype != "realtime":
        raise _Bad(Code.INVALID_EVENT, f"session.type {str(stype)[:32]!r} is not supported; use 'realtime'", "session.type")
    fields: dict[str, Any] = {}
    if "model" in s:
        fields["model"] = p.str("model", s, "session", required=True)
    if "instructions" in s:
        fields["instructions"] = p.str("instructions", s, "session", required=True)
    if "output_modalities" in s:
        fields["output_modalities"] = _modalities(s["output_modalities"], "session.output_modalities")
    audio = p.obj("audio", s, "session")
    if audio is not None:
        p.keys({"input", "output"}, audio, "session.audio")
        inp = p.obj("input", audio, "session.audio")
        if inp is not None:
            p.keys({"format", "turn_detection", "transcription", "noise_reduction"}, inp, "session.audio.input")
            p.ignored(inp, {"transcription", "noise_reduction"}, "session.audio.input")
            fmt = p.obj("format", inp, "session.audio.input")
            if fmt is not None:
                fields["input_format"] = _format(p, fmt, "session.audio.input.format")
            if "turn_detection" in inp:
                td = inp["turn_detection"]
                if td is not None and not isinstance(td, dict):
                    raise _Bad(Code.INVALID_EVENT, "session.audio.input.turn_detection must be an object or null", "session.audio.input.turn_detection")
                fields["turn_detection"] = td
        out = p.obj("output", audio, "session.audio")
        if out is not None:
            p.keys({"format", "voice", "speed"}, out, "session.audio.output")
            p.ignored(out, {"speed"}, "session.audio.output")
            fmt = p.obj("format", out, "session.audio.output")
            if fmt is not None:
                fields["output_format"] = _format(p, fmt, "session.audio.output.format")
            if out.get("voice") is not None:
                fields["voice"] = _voice(out["voice"], "session.audio.output.voice")
    duplex = p.obj("duplex", s, "session")
    if duplex is not None:
        p.keys({"transcript_on_truncate", "acknowledge_appends"}, duplex, "session.duplex")
        if "transcript_on_truncate" in duplex:
            fields["transcript_on_truncate"] = p.str("transcript_on_truncate", duplex, "session.duplex", required=True)
        if "acknowledge_appends" in duplex:
            if not isinstance(duplex["acknowledge_appends"], bool):
                raise _Bad(Code.INVALID_EVENT, "session.duplex.acknowledge_appends must be a boolean", "session.duplex.acknowledge_appends")
            fields["acknowledge_appends"] = duplex["acknowledge_appends"]
    return UpdateSession(**p.common(), patch=SessionPatch(**fields))


def _append(p: _P) -> Command:
    p.keys({"audio"})
    audio = p.str("audio", required=True)
    raw = _strict_b64(audio, "audio")  # type: ignore[arg-type]
    ids = VadIds(item_id=p.new_id("item"), response_id=p.new_id("resp"), response_item_id=p.new_id("item"), request_id=p.new_id("req"))
    return AppendAudio(**p.common(), audio=audio, nbytes=len(raw), vad_ids=ids)  # type: ignore[arg-type]


def _text_append(p: _P) -> Command:
    p.keys({"text"})
    return AppendText(**p.common(), text=p.str("text", required=True) or "")


def _commit(p: _P) -> Command:
    p.keys(set())
    return Commit(**p.common(), item_id=p.new_id("item"))


def _clear(p: _P) -> Command:
    p.keys(set())
    return ClearInput(**p.common())


def _input_cancel(p: _P) -> Command:
    p.keys(set())
    return CancelInput(**p.common())


def _response_create(p: _P) -> Command:
    p.keys({"response"})
    r = p.obj("response") or {}
    p.keys({"output_modalities", "instructions", "audio", "conversation", "input"} | _IGNORED_RESPONSE_FIELDS, r, "response")
    p.ignored(r, _IGNORED_RESPONSE_FIELDS, "response")
    if "input" in r:
        raise _Bad(Code.UNSUPPORTED_RESPONSE_OPTION, "response.input is not supported yet; the default conversation is used", "response.input")
    opts: dict[str, Any] = {}
    if r.get("output_modalities") is not None:
        opts["output_modalities"] = _modalities(r["output_modalities"], "response.output_modalities")
    if "instructions" in r:
        opts["instructions"] = p.str("instructions", r, "response")
    conv = r.get("conversation", "auto")
    if not isinstance(conv, str):
        raise _Bad(Code.INVALID_EVENT, "response.conversation must be 'auto' or 'none'", "response.conversation")
    opts["conversation"] = conv
    audio = p.obj("audio", r, "response")
    if audio is not None:
        p.keys({"output"}, audio, "response.audio")
        out = p.obj("output", audio, "response.audio") or {}
        p.keys({"format", "voice"}, out, "response.audio.output")
        fmt = p.obj("format", out, "response.audio.output")
        if fmt is not None:
            opts["output_format"] = _format(p, fmt, "response.audio.output.format")
        if out.get("voice") is not None:
            opts["voice"] = _voice(out["voice"], "response.audio.output.voice")
    return CreateResponse(
        **p.common(), response_id=p.new_id("resp"), item_id=p.new_id("item"), request_id=p.new_id("req"), options=ResponseOptions(**opts)
    )


def _response_cancel(p: _P) -> Command:
    p.keys({"response_id"})
    return CancelResponse(**p.common(), response_id=p.str("response_id"))


def _barge_in(p: _P) -> Command:
    p.keys(set())
    return BargeIn(**p.common())


def _output_clear(p: _P) -> Command:
    p.keys({"response_id"})
    return ClearOutputAudio(**p.common(), response_id=p.str("response_id"))


def _item_create(p: _P) -> Command:
    p.keys({"item", "previous_item_id"})
    item = p.obj("item")
    if item is None:
        raise _Bad(Code.INVALID_EVENT, "missing required parameter 'item'", "item")
    p.keys({"id", "type", "role", "content", "object", "status"}, item, "item")
    kind = item.get("type", "message")
    if kind != "message":
        raise _Bad(Code.INVALID_ITEM, f"item type {str(kind)[:32]!r} is not supported; only 'message'", "item.type")
    role = p.str("role", item, "item", required=True)
    content = item.get("content")
    if not isinstance(content, list) or not all(isinstance(c, dict) for c in content):
        raise _Bad(Code.INVALID_EVENT, "item.content must be a list of content objects", "item.content")
    parts: list[ContentPart] = []
    audio_bytes = 0
    for i, c in enumerate(content):
        path = f"item.content[{i}]"
        p.keys({"type", "text", "audio", "transcript"}, c, path)
        ptype = p.str("type", c, path, required=True)
        text = p.str("text", c, path) or ""
        audio = p.str("audio", c, path) or ""
        if audio:
            audio_bytes += len(_strict_b64(audio, f"{path}.audio"))
        parts.append(ContentPart(type=ptype, text=text, audio=audio))  # type: ignore[arg-type]
    item_id = p.str("id", item, "item")
    if item_id is None:
        item_id = p.new_id("item")
    elif not 0 < len(item_id) <= 128:
        raise _Bad(Code.INVALID_EVENT, "item.id must be 1-128 characters", "item.id")
    previous = p.str("previous_item_id")
    return CreateItem(
        **p.common(), item_id=item_id, role=role, content=tuple(parts), previous_item_id=previous, audio_nbytes=audio_bytes  # type: ignore[arg-type]
    )


def _item_retrieve(p: _P) -> Command:
    p.keys({"item_id"})
    return RetrieveItem(**p.common(), item_id=p.str("item_id", required=True))  # type: ignore[arg-type]


def _item_delete(p: _P) -> Command:
    p.keys({"item_id"})
    return DeleteItem(**p.common(), item_id=p.str("item_id", required=True))  # type: ignore[arg-type]


def _truncate(p: _P) -> Command:
    p.keys({"item_id", "content_index", "audio_end_ms"})
    content_index = p.int("content_index")
    return TruncateItem(
        **p.common(),
        item_id=p.str("item_id", required=True),  # type: ignore[arg-type]
        content_index=0 if content_index is None else content_index,
        audio_end_ms=p.int("audio_end_ms", required=True),  # type: ignore[arg-type]
    )


def _playback_ack(p: _P) -> Command:
    p.keys({"response_id", "item_id", "played_ms", "committed_ms", "truncate"})
    return AckPlayback(
        **p.common(),
        response_id=p.str("response_id"),
        item_id=p.str("item_id"),
        played_ms=p.int("played_ms", required=True),  # type: ignore[arg-type]
        committed_ms=p.int("committed_ms"),
        truncate=p.bool("truncate"),
    )


def _turn_signal(p: _P) -> Command:
    p.keys({"event", "payload"})
    if p.msg.get("payload"):
        raise _Bad(Code.INVALID_EVENT, "an informational turn.signal carries no payload", "payload")
    return TurnSignal(**p.common(), signal=p.str("event", required=True))  # type: ignore[arg-type]


def _heartbeat(p: _P) -> Command:
    p.keys(set())
    return Heartbeat(**p.common())


def _close(p: _P) -> Command:
    p.keys({"reason"})
    return CloseSession(**p.common(), reason=p.str("reason") or "client_close")


@attrs.frozen(kw_only=True)
class ResumeRequest:
    """``session.resume`` (DESIGN §4, Resume): take over ``session_id`` with the
    ``resume_token`` the server issued, and be re-sent the wire events after
    ``last_server_event_seq`` (``None``: re-send nothing). Not a session command: the
    transport acts on it before a session is bound to the connection, so it may only be the
    first message (or ride on the connection URL as ``resume_session``, ``resume_token`` and
    ``last_server_event_seq`` query parameters, which the SDK's ``on_reconnecting`` can set)."""

    session_id: str
    resume_token: str
    last_server_event_seq: Optional[int] = None
    event_id: Optional[str] = None


def _resume(p: _P) -> ResumeRequest:
    p.keys({"session_id", "resume_token", "last_server_event_seq"})
    session_id = p.str("session_id", required=True)
    token = p.str("resume_token", required=True)
    if not 0 < len(session_id) <= 128:  # type: ignore[arg-type]
        raise _Bad(Code.INVALID_EVENT, "session_id must be 1-128 characters", "session_id")
    if not 0 < len(token) <= 256:  # type: ignore[arg-type]
        raise _Bad(Code.INVALID_EVENT, "resume_token must be 1-256 characters", "resume_token")
    last = p.int("last_server_event_seq")
    if last is not None and last < 0:
        raise _Bad(Code.INVALID_EVENT, "last_server_event_seq must be >= 0", "last_server_event_seq")
    return ResumeRequest(session_id=session_id, resume_token=token, last_server_event_seq=last, event_id=p.event_id)  # type: ignore[arg-type]


def resume_request(payload: dict) -> ResumeRequest:
    """Parse a ``session.resume`` message (any endpoint).

    Raises:
        CommandError: a field is missing, unknown or malformed (code ``invalid_event``).
    """
    out = command_from_realtime(payload)
    if not isinstance(out, ResumeRequest):
        raise CommandError(Code.INVALID_EVENT, "not a session.resume message", "type")
    return out


def resume_from_query(params: Mapping[str, str]) -> Optional[ResumeRequest]:
    """The resume a connection URL asks for (``?resume_session=…&resume_token=…
    &last_server_event_seq=…``), or ``None`` when it names no session.

    Raises:
        CommandError: ``resume_session`` is given but the token is missing or the seq is not
            a non-negative integer.
    """
    session_id = params.get("resume_session")
    if session_id is None:
        return None
    payload: dict[str, Any] = {"type": "session.resume", "session_id": session_id, "resume_token": params.get("resume_token")}
    last = params.get("last_server_event_seq")
    if last is not None:
        if not last.isascii() or not last.isdigit() or len(last) > 16:
            raise CommandError(Code.INVALID_EVENT, "last_server_event_seq must be a non-negative integer", "last_server_event_seq")
        payload["last_server_event_seq"] = int(last)
    return resume_request(payload)


_PARSERS: dict[str, Callable[[_P], Command]] = {
    "session.update": _session_update,
    "input_audio_buffer.append": _append,
    "input.text.append": _text_append,
    "input_audio_buffer.commit": _commit,
    "input_audio_buffer.clear": _clear,
    "input.cancel": _input_cancel,
    "response.create": _response_create,
    "response.cancel": _response_cancel,
    "barge_in": _barge_in,
    "output_audio_buffer.clear": _output_clear,
    "conversation.item.create": _item_create,
    "conversation.item.retrieve": _item_retrieve,
    "conversation.item.delete": _item_delete,
    "conversation.item.truncate": _truncate,
    "playback.ack": _playback_ack,
    "turn.signal": _turn_signal,
    "session.heartbeat": _heartbeat,
    "session.close": _close,
    "session.resume": _resume,  # type: ignore[dict-item]
}

#: ``turn.signal`` events that carry a command (vLLM-Omni remaps them the same way).
_SIGNAL_COMMANDS = frozenset(
    {"input.cancel", "barge_in", "response.cancel", "session.update", "conversation.item.create", "conversation.item.delete", "conversation.item.truncate"}
)

#: Every client event type this server understands.
CLIENT_EVENT_TYPES: frozenset[str] = frozenset(_PARSERS)

