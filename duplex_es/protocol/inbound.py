"""Realtime client events → commands.

Shape checks that need no session state happen here: the frame is JSON, has a ``type`` this
server knows, fields have the right JSON types, audio is strict base64, strings are storable.
:func:`command_from_realtime` raises :class:`CommandError` (code, message, param and the
client's ``event_id``); :func:`parse_frame`, for transports, turns any problem into an
:class:`~duplex_es.domain.commands.Invalid` command, which the session logs as rejected like every
other refusal (docs/architecture.md, I3). Rules that need state (buffer length, active response, audio length)
are the domain's.

Names follow OpenAI Realtime GA (docs/sources.md, "Realtime GA events") plus vLLM-Omni's
duplex extensions (``input.text.append``, ``input.cancel``, ``barge_in``, ``playback.ack``,
``turn.signal``, ``session.heartbeat``, ``session.close``;
docs/sources.md, "vLLM-Omni's client event names"); every client event may carry an
``expected_epoch`` fence. Beta-named events are translated first (:mod:`duplex_es.protocol.beta`).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import math
import secrets
from typing import Any, Callable, Mapping, Optional

import attrs
import pybase64

from duplex_es.errors import ProtocolError
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
from duplex_es.domain.rules import shown
from duplex_es.events import AudioFormat, ContentPart, ResponseInput

__all__ = [
    "CommandError",
    "command_from_realtime",
    "parse_frame",
    "MAX_FRAME_BYTES",
    "read_frame",
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


class CommandError(ProtocolError, ValueError):
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
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _optional(check: Callable[[Any], bool]) -> Callable[[Any], bool]:
    return lambda v: v is None or check(v)


_NAME_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-")


def _is_str_list(v: Any) -> bool:
    return isinstance(v, list) and all(isinstance(x, str) for x in v)


def _tool_problem(tool: Any) -> Optional[tuple[str, str]]:
    """Why a ``tools`` entry is not a valid tool: ``(field, message)``, or ``None``. A function
    tool needs a ``name`` of 1-64 letters, digits, ``_`` or ``-`` and, if given, a string
    ``description`` and a JSON-Schema object ``parameters`` (GA ``RealtimeFunctionTool``)."""
    if not isinstance(tool, dict):
        return "", "each tool must be an object"
    kind = tool.get("type", "function")
    if kind == "mcp":
        if not isinstance(tool.get("server_label"), str) or not tool["server_label"]:
            return "server_label", "an mcp tool needs a string server_label"
        return None
    if kind != "function":
        return "type", f"tool type {str(kind)[:32]!r} is not supported; use 'function' or 'mcp'"
    for key in tool:
        if key not in ("type", "name", "description", "parameters"):
            return key, f"unknown tool field {key[:40]!r}"
    name = tool.get("name")
    if not isinstance(name, str) or not 0 < len(name) <= 64 or not set(name) <= _NAME_CHARS:
        return "name", f"a function tool needs a name of 1-64 letters, digits, '_' or '-'; got {str(name)[:70]!r}"
    if "description" in tool and not isinstance(tool["description"], str):
        return "description", f"tool {name!r}: description must be a string"
    params = tool.get("parameters")
    if params is not None:
        if not isinstance(params, dict):
            return "parameters", f"tool {name!r}: parameters must be a JSON Schema object"
        if "type" in params and params["type"] != "object":
            return "parameters.type", f"tool {name!r}: parameters must describe an object (type 'object'), not {str(params['type'])[:32]!r}"
        if "properties" in params and not isinstance(params["properties"], dict):
            return "parameters.properties", f"tool {name!r}: parameters.properties must be an object"
        if "required" in params and not _is_str_list(params["required"]):
            return "parameters.required", f"tool {name!r}: parameters.required must be a list of property names"
        problem = _schema_problem(params)
        if problem is not None:
            where, why = problem
            return "parameters" + where, f"tool {name!r}: parameters is not a valid JSON Schema at {('parameters' + where)!r}: {why}"
    return None


def _schema_problem(schema: dict) -> Optional[tuple[str, str]]:
    """Why ``schema`` is not a valid JSON Schema (checked against its dialect's meta-schema by
    the ``jsonschema`` library; 2020-12 when it names none): ``(path, message)`` with the path
    as ``.a.b[0]`` inside it, or ``None``."""
    from jsonschema import exceptions, validators

    cls = validators.validator_for(schema, default=validators.Draft202012Validator)
    try:
        cls.check_schema(schema)
    except exceptions.SchemaError as err:
        path = "".join(f"[{k}]" if isinstance(k, int) else f".{k}" for k in err.absolute_path)
        return path[:100], _printable(err.message, 160)
    return None


def _tool_choice_ok(v: Any) -> bool:
    if v in ("auto", "none", "required"):
        return True
    if isinstance(v, dict) and v.get("type") == "function":
        return isinstance(v.get("name"), str) and set(v) <= {"type", "name"}
    return isinstance(v, dict) and v.get("type") == "mcp" and isinstance(v.get("server_label"), str)


#: Most JSON bytes a kept setting may hold (what a session echoes and every tick carries).
_SETTING_MAX_BYTES = {"tools": 65_536, "tracing": 16_384, "prompt": 16_384, "truncation": 4_096, "reasoning": 4_096, "noise_reduction": 1_024}

#: Most tools a session or response may declare.
MAX_TOOLS = 128

#: What GA's ``include`` may name.
_INCLUDE = frozenset({"item.input_audio_transcription.logprobs"})

#: GA settings duplex_es keeps exactly as the client set them and echoes (docs/protocol.md), each
#: with the JSON type it must have: keeping a setting is no reason to accept junk in it.
_SETTING_CHECKS: dict[str, tuple[Callable[[Any], bool], str]] = {
    "tools": (lambda v: isinstance(v, list) and len(v) <= MAX_TOOLS, f"a list of at most {MAX_TOOLS} tool objects"),
    "tool_choice": (_tool_choice_ok, '"auto", "none", "required" or {"type": "function", "name": ...}'),
    "max_output_tokens": (lambda v: v == "inf" or (isinstance(v, int) and not isinstance(v, bool) and 1 <= v <= 4096), '"inf" or an integer in 1..4096'),
    "tracing": (_optional(lambda v: v == "auto" or isinstance(v, dict)), '"auto", an object or null'),
    "truncation": (lambda v: v in ("auto", "disabled") or (isinstance(v, dict) and isinstance(v.get("type"), str)), '"auto", "disabled" or an object with a type'),
    "include": (_optional(lambda v: _is_str_list(v) and set(v) <= _INCLUDE), f"null or a list of {', '.join(sorted(_INCLUDE))}"),
    "prompt": (_optional(lambda v: isinstance(v, dict) and isinstance(v.get("id"), str)), "an object with a string id, or null"),
    "temperature": (lambda v: _is_number(v) and 0 <= v <= 2, "a number in [0, 2]"),
    "reasoning": (_optional(lambda v: isinstance(v, dict)), "an object or null"),
    "parallel_tool_calls": (lambda v: isinstance(v, bool), "a boolean"),
    "metadata": (
        _optional(lambda v: isinstance(v, dict) and len(v) <= 16 and all(isinstance(x, str) and 0 < len(k) <= 64 and len(x) <= 512 for k, x in v.items())),
        "null or an object of at most 16 string values (keys of 1-64, values up to 512 characters)",
    ),
    "noise_reduction": (
        _optional(lambda v: isinstance(v, dict) and v.get("type") in ("near_field", "far_field") and set(v) <= {"type", "strength"}
                  and (_is_number(v.get("strength", 0.0)))),
        'null or {"type": "near_field" | "far_field"}',
    ),
    "speed": (lambda v: _is_number(v) and 0.25 <= v <= 1.5, "a number in [0.25, 1.5]"),
}
#: ``audio.input.transcription``: the keys GA's ``AudioTranscription`` has, and their types.
_TRANSCRIPTION_KEYS: dict[str, tuple[Callable[[Any], bool], str]] = {
    "model": (lambda v: isinstance(v, str) and 0 < len(v) <= 128, "a model name of 1-128 characters"),
    "language": (lambda v: isinstance(v, str) and len(v) <= 32, "a language code"),
    "languages": (lambda v: _is_str_list(v) and len(v) <= 100 and all(len(x) <= 32 for x in v), "a list of at most 100 language codes"),
    "prompt": (lambda v: isinstance(v, str) and len(v) <= 16_384, "a string of at most 16384 characters"),
    "delay": (lambda v: v in ("minimal", "low", "medium", "high", "xhigh"), '"minimal", "low", "medium", "high" or "xhigh"'),
    "keywords": (lambda v: _is_str_list(v) and len(v) <= 100 and all(len(x) <= 64 for x in v), "a list of at most 100 strings of up to 64 characters"),
}
_SESSION_SETTINGS = frozenset(
    {"tools", "tool_choice", "max_output_tokens", "tracing", "truncation", "include", "prompt", "temperature", "reasoning", "parallel_tool_calls"}
)
_RESPONSE_SETTINGS = frozenset(
    {"metadata", "tools", "tool_choice", "max_output_tokens", "prompt", "temperature", "reasoning", "parallel_tool_calls"}
)
#: Per-response settings accepted and echoed that nothing applies (recorded on the response).
_RESPONSE_NOT_APPLIED = ("prompt", "reasoning")
_COMMON = {"type", "event_id", "expected_epoch"}


# ---------------------------------------------------------------------------------- strings


def _printable(text: str, limit: int = 200) -> str:
    """``text`` cut to ``limit`` characters and made storable: no NUL (PostgreSQL text cannot
    hold it) and no lone surrogate (not encodable as UTF-8)."""
    text = text[:limit].replace("\x00", "\\x00")
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


def _bad_string(obj: Any) -> Optional[str]:
    """Why a parsed frame cannot be stored as given: a string (or key) with a NUL or a lone
    UTF-16 surrogate (JSON escapes such as ``\\udc00`` decode to one), or a number that is not
    finite (a Python caller's NaN)."""
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
        elif isinstance(v, float) and not math.isfinite(v):
            return "numbers must be finite (NaN and Infinity are not JSON)"
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
    msg = read_frame(raw, "binary frames are not part of the Realtime protocol; send JSON text")
    if isinstance(msg, Invalid):
        return msg
    digest = _digest(raw) if isinstance(msg, dict) and msg.get("event_id") is not None else None
    try:
        return command_from_realtime(msg, new_id, dialect=dialect, digest=digest)
    except CommandError as err:
        if err.code in (Code.INVALID_EVENT, Code.MISSING_TYPE) and err.param is None:
            err.excerpt = _printable(raw)
        return err.as_command()


def read_frame(raw: str | bytes, binary_message: str) -> Any:
    """The JSON value of a text frame, or the ``Invalid`` command refusing the frame: a binary
    frame (``binary_frame``, with ``binary_message``), one over :data:`MAX_FRAME_BYTES` of UTF-8
    (``frame_too_large``), or text that is not JSON (``invalid_json``: also ``NaN``/``Infinity``,
    too deep nesting, unparseable numbers). The guard every endpoint's parser starts with."""
    if isinstance(raw, bytes):
        return Invalid(code=Code.BINARY_FRAME, message=binary_message)
    # Count UTF-8 bytes, as the transport does; characters are a cheap lower bound.
    size = len(raw) if len(raw) * 4 <= MAX_FRAME_BYTES else len(raw.encode("utf-8", "surrogatepass"))
    if size > MAX_FRAME_BYTES:
        return Invalid(code=Code.FRAME_TOO_LARGE, message=f"frame of {size} bytes exceeds the limit of {MAX_FRAME_BYTES}")
    # The excerpt (for debugging a refusal) is only made when the frame is refused.
    try:
        return json.loads(raw, parse_constant=_no_constant)
    except json.JSONDecodeError as exc:
        return Invalid(code=Code.INVALID_JSON, message=f"frame is not valid JSON: {exc}", excerpt=_printable(raw))
    except RecursionError:
        return Invalid(code=Code.INVALID_JSON, message="frame nests JSON values too deeply to parse", excerpt=_printable(raw))
    except ValueError as exc:  # e.g. an integer literal of thousands of digits
        return Invalid(code=Code.INVALID_JSON, message=f"frame holds a value that cannot be parsed: {exc}", excerpt=_printable(raw))


def _no_constant(name: str) -> Any:
    """``NaN``, ``Infinity`` and ``-Infinity`` are not JSON (RFC 8259), though Python's parser
    takes them: a value a client cannot parse back, nor the log's canonical JSON store."""
    raise ValueError(f"{name} is not a JSON number")


def _random_id(prefix: str) -> str:
    return f"{prefix}_{secrets.token_hex(8)}"


def _digest(text: str) -> str:
    """The content fingerprint of a client frame (or of a payload's canonical JSON): BLAKE2b,
    128 bits, hex. A retry re-sends the same frame, so it has the same fingerprint."""
    return hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=16).hexdigest()


