"""The event catalogue: every event duplex_es logs, with its stable wire name and schema version.

Three families share the log:

* **client commands**, accepted (one or more events below) or rejected (``command.rejected``);
  each carries the client's ``client_event_id`` (``None`` when the client sent none);
* **engine outputs** written by workers (``tick.output``, ``tick.failed``), each echoing the
  identity of the tick it answers;
* **session reactions** the server decides on its own (``tick.issued`` for the next chunk,
  ``response.done`` after the final chunk).

Audio travels as base64 text of the session's declared format. Positions on the audio clock are
sample counts (DESIGN I12); milliseconds are derived from them.
"""


from typing import Optional

import attrs

from duplex_es.events.base import Event, event

__all__ = [
    "AudioFormat",
    "TurnDetection",
    "SessionConfig",
    "Mark",
    "SpeechInputs",
    "InputTranscript",
    "SessionOpened",
    "SessionUpdated",
    "SessionClosed",
    "CommandRejected",
    "AudioAppended",
    "TextAppended",
    "InputCommitted",
    "InputCleared",
    "ResponseCreated",
    "TickIssued",
    "TickOutput",
    "TickFailed",
    "EpochAdvanced",
    "ResponseDone",
    "PlaybackAcked",
    "ItemTruncated",
    "MODEL_FEEDING",
]


# --------------------------------------------------------------------------------------------
# Value classes carried inside events
# --------------------------------------------------------------------------------------------


@attrs.frozen(kw_only=True)
class AudioFormat:
    """A declared audio format, as in the Realtime GA ``audio.*.format`` object.

    ``type`` is ``"audio/pcm"`` (signed 16-bit little-endian mono) and ``rate`` its sample rate
    in Hz. 24000 Hz is the GA rate (``reference/realtime-protocol.md`` §1.9).
    """

    type: str = "audio/pcm"
    rate: int = 24000


@attrs.frozen(kw_only=True)
class TurnDetection:
    """Server VAD settings, OpenAI's defaults (``reference/realtime-protocol.md`` §1.7).

    Durations are in ms of the input audio clock; ``threshold`` is in [0, 1].
    """

    type: str = "server_vad"
    threshold: float = 0.5
    prefix_padding_ms: int = 300
    silence_duration_ms: int = 500
    create_response: bool = True
    interrupt_response: bool = True


@attrs.frozen(kw_only=True)
class SessionConfig:
    """The full effective configuration of a speech session (what ``session.updated`` echoes)."""

    model: str
    instructions: str = ""
    voice: str = "alloy"
    output_modalities: tuple[str, ...] = ("audio",)
    input_format: AudioFormat = AudioFormat()
    output_format: AudioFormat = AudioFormat()
    turn_detection: Optional[TurnDetection] = None


@attrs.frozen(kw_only=True)
class Mark:
    """An alignment point between reply text and reply audio.

    ``text_chars`` characters of the transcript are spoken by ``audio_ms`` ms of audio; both are
    cumulative from the start of the response.
    """

    text_chars: int
    audio_ms: int


@attrs.frozen(kw_only=True)
class SpeechInputs:
    """What a speech engine needs to answer, folded from the log when a tick is issued.

    ``user_audio_seqs`` are the session seqs of the ``input_audio_buffer.appended`` events whose
    audio forms the user item being answered, in order; the worker reads that audio from the log.
    """

    reply_to_item_id: Optional[str] = None
    user_audio_seqs: tuple[int, ...] = ()
    user_text: str = ""
    input_format: AudioFormat = AudioFormat()
    output_format: AudioFormat = AudioFormat()
    instructions: str = ""
    voice: str = "alloy"
    output_modalities: tuple[str, ...] = ("audio",)


@attrs.frozen(kw_only=True)
class InputTranscript:
    """What the engine heard in a user item (its ASR result)."""

    item_id: str
    transcript: str


# --------------------------------------------------------------------------------------------
# Session lifecycle
# --------------------------------------------------------------------------------------------


@event("session.opened")
class SessionOpened(Event):
    """A session came into existence with its initial configuration (wire: ``session.created``)."""

    session_id: str
    config: SessionConfig


@event("session.updated")
class SessionUpdated(Event):
    """An accepted ``session.update``; ``config`` is the full effective configuration after it.

    ``model_relevant`` is true when a field the engine reads changed (instructions, voice, output
    modalities or formats); such an update must be applied by exactly one tick (DESIGN I5).
    """

    client_event_id: Optional[str] = None
    config: SessionConfig
    model_relevant: bool = False


@event("session.closed")
class SessionClosed(Event):
    """The session ended; nothing is accepted after it."""

    client_event_id: Optional[str] = None
    reason: str = "client_close"


@event("command.rejected")
class CommandRejected(Event):
    """A client command that was refused. It changes no derived state (DESIGN I3).

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
    """

    client_event_id: Optional[str] = None
    audio: str
    samples: int
    start_sample: int


