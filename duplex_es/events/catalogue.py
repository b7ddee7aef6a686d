"""The event catalogue: every event duplex_es logs, with its stable wire name and schema version.

Four families share the log:

* **client commands**, accepted (one or more events below) or rejected (``command.rejected``);
  each carries the client's ``client_event_id`` (``None`` when the client sent none);
* **engine outputs** written by workers (``tick.output``, ``tick.failed``), each echoing the
  identity of the tick it answers;
* **session reactions** the server decides on its own (``tick.issued`` for the next chunk,
  ``response.done`` after the final chunk, server VAD verdicts);
* **time decisions** made outside the reducer, carrying the time they used (docs/architecture.md, I11):
  ``session.detached``, ``session.resumed``, ``session.expired``.

Audio travels as base64 text of the session's declared format. Positions on the audio clock are
sample counts (docs/architecture.md, I12); milliseconds are derived from them.
"""

from typing import Any, Optional

import attrs

from duplex_es.events.base import Event, Refusal, event
from duplex_es.events.ticks import TickAnswer, TickCanceller, TickRequest

__all__ = [
    "SessionErased",
    "AudioFormat",
    "TurnDetection",
    "SEMANTIC_VAD_SILENCE_MS",
    "SEMANTIC_VAD_MAX_WAIT_MS",
    "JUDGE_UNIT",
    "USER_TURN_ENDED",
    "TokenUsage",
    "SessionConfig",
    "VadState",
    "AudioSegment",
    "Mark",
    "ContentPart",
    "ResponseInput",
    "HistoryEntry",
    "SpeechInputs",
    "InputTranscript",
    "FunctionCallChunk",
    "SessionOpened",
    "SessionUpdated",
    "SessionClosed",
    "SessionDetached",
    "SessionResumed",
    "SessionExpired",
    "HeartbeatReceived",
    "TurnSignaled",
    "CommandRejected",
    "AudioAppended",
    "TextAppended",
    "SpeechStarted",
    "SpeechStopped",
    "ResponseDeferred",
    "InputCommitted",
    "InputCleared",
    "ItemCreated",
    "ItemDeleted",
    "ItemRetrieved",
    "ResponseCreated",
    "TickIssued",
    "TickOutput",
    "TickFailed",
    "EpochAdvanced",
    "OutputAudioCleared",
    "ResponseDone",
    "PlaybackAcked",
    "CommandDeduplicated",
    "TimeoutTriggered",
    "TranscriptionRequested",
    "TranscriptionCompleted",
    "TranscriptionFailed",
    "ItemTruncated",
    "MODEL_FEEDING",
]


# --------------------------------------------------------------------------------------------
# Value classes carried inside events
# --------------------------------------------------------------------------------------------


@attrs.frozen(kw_only=True)
class AudioFormat:
    """A declared audio format, as in the Realtime GA ``audio.*.format`` object.

    ``audio/pcm`` is signed 16-bit little-endian mono at ``rate`` Hz (24000 is the GA rate;
    16000 is a duplex_es extension); ``audio/pcmu`` and ``audio/pcma`` are G.711 mu-law and
    a-law at 8000 Hz, one byte per sample (docs/sources.md, "Audio formats").
    """

    type: str = "audio/pcm"
    rate: int = 24000


#: ``semantic_vad``: the pause (ms of input audio) that ends a turn at each ``eagerness`` where
#: the session's engine does not judge it (docs/protocol.md, Turn detection); ``low`` waits
#: longer for the user to go on, ``high`` answers sooner, ``auto`` is ``medium``. Where the
#: engine judges (a turn-based session on a full-duplex engine) it is the engine's base pause,
#: carried by each judge unit (``duplex.unit.issued``'s ``pause_ms``).
SEMANTIC_VAD_SILENCE_MS: dict[str, int] = {"low": 1200, "medium": 800, "auto": 800, "high": 500}

#: ``semantic_vad`` judged by the engine: the longest pause (ms of input audio) after which the
#: turn ends whatever the engine said, or if it never answered — OpenAI's semantic VAD max waits
#: (docs/sources.md, "OpenAI turn detection").
SEMANTIC_VAD_MAX_WAIT_MS: dict[str, int] = {"low": 8000, "medium": 4000, "auto": 4000, "high": 2000}

#: ``duplex.unit.issued``'s ``purpose`` of a *judge unit*: the engine is asked only whether the
#: user's turn is over (``semantic_vad`` in a turn-based session on a full-duplex engine).
JUDGE_UNIT = "judge"