def command_from_realtime(
    payload: Any, new_id: Optional[IdFactory] = None, *, dialect: str = "ga", digest: Optional[str] = None
) -> Command | ResumeRequest:
    """Translate one parsed client event into a command; ``new_id`` makes the ids it creates
    (default: 64 random bits after the prefix, e.g. ``item_3f2a9c...``). ``digest`` fingerprints
    the command's content (default: of the payload's canonical JSON, when it has an
    ``event_id``); a repeat of an applied command's ``event_id`` and fingerprint is a retry.

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
    if event_id is not None and digest is None:
        digest = _digest(json.dumps(payload, sort_keys=True, ensure_ascii=False))
    type_ = _ALIASES.get(type_, type_)
    if type_ == "turn.signal":
        payload = _unwrap_turn_signal(payload, event_id)
        type_ = _ALIASES.get(payload["type"], payload["type"])
    if dialect == "beta":
        from duplex_es.protocol.beta import client_event_to_ga

        payload = client_event_to_ga(payload)
    parser = _PARSERS.get(type_)
    if parser is None:
        raise CommandError(
            Code.UNKNOWN_TYPE, f"unknown event type {type_[:128]!r}", "type", event_id=event_id, command_type=_printable(type_, 128)
        )
    p = _P(payload, event_id, new_id or _random_id, digest)
    p.alias = payload.get("type") if payload.get("type") != type_ else None
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


class _Bad(ProtocolError):
    def __init__(self, code: str, message: str, param: Optional[str] = None) -> None:
        self.code, self.message, self.param = code, message, param


class _P:
    """One event being parsed: typed field access that raises ``_Bad`` naming the field."""

    def __init__(self, msg: dict, event_id: Optional[str], new_id: IdFactory, digest: Optional[str] = None) -> None:
        self.msg, self.event_id, self.new_id = msg, event_id, new_id
        self.expected_epoch: Optional[int] = None
        self.digest = digest
        self.alias: Optional[str] = None  # the vLLM-Omni name the client used, if it used one

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

    def settings(self, obj: dict, names: frozenset[str] | set[str], path: str) -> dict[str, Any]:
        """The settings of ``names`` present in ``obj``, each checked (``tools`` entry by entry)
        and bounded in size (they are kept, echoed and handed to the engine with every tick), as
        the client sent them."""
        out: dict[str, Any] = {}
        for name in names:
            if name in obj:
                value = obj[name]
                ok, want = _SETTING_CHECKS[name]
                if not ok(value):
                    raise _Bad(Code.INVALID_EVENT, f"{path}.{name} must be {want}; got {shown(value)}", f"{path}.{name}")
                limit = _SETTING_MAX_BYTES.get(name)
                if limit is not None and value is not None:
                    size = len(json.dumps(value, ensure_ascii=False).encode("utf-8", "surrogatepass"))
                    if size > limit:
                        raise _Bad(Code.INVALID_EVENT, f"{path}.{name} holds {size} bytes of JSON; at most {limit}", f"{path}.{name}")
                if name == "tools":
                    seen: set[str] = set()
                    for i, tool in enumerate(value):
                        problem = _tool_problem(tool)
                        if problem is None and tool.get("type", "function") == "function":
                            if tool["name"] in seen:
                                problem = ("name", f"two tools are named {tool['name']!r}")
                            seen.add(tool["name"])
                        if problem is not None:
                            where = f"{path}.tools[{i}]" + (f".{problem[0]}" if problem[0] else "")
                            raise _Bad(Code.INVALID_TOOL, problem[1], _printable(where, 120))
                    value = tuple(value)
                elif name == "include" and value is not None:
                    value = tuple(value)
                out[name] = value
        return out

    def common(self) -> dict[str, Any]:
        return {"event_id": self.event_id, "expected_epoch": self.expected_epoch, "digest": self.digest}


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

    ``pybase64`` in validating mode checks the alphabet and the padding in C (SIMD: about a
    quarter of ``binascii``'s time on a 20 ms append); only the length and the last group's
    unused bits are left to check, by re-encoding that group (not the whole audio, which is
    what makes this cheap)."""
    if not text.isascii():
        return None
    try:
        raw = pybase64.b64decode(text, validate=True)
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
    p.keys({"type", "model", "instructions", "output_modalities", "audio", "duplex"} | _SESSION_SETTINGS, s, "session")
    fields: dict[str, Any] = p.settings(s, _SESSION_SETTINGS, "session")
    if "type" in s:
        stype = s["type"]
        if stype not in ("realtime", "transcription"):
            raise _Bad(Code.INVALID_EVENT, f"session.type {shown(stype)} is not supported; use 'realtime' or 'transcription'", "session.type")
        fields["session_type"] = stype
    if "model" in s:
        fields["model"] = p.str("model", s, "session", required=True)
        if not 0 < len(fields["model"]) <= 128:
            raise _Bad(Code.INVALID_EVENT, f"session.model must be a name of 1-128 characters; got {len(fields['model'])}", "session.model")
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
            fields.update(p.settings(inp, {"noise_reduction"}, "session.audio.input"))
            if "transcription" in inp:
                fields["transcription"] = _transcription(p, inp["transcription"])
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
            fields.update(p.settings(out, {"speed"}, "session.audio.output"))
            fmt = p.obj("format", out, "session.audio.output")
            if fmt is not None:
                fields["output_format"] = _format(p, fmt, "session.audio.output.format")
            if out.get("voice") is not None:
                fields["voice"] = _voice(out["voice"], "session.audio.output.voice")
    duplex = p.obj("duplex", s, "session")
    if duplex is not None:
        if "modes" in duplex:  # session.updated shows it; a client echoing the object back learns why
            raise _Bad(Code.INVALID_EVENT, "session.duplex.modes is read only (the modes the session's engine offers); leave it out", "session.duplex.modes")
        p.keys({"transcript_on_truncate", "acknowledge_appends", "mode", "chunk_period_ms", "overlap", "barge_in_ms", "extension_events", "backchannels"}, duplex, "session.duplex")
        if "extension_events" in duplex:
            fields["extension_events"] = duplex["extension_events"]
        if "backchannels" in duplex:
            fields["backchannels"] = duplex["backchannels"]
        if "barge_in_ms" in duplex:
            fields["barge_in_ms"] = p.int("barge_in_ms", duplex, "session.duplex", required=True)
        if "mode" in duplex:
            fields["turn_mode"] = p.str("mode", duplex, "session.duplex", required=True)
        if "overlap" in duplex:
            fields["overlap"] = p.str("overlap", duplex, "session.duplex", required=True)
        if "chunk_period_ms" in duplex:
            fields["chunk_period_ms"] = p.int("chunk_period_ms", duplex, "session.duplex", required=True)
        if "transcript_on_truncate" in duplex:
            fields["transcript_on_truncate"] = p.str("transcript_on_truncate", duplex, "session.duplex", required=True)
        if "acknowledge_appends" in duplex:
            if not isinstance(duplex["acknowledge_appends"], bool):
                raise _Bad(Code.INVALID_EVENT, "session.duplex.acknowledge_appends must be a boolean", "session.duplex.acknowledge_appends")
            fields["acknowledge_appends"] = duplex["acknowledge_appends"]
    return UpdateSession(**p.common(), patch=SessionPatch(**fields))