@event("input.text.appended")
class TextAppended(Event):
    """Text appended to the pending user input (duplex extension ``input.text.append``)."""

    client_event_id: Optional[str] = None
    text: str


@event("input_audio_buffer.committed")
class InputCommitted(Event):
    """The input buffer became a user item.

    ``append_seqs`` / ``text_seqs`` name exactly the appends the item consumed, in log order.
    ``samples`` is the item's audio length on the input clock.
    """

    client_event_id: Optional[str] = None
    item_id: str
    previous_item_id: Optional[str] = None
    append_seqs: tuple[int, ...] = ()
    text_seqs: tuple[int, ...] = ()
    samples: int = 0
    text: str = ""


@event("input_audio_buffer.cleared")
class InputCleared(Event):
    """The input buffer was discarded; ``discarded_seqs`` names every append it dropped."""

    client_event_id: Optional[str] = None
    discarded_seqs: tuple[int, ...] = ()


# --------------------------------------------------------------------------------------------
# Responses and ticks
# --------------------------------------------------------------------------------------------


@event("response.created")
class ResponseCreated(Event):
    """An accepted ``response.create``: a response and its assistant item exist from here on."""

    client_event_id: Optional[str] = None
    response_id: str
    item_id: str
    previous_item_id: Optional[str] = None
    output_modalities: tuple[str, ...] = ("audio",)
    voice: str = "alloy"
    instructions: str = ""
    output_format: AudioFormat = AudioFormat()
    conversation: str = "auto"


@event("tick.issued")
class TickIssued(Event):
    """A tick snapshot: the frozen input of one engine step (DESIGN I5).

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


@event("tick.output")
class TickOutput(Event):
    """An engine's output for one tick, appended by a worker.

    It echoes the tick's identity (``session_id``, ``request_id``, ``epoch``, ``chunk_index``,
    ``applied_event_ids``); the reducer accepts it only on an exact match with a live tick.
    ``audio`` is base64 PCM16 in the response's output format; ``text_delta`` is the transcript
    (audio modality) or text (text modality) added by this chunk; ``marks`` align the two,
    cumulative over the response; ``final`` marks the response's last chunk.
    """

    session_id: str
    request_id: str
    response_id: str
    epoch: int
    chunk_index: int
    applied_event_ids: tuple[int, ...] = ()
    audio: str = ""
    text_delta: str = ""
    marks: tuple[Mark, ...] = ()
    final: bool = False
    input_transcripts: tuple[InputTranscript, ...] = ()
    engine: str = ""


@event("tick.failed")
class TickFailed(Event):
    """An engine step failed; the response it belongs to ends ``failed``."""

    session_id: str
    request_id: str
    response_id: str
    epoch: int
    chunk_index: int
    applied_event_ids: tuple[int, ...] = ()
    code: str
    message: str


@event("epoch.advanced")
class EpochAdvanced(Event):
    """The session's fence moved: every tick of an older epoch is dead (DESIGN I7).

    ``cancelled_request_ids`` are the ticks in flight that will never be accepted;
    ``discarded_event_ids`` are the model-feeding events those ticks would have applied, which
    this event discards explicitly (DESIGN I5).
    """

    epoch: int
    reason: str
    cancelled_request_ids: tuple[str, ...] = ()
    discarded_event_ids: tuple[int, ...] = ()


@event("response.done")
class ResponseDone(Event):
    """A response ended; exactly one per response (DESIGN §4).

    ``status`` is ``completed``, ``cancelled``, ``failed`` or ``incomplete``; ``reason`` the
    Realtime ``status_details.reason`` (``client_cancelled``, ...). ``heard_ms`` is the playback
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
# Playback and history
# --------------------------------------------------------------------------------------------


@event("playback.acked")
class PlaybackAcked(Event):
    """The client reported playback of a response's audio (duplex extension ``playback.ack``).

    ``played_ms`` / ``committed_ms`` are the new cursor values (already the max with earlier
    acks), in ms from the start of the response's audio.
    """

    client_event_id: Optional[str] = None
    response_id: str
    item_id: str
    played_ms: int
    committed_ms: int


@event("conversation.item.truncated")
class ItemTruncated(Event):
    """An assistant audio item was cut at ``audio_end_ms``; its transcript becomes the heard prefix."""

    client_event_id: Optional[str] = None
    item_id: str
    content_index: int = 0
    audio_end_ms: int


#: Event types whose acceptance feeds the model: each must be applied by exactly one tick or
#: discarded explicitly (DESIGN I5). ``session.updated`` counts only when ``model_relevant``.
MODEL_FEEDING: frozenset[str] = frozenset(
    {InputCommitted.TYPE, SessionUpdated.TYPE, ItemTruncated.TYPE}
)