#: The listen reason of an engine's answer that judges the user's turn over.
USER_TURN_ENDED = "end_of_turn"


@attrs.frozen(kw_only=True)
class TurnDetection:
    """Turn detection settings, OpenAI's defaults (docs/protocol.md, "Turn detection";
    docs/sources.md, "OpenAI turn detection").

    ``type`` is ``server_vad`` (an energy detector with ``threshold``, ``prefix_padding_ms`` and
    ``silence_duration_ms``) or ``semantic_vad`` (``eagerness`` sets how long a pause ends the
    turn, :data:`SEMANTIC_VAD_SILENCE_MS`; the other detector settings keep their defaults and
    are not echoed). ``detector`` (a duplex_es extension, both types) picks what judges a frame
    voiced: ``energy`` or ``silero``. Durations are in ms of the input audio clock;
    ``threshold`` is in [0, 1] (higher needs louder audio, or for ``silero`` a higher speech
    probability). ``idle_timeout_ms`` (``server_vad`` only; ``None``: off) starts
    a response once that much input audio passed without speech after the last response's
    audio ended.
    """

    type: str = "server_vad"
    threshold: float = 0.5
    prefix_padding_ms: int = 300
    silence_duration_ms: int = 500
    create_response: bool = True
    interrupt_response: bool = True
    idle_timeout_ms: Optional[int] = None
    eagerness: Optional[str] = None
    #: The voice-activity detector (duplex_es extension): ``energy`` (the default and fallback)
    #: or ``silero`` (the neural model, docs/protocol.md "Turn detection").
    detector: str = "energy"

    @property
    def end_of_turn_silence_ms(self) -> int:
        """The silence (ms of input audio) that ends speech."""
        if self.type == "semantic_vad":
            return SEMANTIC_VAD_SILENCE_MS[self.eagerness or "auto"]
        return self.silence_duration_ms


@attrs.frozen(kw_only=True)
class SessionConfig:
    """The full effective configuration of a speech session (what ``session.updated`` echoes).

    ``model`` is the name the client asked for and ``engine`` the engine that serves it (the
    server's model map; ``""`` in logs written before the map existed: the engine was the
    model). ``session_type`` is ``realtime`` or ``transcription`` (no responses; committed audio
    is only transcribed).

    ``transcript_on_truncate`` is ``"heard_prefix"`` (duplex_es: a truncated assistant item keeps
    the words heard before the cut) or ``"remove"`` (OpenAI: the transcript is deleted).
    ``acknowledge_appends`` (duplex extension, off by default as in OpenAI) makes every logged
    ``input_audio_buffer.append`` answer with an ``input_audio_buffer.appended`` server event.
    ``turn_mode`` is ``turn_based`` (a response per turn, as in OpenAI) or ``full_duplex`` (the
    model hears the input continuously in units of ``chunk_period_ms`` ms of input audio and
    decides when to talk; user speech over its turn follows ``overlap``: ``barge_in`` (after
    ``barge_in_ms`` of speech: shorter speech is an acknowledgement the model talks through),
    ``listen`` or ``drop``) — docs/duplex.md. ``extension_events`` adds vLLM-Omni's full-duplex
    events (``response.listen``, ``response.speak``, ``overlap.decision``,
    ``input_audio_buffer.processed``) to the wire; off, a client sees GA events only. ``turn_modes`` are the modes the session's engine offers.
    ``backchannels`` lets a full-duplex model say short acknowledgements ("Mm-hm.") while the
    user keeps talking (off by default: the model speaks only when it takes the turn).

    The GA settings below are kept exactly as the client set them (JSON values) and echoed so:
    ``transcription`` (``audio.input.transcription``: each committed user audio item is
    transcribed by a worker), ``max_output_tokens``, ``speed`` and ``tools`` / ``tool_choice``
    reach the engine in every tick; ``noise_reduction``, ``tracing``, ``truncation``,
    ``include``, ``prompt``, ``reasoning`` and ``parallel_tool_calls`` are echoed and recorded as
    not applied (``session.updated.not_applied``).

    Schema evolution: a field added here must have a default. Events stored before it existed
    lack the key and decode with the default (cattrs fills it in), so no version bump or
    upcaster is needed; ``tests/unit/test_codec.py`` checks this with an old ``session.opened``.
    """

    model: str
    instructions: str = ""
    voice: str = "alloy"
    output_modalities: tuple[str, ...] = ("audio",)
    input_format: AudioFormat = AudioFormat()
    output_format: AudioFormat = AudioFormat()
    turn_detection: Optional[TurnDetection] = None
    transcript_on_truncate: str = "heard_prefix"
    acknowledge_appends: bool = False
    engine: str = ""
    session_type: str = "realtime"
    transcription: Optional[Any] = None
    noise_reduction: Optional[Any] = None
    speed: float = 1.0
    max_output_tokens: Any = "inf"
    tools: tuple[Any, ...] = ()
    tool_choice: Any = "auto"
    tracing: Optional[Any] = None
    truncation: Any = "auto"
    include: Optional[tuple[str, ...]] = None
    prompt: Optional[Any] = None
    reasoning: Optional[Any] = None
    parallel_tool_calls: Optional[bool] = None
    temperature: Optional[float] = None
    turn_mode: str = "turn_based"
    chunk_period_ms: int = 200
    overlap: str = "barge_in"
    turn_modes: tuple[str, ...] = ("turn_based",)
    barge_in_ms: int = 0
    extension_events: bool = False
    backchannels: bool = False


