"""The reference full-duplex engine: a deterministic listening agent on the CPU (docs/duplex.md,
"The reference engine").

It hears every unit of the session's input, while it speaks too. While the user speaks it
listens, and every :data:`PARTIAL_EVERY_MS` of new speech it decodes the utterance so far with
pocketsphinx and reports the words beyond those already reported (user transcript deltas). It
judges the end of the user's turn from the pauses and the words: :data:`END_SILENCE_MS` of
silence after at least :data:`MIN_SPEECH_MS` of speech — twice as long when the last word heard
leaves the sentence open (``and``, ``but``, ``um``, ...). Then it answers as the cascade echo
agent does ("You said: ..."), spoken by espeak-ng and streamed :data:`REPLY_CHUNK_MS` per unit
(about twice real time at 200 ms units, as a GPU model streams; twice the unit's length for
longer units), and ends its turn with the last chunk. Partial decodes stop at
:data:`PARTIAL_UNTIL_MS` of speech and a turn ends at :data:`MAX_TURN_SPEECH_MS` (each decode
reads the whole utterance). Speech is told from silence by frame energy (10 ms frames above
:data:`SPEECH_DBFS`).

**Listening while it speaks.** User speech over its turn that the session lets through
(``duplex.overlap`` ``listen``) goes on accumulating, with partial decodes, while the reply
streams; once its turn is over it judges that utterance as any other (the end of the user's turn
→ the next reply). A barge-in drops the reply and keeps what it heard.

**Backchannels** (``duplex.backchannels``, off by default). After every
:data:`BACKCHANNEL_EVERY_MS` of speech in the user's utterance, at the first pause of at least
:data:`BACKCHANNEL_PAUSE_MS` that does not end the turn, it says :data:`BACKCHANNEL` — the whole
clip in one output, ``end_of_turn`` and ``backchannel`` — and listens on to the same utterance.

**Tools.** With the session's ``tools``, it follows the reference agent's rule
(:mod:`duplex_es.worker.speech.tools`) when the user's turn ends: it calls the tools the words
name, :data:`~duplex_es.worker.speech.engine.ARGUMENT_CHARS_PER_TICK` characters of arguments
per unit, and ends its turn; once every call's output came (in a unit's ``items``) it says what
the tools returned when the client asks for the turn (``turn_requested``: clients send
``response.create`` after a tool's output), or one unit later. A turn request while the user
speaks ends the user's turn; with only typed messages waiting, it answers them.

**Judge units** (``semantic_vad`` in a turn-based session): it only judges whether the user's
turn is over, by :func:`end_of_turn_silence_ms` with the unit's ``pause_ms``.

Everything it needs between units is in its state (JSON, carried by the log from unit to unit):
the utterance's audio segments, what it reported, and while speaking the reply's text and the next
chunk. The reply's audio is recomputed from the text (deterministic), so a worker that takes the
session over after a crash continues with the same words and bytes.
"""

from __future__ import annotations

import logging
import math
from collections import OrderedDict
from typing import Any

import attrs
import numpy as np

from duplex_es.audio import decode_to_pcm16, encode_from_pcm16
from duplex_es.audio.pcm import bytes_per_sample
from duplex_es.events import JUDGE_UNIT, USER_TURN_ENDED, AudioSegment, FunctionCallChunk, Mark, SpeechInputs
from duplex_es.worker.engine import EngineError, UnitContext, UnitOutputs
from duplex_es.worker.speech.engine import ARGUMENT_CHARS_PER_TICK, reply_text
from duplex_es.worker.speech.tools import decide, output_sentence
from duplex_es.worker.speech.tts import ESPEAK_VOICES

__all__ = [
    "FullDuplexEngine",
    "END_SILENCE_MS",
    "MIN_SPEECH_MS",
    "PARTIAL_EVERY_MS",
    "PARTIAL_UNTIL_MS",
    "MAX_TURN_SPEECH_MS",
    "REPLY_CHUNK_MS",
    "SPEECH_DBFS",
    "OPEN_ENDINGS",
    "end_of_turn_silence_ms",
    "BACKCHANNEL",
    "BACKCHANNEL_EVERY_MS",
    "BACKCHANNEL_PAUSE_MS",
]