def _transcription(p: _P, value: Any) -> Optional[dict]:
    """``audio.input.transcription``: ``null`` (off) or GA's ``AudioTranscription`` object, kept
    as the client sent it."""
    path = "session.audio.input.transcription"
    if value is None:
        return None
    if not isinstance(value, dict):
        raise _Bad(Code.INVALID_EVENT, f"{path} must be an object or null; got {shown(value)}", path)
    for key, v in value.items():
        check = _TRANSCRIPTION_KEYS.get(key)
        if check is None:
            where = _printable(f"{path}.{key}", 120)
            raise _Bad(Code.INVALID_EVENT, f"unknown parameter {where!r} (known: {', '.join(sorted(_TRANSCRIPTION_KEYS))})", where)
        if not check[0](v):
            raise _Bad(Code.INVALID_EVENT, f"{path}.{key} must be {check[1]}; got {shown(v)}", f"{path}.{key}")
    return value


def _append(p: _P) -> Command:
    p.keys({"audio", "is_speech"})
    audio = p.str("audio", required=True)
    raw = _strict_b64(audio, "audio")  # type: ignore[arg-type]
    is_speech = p.msg.get("is_speech")
    if is_speech is not None and not isinstance(is_speech, bool):
        raise _Bad(Code.INVALID_EVENT, f"is_speech must be a boolean or null; got {shown(is_speech)}", "is_speech")
    ids = VadIds(item_id=p.new_id("item"), response_id=p.new_id("resp"), response_item_id=p.new_id("item"), request_id=p.new_id("req"))
    return AppendAudio(**p.common(), audio=audio, nbytes=len(raw), vad_ids=ids, is_speech=is_speech)  # type: ignore[arg-type]