@attrs.frozen(kw_only=True)
class VadState:
    """Server VAD state after an append, on the input clock (samples).

    ``speaking``: speech is in progress since ``start_sample`` (prefix padding included);
    ``voiced_run``: consecutive voiced samples seen while not speaking (onset debouncing);
    ``silence_run``: consecutive unvoiced samples while speaking; ``item_id``: the user item the
    current speech will become. Frames are 10 ms of the input clock: ``frame_fill`` samples of
    the current frame have arrived, with ``frame_energy`` (sum of squared samples, full scale 1)
    — so detection does not depend on how the client sized its appends. ``model_state`` is what
    the ``silero`` detector carries to the next append (its network's recurrent state, the
    context and the samples of its unfinished 32 ms frame; base64, opaque:
    ``duplex_es.audio.silero``); ``None`` for the energy detector.
    """

    speaking: bool = False
    start_sample: int = 0
    voiced_run: int = 0
    silence_run: int = 0
    item_id: Optional[str] = None
    frame_fill: int = 0
    frame_energy: float = 0.0
    model_state: Optional[str] = None


@attrs.frozen(kw_only=True)
class AudioSegment:
    """``samples`` samples of the audio logged at session seq ``seq``, starting ``offset``
    samples into it (an item may begin or end inside an append)."""

    seq: int
    offset: int = 0
    samples: int


@attrs.frozen(kw_only=True)
class Mark:
    """An alignment point between reply text and reply audio.

    ``text_chars`` characters of the transcript are spoken by ``audio_ms`` ms of audio; both are
    cumulative from the start of the item.
    """

    text_chars: int
    audio_ms: int


@attrs.frozen(kw_only=True)
class ContentPart:
    """One content part of a client-created item: ``type`` is ``input_text`` or ``input_audio``
    (user), ``output_text`` (assistant) or ``input_text`` (system); ``audio`` is base64 in the
    session's input format."""

    type: str
    text: str = ""
    audio: str = ""


@attrs.frozen(kw_only=True)
class FunctionCallChunk:
    """A piece of a function call an engine streams (a GA ``function_call`` output item;
    docs/protocol.md, "Function calling").

    ``call_id`` is the engine's id for the call (unique in the session; the client answers it
    with a ``function_call_output`` item naming it), ``name`` the function called (one of the
    tick's ``tools``), ``arguments_delta`` the next characters of the call's JSON arguments and
    ``done`` whether they are now complete (the client may run the tool from then on). The
    first chunk of a call opens its output item; later chunks of the same ``call_id`` extend
    it until one is ``done``.
    """

    call_id: str
    name: str
    arguments_delta: str = ""
    done: bool = False


@attrs.frozen(kw_only=True)
class ResponseInput:
    """One entry of a ``response.create`` ``input``: a reference to a conversation item
    (``item_id``), or an inline item, which joins no conversation and answers or makes no call
    of the session (it is only the response's context): a ``message`` (``type`` ``None``,
    ``role`` and ``content``), a ``function_call`` (``call_id``, ``name``, ``arguments`` as
    JSON text) or a ``function_call_output`` (``call_id``, ``output``)."""

    item_id: Optional[str] = None
    role: Optional[str] = None
    content: tuple[ContentPart, ...] = ()
    type: Optional[str] = None
    call_id: Optional[str] = None
    name: Optional[str] = None
    arguments: Optional[str] = None
    output: Optional[str] = None


