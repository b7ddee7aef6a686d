"""Where logged audio lives: the events that carry audio bytes, and how to read them."""

from __future__ import annotations

import base64
from typing import Iterable

import pybase64

from duplex_es.events.base import Event
from duplex_es.events.catalogue import AudioAppended, AudioSegment, ItemCreated, ResponseCreated, TickOutput
from duplex_es.events.duplex import UnitOutput

__all__ = ["audio_bytes", "audio_of", "join_audio", "segments_audio"]


def audio_bytes(event: Event) -> bytes:
    """The audio an event carries (in its session's declared format), ``b""`` if none.

    ``input_audio_buffer.appended``, ``tick.output`` and ``duplex.unit.output`` (a full-duplex
    model's speech, which its assistant items' segments point at) carry one base64 payload;
    ``conversation.item.created`` the ``input_audio`` parts of its content;
    ``response.created`` those of its inline ``input`` items, one after the other.
    Canonical base64 (what the inbound check admits and engines write) is decoded by
    ``pybase64`` (SIMD, about a quarter of the time: the inspector decodes every append of a
    session it draws); any other text as it always was, by the standard library's lenient
    ``base64.b64decode``, whose results ``pybase64`` does not share off the canonical form.
    """
    if isinstance(event, (AudioAppended, TickOutput, UnitOutput)):
        return audio_of(event.audio) if event.audio else b""
    if isinstance(event, ItemCreated):
        return b"".join(audio_of(p.audio) for p in event.content if p.audio)
    if isinstance(event, ResponseCreated) and event.input:
        return b"".join(audio_of(p.audio) for entry in event.input for p in entry.content if p.audio)
    return b""


def audio_of(text: str) -> bytes:
    """The bytes of a base64 audio field, as :func:`audio_bytes` reads them."""
    try:
        return pybase64.b64decode(text, validate=True)
    except ValueError:  # binascii.Error too: not canonical, so the standard library's reading
        return base64.b64decode(text)


def join_audio(events: Iterable[Event]) -> bytes:
    """The audio of several events, one after the other."""
    return b"".join(audio_bytes(e) for e in events)


def segments_audio(events_by_seq: dict[int, Event], segments: Iterable[AudioSegment], bytes_per_sample: int) -> bytes:
    """The audio of ``segments``, cut from the events that logged it.

    Raises:
        KeyError: a segment names a seq missing from ``events_by_seq``.
    """
    out = []
    for s in segments:
        data = audio_bytes(events_by_seq[s.seq])
        out.append(data[s.offset * bytes_per_sample : (s.offset + s.samples) * bytes_per_sample])
    return b"".join(out)