def _text_append(p: _P) -> Command:
    p.keys({"text"})
    return AppendText(**p.common(), text=p.str("text", required=True) or "")


def _commit(p: _P) -> Command:
    """``input_audio_buffer.commit``, or vLLM-Omni's ``input.commit``, whose ``create_response``
    defaults to true (docs/sources.md, "vLLM-Omni's client event names")."""
    p.keys({"final", "create_response", "is_speech"})
    create = p.msg.get("create_response")
    if create is None:
        create = p.alias == "input.commit"
    for key, value in (("create_response", create), ("final", p.msg.get("final")), ("is_speech", p.msg.get("is_speech"))):
        if value is not None and not isinstance(value, bool):
            raise _Bad(Code.INVALID_EVENT, f"{key} must be a boolean or null; got {shown(value)}", key)
    ids = (p.new_id("resp"), p.new_id("item"), p.new_id("req")) if create else None
    return Commit(**p.common(), item_id=p.new_id("item"), create_response=bool(create), response_ids=ids, final=p.msg.get("final"))


def _clear(p: _P) -> Command:
    p.keys(set())
    return ClearInput(**p.common())


def _input_cancel(p: _P) -> Command:
    p.keys(set())
    return CancelInput(**p.common())


def _response_create(p: _P) -> Command:
    p.keys({"response"})
    r = p.obj("response") or {}
    p.keys({"output_modalities", "instructions", "audio", "conversation", "input"} | _RESPONSE_SETTINGS, r, "response")
    opts: dict[str, Any] = p.settings(r, _RESPONSE_SETTINGS, "response")
    opts["not_applied"] = tuple(f"response.{k}" for k in _RESPONSE_NOT_APPLIED if k in opts)
    for k in _RESPONSE_NOT_APPLIED:
        opts.pop(k, None)
    if "input" in r:
        opts["input"] = _response_input(p, r["input"])
    if r.get("output_modalities") is not None:
        opts["output_modalities"] = _modalities(r["output_modalities"], "response.output_modalities")
    if "instructions" in r:
        opts["instructions"] = p.str("instructions", r, "response")
    conv = r.get("conversation", "auto")
    if not isinstance(conv, str):
        raise _Bad(Code.INVALID_EVENT, f"response.conversation must be 'auto' or 'none'; got {shown(conv)}", "response.conversation")
    opts["conversation"] = conv
    audio = p.obj("audio", r, "response")
    if audio is not None:
        p.keys({"output"}, audio, "response.audio")
        out = p.obj("output", audio, "response.audio") or {}
        p.keys({"format", "voice", "speed"}, out, "response.audio.output")
        opts.update(p.settings(out, {"speed"}, "response.audio.output"))
        fmt = p.obj("format", out, "response.audio.output")
        if fmt is not None:
            opts["output_format"] = _format(p, fmt, "response.audio.output.format")
        if out.get("voice") is not None:
            opts["voice"] = _voice(out["voice"], "response.audio.output.voice")
    return CreateResponse(
        **p.common(), response_id=p.new_id("resp"), item_id=p.new_id("item"), request_id=p.new_id("req"), options=ResponseOptions(**opts)
    )


