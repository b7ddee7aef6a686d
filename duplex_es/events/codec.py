"""One codec for every event: attrs instances ⇄ canonical JSON text.

The log stores ``(type, version, data)`` where ``data`` is canonical JSON (sorted keys, no
whitespace, UTF-8), so the same event always encodes to the same bytes and the per-session hash
chain is reproducible. Reading an older ``version`` runs the registered upcasters first.

Reading is on the path of every rebuild (a one-hour speech session is 180,000 events, most of
them base64 audio), so decoding parses with ``msgspec`` and structures with each class's cattrs
hook looked up once; encoding stays the standard library's, byte for byte, because the hash
chain is computed over the stored text (docs/performance.md, "Read path").
"""

from __future__ import annotations

import json
from typing import Any, Callable, Optional

import cattrs
import msgspec
import pybase64

from duplex_es.errors import DuplexError
from duplex_es.events.base import Event, event_class

# Import for their side effect: they register every event type.
from duplex_es.events import catalogue as _catalogue  # noqa: F401
from duplex_es.events import world as _world  # noqa: F401
from duplex_es.events import duplex as _duplex  # noqa: F401
from duplex_es.events.sealing import SEALED_PATHS, merge, split

__all__ = [
    "EventDecodeError",
    "converter",
    "encode",
    "encode_data",
    "encode_row",
    "PAYLOAD_AUDIO",
    "encode_sealed_row",
    "has_content",
    "decode_sealed",
    "decode",
    "decode_data",
    "parse_json",
    "to_plain",
    "register_upcaster",
]

converter = cattrs.Converter()

Upcaster = Callable[[dict[str, Any]], dict[str, Any]]
_UPCASTERS: dict[tuple[str, int], Upcaster] = {}


class EventDecodeError(DuplexError, ValueError):
    """A stored event cannot be turned into a current event object.

    Attributes:
        type: the stored wire name.
        version: the stored schema version.
        reason: ``"unknown_type"``, ``"future_version"``, ``"missing_upcaster"`` or
            ``"bad_data"``.
    """

    def __init__(self, type_: str, version: int, reason: str, detail: str = "") -> None:
        self.type = type_
        self.version = version
        self.reason = reason
        super().__init__(f"cannot decode event {type_!r} v{version}: {reason} {detail}".rstrip())


def register_upcaster(type_name: str, from_version: int, fn: Upcaster) -> None:
    """Register ``fn`` to turn the data of ``type_name`` at ``from_version`` into ``from_version+1``.

    Raises:
        ValueError: if one is already registered for that step.
    """
    key = (type_name, from_version)
    if key in _UPCASTERS:
        raise ValueError(f"upcaster for {type_name} v{from_version} registered twice")
    _UPCASTERS[key] = fn


def to_plain(obj: Any) -> Any:
    """Unstructure an attrs object (event, state, value class) into JSON-ready dicts and lists."""
    return converter.unstructure(obj)


#: The canonical JSON encoder (sorted keys, no whitespace, UTF-8 text), made once: ``json.dumps``
#: with options builds a new encoder on every call.
_CANONICAL = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def _dumps(data: Any) -> str:
    return _CANONICAL.encode(data)


def encode_data(ev: Event) -> str:
    """The canonical JSON text of an event's fields (without type and version)."""
    return _dumps(converter.unstructure(ev))


def encode(ev: Event) -> tuple[str, int, str]:
    """Encode an event as ``(type, version, canonical JSON data)``, everything in the JSON (what
    exports and the recorded corpus hold; the log stores :func:`encode_row`)."""
    return ev.TYPE, ev.VERSION, encode_data(ev)


#: Event classes whose ``audio`` (base64 text in memory and on the wire) the log stores as its
#: bytes in the row's ``payload`` column, with ``"audio": ""`` in the JSON: the appends, and
#: the engines' audio outputs (docs/performance.md, "Audio as bytes").
PAYLOAD_AUDIO: frozenset[type] = frozenset({_catalogue.AudioAppended, _catalogue.TickOutput, _duplex.UnitOutput})


