"""Commands: what a client (or the session host) asks of a session.

One frozen class per command. Every id a command creates (item, response, request) arrives in
the command, chosen by the caller, and so does every time (docs/architecture.md, I2, I11), so
:func:`~duplex_es.domain.decide.decide` stays pure. Client commands carry the client's optional
``event_id`` (echoed in errors) and an optional ``expected_epoch``: a command fenced to an epoch
the session has left is refused with ``stale_fence``.
"""

from __future__ import annotations

from typing import Any, Optional, Union

import attrs

from duplex_es.events import AudioFormat, ContentPart, ResponseInput

__all__ = [
    "UNSET",
    "ROOT",
    "ClientCommand",
    "OpenSession",
    "SessionPatch",
    "UpdateSession",
    "AppendAudio",
    "VadIds",
    "AppendText",
    "Commit",
    "ClearInput",
    "CancelInput",
    "ResponseOptions",
    "CreateResponse",
    "CancelResponse",
    "BargeIn",
    "ClearOutputAudio",
    "CreateItem",
    "RetrieveItem",
    "DeleteItem",
    "AckPlayback",
    "TruncateItem",
    "TurnSignal",
    "Heartbeat",
    "CloseSession",
    "Detach",
    "Resume",
    "Expire",
    "Pump",
    "Duplicate",
    "Invalid",
    "Command",
]


class _Sentinel:
    def __init__(self, name: str) -> None:
        self._name = name

    def __repr__(self) -> str:
        return self._name

    def __bool__(self) -> bool:
        return False


#: A patch field the client did not send (distinct from an explicit ``null``).
UNSET = _Sentinel("UNSET")

#: ``previous_item_id`` of an item inserted at the start of the conversation.
ROOT = "root"


@attrs.frozen(kw_only=True)
class ClientCommand:
    """Fields every client command has.

    ``event_id`` is the client's correlation id (echoed in errors). ``digest`` fingerprints the
    command's content (the protocol layer hashes the client's frame): a command repeating an
    applied one's ``event_id`` *and* digest is a retry and is not applied again; ``None`` lets
    the session host fingerprint the command itself (docs/protocol.md, Event ids).
    """

    event_id: Optional[str] = None
    expected_epoch: Optional[int] = None
    digest: Optional[str] = attrs.field(default=None, eq=False, repr=False)


# ------------------------------------------------------------------------------------ session


@attrs.frozen(kw_only=True)
class OpenSession:
    """Create the session (the host sends it when a connection opens a new session);
    ``model`` is the name the client asked for, ``engine`` the engine serving it (``""``: the
    model's own name); ``resume_token_hash`` is the digest of the resume token issued with it;
    ``principal`` the name of the principal opening it (``None``: anonymous); ``full_duplex``:
    its engine is full-duplex, so the session starts in ``full_duplex`` mode (docs/duplex.md).
    Turn detection starts as OpenAI's default (``server_vad``)."""

    session_id: str
    model: str
    engine: str = ""
    resume_token_hash: Optional[str] = None
    principal: Optional[str] = None
    full_duplex: bool = False


@attrs.frozen(kw_only=True)
class SessionPatch:
    """The fields of a ``session.update``; :data:`UNSET` fields keep their value.

    ``turn_detection`` is :data:`UNSET`, ``None`` (off) or a dict of the fields the client sent,
    merged field-wise into the current settings (OpenAI's defaults fill the rest).
    ``engine`` is the engine the server's model map gives ``model`` (:data:`UNSET` when nobody
    resolved it: then only the session's own model name is accepted). The GA settings from
    ``session_type`` on are JSON values as the client sent them, already shape-checked by the
    protocol layer.
    """

    model: object = UNSET
    engine: object = UNSET
    instructions: object = UNSET
    voice: object = UNSET
    output_modalities: object = UNSET
    input_format: object = UNSET  # AudioFormat
    output_format: object = UNSET  # AudioFormat
    turn_detection: object = UNSET  # None | dict
    transcript_on_truncate: object = UNSET
    acknowledge_appends: object = UNSET  # bool
    session_type: object = UNSET  # "realtime" | "transcription"
    transcription: object = UNSET  # None | dict
    noise_reduction: object = UNSET  # None | dict
    speed: object = UNSET  # float
    max_output_tokens: object = UNSET  # int | "inf"
    tools: object = UNSET  # tuple of dicts
    tool_choice: object = UNSET  # str | dict
    tracing: object = UNSET
    truncation: object = UNSET
    include: object = UNSET  # tuple of str | None
    prompt: object = UNSET
    reasoning: object = UNSET
    parallel_tool_calls: object = UNSET  # bool
    temperature: object = UNSET  # float
    turn_mode: object = UNSET  # "turn_based" | "full_duplex"
    chunk_period_ms: object = UNSET  # int
    overlap: object = UNSET  # "barge_in" | "listen" | "drop"
    barge_in_ms: object = UNSET  # int
    extension_events: object = UNSET  # bool
    backchannels: object = UNSET  # bool


