"""Full-duplex speech: the events of a session whose model listens while the user speaks and
decides by itself when to talk (docs/duplex.md; vLLM-Omni's model-native "auto-response"
sessions, docs/sources.md).

Input is submitted to the model continuously: each *unit* (``duplex.unit.issued``, a fenced
tick of kind ``duplex``) applies the appends that arrived since the previous one, at least one
``chunk_period_ms`` of audio on the input clock, each append exactly once and in order (as world
interactions are). The engine answers every unit (``duplex.unit.output``): it listens (with a
reason), or speaks (audio and text with marks, opening a response when none is open), may end
its turn, and may report the user's words as they are recognised; the state it needs for the
next unit comes back with the output and the next unit carries it, so a worker that takes a
session over continues the same conversation. User speech over the model's turn goes through the
session's overlap policy, each decision logged (``overlap.decided``).
"""

from __future__ import annotations

from typing import Any, Optional

from duplex_es.events.base import Event, event
from duplex_es.events.catalogue import AudioSegment, FunctionCallChunk, HistoryEntry, Mark, SpeechInputs, TokenUsage
from duplex_es.events.ticks import TickAnswer, TickRequest

__all__ = ["UnitIssued", "UnitOutput", "UnitFailed", "OverlapDecided", "TurnRequested"]


@event("duplex.unit.issued")
class UnitIssued(TickRequest):
    """One unit of continuous input for the model (docs/duplex.md, "Units").

    ``purpose`` ``judge`` (:data:`~duplex_es.events.JUDGE_UNIT`) makes it a *judge unit* of a
    turn-based session's ``semantic_vad`` (docs/protocol.md, "Turn detection"): it applies no
    appends (the input buffer's commit does), ``audio`` is the user's utterance so far, from
    where its speech started, and ``pause_ms`` the pause (ms) after a finished sentence that
    ends the turn at the session's eagerness; the engine answers only whether the user's turn is
    over (listen reason :data:`~duplex_es.events.USER_TURN_ENDED`) and never speaks.

    ``applied_event_ids`` are the seqs of the appends it applies, in order, each applied by
    exactly one committed unit (a unit a barge-in cancels gives them back to the next one);
    ``audio`` their segments of logged audio and ``start_sample`` where the first begins on the
    input clock (samples). ``chunk_index`` counts the session's units from 0. ``response_id``
    is the model's open turn (``None``: the model is listening) — an engine whose turn was
    cancelled sees it gone. ``engine_state`` is what the previous committed output left
    (``None`` for the first unit); ``inputs`` the session's settings the engine reads (formats,
    voice, instructions, tools; no history: the engine keeps what it needs in its state).
    ``silence_ms`` is quiet time the engine is to hear after the unit's audio: a *silence
    unit*'s whole period (no audio), issued on the clock when no input came while the engine is
    mid-turn, or what completes a period after input that stopped short of one (docs/duplex.md,
    "Silence units"). ``issued_at_ms`` is the host's clock when it was issued
    (Unix ms; ``None`` when none was given), which paces silence units.
    ``items`` are the conversation items the client created since the previous unit (a typed
    message, a ``function_call_output``), as the model reads them, in conversation order: each
    reaches the model in exactly one committed unit. ``turn_requested``: the client asked for
    the model's turn (``response.create``; its instructions, if it gave some, are the unit's
    ``inputs.instructions``); the engine decides whether it speaks. ``acknowledged``: speech
    over the model's turn was decided a short acknowledgement since the previous unit (the
    overlap policy's ``short_acknowledgement``): the model talks through it and does not answer
    it.
    """

    request_id: str
    epoch: int
    chunk_index: int
    applied_event_ids: tuple[int, ...] = ()
    audio: tuple[AudioSegment, ...] = ()
    start_sample: int = 0
    purpose: str = "listen"
    pause_ms: int = 0
    response_id: Optional[str] = None
    engine_state: Optional[dict[str, Any]] = None
    inputs: SpeechInputs = SpeechInputs()
    silence_ms: int = 0
    issued_at_ms: Optional[int] = None
    items: tuple[HistoryEntry, ...] = ()
    turn_requested: bool = False
    acknowledged: bool = False
    kind: str = "duplex"

    def failed(self, session_id: str, code: str, message: str) -> "UnitFailed":
        """The answer a worker logs when its engine failed on this unit (echoing it)."""
        return UnitFailed(
            session_id=session_id,
            request_id=self.request_id,
            epoch=self.epoch,
            chunk_index=self.chunk_index,
            applied_event_ids=self.applied_event_ids,
            code=code,
            message=message,
        )