@attrs.frozen(kw_only=True)
class HistoryEntry:
    """One conversation item as the model sees it when a tick is issued: assistant entries hold
    only what the user heard.

    ``type`` is the GA item type: ``message`` (``role``, ``text``, ``audio_ms``),
    ``function_call`` (the call the model made: ``call_id``, ``name``, ``arguments`` as JSON
    text; ``role`` ``assistant``) or ``function_call_output`` (what the client's tool
    returned for ``call_id``: ``output``; ``role`` ``tool``)."""

    item_id: str
    role: str
    text: str
    audio_ms: int = 0
    type: str = "message"
    call_id: Optional[str] = None
    name: Optional[str] = None
    arguments: Optional[str] = None
    output: Optional[str] = None


@attrs.frozen(kw_only=True)
class SpeechInputs:
    """What a speech engine needs to answer, folded from the log when a response starts.

    ``user_audio`` are the segments of logged audio (``input_audio_buffer.appended``,
    ``conversation.item.created`` or the ``response.created`` of a response given inline
    ``input``) that form the user item being answered, in order; the worker reads that audio
    from the log. ``history`` is the conversation before the reply (or the response's own
    ``input``). ``engine`` is the engine the session's model maps to and ``model`` the name the
    client asked for. The response's settings follow, as the client set them:
    ``max_output_tokens`` (an int or ``"inf"``), ``speed`` (0.25–1.5), ``temperature``,
    ``tools`` (GA function tools: ``name``, ``description``, JSON-Schema ``parameters``),
    ``tool_choice`` (``auto``, ``none``, ``required`` or ``{"type": "function", "name": ...}``)
    and ``parallel_tool_calls`` (``None``: GA's default, true: the engine may make several
    calls in one response) — JSON as sent. ``backchannels`` (full-duplex units only): the
    session lets the model acknowledge the user while they keep talking (``duplex.backchannels``).
    """

    reply_to_item_id: Optional[str] = None
    user_audio: tuple[AudioSegment, ...] = ()
    user_text: str = ""
    input_format: AudioFormat = AudioFormat()
    output_format: AudioFormat = AudioFormat()
    instructions: str = ""
    voice: str = "alloy"
    output_modalities: tuple[str, ...] = ("audio",)
    history: tuple[HistoryEntry, ...] = ()
    engine: str = ""
    model: str = ""
    max_output_tokens: Any = "inf"
    speed: float = 1.0
    temperature: Optional[float] = None
    tools: tuple[Any, ...] = ()
    tool_choice: Any = "auto"
    parallel_tool_calls: Optional[bool] = None
    backchannels: bool = False


@attrs.frozen(kw_only=True)
class InputTranscript:
    """What the engine heard in a user item (its ASR result)."""

    item_id: str
    transcript: str


@attrs.frozen(kw_only=True)
class TokenUsage:
    """Tokens an engine reports for what it read and wrote (summed over a response's ticks).

    An engine that counts no tokens reports none; ``response.done`` then shows zeros beside the
    audio and text sizes the server always measures itself (docs/protocol.md, Usage).
    """

    input_text_tokens: int = 0
    input_audio_tokens: int = 0
    cached_tokens: int = 0
    output_text_tokens: int = 0
    output_audio_tokens: int = 0

    def __add__(self, other: "TokenUsage") -> "TokenUsage":
        return TokenUsage(
            input_text_tokens=self.input_text_tokens + other.input_text_tokens,
            input_audio_tokens=self.input_audio_tokens + other.input_audio_tokens,
            cached_tokens=self.cached_tokens + other.cached_tokens,
            output_text_tokens=self.output_text_tokens + other.output_text_tokens,
            output_audio_tokens=self.output_audio_tokens + other.output_audio_tokens,
        )


# --------------------------------------------------------------------------------------------
# Session lifecycle
# --------------------------------------------------------------------------------------------


@event("session.opened")
class SessionOpened(Event):
    """A session came into existence with its initial configuration (wire: ``session.created``).

    ``resume_token_hash`` is the SHA-256 hex digest of the resume token the client got with
    ``session.created``; the token itself is never logged (docs/protocol.md, Resume).
    ``principal`` names the API key's principal that opened the session, which owns it
    (``None``: opened with no keys configured, or before principals existed; never the key)."""

    session_id: str
    config: SessionConfig
    resume_token_hash: Optional[str] = None
    principal: Optional[str] = None


