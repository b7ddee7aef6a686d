"""The engine protocol: one tick snapshot in, one output out — or, for a batched engine, one
batch of tick snapshots (of many sessions) in, one output or error per tick out.

Engines run on the worker side and never see the database. A GPU model plugs in here like the
CPU reference engines: the worker's claims, fencing and commits do not change (docs/architecture.md).
"""

from __future__ import annotations

from typing import Any, Callable, Optional, Protocol, Sequence, runtime_checkable

import attrs

from duplex_es.errors import DuplexError
from duplex_es.events import (
    AudioSegment,
    Event,
    FunctionCallChunk,
    InputTranscript,
    Mark,
    TickIdentity,
    TickIssued,
    TickRequest,
    TokenUsage,
    TranscriptionRequested,
    UnitIssued,
)

__all__ = [
    "TickIdentity",
    "TickContext",
    "EngineOutput",
    "EngineError",
    "Engine",
    "BatchEngine",
    "TranscriptionContext",
    "TranscriptionOutput",
    "TickContract",
    "AudioCutter",
    "UnitContext",
    "UnitOutputs",
]


@attrs.frozen(kw_only=True)
class TickContext:
    """A tick and the means to read what it references.

    ``read_audio(segments)`` returns the audio of those segments of logged input audio
    (``tick.inputs.user_audio``), in the session's input format; it reads the log, so engines
    call it only when they need the audio.
    """

    session_id: str
    tick: TickIssued
    read_audio: Callable[[tuple[AudioSegment, ...]], bytes]

    @property
    def identity(self) -> TickIdentity:
        """The identity this tick's output must echo."""
        return TickIdentity.of(self.session_id, self.tick)


@attrs.frozen(kw_only=True)
class EngineOutput:
    """One step's output.

    ``audio`` is in the tick's output format (empty for text); ``text_delta`` the text this
    chunk adds; ``marks`` text/audio alignment points, cumulative over the current item;
    ``new_item`` starts a new output item with this chunk; ``final`` ends the response,
    ``incomplete_reason`` (e.g. ``max_output_tokens``) ending it ``incomplete``;
    ``input_transcripts`` report what the engine heard.

    ``new_item`` is for a *second* (third, ...) output item: ``response.created`` already
    opened the response's first item, so ``new_item`` on a response's first chunk leaves an
    empty item before it (the reference engine sets it on the first chunk of each later
    sentence only).

    ``function_call`` streams a function call instead of audio and text (an output carries
    one or the other): the first chunk of a ``call_id`` opens its ``function_call`` item —
    the response's first item when it is the response's first output, else a new item, so
    set ``new_item`` then — and the chunk that is ``done`` completes its arguments, which
    must be a JSON object's text by then. The tick's ``inputs.tools``, ``tool_choice`` and
    ``parallel_tool_calls`` say which calls are allowed; the call's output comes back in a
    later response's ``inputs.history`` (a ``function_call_output`` entry). docs/protocol.md,
    "Function calling".
    """

    echo: TickIdentity
    audio: bytes = b""
    text_delta: str = ""
    marks: tuple[Mark, ...] = ()
    new_item: bool = False
    final: bool = False
    incomplete_reason: Optional[str] = None
    input_transcripts: tuple[InputTranscript, ...] = ()
    usage: Optional[TokenUsage] = None
    not_applied: tuple[str, ...] = ()
    function_call: Optional[FunctionCallChunk] = None


@attrs.frozen(kw_only=True)
class TranscriptionContext:
    """A ``transcription`` tick: transcribe the user item ``tick.item_id``. ``read_audio()``
    returns its audio (``tick.audio`` in ``tick.input_format``) from the log."""

    session_id: str
    tick: TranscriptionRequested
    read_audio: Callable[[], bytes]


@attrs.frozen(kw_only=True)
class TranscriptionOutput:
    """A transcript of ``item_id`` answering ``request_id`` (both echoed from the tick);
    ``seconds`` of audio were transcribed."""

    request_id: str
    item_id: str
    transcript: str
    seconds: float


@attrs.frozen(kw_only=True)
class UnitContext:
    """A full-duplex unit (docs/duplex.md): ``tick.audio`` is the input the model hears now,
    ``tick.engine_state`` what the engine's previous answer left, and ``tick.response_id`` the
    model's open turn (``None``: it is not speaking — a turn the user barged in on is gone).
    ``read_audio(segments)`` returns logged input audio (this unit's ``tick.audio``, or earlier
    units' segments an engine kept in its state) in ``tick.inputs.input_format``."""

    session_id: str
    tick: UnitIssued
    read_audio: Callable[[tuple[AudioSegment, ...]], bytes]

    @property
    def identity(self) -> TickIdentity:
        """The identity this unit's answer must echo."""
        return TickIdentity.of(self.session_id, self.tick)