def encode_row(ev: Event) -> tuple[str, int, str, Optional[bytes]]:
    """Encode an event as the log stores it: ``(type, version, canonical JSON data, payload)``.

    For a class in :data:`PAYLOAD_AUDIO` with audio that is canonical base64 (padded, standard
    alphabet, nothing else: what the inbound check admits and every encoder writes), the
    payload is the audio's bytes and the JSON holds ``"audio": ""``. Anything else — no audio,
    or text that does not round-trip exactly — is stored whole in the JSON with no payload
    (``None``), so :func:`decode` always gives back the event that was encoded.
    """
    if type(ev) in PAYLOAD_AUDIO and ev.audio:  # type: ignore[attr-defined]
        text: str = ev.audio  # type: ignore[attr-defined]
        try:
            raw = pybase64.b64decode(text, validate=True)
        except ValueError:  # binascii.Error included; non-ASCII text too
            raw = None
        if raw is not None and pybase64.b64encode_as_string(raw) == text:
            plain = converter.unstructure(ev)
            plain["audio"] = ""
            return ev.TYPE, ev.VERSION, _dumps(plain), raw
    return ev.TYPE, ev.VERSION, encode_data(ev), None


#: Each event class's cattrs structure hook, looked up on its first decode: ``converter.structure``
#: dispatches on the class for every call. (No hook is registered on :data:`converter` after
#: import; one that were would have to be registered before the first decode.)
_HOOKS: dict[type, Callable[[Any, type], Any]] = {}


def decode_data(type_name: str, version: int, data: dict[str, Any]) -> Event:
    """Build the current event object from stored, already parsed ``data``.

    Raises:
        EventDecodeError: unknown type, a version newer than this code knows, a missing
            upcaster step, or data that does not fit the class.
    """
    cls = event_class(type_name)
    if cls is None:
        raise EventDecodeError(type_name, version, "unknown_type")
    if version > cls.VERSION:
        raise EventDecodeError(type_name, version, "future_version", f"(this code reads <= v{cls.VERSION})")
    while version < cls.VERSION:
        step = _UPCASTERS.get((type_name, version))
        if step is None:
            raise EventDecodeError(type_name, version, "missing_upcaster")
        data = step(data)
        version += 1
    hook = _HOOKS.get(cls)
    if hook is None:
        hook = _HOOKS[cls] = converter.get_structure_hook(cls)
    try:
        return hook(data, cls)
    except Exception as exc:  # cattrs raises a family of exception groups
        raise EventDecodeError(type_name, version, "bad_data", str(exc)) from exc


#: ``msgspec``'s JSON parser, untyped: it gives the dicts, lists, strs, ints (of any size) and
#: floats ``json.loads`` gives, in about 40% of its time on the log's rows. (``orjson`` is as
#: fast but reads an integer beyond 64 bits as a float, which would change what an event holds.)
_PARSER = msgspec.json.Decoder()


def parse_json(data: str | bytes) -> Any:
    """The value of JSON text, exactly as ``json.loads`` gives it, parsed by ``msgspec``.

    What ``msgspec`` refuses and the standard library reads (``NaN``, ``Infinity``, numbers
    beyond a float's range, lone surrogates) is read by the standard library, so every text
    parses to what it always did, and text that is not JSON fails with the standard
    library's error and message.

    Raises:
        json.JSONDecodeError: the text is not JSON.
    """
    try:
        return _PARSER.decode(data)
    except msgspec.DecodeError:
        return json.loads(data)


#: Each event class's typed ``msgspec`` decoder (``None``: a class ``msgspec`` cannot decode
#: into, such as one with a union of classes), made on its first decode.
_TYPED: dict[type, Optional[msgspec.json.Decoder]] = {}


def _typed(cls: type) -> Optional[msgspec.json.Decoder]:
    try:
        dec = _TYPED[cls]
    except KeyError:
        try:
            dec = msgspec.json.Decoder(cls)
        except (TypeError, ValueError):  # a type msgspec does not support
            dec = None
        _TYPED[cls] = dec
    return dec


def decode(type_name: str, version: int, data: str, payload: Optional[bytes] = None) -> Event:
    """Decode an event from its stored ``(type, version, JSON text, payload)``; see
    :func:`decode_data` and :func:`encode_row` (a row without payload, as every row written
    before the payload column, holds its audio in the JSON).

    Text of the current version is decoded straight into the class by ``msgspec`` (parse and
    build in one pass, several times faster than parsing then structuring with cattrs). That
    decoder is strict: it accepts only values of exactly the fields' types, which cattrs turns
    into themselves, so whatever it accepts decodes to the object the cattrs path gives; what
    it refuses (a ``"5"`` for an int, a bool for an int, an integer beyond 64 bits, ``NaN``,
    duplicate keys, older versions with their upcasters) goes the cattrs path, with its results
    and its errors. ``tests/unit/test_read_decode.py`` checks both paths agree on every event
    of the recorded corpus and of random sessions.
    """
    ev = _decode_json(type_name, version, data)
    if payload is not None:
        if type(ev) not in PAYLOAD_AUDIO or ev.audio:  # type: ignore[attr-defined]
            raise EventDecodeError(type_name, version, "bad_data", "(a payload, but this event keeps no audio in one)")
        # The object was built just now and is not shared: its audio is filled in place.
        object.__setattr__(ev, "audio", pybase64.b64encode_as_string(payload))
    return ev