@event("session.updated")
class SessionUpdated(Event):
    """An accepted ``session.update``; ``config`` is the full effective configuration after it.

    ``model_relevant`` is true when a field the engine reads changed (instructions, voice, output
    modalities or formats); such an update must be applied by exactly one tick (docs/architecture.md, I5).
    ``not_applied`` names the settings of this update that were accepted and echoed but that
    nothing applies (``session.audio.input.noise_reduction``, ``session.tracing``, ...), so a
    replay shows why a setting had no effect.
    """

    client_event_id: Optional[str] = None
    config: SessionConfig
    model_relevant: bool = False
    not_applied: tuple[str, ...] = ()


@event("session.closed")
class SessionClosed(Event):
    """The session ended at the client's request; nothing is accepted after it."""

    client_event_id: Optional[str] = None
    reason: str = "client_close"


@event("session.detached")
class SessionDetached(Event):
    """The client's connection ended without ``session.close`` at ``at_ms`` (Unix ms); the
    session waits for a resume until its disconnect grace runs out."""

    at_ms: int
    reason: str = "connection_closed"


@event("session.resumed")
class SessionResumed(Event):
    """A client took the session over at ``at_ms`` (Unix ms); ``lease_generation`` is the new
    generation (the compare-and-swap on the previous one succeeded).

    ``resume_token_hash`` is the digest of the rotated token handed to the resuming client
    (``None``: the token did not change); ``last_server_event_seq`` the last wire event the
    client said it had seen (``None`` when it asked for no replay). ``token_in_url``: the
    presented token came in the connection URL (access logs may hold it), so the leeway of the
    token this resume rotated away is short (docs/protocol.md, Resume)."""

    client_event_id: Optional[str] = None
    lease_generation: int
    at_ms: int
    resume_token_hash: Optional[str] = None
    last_server_event_seq: Optional[int] = None
    token_in_url: bool = False


@event("session.expired")
class SessionExpired(Event):
    """The session's lease ran out: ``reason`` is ``idle_ttl_expired`` or
    ``disconnect_grace_expired``; ``decided_at_ms`` the reaper's time and ``since_ms`` the last
    activity or the detach it measured from (docs/architecture.md, I11)."""

    reason: str
    decided_at_ms: int
    since_ms: int


@event("session.erased")
class SessionErased(Event):
    """The session's content was erased at ``at_us`` (Unix µs) by ``by`` (a principal, or
    ``operator`` for the command line, or ``retention``): its data key is destroyed, so the
    sealed content of its events no longer opens, and its snapshots are deleted. Everything
    else of the log stays: order, times, verdicts and the hash chain (docs/privacy.md). Logged
    by the component that erased, with the time it used (docs/architecture.md, I11); the last
    event of the session. ``sealed_events`` is how many of its events held content."""

    at_us: int
    by: str
    reason: str = "request"
    sealed_events: int = 0


@event("session.heartbeat")
class HeartbeatReceived(Event):
    """A ``session.heartbeat``: the client is alive (it renews the idle TTL)."""

    client_event_id: Optional[str] = None


@event("turn.signaled")
class TurnSignaled(Event):
    """An informational ``turn.signal`` from the client (``user_started``, ``user_stopped``,
    ``assistant_started``, ``assistant_done``); logged for replay, no state changes."""

    client_event_id: Optional[str] = None
    signal: str


@event("command.deduplicated")
class CommandDeduplicated(Event):
    """A client command that repeats an applied one: the same ``event_id`` and the same content
    (a retry, e.g. after a resume). It is not applied again; ``first_seq``..``last_seq`` are the
    events the first one wrote. Nothing is sent for it: the client got (or is re-sent) the first
    one's server events."""

    client_event_id: str
    command_type: Optional[str] = None
    first_seq: int
    last_seq: int


@event("command.rejected")
class CommandRejected(Refusal):
    """A client command that was refused. It changes no derived state (docs/architecture.md, I3).

    ``code`` is the error code the client can branch on, ``param`` the offending field, and
    ``excerpt`` the first bytes of a frame that could not be parsed (for debugging).
    """

    client_event_id: Optional[str] = None
    command_type: Optional[str] = None
    code: str
    message: str
    param: Optional[str] = None
    error_type: str = "invalid_request_error"
    excerpt: Optional[str] = None


# --------------------------------------------------------------------------------------------
# Input
# --------------------------------------------------------------------------------------------


@event("input_audio_buffer.appended")
class AudioAppended(Event):
    """Audio appended to the input buffer.

    ``audio`` is base64 of the bytes in the session's input format; ``start_sample`` is the
    position of its first sample on the session's input audio clock and ``samples`` its length.
    ``vad`` is the server VAD's state after this audio (``None`` without server VAD), so replay
    never reruns the detector.
    """

    client_event_id: Optional[str] = None
    audio: str
    samples: int
    start_sample: int
    vad: Optional[VadState] = None