@attrs.frozen(kw_only=True)
class UnitOutputs:
    """An engine's answer to one unit. No ``audio`` and no ``text_delta``: it listens, for
    ``listen_reason``. Otherwise it speaks (``audio`` in the output format, ``text_delta`` and
    ``marks`` cumulative over the item), opening a turn if none is open; ``end_of_turn`` ends
    its turn. ``user_transcript_delta`` adds to what it heard of the user's utterance;
    ``engine_state`` (JSON values) is what the next unit starts from — a worker that takes the
    session over continues from it. ``continue_turn``: step it again on the audio clock's pace
    even if no input comes (it is judging the end of the user's turn; silence units).
    ``function_call``: a chunk of a function call instead of audio and text (docs/duplex.md,
    "Function calls and client items"); the turn's calls follow the rules of turn-based
    responses (docs/protocol.md, "Function calling").

    ``backchannel``: the speech is a short acknowledgement while the user keeps the turn — a
    whole response (with ``end_of_turn``, and only while no turn of the model is open) that
    does not commit the user's utterance (docs/duplex.md, "Backchannels")."""

    echo: TickIdentity
    listen_reason: Optional[str] = None
    audio: bytes = b""
    text_delta: str = ""
    marks: tuple[Mark, ...] = ()
    end_of_turn: bool = False
    user_transcript_delta: str = ""
    engine_state: Optional[dict] = None
    usage: Optional[TokenUsage] = None
    continue_turn: bool = False
    function_call: Optional[FunctionCallChunk] = None
    backchannel: bool = False


class EngineError(DuplexError):
    """An engine step failed; the worker logs ``tick.failed`` with ``code`` and ``message``."""

    def __init__(self, code: str, message: str) -> None:
        self.code, self.message = code, message
        super().__init__(f"{code}: {message}")


@runtime_checkable
class Engine(Protocol):
    """A model behind the tick protocol.

    ``name`` is recorded with every output; ``kinds`` are the tick kinds it runs (``speech``,
    ``world``, ``transcription``, ``duplex``); ``step`` gets the context of its kind
    (:class:`TickContext`, ``WorldContext``, :class:`TranscriptionContext`,
    :class:`UnitContext`). ``step`` must be deterministic in the
    tick for replay to reproduce outputs.

    **Batches (optional).** An engine may also define ``step_batch(ctxs) -> list``: the
    worker (``duplex-es worker --batch-size B``) then hands it every claimed tick of one kind
    at once — up to B contexts, at most one per session, oldest tick first — and it returns
    one entry per context, in the same order: the output :meth:`step` would have returned,
    or an :class:`EngineError` instance for a tick that failed (that tick's response fails;
    the others go on). A GPU plugin runs the batch as one forward pass; each output must
    still echo its own context's identity, and be the same as that tick stepped alone
    (determinism). Raising from ``step_batch``, or returning a list of the wrong length,
    fails every tick of the batch. An engine with ``step`` alone is run tick by tick; the
    claims, heartbeat, fencing and the one-transaction commit are the same either way
    (:class:`BatchEngine`, docs/architecture.md, "Ticks and workers").
    """

    name: str
    kinds: tuple[str, ...]

    def step(self, ctx: TickContext) -> EngineOutput:
        """Run one tick. Raises :class:`EngineError` for a failure the session should see."""
        ...


@runtime_checkable
class BatchEngine(Engine, Protocol):
    """An :class:`Engine` that steps many sessions' ticks at once (see :class:`Engine`)."""

    def step_batch(self, ctxs: Sequence[Any]) -> Sequence[Any]:
        """Run the ticks of ``ctxs`` (one kind, distinct sessions) as one batch.

        Returns:
            ``len(ctxs)`` entries in the order of ``ctxs``: each the tick's output (as
            :meth:`Engine.step` returns it) or an :class:`EngineError` for that tick alone.

        Raises:
            Exception: the whole batch failed; every tick of it fails with ``engine_failed``.
        """
        ...


#: ``cut(session_id, segments, bytes_per_sample) -> bytes``: the logged input audio of those
#: segments (the worker reads it from the log; engines get it through their context).
AudioCutter = Callable[[str, tuple[AudioSegment, ...], int], bytes]


@attrs.frozen(kw_only=True)
class TickContract:
    """How a worker runs one kind of tick (docs/architecture.md, "Session kinds"): the
    engine's input and what its output is logged as. The claim, heartbeat, fencing and commit
    are the same for every kind.

    Attributes:
        kind: the ticks' ``kind`` (``speech``, ``world``, ``transcription``), which an engine
            lists in its ``kinds``.
        context: ``context(session_id, tick, cut_audio) -> ctx``: what ``engine.step`` gets.
        answer: ``answer(session_id, engine_name, output) -> events``: the log events for the
            engine's output; their identity comes from the engine's echo, not from the claim,
            so an engine that answers the wrong tick is caught by the session (I5).
    """

    kind: str
    context: Callable[[str, TickRequest, AudioCutter], Any]
    answer: Callable[[str, str, Any], list[Event]]