#: Most entries a ``response.create`` ``input`` may hold.
MAX_RESPONSE_INPUT_ITEMS = 256


def _response_input(p: _P, value: Any) -> tuple[ResponseInput, ...]:
    """``response.input``: the response's own context (GA): references to conversation items
    (``{"type": "item_reference", "id": ...}``) and inline ``message``, ``function_call`` and
    ``function_call_output`` items (checked as ``conversation.item.create`` checks them; an
    ``id`` they carry is not kept), in order; ``[]`` is an empty context."""
    if not isinstance(value, list):
        raise _Bad(Code.INVALID_EVENT, f"response.input must be a list of items; got {shown(value)}", "response.input")
    if len(value) > MAX_RESPONSE_INPUT_ITEMS:
        raise _Bad(Code.INVALID_EVENT, f"response.input holds {len(value)} items; at most {MAX_RESPONSE_INPUT_ITEMS}", "response.input")
    out = []
    for i, entry in enumerate(value):
        path = f"response.input[{i}]"
        if not isinstance(entry, dict):
            raise _Bad(Code.INVALID_EVENT, f"{path} must be an item object", path)
        if entry.get("type") == "item_reference":
            p.keys({"type", "id"}, entry, path)
            ref = p.str("id", entry, path, required=True)
            out.append(ResponseInput(item_id=ref))
            continue
        if entry.get("type") in ("function_call", "function_call_output"):
            kind, call_id, name, text, _ = _function_fields(p, entry, path)
            if kind == "function_call":
                out.append(ResponseInput(type=kind, call_id=call_id, name=name, arguments=text))
            else:
                out.append(ResponseInput(type=kind, call_id=call_id, output=text))
            continue
        role, parts, _, _ = _message(p, entry, path)
        out.append(ResponseInput(role=role, content=parts))
    return tuple(out)