@attrs.frozen(kw_only=True)
class UpdateSession(ClientCommand):
    """``session.update``: validated whole, applied atomically."""

    patch: SessionPatch


@attrs.frozen(kw_only=True)
class TurnSignal(ClientCommand):
    """``turn.signal`` with an informational ``signal`` (``user_started``, ...)."""

    signal: str


@attrs.frozen(kw_only=True)
class Heartbeat(ClientCommand):
    """``session.heartbeat``: the client is alive."""


@attrs.frozen(kw_only=True)
class CloseSession(ClientCommand):
    """``session.close`` (duplex extension)."""

    reason: str = "client_close"


@attrs.frozen(kw_only=True)
class Detach:
    """The connection ended without ``session.close`` at ``at_ms`` (Unix ms, the host's clock);
    ``reason`` ``server_restart`` when a restarted server found the session attached to a
    connection that died with the previous process."""

    at_ms: int
    reason: str = "connection_closed"


@attrs.frozen(kw_only=True)
class Resume(ClientCommand):
    """Take the session over at ``at_ms`` (Unix ms): succeeds only if the lease is still at
    ``expected_generation`` and, when ``token_hash`` is given, it is the digest of the current
    resume token (a wire client must present one; an in-process caller of the Python API need
    not). ``new_token_hash`` is the digest of the rotated token (``None``: keep the token);
    ``last_server_event_seq`` the last wire event the client saw, recorded for audit;
    ``token_in_url``: the token came in the connection URL, so once rotated away its leeway
    lasts only ``url_leeway_ms`` (ms) from this resume."""

    expected_generation: int
    at_ms: int
    token_hash: Optional[str] = None
    new_token_hash: Optional[str] = None
    last_server_event_seq: Optional[int] = None
    token_in_url: bool = False
    url_leeway_ms: int = 0


@attrs.frozen(kw_only=True)
class Expire:
    """The reaper's verdict that the lease ran out (``idle_ttl_expired`` or
    ``disconnect_grace_expired``), decided at ``now_ms`` from ``since_ms``."""

    reason: str
    now_ms: int
    since_ms: int


# -------------------------------------------------------------------------------------- input


@attrs.frozen(kw_only=True)
class VadIds:
    """Ids server VAD may need for what an append triggers: the user item its speech becomes,
    and the response (with its first item and tick) a stop with ``create_response`` starts."""

    item_id: str
    response_id: str
    response_item_id: str
    request_id: str


@attrs.frozen(kw_only=True)
class AppendAudio(ClientCommand):
    """``input_audio_buffer.append``: ``audio`` is the base64 text as received, already checked
    to be strict base64 of ``nbytes`` bytes. ``is_speech`` is vLLM-Omni's client-declared speech
    verdict for the append; it is recorded, and server VAD still decides from the audio."""

    audio: str
    nbytes: int
    vad_ids: Optional[VadIds] = None
    is_speech: Optional[bool] = None


@attrs.frozen(kw_only=True)
class AppendText(ClientCommand):
    """``input.text.append`` (duplex extension): text added to the pending user input."""

    text: str


@attrs.frozen(kw_only=True)
class Commit(ClientCommand):
    """``input_audio_buffer.commit``: the buffer becomes user item ``item_id``. With
    ``create_response`` (vLLM-Omni's ``input.commit``, which defaults to it) a response with
    ``response_ids`` (response, first item, first tick) follows in the same batch; ``final``
    is vLLM-Omni's end-of-input flag, recorded only (every commit here is final)."""

    item_id: str
    create_response: bool = False
    response_ids: Optional[tuple[str, str, str]] = None
    final: Optional[bool] = None


@attrs.frozen(kw_only=True)
class ClearInput(ClientCommand):
    """``input_audio_buffer.clear``."""


@attrs.frozen(kw_only=True)
class CancelInput(ClientCommand):
    """``input.cancel`` (duplex extension): drop the pending user input, speech in progress included."""


# ---------------------------------------------------------------------------------- responses


