"""Session state: what :func:`~duplex_es.domain.evolve.evolve` rebuilds from the log.

Every class is frozen; maps are plain dicts that are never mutated, only replaced. One
:class:`Item` aggregate holds everything about a conversation item (docs/protocol.md, "one item
aggregate"); one :class:`Response` holds a response's lifecycle and its playback ledger.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any, Optional

import attrs

from duplex_es.events import AudioFormat, AudioSegment, Mark, ResponseDeferred, SessionConfig, SpeechInputs, TickIdentity, TokenUsage, VadState

__all__ = [
    "InputBuffer",
    "Item",
    "Call",
    "DuplexState",
    "JudgeState",
    "Response",
    "Tick",
    "Lease",
    "SessionState",
    "SessionStatus",
    "ResponseStatus",
    "TickStatus",
    "SESSION_TRANSITIONS",
    "ACTIVE",
    "TERMINAL_STATUSES",
]


class SessionStatus(StrEnum):
    """A speech session's status; the allowed moves are :data:`SESSION_TRANSITIONS`. A
    ``StrEnum``: it compares equal to, and is stored as, its value."""

    NEW = "new"
    OPEN = "open"
    CLOSED = "closed"
    EXPIRED = "expired"


#: The status moves an event may make (checked by ``evolve``): a session opens once and ends
#: once, closed by a client or expired by its lease.
SESSION_TRANSITIONS: dict[str, frozenset[str]] = {
    SessionStatus.NEW: frozenset({SessionStatus.OPEN}),
    SessionStatus.OPEN: frozenset({SessionStatus.CLOSED, SessionStatus.EXPIRED}),
}


class ResponseStatus(StrEnum):
    """A response's status (Realtime's ``response.status``): ``in_progress`` until its one
    ``response.done`` sets a terminal status, which never changes again (``put_response``
    checks it)."""

    IN_PROGRESS = "in_progress"
    COMPLETED = "completed"
    CANCELLED = "cancelled"
    FAILED = "failed"
    INCOMPLETE = "incomplete"


class TickStatus(StrEnum):
    """A speech tick's status: ``issued`` until its answer commits (it then leaves the state) or
    fails."""

    ISSUED = "issued"
    FAILED = "failed"


# The wide classes the reducer copies on most events (``SessionState``, ``DuplexState``, and
# ``Response`` / ``Item`` on ticks, acks and deltas) keep their fields in an instance dict, not
# in slots (``slots=False``): ``replace`` copies a dict in one C call, where slots take a
# Python-level store per field (25 to 39 of them). Reading a field costs about the same.

ACTIVE = ResponseStatus.IN_PROGRESS
TERMINAL_STATUSES = frozenset({ResponseStatus.COMPLETED, ResponseStatus.CANCELLED, ResponseStatus.FAILED, ResponseStatus.INCOMPLETE})


@attrs.frozen(kw_only=True)
class InputBuffer:
    """The uncommitted input: appended audio (as segments of logged appends) and text, in log
    order.

    ``samples`` is the buffered audio's length in samples of the session's input format;
    ``start_sample`` is where the buffer begins on the input clock; ``append_seqs`` the appends
    it draws from.
    """

    segments: tuple[AudioSegment, ...] = ()
    append_seqs: tuple[int, ...] = ()
    samples: int = 0
    start_sample: int = 0
    text_seqs: tuple[int, ...] = ()
    text: str = ""

    @property
    def empty(self) -> bool:
        """True if nothing is buffered."""
        return not self.append_seqs and not self.text_seqs


@attrs.frozen(kw_only=True, slots=False)  # copied per event: see the note above ``ACTIVE``
class Item:
    """One conversation item.

    ``audio`` are the segments of logged audio the item holds (appends, a created item, or engine
    outputs). User items come from a commit or ``conversation.item.create``: ``input_samples``
    is their audio length, ``input_text`` the text sent with it, ``transcript`` what the engine
    heard. Assistant items belong to ``response_id`` and start ``offset_ms`` into the response's
    audio: ``full_text`` is everything generated, ``transcript`` what the history keeps (the
    heard prefix), ``audio_samples`` the generated audio (the sum of the delta bytes over bytes
    per sample), ``marks`` the text/audio alignment, ``truncated_ms`` the hard cap set by a
    truncate.
    ``in_conversation`` is false for the items of out-of-band responses.

    ``type`` is the GA item type. A ``function_call`` item (role ``assistant``, content type
    ``function_call``) holds ``call_id``, ``name`` and ``arguments`` (JSON text, complete once
    ``complete``); a ``function_call_output`` item (role ``tool``) holds ``call_id`` and
    ``output``.
    """

    id: str
    role: str
    status: str = "completed"
    content_type: str = "input_audio"
    in_conversation: bool = True
    audio: tuple[AudioSegment, ...] = ()
    input_samples: int = 0
    input_text: str = ""
    transcript: str = ""
    response_id: Optional[str] = None
    output_index: int = 0
    offset_ms: int = 0
    full_text: str = ""
    audio_samples: int = 0
    audio_format: AudioFormat = AudioFormat()
    marks: tuple[Mark, ...] = ()
    complete: bool = False
    truncated_ms: Optional[int] = None
    transcript_removed: bool = False
    transcription: Optional[str] = None
    type: str = "message"
    call_id: Optional[str] = None
    name: Optional[str] = None
    arguments: str = ""
    output: Optional[str] = None

    @property
    def generated_ms(self) -> int:
        """Generated audio in ms."""
        return self.audio_samples * 1000 // self.audio_format.rate

    @property
    def audio_ms_ceil(self) -> int:
        """The item's audio length in ms rounded up (a truncate may name the partial last ms)."""
        samples = self.audio_samples if self.role == "assistant" else self.input_samples
        own = -(-samples * 1000 // self.audio_format.rate)
        return own if self.truncated_ms is None else min(own, self.truncated_ms)

    @property
    def audio_ms(self) -> int:
        """The item's audio length in ms: its audio, cut at the truncation cap if any."""
        own = self.generated_ms if self.role == "assistant" else self.input_samples * 1000 // self.audio_format.rate
        return own if self.truncated_ms is None else min(own, self.truncated_ms)


@attrs.frozen(kw_only=True)
class Call:
    """A function call of the session, by ``call_id`` (docs/protocol.md, "Function calling").

    ``item_id`` is its ``function_call`` item; ``response_id`` the response whose engine made
    it (``None``: a client created it). ``status`` is ``in_progress`` while its arguments
    stream, ``completed`` once they are done, ``cancelled`` when its response ended before they
    were done (its tool must not run).
    ``output_item_id`` is the ``function_call_output`` item that answered it (at most one).
    Calls are never forgotten, so a call_id is made and answered once per session.
    """

    item_id: str
    response_id: Optional[str] = None
    status: str = "in_progress"
    output_item_id: Optional[str] = None


@attrs.frozen(kw_only=True, slots=False)  # copied per event: see the note above ``ACTIVE``
class Response:
    """One response: lifecycle, tick progress and playback ledger.

    Ledger, in ms of the response's audio (its items' audio, one after the other):
    ``generated_ms`` accepted from the engine (each accepted chunk is sent to the client after it
    commits, so it is also the sent position), ``played_ms`` and ``committed_ms`` from the
    client's acks (monotonic), ``cap_ms`` set by a hard truncation (it lowers ``committed_ms`` and
    caps every later ack). ``slot_reserved`` becomes true with the first accepted ack: after
    that the history follows playback even once newer user input exists.
    ``playback_cleared``: the client dropped what it had not played (``output_audio_buffer.clear``).
    ``metadata`` is the client's (echoed on ``response.created`` / ``response.done``);
    ``usage`` the tokens its engine reported, summed over its ticks; ``started_at_sample`` the
    input clock when it was created (the idle timeout counts from its audio's end);
    ``input_audio_ms`` / ``input_text_chars`` the user input its first tick gave the engine.
    ``by_units``: a full-duplex model's turn, advanced by the session's units, not by ticks of
    its own; ``backchannel``: such a turn that was a short acknowledgement while the user kept
    talking (docs/duplex.md, "Backchannels").
    ``status_reason`` is its ``status_details.reason`` once it ended, and ``status_error_code``
    the real cause GA's reason cannot name (``session_expired``, ``session_closed``, or a failed
    response's error code).
    """

    id: str
    item_ids: tuple[str, ...]
    status: ResponseStatus = ACTIVE
    epoch: int = 0
    output_modalities: tuple[str, ...] = ("audio",)
    voice: str = "alloy"
    instructions: str = ""
    output_format: AudioFormat = AudioFormat()
    conversation: str = "auto"
    answers_commit_seq: int = 0
    inputs: SpeechInputs = SpeechInputs()
    next_chunk: int = 0
    tick_in_flight: Optional[str] = None
    final_seen: bool = False
    incomplete_reason: Optional[str] = None
    failure_code: Optional[str] = None
    failure_message: Optional[str] = None
    status_reason: Optional[str] = None
    status_error_code: Optional[str] = None
    generated_ms: int = 0
    played_ms: int = 0
    committed_ms: int = 0
    cap_ms: Optional[int] = None
    acked: bool = False
    slot_reserved: bool = False
    playback_cleared: bool = False
    metadata: Optional[Any] = None
    max_output_tokens: Any = "inf"
    usage: TokenUsage = TokenUsage()
    started_at_sample: int = 0
    input_audio_ms: int = 0
    input_text_chars: int = 0
    by_units: bool = False
    backchannel: bool = False

    @property
    def sent_ms(self) -> int:
        """Audio sent to the client: every accepted chunk is, after its commit (docs/architecture.md, I4)."""
        return self.generated_ms

    @property
    def active(self) -> bool:
        """True until the response's ``response.done``."""
        return self.status == ACTIVE

    @property
    def item_id(self) -> str:
        """The response's current (latest) output item."""
        return self.item_ids[-1]


@attrs.frozen(kw_only=True)
class Tick:
    """A tick the session issued and has not resolved (committed, cancelled or failed)."""

    request_id: str
    response_id: str
    epoch: int
    chunk_index: int
    applied_event_ids: tuple[int, ...] = ()
    status: TickStatus = TickStatus.ISSUED

    def identity(self, session_id: str) -> TickIdentity:
        """What this tick's output must echo."""
        return TickIdentity(
            session_id=session_id,
            request_id=self.request_id,
            epoch=self.epoch,
            chunk_index=self.chunk_index,
            applied_event_ids=self.applied_event_ids,
            response_id=self.response_id,
        )


@attrs.frozen(kw_only=True)
class Lease:
    """Who holds the session: ``generation`` grows with every resume (a compare-and-swap
    target); ``detached_at_ms`` is set while no client is attached (Unix ms).

    ``token_hash`` is the SHA-256 hex digest of the current resume token (the token is never
    stored); ``retired_token_hashes`` those of tokens a resume rotated away, so a stale token is
    told apart from a wrong one. ``detached_total_ms`` sums the finished detached intervals
    (a world session's realtime pacing does not count them). ``principal`` names the
    principal that owns the session (``None``: anonymous). ``retired_in_url_at_ms``: when the
    latest resume, whose token came in a URL, rotated it away (Unix ms; ``None``: it came in a
    message), which bounds that token's leeway.
    """

    generation: int = 0
    detached_at_ms: Optional[int] = None
    token_hash: Optional[str] = None
    retired_token_hashes: tuple[str, ...] = ()
    detached_total_ms: int = 0
    principal: Optional[str] = None
    retired_in_url_at_ms: Optional[int] = None


@attrs.frozen(kw_only=True)
class TurnRequest:
    """A client's request for a full-duplex model's turn (``response.create``): its
    ``metadata`` (echoed on the turn's ``response.created`` / ``response.done``) and the
    ``instructions`` for that turn (``None``: the session's)."""

    metadata: Optional[Any] = None
    instructions: Optional[str] = None


@attrs.frozen(kw_only=True, slots=False)  # copied per event: see the note above ``ACTIVE``
class DuplexState:
    """A full-duplex session's input pipeline (docs/duplex.md).

    ``pending`` are the appends no unit applied yet (their seqs and ``segments``, ``samples``
    long, from clock sample ``pending_start``); ``unit`` the unit in flight (its request id,
    applied seqs, segments and start); ``next_unit`` the next unit's index; ``engine_state``
    what the engine's last committed output left; ``response_id`` the model's open turn.
    The user's current utterance — what the model heard since the last user item, its own
    turns included (less dropped speech) — is ``turn_audio`` (segments), ``turn_transcript``
    (the engine's deltas) and becomes user item ``turn_item_id`` when the model takes the turn
    (a backchannel does not commit it). ``processed`` counts the appends answered
    by ``input_audio_buffer.processed`` so far. ``last_unit_ms`` is when the last unit was
    issued (host clock, Unix ms), ``silent_units`` the silence units since the last real input,
    ``continue_turn`` whether the engine's last answer asked to be stepped on without input.
    ``overlap_item`` is the last speech (server VAD's item id) the overlap policy decided on;
    while ``drop_item`` speaks, appends are ``muted``: applied by their units, not heard.
    ``turn_speech``: server VAD heard speech since the last user item; ``overlap_turn`` the
    model's turn the current speech began over (its overlap decision may come after the turn).
    ``items`` are the client-created conversation items waiting for the next unit (ids, in
    order, and ``item_seqs`` the seqs of their ``conversation.item.created``; ``unit_items`` /
    ``unit_item_seqs`` those of the unit in flight): a committed unit applies them, as a tick
    applies model-feeding events. ``turn_request`` is the client's request for the model's
    turn since the last unit (``None``: none; its ``metadata`` is echoed by the turn it opens),
    ``unit_turn_request`` the one the unit in flight carries, ``answering`` the one the model
    got and has not answered by a turn yet. ``acknowledged``: the overlap policy decided speech
    over the model's turn was a short acknowledgement since the last unit (the next unit tells
    the engine).
    """

    pending: tuple[int, ...] = ()
    segments: tuple[AudioSegment, ...] = ()
    samples: int = 0
    pending_start: int = 0
    unit: Optional[str] = None
    unit_epoch: int = 0
    unit_seqs: tuple[int, ...] = ()
    unit_segments: tuple[AudioSegment, ...] = ()
    unit_start: int = 0
    next_unit: int = 0
    engine_state: Optional[dict[str, Any]] = None
    response_id: Optional[str] = None
    turn_audio: tuple[AudioSegment, ...] = ()
    turn_transcript: str = ""
    turn_item_id: Optional[str] = None
    processed: int = 0
    last_unit_ms: Optional[int] = None
    silent_units: int = 0
    continue_turn: bool = False
    overlap_item: Optional[str] = None
    drop_item: Optional[str] = None
    muted: tuple[int, ...] = ()
    turn_speech: bool = False
    overlap_turn: Optional[str] = None
    items: tuple[str, ...] = ()
    item_seqs: tuple[int, ...] = ()
    unit_items: tuple[str, ...] = ()
    unit_item_seqs: tuple[int, ...] = ()
    turn_request: Optional["TurnRequest"] = None
    unit_turn_request: Optional["TurnRequest"] = None
    answering: Optional["TurnRequest"] = None
    acknowledged: bool = False
    unit_acknowledged: bool = False


@attrs.frozen(kw_only=True)
class JudgeState:
    """``semantic_vad``'s engine judgement in a turn-based session on a full-duplex engine
    (docs/protocol.md, "Turn detection"; :mod:`duplex_es.domain.judge`).

    ``unit`` is the judge unit in flight (its request id, ``epoch`` and ``chunk_index``;
    ``None`` once answered) and ``item_id`` the utterance it judges (server VAD's item id): a
    unit whose utterance ended meanwhile (committed, cleared, stopped by the max wait) is dead,
    and its answer discarded. ``heard_to`` is where on the input clock the audio the engine was
    last sent ends (samples). ``ended_item`` is the utterance the engine judged over, up to
    ``ended_at`` (samples; the next pump commits it); ``failed_item`` one whose judge unit
    failed (no more units for it: the max wait decides).
    """

    unit: Optional[str] = None
    epoch: int = 0
    chunk_index: int = 0
    item_id: Optional[str] = None
    heard_to: int = 0
    ended_item: Optional[str] = None
    ended_at: int = 0
    failed_item: Optional[str] = None


@attrs.frozen(kw_only=True, slots=False)  # copied per event: see the note above ``ACTIVE``
class SessionState:
    """The whole derived state of one session after its event ``seq``.

    ``unapplied`` are the seqs of accepted model-feeding events no tick has taken yet, in log
    order (docs/architecture.md, I5). ``input_clock`` is the number of input samples appended since the
    session began: the audio clock of docs/architecture.md, I12. ``last_commit_seq`` is the seq of the newest
    user item (the ``playback_ack_too_late`` rule measures responses against it).
    ``retired_response_ids`` are responses whose ledger was dropped unacknowledged once a newer
    user turn made their history final; ``deferred_response`` a server VAD turn's response
    waiting for the active one to end. ``transcriptions`` maps the request id of each input
    transcription in flight to its user item. ``idle_since_sample`` is where on the input clock
    the idle timeout counts from (the end of the last response's audio), ``None`` while it is
    not running. ``calls`` are the session's function calls by ``call_id``. ``judge`` is
    ``semantic_vad``'s engine judgement of the end of the user's turn, where the engine gives it.
    """

    session_id: str = ""
    seq: int = 0
    status: SessionStatus = SessionStatus.NEW
    close_reason: Optional[str] = None
    config: Optional[SessionConfig] = None
    epoch: int = 0
    input_clock: int = 0
    buffer: InputBuffer = InputBuffer()
    vad: VadState = VadState()
    item_order: tuple[str, ...] = ()
    items: dict[str, Item] = attrs.Factory(dict)
    responses: dict[str, Response] = attrs.Factory(dict)
    active_response_id: Optional[str] = None
    ticks: dict[str, Tick] = attrs.Factory(dict)
    unapplied: tuple[int, ...] = ()
    last_commit_seq: int = 0
    audio_output_started: bool = False
    lease: Lease = Lease()
    retired_response_ids: tuple[str, ...] = ()
    deferred_response: Optional[ResponseDeferred] = None
    transcriptions: dict[str, str] = attrs.Factory(dict)
    idle_since_sample: Optional[int] = None
    calls: dict[str, Call] = attrs.Factory(dict)
    duplex: DuplexState = DuplexState()
    judge: JudgeState = JudgeState()

    @property
    def full_duplex(self) -> bool:
        """True when the model hears the input continuously (``turn_mode: full_duplex``)."""
        return self.config is not None and self.config.turn_mode == "full_duplex"

    @property
    def active_response(self) -> Optional[Response]:
        """The response that holds the default conversation, if any."""
        return self.responses.get(self.active_response_id) if self.active_response_id else None

    @property
    def is_open(self) -> bool:
        """True while the session accepts commands."""
        return self.status == SessionStatus.OPEN

    @property
    def ended(self) -> bool:
        """True once the session was closed or expired (it never opens again)."""
        return self.status == SessionStatus.CLOSED or self.status == SessionStatus.EXPIRED

    @property
    def last_item_id(self) -> Optional[str]:
        """The newest item in the conversation, if any."""
        return self.item_order[-1] if self.item_order else None

    def previous_of(self, item_id: str) -> Optional[str]:
        """The item before ``item_id`` in the conversation (``None`` at the start)."""
        i = self.item_order.index(item_id)
        return self.item_order[i - 1] if i > 0 else None

    def last_user_item(self) -> Optional[Item]:
        """The newest user item in the conversation, if any."""
        for item_id in reversed(self.item_order):
            item = self.items[item_id]
            if item.role == "user":
                return item
        return None

    def live_responses(self) -> list[Response]:
        """Every response still in progress (the default one and any out-of-band ones)."""
        return [r for r in self.responses.values() if r.active]
