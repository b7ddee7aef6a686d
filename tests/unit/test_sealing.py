"""What of an event is sealed (docs/privacy.md): every text of every event class reaches the
clear JSON only through a field declared structure, and sealed rows decode back to the event
(with the plaintext) or to a valid event of the same class (without it)."""

from __future__ import annotations

import base64
import json
import typing

import attrs
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from duplex_es.events import registry
from duplex_es.events.codec import PAYLOAD_AUDIO, decode_sealed, encode_sealed_row
from duplex_es.events.sealing import CLEAR_TEXT_FIELDS, SEALED_PATHS, merge, split

from test_codec import _strategy

# The project's own event classes (the suite registers test-only classes too).
TYPES = sorted((n, c) for n, c in registry().items() if c.__module__.startswith("duplex_es."))
MARK = "zyzzyva"


def _marked(tp: typing.Any) -> typing.Any:
    """A value of type ``tp`` holding :data:`MARK` in every string it can hold: every text
    field, one element in every tuple, the non-``None`` branch of every option, the text for
    ``Any`` (a client's JSON value: named by its field, whatever shape it has)."""
    if tp is typing.Any:
        return MARK
    if tp is str:
        return MARK
    if tp in (int, float, bool, type(None)):
        return {int: 1, float: 1.5, bool: True, type(None): None}[tp]
    if attrs.has(tp):
        hints = typing.get_type_hints(tp)
        return tp(**{f.name: _marked(hints[f.name]) for f in attrs.fields(tp) if f.init})
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin is typing.Union:
        return _marked(next(a for a in args if a is not type(None)))
    if origin is tuple:
        return (_marked(args[0]),) if len(args) == 2 and args[1] is Ellipsis else tuple(_marked(a) for a in args)
    if origin is dict:
        return {"k": _marked(args[1])}
    raise TypeError(tp)


def _names_holding(value: typing.Any, mark: str, name: str = "") -> set[str]:
    """The field names under which ``mark`` appears in a parsed JSON value (the innermost
    object key above each occurrence: a list's items count as its field's)."""
    if isinstance(value, str):
        return {name} if mark in value else set()
    if isinstance(value, list):
        return set().union(*(_names_holding(v, mark, name) for v in value)) if value else set()
    if isinstance(value, dict):
        return set().union(*(_names_holding(v, mark, k) for k, v in value.items())) if value else set()
    return set()


@pytest.mark.parametrize("name,cls", TYPES, ids=[n for n, _ in TYPES])
def test_text_reaches_the_clear_json_only_through_fields_declared_structure(name, cls):
    """A field added to the catalogue is sealed unless someone declares it structure: any
    other text of any event class, nested ones included, stays out of the clear JSON."""
    event = _marked(cls)
    _, _, clear, _, plaintext = encode_sealed_row(event)
    leaked = _names_holding(json.loads(clear), MARK) - CLEAR_TEXT_FIELDS
    assert leaked == set(), f"{name}: {sorted(leaked)} hold text in the clear: add them to SEALED_PATHS, or to CLEAR_TEXT_FIELDS if they are structure"
    if cls in SEALED_PATHS:
        assert plaintext is not None and MARK.encode() in plaintext


def test_every_sealed_path_names_a_field_of_its_class():
    """A path that names no field would seal nothing (a typo is a leak)."""
    for cls, paths in SEALED_PATHS.items():
        for path in paths:
            tp: typing.Any = cls
            for part in path.split("."):
                hints = typing.get_type_hints(tp)
                assert part in hints, f"{cls.__name__}: {path!r} has no field {part!r}"
                tp = hints[part]
                if typing.get_origin(tp) is typing.Union:
                    tp = next(a for a in typing.get_args(tp) if a is not type(None))


@pytest.mark.parametrize("name,cls", TYPES, ids=[n for n, _ in TYPES])
@settings(max_examples=40, deadline=None)
@given(data=st.data())
def test_a_sealed_row_decodes_to_the_event_with_its_plaintext_and_to_the_same_class_without(name, cls, data):
    event = data.draw(_strategy(cls))
    type_, version, clear, payload, plaintext = encode_sealed_row(event)
    if plaintext is None:  # nothing to seal: the ordinary row
        return
    assert payload is None
    assert decode_sealed(type_, version, clear, plaintext) == event
    audio = plaintext.partition(b"\0")[2]
    withheld = decode_sealed(type_, version, clear, None, len(audio))
    assert type(withheld) is cls
    if cls in PAYLOAD_AUDIO and audio:
        assert base64.b64decode(withheld.audio) == bytes(len(audio))  # silence of the same length


@settings(max_examples=200, deadline=None)
@given(st.dictionaries(st.sampled_from(["a", "b", "c"]), st.one_of(st.text(max_size=3), st.lists(st.integers(), max_size=2), st.none())))
def test_split_then_merge_gives_back_the_fields(plain):
    class Probe:  # split only reads SEALED_PATHS by class
        pass

    SEALED_PATHS[Probe] = ("a", "b")  # type: ignore[index]
    try:
        clear, secret = split(Probe, plain)
        assert merge(dict(clear), secret) == plain
        assert set(secret) <= {"a", "b"} and all(clear[k] in ("", [], {}, None) for k in secret)
    finally:
        del SEALED_PATHS[Probe]  # type: ignore[attr-defined]