log = logging.getLogger(__name__)

#: Silence after speech that ends the user's turn (ms of input audio).
END_SILENCE_MS = 700

#: The least speech that makes a turn (ms): shorter sounds are noise, a cough, a click.
MIN_SPEECH_MS = 300

#: New speech (ms) between two partial decodes of the utterance.
PARTIAL_EVERY_MS = 1000

#: Partial decodes stop once the utterance holds this much speech (ms): each decodes the whole
#: utterance again, so their cost grows with its square; the final decode reports the rest.
PARTIAL_UNTIL_MS = 6000

#: The longest user turn (ms of speech): past it the agent answers as if the user had paused —
#: what it holds in its state, and the final decode's time, stay bounded.
MAX_TURN_SPEECH_MS = 15_000

#: Reply audio per unit (ms).
REPLY_CHUNK_MS = 400

#: A 10 ms frame is speech above this level (dBFS of its RMS); the fixture's background noise
#: is about -48 dBFS, speech -30 to -15.
SPEECH_DBFS = -38.0

#: Last words that leave a sentence open: the pause that ends the turn is twice as long.
OPEN_ENDINGS = frozenset({"and", "but", "or", "so", "because", "um", "uh", "the", "a", "to", "of", "with", "if", "then"})

#: What it says to acknowledge the user while they keep talking (``duplex.backchannels``).
BACKCHANNEL = "Mm-hm."

#: Speech (ms of the current utterance) between two backchannels.
BACKCHANNEL_EVERY_MS = 4000

#: The pause (ms) that, once :data:`BACKCHANNEL_EVERY_MS` of speech went by, it acknowledges;
#: shorter than :data:`END_SILENCE_MS`, so the turn goes on.
BACKCHANNEL_PAUSE_MS = 300

#: The state's keys that describe the user's current utterance (forgotten when it was noise).
_UTTERANCE = ("speech_ms", "silence_ms", "utterance", "heard", "partial_at_ms", "backchannel_at_ms")

_FRAME_MS = 10
_THRESHOLD = 32768 * 10 ** (SPEECH_DBFS / 20)


def end_of_turn_silence_ms(words: list[str], base_ms: int = END_SILENCE_MS) -> int:
    """The silence (ms) after at least :data:`MIN_SPEECH_MS` of speech that ends the user's
    turn, given the ``words`` heard so far: ``base_ms``, twice as long when the last word leaves
    the sentence open (:data:`OPEN_ENDINGS`). The engine's rule for its own turns
    (``base_ms`` :data:`END_SILENCE_MS`) and for ``semantic_vad``'s judge units (the unit's
    ``pause_ms``)."""
    return base_ms * (2 if words and words[-1] in OPEN_ENDINGS else 1)