def _response_cancel(p: _P) -> Command:
    p.keys({"response_id"})
    return CancelResponse(**p.common(), response_id=p.str("response_id"))


def _barge_in(p: _P) -> Command:
    p.keys(set())
    return BargeIn(**p.common())


def _output_clear(p: _P) -> Command:
    p.keys({"response_id"})
    return ClearOutputAudio(**p.common(), response_id=p.str("response_id"))


def _message(p: _P, item: dict, path: str) -> tuple[str, tuple[ContentPart, ...], int, Optional[str]]:
    """A ``message`` item's role, content parts, decoded audio bytes and ``id`` (if given).
    Called for every item that is not a function item (nor, in ``response.input``, an item
    reference): any other ``type`` is refused with ``invalid_item``, listing the types the
    place takes."""
    kind = item.get("type", "message")
    if kind != "message":
        allowed = "'message', 'function_call' or 'function_call_output'"
        if path != "item":
            allowed = "'item_reference', " + allowed
        raise _Bad(Code.INVALID_ITEM, f"{path}.type must be {allowed}; got {shown(kind)}", f"{path}.type")
    p.keys({"id", "type", "role", "content", "object", "status"}, item, path)
    role = p.str("role", item, path, required=True)
    content = item.get("content")
    if not isinstance(content, list) or not all(isinstance(c, dict) for c in content):
        raise _Bad(Code.INVALID_EVENT, f"{path}.content must be a list of content objects", f"{path}.content")
    parts: list[ContentPart] = []
    audio_bytes = 0
    for i, c in enumerate(content):
        cpath = f"{path}.content[{i}]"
        p.keys({"type", "text", "audio", "transcript"}, c, cpath)
        ptype = p.str("type", c, cpath, required=True)
        text = p.str("text", c, cpath) or ""
        audio = p.str("audio", c, cpath) or ""
        if audio:
            audio_bytes += len(_strict_b64(audio, f"{cpath}.audio"))
        parts.append(ContentPart(type=ptype, text=text, audio=audio))  # type: ignore[arg-type]
    item_id = p.str("id", item, path)
    if item_id is not None and not 0 < len(item_id) <= 128:
        raise _Bad(Code.INVALID_EVENT, f"{path}.id must be 1-128 characters", f"{path}.id")
    return role, tuple(parts), audio_bytes, item_id  # type: ignore[return-value]


