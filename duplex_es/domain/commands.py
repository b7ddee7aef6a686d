"""Commands: what a client (or the session host) asks of a session.

One frozen class per command. Every id a command creates (item, response, request) arrives in
the command, chosen by the caller, so :func:`~duplex_es.domain.decide.decide` stays pure
(DESIGN I2). ``event_id`` is the client's optional correlation id, echoed in errors.
"""

from __future__ import annotations

from typing import Optional, Union

import attrs

from duplex_es.events import AudioFormat

__all__ = [
    "UNSET",
    "OpenSession",
    "SessionPatch",
    "UpdateSession",
    "AppendAudio",
    "AppendText",
    "CommitInput",
    "ClearInput",
    "ResponseOptions",
    "CreateResponse",
    "CancelResponse",
    "AckPlayback",
    "TruncateItem",
    "CloseSession",
    "Pump",
    "Invalid",
    "Command",
]


class _Unset:
    """Marks a patch field the client did not send (distinct from an explicit ``null``)."""

    _instance: Optional["_Unset"] = None

    def __new__(cls) -> "_Unset":
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "UNSET"

    def __bool__(self) -> bool:
        return False


UNSET = _Unset()


@attrs.frozen(kw_only=True)
class OpenSession:
    """Create the session (the host sends it when a connection opens a new session)."""

    session_id: str
    model: str


@attrs.frozen(kw_only=True)
class SessionPatch:
    """The fields of a GA ``session.update``; :data:`UNSET` fields keep their value."""

    model: object = UNSET
    instructions: object = UNSET
    voice: object = UNSET
    output_modalities: object = UNSET
    input_format: object = UNSET  # AudioFormat
    output_format: object = UNSET  # AudioFormat
    turn_detection: object = UNSET  # TurnDetection | None


@attrs.frozen(kw_only=True)
class UpdateSession:
    """``session.update``."""

    event_id: Optional[str] = None
    patch: SessionPatch


@attrs.frozen(kw_only=True)
class AppendAudio:
    """``input_audio_buffer.append``: ``audio`` is the base64 text as received, already checked
    to be strict base64 of ``nbytes`` bytes."""

    event_id: Optional[str] = None
    audio: str
    nbytes: int


@attrs.frozen(kw_only=True)
class AppendText:
    """``input.text.append`` (duplex extension): text added to the pending user input."""

    event_id: Optional[str] = None
    text: str


@attrs.frozen(kw_only=True)
class CommitInput:
    """``input_audio_buffer.commit``: the buffer becomes user item ``item_id``."""

    event_id: Optional[str] = None
    item_id: str


@attrs.frozen(kw_only=True)
class ClearInput:
    """``input_audio_buffer.clear``."""

    event_id: Optional[str] = None


@attrs.frozen(kw_only=True)
class ResponseOptions:
    """Per-response overrides from ``response.create``'s ``response`` object."""

    output_modalities: Optional[tuple[str, ...]] = None
    instructions: Optional[str] = None
    voice: Optional[str] = None
    output_format: Optional[AudioFormat] = None
    conversation: str = "auto"


@attrs.frozen(kw_only=True)
class CreateResponse:
    """``response.create``: ids for the response, its assistant item and its first tick."""

    event_id: Optional[str] = None
    response_id: str
    item_id: str
    request_id: str
    options: ResponseOptions = ResponseOptions()


@attrs.frozen(kw_only=True)
class CancelResponse:
    """``response.cancel``, optionally naming the response. The server also cancels with
    ``cause="client_disconnected"`` when the connection drops mid-response."""

    event_id: Optional[str] = None
    response_id: Optional[str] = None
    cause: str = "client_cancelled"


@attrs.frozen(kw_only=True)
class AckPlayback:
    """``playback.ack`` (duplex extension): ms of a response's audio played / committed."""

    event_id: Optional[str] = None
    response_id: Optional[str] = None
    item_id: Optional[str] = None
    played_ms: int
    committed_ms: Optional[int] = None


@attrs.frozen(kw_only=True)
class TruncateItem:
    """``conversation.item.truncate``."""

    event_id: Optional[str] = None
    item_id: str
    content_index: int = 0
    audio_end_ms: int


@attrs.frozen(kw_only=True)
class CloseSession:
    """``session.close`` (duplex extension)."""

    event_id: Optional[str] = None
    reason: str = "client_close"


@attrs.frozen(kw_only=True)
class Pump:
    """Sent by the session host after it folds engine outputs: issue the active response's next
    tick (with ``request_id``) or end it. Decides nothing when there is nothing to do."""

    request_id: str


@attrs.frozen(kw_only=True)
class Invalid:
    """A client frame the protocol layer refused before it became a command; it is logged as
    rejected like any other refusal."""

    event_id: Optional[str] = None
    command_type: Optional[str] = None
    code: str
    message: str
    param: Optional[str] = None
    excerpt: Optional[str] = None


Command = Union[
    OpenSession,
    UpdateSession,
    AppendAudio,
    AppendText,
    CommitInput,
    ClearInput,
    CreateResponse,
    CancelResponse,
    AckPlayback,
    TruncateItem,
    CloseSession,
    Pump,
    Invalid,
]