def _voiced_frames(pcm: np.ndarray, rate: int) -> list[bool]:
    """Speech or not for each 10 ms frame of ``pcm`` (a last partial frame counts too)."""
    n = max(1, rate * _FRAME_MS // 1000)
    out = []
    for at in range(0, len(pcm), n):
        frame = pcm[at : at + n].astype(np.float64)
        out.append(math.sqrt(float(np.mean(frame * frame))) > _THRESHOLD if len(frame) else False)
    return out


class FullDuplexEngine:
    """Listens to every unit, its own turns included, and decides when to talk (tick kind
    ``duplex``).

    Args:
        recognizer: a :class:`~duplex_es.worker.speech.asr.Recognizer` to share with the other
            speech engines of the worker (one decoder process); a new one if ``None``.
        reply_chunk_ms: reply audio per unit, ms.
    """

    name = "duplex_es.full_duplex_echo/1"
    kinds = ("duplex",)

    def __init__(self, recognizer: object = None, reply_chunk_ms: int = REPLY_CHUNK_MS) -> None:
        from duplex_es.worker.speech.asr import Recognizer
        from duplex_es.worker.speech.tts import Synthesizer

        self._asr = recognizer or Recognizer()
        self._tts = Synthesizer()
        self.reply_chunk_ms = reply_chunk_ms
        self._spoken: OrderedDict[tuple, _Plan] = OrderedDict()
        self._judged: OrderedDict[tuple, list[str]] = OrderedDict()  # judge units' decodes

    # -------------------------------------------------------------------------------- state

    @staticmethod
    def _fresh() -> dict[str, Any]:
        """Listening, with no utterance: ``speech_ms`` / ``silence_ms`` of the utterance (its
        speech, the quiet since its last voiced frame), its ``utterance`` segments, the words
        ``heard`` (reported), the speech at the last partial decode and at the last backchannel;
        the calls whose outputs it ``awaits`` (call_id → name), the ``outputs`` come so far
        (``[name, output]``) and whether it already waited a unit for the turn request
        (``outputs_waited``); the words the user ``typed`` (messages in the units' items)."""
        return {
            "phase": "listening", "speech_ms": 0, "silence_ms": 0, "utterance": [], "heard": "", "partial_at_ms": 0, "backchannel_at_ms": 0,
            "awaiting": {}, "outputs": [], "outputs_waited": False, "typed": "",
        }

    @classmethod
    def _listening(cls, state: dict[str, Any]) -> dict[str, Any]:
        """``state`` back to listening, keeping the utterance it is hearing (the reply dropped)."""
        return {k: state[k] for k in cls._fresh()} | {"phase": "listening"}

    @classmethod
    def _forget_utterance(cls, state: dict[str, Any]) -> dict[str, Any]:
        """``state`` with the user's current utterance forgotten (noise, or an acknowledgement);
        its turn, calls awaited and outputs stay."""
        fresh = cls._fresh()
        return {**state, **{k: fresh[k] for k in _UTTERANCE}}

    def step(self, ctx: UnitContext) -> UnitOutputs:
        """Hear one unit; then listen, acknowledge, call a tool, or speak the next chunk of its
        turn (a judge unit: only judge whether the user's turn is over)."""
        tick = ctx.tick
        if tick.purpose == JUDGE_UNIT:
            return self._judge(ctx)
        inputs = tick.inputs
        # Defaults first: a state written before a field existed (a take-over) still steps.
        state = {**self._fresh(), **tick.engine_state} if tick.engine_state else self._fresh()
        if state["phase"] != "listening" and tick.response_id is None:
            state = self._listening(state)  # the user barged in: the turn is gone, what they said stays
        fmt = inputs.input_format
        raw = ctx.read_audio(tick.audio) if tick.audio else b""
        pcm = decode_to_pcm16(raw, fmt.type) if raw else np.zeros(0, dtype="<i2")
        unit_ms = len(pcm) * 1000 // fmt.rate + tick.silence_ms  # a silence unit is quiet time
        if tick.acknowledged:
            # The session decided the speech over its turn was an "mm-hm": talk through it,
            # never answer it.
            state = self._forget_utterance(state)
        hearing = self._hear(state, pcm, fmt.rate, unit_ms, tick.audio)
        if state["phase"] == "calling":
            return self._call(ctx, state)
        _read_items(tick, state)
        quiet = state["phase"] == "listening" and not state["utterance"]  # nobody speaks: the model may take the turn
        if quiet and state["outputs"] and not state["awaiting"]:
            # Every call was answered: say what the tools returned once the client asks for the
            # turn (clients send response.create after a tool's output), or a unit later. (While
            # the user speaks it waits for the end of their turn, and answers both.)
            if tick.turn_requested or state["outputs_waited"]:
                return self._answer(ctx, "", state, unit_ms, "")
            state["outputs_waited"] = True
            return UnitOutputs(echo=ctx.identity, listen_reason="waiting_for_turn_request", engine_state=state, continue_turn=True)
        if quiet and tick.turn_requested:
            # The client asks for the turn with no speech to answer: answer what was typed, or
            # say nothing was heard — a response.create always gets a response.
            return self._answer(ctx, "", state, unit_ms, "")
        if not hearing:
            if state["phase"] == "speaking":
                return self._speak(ctx, state, unit_ms, "")
            return UnitOutputs(echo=ctx.identity, listen_reason="silence", engine_state=state)
        delta = ""
        if state["speech_ms"] - state["partial_at_ms"] >= PARTIAL_EVERY_MS and state["speech_ms"] <= PARTIAL_UNTIL_MS:
            delta = self._heard_more(ctx, state)
            state["partial_at_ms"] = state["speech_ms"]
        verdict = _turn_verdict(state, (state["heard"] + delta).split())
        if verdict == "noise":  # a click or a cough: forget it
            state = self._forget_utterance(state)
        if state["phase"] == "speaking":  # it hears the user, and answers once its turn is over
            return self._speak(ctx, state, unit_ms, delta)
        if verdict == "noise":
            return UnitOutputs(echo=ctx.identity, listen_reason="noise", engine_state=state)
        if verdict != "end_of_turn" and not tick.turn_requested:  # a request for the turn ends the user's
            if inputs.backchannels and _backchannel_due(state):
                state["backchannel_at_ms"] = state["speech_ms"]
                return self._backchannel(ctx, state, delta)
            # Ask for the quiet that follows even if the client stops sending (silence units).
            return UnitOutputs(echo=ctx.identity, listen_reason=verdict, user_transcript_delta=delta, engine_state=state, continue_turn=True)
        # The user's turn ended: hear the whole utterance, then answer it.
        delta += self._heard_more(ctx, state, final=True)
        return self._answer(ctx, state["heard"], state, unit_ms, delta)

    def _answer(self, ctx: UnitContext, heard: str, state: dict[str, Any], unit_ms: int, delta: str) -> UnitOutputs:
        """The first output of the model's turn answering ``heard`` and what the user typed:
        the agent's rule (:mod:`duplex_es.worker.speech.tools`) — call the tools the words name
        (then speak its questions, if any), or echo. ``delta``: the user's words it reports with
        it. The answered utterance is done with; the calls awaited and outputs come stay."""
        inputs = ctx.tick.inputs
        said = [output_sentence(name, output) for name, output in state["outputs"]] if not state["awaiting"] else []
        if said and not heard and not state["typed"]:  # the tools answered: say what they returned
            return self._speak(ctx, {**self._fresh(), "awaiting": state["awaiting"], "phase": "speaking", "text": " ".join(said), "at_ms": 0}, unit_ms, delta)
        plan = decide(heard, state["typed"], inputs.tools, inputs.tool_choice, inputs.parallel_tool_calls) if inputs.tools else None
        base = {**self._fresh(), "awaiting": state["awaiting"], "outputs": [] if said else state["outputs"]}
        if plan is not None and plan.calls:
            rid = ctx.tick.request_id.removeprefix("req_")
            calls = [[f"call_{rid}_{n}", c.name, c.arguments] for n, c in enumerate(plan.calls)]
            return self._call(ctx, {**base, "phase": "calling", "calls": calls, "call": 0, "at": 0, "then": " ".join(plan.questions)}, delta)
        text = " ".join(plan.questions) if plan is not None else reply_text(heard, state["typed"])
        return self._speak(ctx, {**base, "phase": "speaking", "text": " ".join([*said, text]), "at_ms": 0}, unit_ms, delta)

    def _call(self, ctx: UnitContext, state: dict[str, Any], heard: str = "") -> UnitOutputs:
        """The next :data:`~duplex_es.worker.speech.engine.ARGUMENT_CHARS_PER_TICK` characters
        of the turn's current call; after the last call, its questions are spoken, or the turn
        ends and the model waits for the tools' outputs (listening meanwhile)."""
        call_id, name, arguments = state["calls"][state["call"]]
        at = state["at"]
        end = at + ARGUMENT_CHARS_PER_TICK
        done = end >= len(arguments)
        chunk = FunctionCallChunk(call_id=call_id, name=name, arguments_delta=arguments[at:end], done=done)
        last = done and state["call"] + 1 == len(state["calls"])
        if not done:
            after = {**state, "at": end}
        elif not last:
            after = {**state, "call": state["call"] + 1, "at": 0}
        elif state["then"]:
            after = {**self._listening(state), "phase": "speaking", "text": state["then"], "at_ms": 0}
        else:
            after = {**self._listening(state), "awaiting": {**state["awaiting"], **{c[0]: c[1] for c in state["calls"]}}, "outputs_waited": False}
        ends = last and not state["then"]
        return UnitOutputs(
            echo=ctx.identity, function_call=chunk, end_of_turn=ends, user_transcript_delta=heard, engine_state=after,
            continue_turn=ends and bool(after["utterance"]),
        )

    def _judge(self, ctx: UnitContext) -> UnitOutputs:
        """A judge unit (``semantic_vad`` in a turn-based session): hear the utterance so far
        and answer only whether the user's turn is over (:func:`end_of_turn_silence_ms` with the
        unit's ``pause_ms``; listen reason :data:`~duplex_es.events.USER_TURN_ENDED`), never
        speaking. The words are decoded only once the pause is long enough to need the last one,
        and once per stretch of speech (cached: a pause grows, the speech before it does not)."""
        tick = ctx.tick
        fmt = tick.inputs.input_format
        raw = ctx.read_audio(tick.audio) if tick.audio else b""
        pcm = decode_to_pcm16(raw, fmt.type) if raw else np.zeros(0, dtype="<i2")
        frames = _voiced_frames(pcm, fmt.rate) if len(pcm) else []
        speech_ms = sum(frames) * _FRAME_MS
        voiced_to = max((i + 1 for i, v in enumerate(frames) if v), default=0)  # frames up to the last voiced one
        silence_ms = (len(frames) - voiced_to) * _FRAME_MS
        if speech_ms < MIN_SPEECH_MS or silence_ms < tick.pause_ms:
            reason = "user_speaking" if silence_ms < 200 else "waiting_for_end_of_turn"
            return UnitOutputs(echo=ctx.identity, listen_reason=reason)
        # The speech and the pause's first ``pause_ms``: a word's quiet tail (a final "d") falls
        # under the speech level, and the decoder needs it to hear the word.
        spoken = pcm[: (voiced_to * _FRAME_MS + tick.pause_ms) * fmt.rate // 1000]
        key = (tick.audio[0].seq, tick.audio[0].offset, len(spoken), fmt.rate)
        words = self._judged.get(key)
        if words is None:
            words = self._asr.transcribe(spoken.tobytes(), fmt.rate).split()  # type: ignore[attr-defined]
            self._judged[key] = words
            while len(self._judged) > 64:
                self._judged.popitem(last=False)
        over = silence_ms >= end_of_turn_silence_ms(words, tick.pause_ms)
        return UnitOutputs(echo=ctx.identity, listen_reason=USER_TURN_ENDED if over else "waiting_for_end_of_turn")

    def _hear(self, state: dict[str, Any], pcm: np.ndarray, rate: int, unit_ms: int, audio: tuple[AudioSegment, ...]) -> bool:
        """Add the unit (``unit_ms`` long, ``audio`` its segments) to the utterance in ``state``:
        its speech, and the quiet since the last voiced frame. ``False`` when it holds no speech
        and no utterance is going on (nothing to hear)."""
        frames = _voiced_frames(pcm, rate) if len(pcm) else []
        voiced = sum(frames) * _FRAME_MS
        if not voiced and not state["utterance"]:
            return False
        state["utterance"] = state["utterance"] + [[s.seq, s.offset, s.samples] for s in audio]
        if voiced:
            trailing = 0
            for v in reversed(frames):
                if v:
                    break
                trailing += _FRAME_MS
            state["speech_ms"] += voiced
            state["silence_ms"] = trailing
        else:
            state["silence_ms"] += unit_ms
        return True

    def _heard_more(self, ctx: UnitContext, state: dict[str, Any], *, final: bool = False) -> str:
        """Decode the utterance so far and report the words beyond those already reported. A
        partial decode reports them only while the words reported so far still start the new
        hypothesis (a decoder revises its guesses); the final decode reports the words past the
        reported count either way — what was reported stays (deltas cannot be taken back)."""
        fmt = ctx.tick.inputs.input_format
        segments = tuple(AudioSegment(seq=a, offset=b, samples=c) for a, b, c in state["utterance"])
        raw = ctx.read_audio(segments)
        words = self._asr.transcribe(decode_to_pcm16(raw, fmt.type).tobytes(), fmt.rate).split() if raw else []  # type: ignore[attr-defined]
        reported = state["heard"].split()
        if not final and words[: len(reported)] != reported:
            return ""
        new = words[len(reported) :]
        if not new:
            return ""
        state["heard"] = " ".join(reported + new)
        return (" " if reported else "") + " ".join(new)

    def _plan(self, text: str, inputs: SpeechInputs) -> _Plan:
        """``text`` spoken in the session's voice and output format: its audio, word marks
        ``(char offset, ms)`` and length (ms) — computed once per worker, then cached (the
        backchannel, the same every time, is synthesized once)."""
        fmt = inputs.output_format
        key = (text, inputs.voice, inputs.speed, fmt.type, fmt.rate, tuple(inputs.output_modalities))
        hit = self._spoken.get(key)
        if hit is not None:
            self._spoken.move_to_end(key)
            return hit
        if "audio" not in inputs.output_modalities:
            plan = _Plan(text, b"", (), 0)
        else:
            if inputs.voice not in ESPEAK_VOICES:
                raise EngineError("unsupported_voice", f"the reference engine has no voice {inputs.voice!r}")
            speech = self._tts.synthesize(text, fmt.rate, inputs.voice, inputs.speed)
            audio = encode_from_pcm16(np.frombuffer(speech.pcm, dtype="<i2"), fmt.type)
            plan = _Plan(text, audio, tuple((m.char_offset, m.audio_ms) for m in speech.marks), speech.duration_ms)
        self._spoken[key] = plan
        while len(self._spoken) > 64:
            self._spoken.popitem(last=False)
        return plan

    def _speak(self, ctx: UnitContext, state: dict[str, Any], unit_ms: int, heard: str) -> UnitOutputs:
        """The next chunk of the reply, from ``state["at_ms"]``: :data:`REPLY_CHUNK_MS`, or twice
        the unit's length (``unit_ms``) when units are longer (so the reply keeps ahead of real
        time at any chunk period); the last ends the turn. ``heard``: the user's words it reports
        with it. After the last chunk it listens on to the utterance it heard while speaking
        (asking for the quiet that follows, if there is one)."""
        # (A state logged before the reply's text was kept in it names the transcript it echoes.)
        said = state["text"] if "text" in state else reply_text(state["transcript"], "")
        plan = self._plan(said, ctx.tick.inputs)
        start = state["at_ms"]
        end = min(start + max(self.reply_chunk_ms, 2 * unit_ms), plan.duration_ms)  # text only: all at once
        last = end >= plan.duration_ms
        after = self._listening(state) if last else {**state, "at_ms": end}
        return UnitOutputs(
            echo=ctx.identity, **_chunk(plan, ctx.tick.inputs, start, end), end_of_turn=last, user_transcript_delta=heard,
            engine_state=after, continue_turn=last and bool(after["utterance"]),
        )

    def _backchannel(self, ctx: UnitContext, state: dict[str, Any], heard: str) -> UnitOutputs:
        """:data:`BACKCHANNEL` in one output, a whole turn of its own; it listens on to the same
        utterance."""
        plan = self._plan(BACKCHANNEL, ctx.tick.inputs)
        return UnitOutputs(
            echo=ctx.identity, **_chunk(plan, ctx.tick.inputs, 0, plan.duration_ms), end_of_turn=True, backchannel=True,
            user_transcript_delta=heard, engine_state=state, continue_turn=True,
        )


@attrs.frozen
class _Plan:
    """Something to say: its text, audio in the output format (``b""`` for text only), word
    marks ``(char offset, ms)`` and length (ms)."""

    text: str
    audio: bytes
    marks: tuple[tuple[int, int], ...]
    duration_ms: int


def _chunk(plan: _Plan, inputs: SpeechInputs, start: int, end: int) -> dict[str, Any]:
    """The audio, text and marks of ``plan`` from ``start`` to ``end`` ms (a text-only plan:
    all of it at once); the last chunk carries the text's end and a closing mark."""
    if not plan.audio:
        return {"text_delta": plan.text}
    width, per_ms = bytes_per_sample(inputs.output_format.type), inputs.output_format.rate // 1000
    last = end >= plan.duration_ms
    text, marks, duration = plan.text, plan.marks, plan.duration_ms
    piece = plan.audio[start * per_ms * width : (len(plan.audio) if last else end * per_ms * width)]
    c0 = _chars_at(marks, start, len(text))
    c1 = len(text) if last else _chars_at(marks, end, len(text))
    out_marks = tuple(Mark(text_chars=o, audio_ms=ms) for o, ms in marks if start <= ms < end)
    if last:
        out_marks += (Mark(text_chars=len(text), audio_ms=duration),)
    return {"audio": piece, "text_delta": text[c0:c1], "marks": out_marks}


def _turn_verdict(state: dict[str, Any], words: list[str]) -> str:
    """Where the user's utterance stands: ``noise`` (too little speech, then quiet: a click, a
    cough), ``user_speaking``, ``waiting_for_end_of_turn`` (a pause, not long enough yet) or
    ``end_of_turn`` (:data:`END_SILENCE_MS` of quiet, twice as long after an open ending; or
    :data:`MAX_TURN_SPEECH_MS` of speech)."""
    if state["speech_ms"] < MIN_SPEECH_MS:
        return "noise" if state["silence_ms"] >= END_SILENCE_MS else "user_speaking"
    needed = end_of_turn_silence_ms(words)
    if state["silence_ms"] < needed and state["speech_ms"] < MAX_TURN_SPEECH_MS:
        return "user_speaking" if state["silence_ms"] < 200 else "waiting_for_end_of_turn"
    return "end_of_turn"


def _backchannel_due(state: dict[str, Any]) -> bool:
    """A pause of :data:`BACKCHANNEL_PAUSE_MS` (one that does not end the turn) after
    :data:`BACKCHANNEL_EVERY_MS` of speech since the utterance began or the last backchannel."""
    return state["speech_ms"] - state["backchannel_at_ms"] >= BACKCHANNEL_EVERY_MS and state["silence_ms"] >= BACKCHANNEL_PAUSE_MS


def _chars_at(marks: tuple[tuple[int, int], ...], ms: int, length: int) -> int:
    """Characters of the words that start before ``ms``."""
    for offset, start in marks:
        if start >= ms:
            return offset
    return length


def _read_items(tick: Any, state: dict[str, Any]) -> None:
    """Take in the client items the unit carries: outputs of calls (the model's own, awaited
    by ``call_id``, or calls the client put in the conversation), and the user's typed words."""
    awaiting = dict(state.get("awaiting") or {})
    outputs = list(state.get("outputs") or [])
    typed = [state["typed"]] if state.get("typed") else []
    named = {e.call_id: e.name for e in tick.items if e.type == "function_call" and e.name}
    for entry in tick.items:
        if entry.type == "function_call_output":
            outputs.append([awaiting.pop(entry.call_id, None) or named.get(entry.call_id) or "the tool", entry.output or ""])
        elif entry.type == "message" and entry.role == "user" and entry.text:
            typed.append(entry.text)
    if tick.items:
        state.update(awaiting=awaiting, outputs=outputs, typed=" ".join(typed))