#: Most characters of a ``function_call_output``'s ``output`` or a ``function_call``'s
#: ``arguments`` (text a tool returned, kept in the log and handed to the engine every tick).
MAX_FUNCTION_TEXT_CHARS = 100_000


def _function_fields(p: _P, item: dict, path: str) -> tuple[str, str, Optional[str], str, Optional[str]]:
    """A ``function_call_output`` or ``function_call`` item (GA
    ``RealtimeConversationItemFunctionCallOutput`` / ``...FunctionCall``) at ``path``:
    ``(type, call_id, name, text, id)``, ``text`` being the output or the arguments and
    ``name`` ``None`` for an output. A missing or null ``output`` is ``""``."""
    kind = item["type"]
    fields = {"call_id", "output"} if kind == "function_call_output" else {"call_id", "name", "arguments"}
    p.keys({"id", "type", "object", "status"} | fields, item, path)
    call_id = p.str("call_id", item, path, required=True)
    if not 0 < len(call_id) <= 128:  # type: ignore[arg-type]
        raise _Bad(Code.INVALID_EVENT, f"{path}.call_id must be 1-128 characters; got {len(call_id)}", f"{path}.call_id")  # type: ignore[arg-type]
    text_field = "output" if kind == "function_call_output" else "arguments"
    # A tool that returned nothing: pipecat then leaves ``output`` out; it is the empty text.
    text = p.str(text_field, item, path, required=kind == "function_call") or ""
    if len(text) > MAX_FUNCTION_TEXT_CHARS:
        raise _Bad(
            Code.FUNCTION_TEXT_TOO_LONG,
            f"{path}.{text_field} of call {call_id[:64]!r} holds {len(text)} characters; at most {MAX_FUNCTION_TEXT_CHARS}",  # type: ignore[index]
            f"{path}.{text_field}",
        )
    item_id = p.str("id", item, path)
    if item_id is not None and not 0 < len(item_id) <= 128:
        raise _Bad(Code.INVALID_EVENT, f"{path}.id must be 1-128 characters", f"{path}.id")
    if kind == "function_call_output":
        return kind, call_id, None, text, item_id  # type: ignore[return-value]
    name = p.str("name", item, path, required=True)
    if not 0 < len(name) <= 64 or not set(name) <= _NAME_CHARS:  # type: ignore[arg-type]
        raise _Bad(Code.INVALID_EVENT, f"{path}.name must be a function name of 1-64 letters, digits, '_' or '-'; got {shown(name)}", f"{path}.name")
    return kind, call_id, name, text, item_id  # type: ignore[return-value]