@event("input.text.appended")
class TextAppended(Event):
    """Text appended to the pending user input (duplex extension ``input.text.append``)."""

    client_event_id: Optional[str] = None
    text: str


@event("input_audio_buffer.speech_started")
class SpeechStarted(Event):
    """Server VAD heard speech begin at ``audio_start_ms`` of the input clock (prefix padding
    included); the speech will become user item ``item_id``."""

    audio_start_ms: int
    item_id: str


@event("input_audio_buffer.speech_stopped")
class SpeechStopped(Event):
    """Speech ended at ``audio_end_ms``: server VAD heard ``silence_duration_ms`` of silence (it
    is included), or a commit, clear or config change cut the speech short."""

    audio_end_ms: int
    item_id: str


@event("input_audio_buffer.timeout_triggered")
class TimeoutTriggered(Event):
    """Server VAD's ``idle_timeout_ms`` ran out on the input clock: no speech from
    ``audio_start_ms`` (where the last response's audio ended) to ``audio_end_ms``. The buffer up
    to there is committed as user item ``item_id`` and a response follows (GA's
    ``input_audio_buffer.timeout_triggered``)."""

    audio_start_ms: int
    audio_end_ms: int
    item_id: str


@event("response.deferred")
class ResponseDeferred(Event):
    """A server VAD turn was committed while a response held the conversation: its response
    (with these ids) starts as soon as that one ends (``create_response`` without
    ``interrupt_response``)."""

    response_id: str
    item_id: str
    request_id: str


@event("input_audio_buffer.committed")
class InputCommitted(Event):
    """The input buffer became a user item.

    ``segments`` are exactly the audio the item took, in log order (a server VAD commit ends
    where the speech stopped, possibly inside an append: the rest stays in the buffer);
    ``append_seqs`` / ``text_seqs`` name the appends it drew from. ``samples`` is the item's
    audio length on the input clock. ``previous_item_id`` is where the item went.
    ``skipped_samples`` is the audio before the item that left the buffer with it: what server
    VAD heard before the speech (and its prefix padding) began, which no item keeps.
    """

    client_event_id: Optional[str] = None
    item_id: str
    previous_item_id: Optional[str] = None
    segments: tuple[AudioSegment, ...] = ()
    append_seqs: tuple[int, ...] = ()
    text_seqs: tuple[int, ...] = ()
    samples: int = 0
    text: str = ""
    skipped_samples: int = 0


@event("input_audio_buffer.cleared")
class InputCleared(Event):
    """The input buffer was discarded; ``discarded_seqs`` names every append it dropped.
    ``reason`` is ``client_clear`` (``input_audio_buffer.clear``) or ``input_cancelled``
    (``input.cancel``)."""

    client_event_id: Optional[str] = None
    discarded_seqs: tuple[int, ...] = ()
    reason: str = "client_clear"


# --------------------------------------------------------------------------------------------
# Conversation items
# --------------------------------------------------------------------------------------------


@event("conversation.item.created")
class ItemCreated(Event):
    """A client-created item (``conversation.item.create``) placed after ``previous_item_id``
    (``None``: at the start of the conversation).

    ``type`` is the GA item type: a ``message`` has ``role`` and ``content``; a
    ``function_call`` (a call restored into the history) has ``call_id``, ``name`` and
    ``arguments``; a ``function_call_output`` answers the call ``call_id`` with ``output``
    (the tool's result as text). Function items log ``role`` ``assistant`` (a call) or
    ``tool`` (an output); the wire shows them without a role."""

    client_event_id: Optional[str] = None
    item_id: str
    previous_item_id: Optional[str] = None
    role: str
    content: tuple[ContentPart, ...] = ()
    samples: int = 0
    type: str = "message"
    call_id: Optional[str] = None
    name: Optional[str] = None
    arguments: Optional[str] = None
    output: Optional[str] = None


@event("conversation.item.deleted")
class ItemDeleted(Event):
    """An item left the conversation."""

    client_event_id: Optional[str] = None
    item_id: str


@event("conversation.item.retrieved")
class ItemRetrieved(Event):
    """A client read an item (``conversation.item.retrieve``); logged like every command."""

    client_event_id: Optional[str] = None
    item_id: str