def _decode_json(type_name: str, version: int, data: str) -> Event:
    cls = event_class(type_name)
    if cls is not None and version == cls.VERSION:
        typed = _typed(cls)
        if typed is not None:
            try:
                return typed.decode(data)
            except msgspec.DecodeError:  # ValidationError included: the cattrs path decides
                pass
    try:
        parsed = parse_json(data)
    except json.JSONDecodeError as exc:
        raise EventDecodeError(type_name, version, "bad_data", str(exc)) from exc
    return decode_data(type_name, version, parsed)


def has_content(ev: Event) -> bool:
    """Whether ``ev`` holds content: something at one of its class's sealed paths
    (:data:`~duplex_es.events.sealing.SEALED_PATHS`)."""
    cls = type(ev)
    return cls in SEALED_PATHS and bool(split(cls, converter.unstructure(ev))[1])


def encode_sealed_row(ev: Event) -> tuple[str, int, str, Optional[bytes], Optional[bytes]]:
    """Encode an event for a session whose content is sealed (docs/privacy.md).

    Returns:
        ``(type, version, clear JSON, payload, plaintext)``. For an event with content
        (:data:`~duplex_es.events.sealing.SEALED_PATHS`), ``clear JSON`` holds everything else
        with empty values at the content's places, ``payload`` is ``None`` and ``plaintext`` is
        what the store seals: the content's canonical JSON (``path → value``), a NUL, and the
        audio's bytes when the audio is canonical base64 of a class in :data:`PAYLOAD_AUDIO`
        (then left out of the JSON, so sealed audio is not inflated by base64). For an event
        without content, ``plaintext`` is ``None`` and the rest is :func:`encode_row`'s.
    """
    cls = type(ev)
    if cls not in SEALED_PATHS:
        return (*encode_row(ev), None)
    clear, secret = split(cls, converter.unstructure(ev))
    if not secret:
        return (*encode_row(ev), None)
    tail = b""
    if cls in PAYLOAD_AUDIO and "audio" in secret:
        text = secret["audio"]
        try:
            raw = pybase64.b64decode(text, validate=True)
        except ValueError:
            raw = None
        if raw is not None and pybase64.b64encode_as_string(raw) == text:
            del secret["audio"]
            tail = raw
    return ev.TYPE, ev.VERSION, _dumps(clear), None, _dumps(secret).encode("utf-8", "surrogatepass") + b"\0" + tail


def decode_sealed(type_name: str, version: int, data: str, plaintext: Optional[bytes], audio_bytes: int = 0) -> Event:
    """Decode a sealed row (:func:`encode_sealed_row`): ``data`` is the clear JSON,
    ``plaintext`` the opened content, or ``None`` when it cannot be opened (the session's key
    was erased, or the reader holds no master key).

    Without the plaintext the event reads as its clear text says: empty text, lists and
    objects where the content was, and — so the audio clock and every duration stay what they
    were (I12) — ``audio_bytes`` zero bytes (silence) where there was audio.

    Raises:
        EventDecodeError: the clear text or the content does not decode (``bad_data``).
    """
    if plaintext is None:
        ev = _decode_json(type_name, version, data)
        if audio_bytes and type(ev) in PAYLOAD_AUDIO:
            object.__setattr__(ev, "audio", pybase64.b64encode_as_string(bytes(audio_bytes)))
        return ev
    head, sep, tail = plaintext.partition(b"\0")
    try:
        secret = parse_json(head)
        clear = parse_json(data)
        if not sep or not isinstance(secret, dict) or not isinstance(clear, dict):
            raise ValueError("not a sealed event's content")
        merge(clear, secret)
    except (ValueError, KeyError, TypeError) as exc:
        raise EventDecodeError(type_name, version, "bad_data", f"(sealed content: {type(exc).__name__})") from exc
    cls = event_class(type_name)
    if tail and cls in PAYLOAD_AUDIO and "audio" not in secret:
        clear["audio"] = pybase64.b64encode_as_string(tail)
    if cls is not None and version == cls.VERSION and _typed(cls) is not None:
        # The parsed values are JSON's own types, which msgspec's conversion takes under the
        # same strict rules as its typed JSON decoding (:func:`decode`); anything it refuses
        # goes the cattrs path, as there.
        try:
            return msgspec.convert(clear, cls)
        except msgspec.ValidationError:
            pass
    return decode_data(type_name, version, clear)