@event("duplex.unit.output")
class UnitOutput(TickAnswer):
    """The engine's answer to one unit, echoing its identity (``session_id``, ``request_id``,
    ``epoch``, ``chunk_index``, ``applied_event_ids``).

    With no ``audio`` and no ``text_delta`` the model *listens*, for ``listen_reason``
    (``user_speaking``, ``waiting_for_end_of_turn``, ``silence``, ...). Otherwise it *speaks*:
    ``audio`` (base64, the session's output format) and ``text_delta`` with ``marks``
    (cumulative over the item, as ``tick.output``), opening a response if none is open — the
    user's words since the last user item become a user item first. ``end_of_turn`` ends the
    model's turn (its response is done). ``user_transcript_delta`` adds to what the engine heard
    of the user's current utterance. ``engine_state`` is what the next unit starts from.
    ``continue_turn``: the engine is judging the end of the user's turn and wants to hear the
    quiet that follows even if no input comes (silence units; its own open turn always gets
    them).
    ``function_call``: a chunk of a function call instead of audio and text (the rules of
    docs/protocol.md, "Function calling": a call opens an item of the model's turn — the turn
    itself when none is open — streams its arguments and is ``done`` before anything follows;
    the ids of the items it opens derive from the unit, so every replay names them the same).

    ``backchannel``: the speech is a short acknowledgement ("Mm-hm.") said while the user keeps
    the turn — a whole response of its own, so it comes with ``end_of_turn`` and only while
    the model holds no turn, and the user's utterance is not committed: it goes on
    accumulating into the next user item (docs/duplex.md, "Backchannels"). An output breaking
    those rules fails its unit with ``invalid_engine_backchannel``. Default ``False``: logs
    written before it existed decode unchanged.
    """

    session_id: str
    request_id: str
    epoch: int
    chunk_index: int
    applied_event_ids: tuple[int, ...] = ()
    listen_reason: Optional[str] = None
    audio: str = ""
    text_delta: str = ""
    marks: tuple[Mark, ...] = ()
    end_of_turn: bool = False
    user_transcript_delta: str = ""
    engine_state: Optional[dict[str, Any]] = None
    engine: str = ""
    usage: Optional[TokenUsage] = None
    continue_turn: bool = False
    function_call: Optional[FunctionCallChunk] = None
    backchannel: bool = False


@event("duplex.unit.failed")
class UnitFailed(TickAnswer):
    """The engine failed on a unit: the model's open turn (if any) ends ``failed`` and the
    unit's appends go to the next unit."""

    FAILURE = True

    session_id: str
    request_id: str
    epoch: int
    chunk_index: int
    applied_event_ids: tuple[int, ...] = ()
    code: str
    message: str


@event("overlap.decided")
class OverlapDecided(Event):
    """The overlap policy's decision on user speech over the model's turn (docs/duplex.md,
    "Overlap"): ``decision`` ``barge_in`` (the model's turn is cancelled), ``listen`` (the model
    goes on; the speech still reaches it) or ``drop`` (the model goes on and does not hear the
    speech); ``reason`` why (``user_speech_over_the_model``, ``long_overlap_speech``,
    ``short_acknowledgement``, ``policy_listen``, ``policy_drop``); ``response_id`` the turn it
    overlapped; ``audio_start_ms`` where the speech began on the input clock; ``item_id`` the
    speech's id (server VAD's ``speech_started``)."""

    decision: str
    reason: str
    response_id: str
    audio_start_ms: int
    item_id: Optional[str] = None


@event("duplex.turn.requested")
class TurnRequested(Event):
    """The client asked a full-duplex model for its turn (``response.create`` in a
    ``full_duplex`` session, e.g. after sending a tool's output): the next unit carries the
    request at once and the model decides whether and what it says (docs/duplex.md, "Function
    calls and client items"). ``metadata`` is echoed by the turn the model opens next;
    ``instructions`` (``None``: the session's) ride in the unit that carries the request."""

    client_event_id: Optional[str] = None
    metadata: Optional[Any] = None
    instructions: Optional[str] = None