@event("conversation.item.truncated")
class ItemTruncated(Event):
    """An assistant audio item was cut at ``audio_end_ms``. ``remove_transcript`` applies
    OpenAI's rule (the transcript is deleted) instead of keeping the heard prefix.
    ``in_conversation`` is false for an out-of-band item: then it does not feed the model."""

    client_event_id: Optional[str] = None
    item_id: str
    content_index: int = 0
    audio_end_ms: int
    remove_transcript: bool = False
    in_conversation: bool = True


# --------------------------------------------------------------------------------------------
# Responses and ticks
# --------------------------------------------------------------------------------------------


@event("response.created")
class ResponseCreated(Event):
    """An accepted ``response.create``: a response and its first assistant item exist from here
    on. ``conversation`` is ``auto`` (the default conversation) or ``none`` (out of band: its
    items never join the conversation). ``metadata`` is the client's, echoed on
    ``response.created`` and ``response.done``; ``input`` the response's own context when the
    client gave one (inline items and references to conversation items, in order) instead of
    the conversation; ``max_output_tokens`` as the client set it (or the session's);
    ``not_applied`` the settings accepted and echoed that nothing applies."""

    client_event_id: Optional[str] = None
    response_id: str
    item_id: str
    previous_item_id: Optional[str] = None
    output_modalities: tuple[str, ...] = ("audio",)
    voice: str = "alloy"
    instructions: str = ""
    output_format: AudioFormat = AudioFormat()
    conversation: str = "auto"
    answers_commit_seq: int = 0
    metadata: Optional[Any] = None
    max_output_tokens: Any = "inf"
    input: Optional[tuple[ResponseInput, ...]] = None
    not_applied: tuple[str, ...] = ()


@event("tick.issued")
class TickIssued(TickRequest):
    """A tick snapshot: the frozen input of one engine step (docs/architecture.md, I5).

    ``applied_event_ids`` are the session seqs of the accepted model-feeding events this step
    applies, strictly increasing and never named by another tick. ``chunk_index`` counts the
    steps of a response from 0. ``inputs`` is everything the engine reads.
    """

    request_id: str
    response_id: str
    epoch: int
    chunk_index: int
    applied_event_ids: tuple[int, ...] = ()
    kind: str = "speech"
    inputs: SpeechInputs = SpeechInputs()

    def failed(self, session_id: str, code: str, message: str) -> "TickFailed":
        """The answer a worker logs when its engine failed on this tick (echoing it)."""
        return TickFailed(
            session_id=session_id,
            request_id=self.request_id,
            response_id=self.response_id,
            epoch=self.epoch,
            chunk_index=self.chunk_index,
            applied_event_ids=self.applied_event_ids,
            code=code,
            message=message,
        )


@event("tick.output")
class TickOutput(TickAnswer):
    """An engine's output for one tick, appended by a worker.

    It echoes the tick's identity (``session_id``, ``request_id``, ``epoch``, ``chunk_index``,
    ``applied_event_ids``); the reducer accepts it only on an exact match with a live tick.
    ``audio`` is base64 in the response's output format; ``text_delta`` is the transcript
    (audio modality) or text (text modality) this chunk adds; ``marks`` align the two,
    cumulative over the item. ``new_item_id`` (chosen by the worker) starts a new output item
    with this chunk. ``final`` marks the response's last chunk; ``incomplete_reason`` (e.g.
    ``max_output_tokens``) ends it ``incomplete``.
    """

    session_id: str
    request_id: str
    response_id: str
    epoch: int
    chunk_index: int
    applied_event_ids: tuple[int, ...] = ()
    new_item_id: Optional[str] = None
    audio: str = ""
    text_delta: str = ""
    marks: tuple[Mark, ...] = ()
    final: bool = False
    incomplete_reason: Optional[str] = None
    input_transcripts: tuple[InputTranscript, ...] = ()
    engine: str = ""
    usage: Optional[TokenUsage] = None
    not_applied: tuple[str, ...] = ()
    function_call: Optional[FunctionCallChunk] = None


@event("tick.failed")
class TickFailed(TickAnswer):
    """An engine step failed; the response it belongs to ends ``failed``."""

    FAILURE = True

    session_id: str
    request_id: str
    response_id: str
    epoch: int
    chunk_index: int
    applied_event_ids: tuple[int, ...] = ()
    code: str
    message: str