@attrs.frozen(kw_only=True)
class ResponseOptions:
    """Per-response overrides from ``response.create``'s ``response`` object (``None``: the
    session's setting). ``metadata`` is echoed on ``response.created`` and ``response.done``;
    ``input`` replaces the conversation as the response's context; the JSON settings are as the
    client sent them (shape-checked by the protocol layer)."""

    output_modalities: Optional[tuple[str, ...]] = None
    instructions: Optional[str] = None
    voice: Optional[str] = None
    output_format: Optional[AudioFormat] = None
    conversation: str = "auto"
    metadata: Optional[Any] = None
    input: Optional[tuple[ResponseInput, ...]] = None
    max_output_tokens: Optional[Any] = None
    tools: Optional[tuple[Any, ...]] = None
    tool_choice: Optional[Any] = None
    parallel_tool_calls: Optional[bool] = None
    temperature: Optional[float] = None
    speed: Optional[float] = None
    not_applied: tuple[str, ...] = ()


@attrs.frozen(kw_only=True)
class CreateResponse(ClientCommand):
    """``response.create``: ids for the response, its first assistant item and its first tick."""

    response_id: str
    item_id: str
    request_id: str
    options: ResponseOptions = ResponseOptions()


@attrs.frozen(kw_only=True)
class CancelResponse(ClientCommand):
    """``response.cancel``, optionally naming the response; ``cause`` is recorded on the epoch
    change (a dropped connection cancels nothing: the response goes on for the resume)."""

    response_id: Optional[str] = None
    cause: str = "client_cancelled"


@attrs.frozen(kw_only=True)
class BargeIn(ClientCommand):
    """``barge_in`` (duplex extension): the user talks over the assistant; the active response
    ends ``cancelled`` with reason ``turn_detected``."""


@attrs.frozen(kw_only=True)
class ClearOutputAudio(ClientCommand):
    """``output_audio_buffer.clear``: the client dropped the audio it had not played; the active
    response (if any) is cancelled."""

    response_id: Optional[str] = None


# -------------------------------------------------------------------------------------- items


@attrs.frozen(kw_only=True)
class CreateItem(ClientCommand):
    """``conversation.item.create``: an item placed after ``previous_item_id`` (``None``: at
    the end; :data:`ROOT`: at the start). ``type`` is the GA item type: a ``message`` has
    ``role`` and ``content``; a ``function_call_output`` answers the call ``call_id`` with
    ``output``; a ``function_call`` (restoring history) has ``call_id``, ``name`` and
    ``arguments``. Function items carry role ``tool`` (output) or ``assistant`` (call)."""

    item_id: str
    role: str
    content: tuple[ContentPart, ...] = ()
    previous_item_id: Optional[str] = None
    audio_nbytes: int = 0
    type: str = "message"
    call_id: Optional[str] = None
    name: Optional[str] = None
    arguments: Optional[str] = None
    output: Optional[str] = None


@attrs.frozen(kw_only=True)
class RetrieveItem(ClientCommand):
    """``conversation.item.retrieve``."""

    item_id: str


@attrs.frozen(kw_only=True)
class DeleteItem(ClientCommand):
    """``conversation.item.delete``."""

    item_id: str


@attrs.frozen(kw_only=True)
class TruncateItem(ClientCommand):
    """``conversation.item.truncate``."""

    item_id: str
    content_index: int = 0
    audio_end_ms: int


@attrs.frozen(kw_only=True)
class AckPlayback(ClientCommand):
    """``playback.ack`` (duplex extension): ms of a response's audio played / committed; with
    ``truncate`` the commit is a hard truncation."""

    response_id: Optional[str] = None
    item_id: Optional[str] = None
    played_ms: int
    committed_ms: Optional[int] = None
    truncate: bool = False


# ------------------------------------------------------------------------------------ internal


@attrs.frozen(kw_only=True)
class Pump:
    """Sent by the session host after it folds engine outputs: issue each live response's next
    tick (taking ``request_ids`` in order) or end it; for a world session, issue the next tick once
    it is due at ``now_ms`` (the host's clock, recorded in the tick). Decides nothing when there
    is nothing to do."""

    request_ids: tuple[str, ...]
    now_ms: Optional[int] = None


@attrs.frozen(kw_only=True)
class Duplicate:
    """Sent by the session host when the log found that a client command repeats an applied
    one (same ``event_id``, same content): it is recorded, not applied again. ``first_seq`` ..
    ``last_seq`` are the events the first one wrote."""

    event_id: str
    command_type: Optional[str]
    first_seq: int
    last_seq: int


@attrs.frozen(kw_only=True)
class Invalid(ClientCommand):
    """A client frame the protocol layer refused before it became a command; it is logged as
    rejected like any other refusal."""

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
    Commit,
    ClearInput,
    CancelInput,
    CreateResponse,
    CancelResponse,
    BargeIn,
    ClearOutputAudio,
    CreateItem,
    RetrieveItem,
    DeleteItem,
    AckPlayback,
    TruncateItem,
    TurnSignal,
    Heartbeat,
    CloseSession,
    Detach,
    Resume,
    Expire,
    Pump,
    Duplicate,
    Invalid,
]