def _function_item(p: _P, item: dict, previous: Optional[str]) -> Command:
    """A ``function_call_output`` (or ``function_call``) item of ``conversation.item.create``."""
    kind, call_id, name, text, item_id = _function_fields(p, item, "item")
    common = dict(**p.common(), item_id=item_id or p.new_id("item"), previous_item_id=previous, call_id=call_id, type=kind)
    if kind == "function_call_output":
        return CreateItem(**common, role="tool", output=text)  # type: ignore[arg-type]
    return CreateItem(**common, role="assistant", name=name, arguments=text)  # type: ignore[arg-type]


def _item_create(p: _P) -> Command:
    p.keys({"item", "previous_item_id"})
    item = p.obj("item")
    if item is None:
        raise _Bad(Code.INVALID_EVENT, "missing required parameter 'item'", "item")
    if item.get("type") in ("function_call_output", "function_call"):
        return _function_item(p, item, p.str("previous_item_id"))
    role, parts, audio_bytes, item_id = _message(p, item, "item")
    previous = p.str("previous_item_id")
    return CreateItem(
        **p.common(), item_id=item_id or p.new_id("item"), role=role, content=parts, previous_item_id=previous, audio_nbytes=audio_bytes
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
    """``playback.ack`` (or vLLM-Omni's ``audio.playback_ack``); ``audio_ms`` is vLLM-Omni's name
    for ``played_ms``."""
    p.keys({"response_id", "item_id", "played_ms", "committed_ms", "truncate", "audio_ms"})
    if "played_ms" in p.msg and "audio_ms" in p.msg:
        raise _Bad(Code.INVALID_EVENT, "give played_ms or its alias audio_ms, not both", "audio_ms")
    played = "played_ms" if "played_ms" in p.msg or "audio_ms" not in p.msg else "audio_ms"
    return AckPlayback(
        **p.common(),
        response_id=p.str("response_id"),
        item_id=p.str("item_id"),
        played_ms=p.int(played, required=True),  # type: ignore[arg-type]
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
    """``session.resume`` (docs/protocol.md, Resume): take over ``session_id`` with the
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

#: vLLM-Omni's other names for client events (docs/sources.md, "vLLM-Omni's client event names"): same
#: meaning, same validation. ``input.commit`` also starts a response unless told not to.
_ALIASES = {
    "input.commit": "input_audio_buffer.commit",
    "input_text.append": "input.text.append",
    "push_text": "input.text.append",
    "signal_turn": "turn.signal",
    "audio.playback_ack": "playback.ack",
    "close": "session.close",
    "close_session": "session.close",
}

#: ``turn.signal`` events that carry a command (vLLM-Omni remaps them the same way).
_SIGNAL_COMMANDS = frozenset(
    {"input.cancel", "barge_in", "response.cancel", "session.update", "conversation.item.create", "conversation.item.delete", "conversation.item.truncate"}
)

#: Every client event type this server understands (vLLM-Omni's aliases included).
CLIENT_EVENT_TYPES: frozenset[str] = frozenset(_PARSERS) | frozenset(_ALIASES)