@event("epoch.advanced")
class EpochAdvanced(TickCanceller):
    """The session's fence moved: every tick of an older epoch is dead (docs/architecture.md, I7).

    ``reason`` is the cause (``client_cancelled``, ``turn_detected``, ``barge_in``,
    ``output_audio_buffer_clear``, ``response_failed``, ``session_closed``, ``session_expired``;
    logs from before issue 12 also hold ``client_disconnected`` and ``server_restart``, when a
    detach still cancelled). ``cancelled_request_ids`` are the ticks in flight
    that will never be accepted; ``discarded_event_ids`` are the model-feeding events those ticks
    would have applied (or that no tick will now apply), discarded explicitly (docs/architecture.md, I5).
    """

    epoch: int
    reason: str
    cancelled_request_ids: tuple[str, ...] = ()
    discarded_event_ids: tuple[int, ...] = ()


@event("output_audio_buffer.cleared")
class OutputAudioCleared(Event):
    """The client's output audio for ``response_id`` was dropped (``output_audio_buffer.clear``)."""

    client_event_id: Optional[str] = None
    response_id: str


@event("response.done")
class ResponseDone(Event):
    """A response ended; exactly one per response (docs/protocol.md).

    ``status`` is ``completed``, ``cancelled``, ``failed`` or ``incomplete``; ``reason`` the
    Realtime ``status_details.reason`` (``client_cancelled``, ``turn_detected``,
    ``max_output_tokens``, ...). ``error_code`` / ``error_message``: a failed response's error,
    or the real cause of a cancel GA's reasons cannot name (``session_expired``,
    ``session_closed``), projected as ``status_details.error``. ``heard_ms`` is the playback
    cutoff used to keep the heard prefix of the transcript (``None``: the whole transcript).
    """

    client_event_id: Optional[str] = None
    response_id: str
    status: str
    reason: Optional[str] = None
    error_code: Optional[str] = None
    error_message: Optional[str] = None
    heard_ms: Optional[int] = None


# --------------------------------------------------------------------------------------------
# Playback
# --------------------------------------------------------------------------------------------


@event("playback.acked")
class PlaybackAcked(Event):
    """The client reported playback of a response's audio (duplex extension ``playback.ack``).

    ``played_ms`` / ``committed_ms`` are the new cursor values in ms of the response's audio.
    ``truncate`` marks a hard truncation: ``committed_ms`` may go down and caps every later ack.
    """

    client_event_id: Optional[str] = None
    response_id: str
    item_id: str
    played_ms: int
    committed_ms: int
    truncate: bool = False


# --------------------------------------------------------------------------------------------
# Input transcription (its own tick kind: docs/architecture.md)
# --------------------------------------------------------------------------------------------


@event("transcription.requested")
class TranscriptionRequested(TickRequest):
    """A committed user audio item is to be transcribed (``audio.input.transcription`` is set):
    a tick of kind ``transcription`` that a worker claims like any other.

    ``audio`` are the item's segments of logged audio in ``input_format``; ``settings`` the
    session's ``transcription`` object as the client set it (``model``, ``language``,
    ``prompt``, ...). Transcription is not fenced by epochs: a cancelled response does not
    cancel the transcript of the turn it answered; only the session's end does."""

    request_id: str
    item_id: str
    audio: tuple[AudioSegment, ...] = ()
    input_format: AudioFormat = AudioFormat()
    settings: Optional[Any] = None
    kind: str = "transcription"

    FENCED = False  # a cancelled response does not cancel the transcript of its turn

    def failed(self, session_id: str, code: str, message: str) -> "TranscriptionFailed":
        """The answer a worker logs when its transcriber failed on this request."""
        return TranscriptionFailed(session_id=session_id, request_id=self.request_id, item_id=self.item_id, code=code, message=message)


@event("transcription.completed")
class TranscriptionCompleted(TickAnswer):
    """A worker's transcript of ``item_id``, answering ``request_id`` (it must echo both).
    ``seconds`` is the audio transcribed; ``engine`` the transcriber that ran."""

    session_id: str
    request_id: str
    item_id: str
    transcript: str
    seconds: float = 0.0
    engine: str = ""


@event("transcription.failed")
class TranscriptionFailed(TickAnswer):
    """Transcribing ``item_id`` failed (``code``, ``message``); the item stays without a
    transcript."""

    FAILURE = True

    session_id: str
    request_id: str
    item_id: str
    code: str
    message: str


#: Event types whose acceptance feeds the model: each must be applied by exactly one tick or
#: discarded explicitly (docs/architecture.md, I5). ``session.updated`` counts only when ``model_relevant``,
#: ``conversation.item.truncated`` only when ``in_conversation``.
MODEL_FEEDING: frozenset[str] = frozenset(
    {InputCommitted.TYPE, SessionUpdated.TYPE, ItemTruncated.TYPE, ItemCreated.TYPE, ItemDeleted.TYPE}
)
