"""The reference speech engine: a deterministic cascade agent on the CPU that echoes and uses tools.

Per response: pocketsphinx transcribes the user item's audio; when the user's words name a
declared function tool the agent calls it (or asks for what it lacks), when the history ends with
the tools' outputs it says them, else the reply echoes what was heard and typed — the rule is
:mod:`duplex_es.worker.speech.tools`. Each spoken item is one sentence ("You said: ..."),
espeak-ng speaks it with word marks, and its audio is streamed one chunk of ``chunk_ms`` per
tick in the response's output format (PCM16 at 24 or 16 kHz, G.711 mu-law or a-law at 8 kHz); a
call's arguments are streamed :data:`ARGUMENT_CHARS_PER_TICK` characters per tick, so a barge-in
can land mid-call. The plan of a response is a pure function of its tick inputs and is cached
per worker, so tick ``k`` on any worker produces the same bytes and the same call ids — a worker
that takes over a tick after a crash continues the same audio or call.
"""

from __future__ import annotations

import logging
import re
from collections import OrderedDict
import attrs
import numpy as np

from duplex_es.audio import decode_to_pcm16, encode_from_pcm16
from duplex_es.audio.pcm import bytes_per_sample
from duplex_es.events import FunctionCallChunk, InputTranscript, Mark, SpeechInputs, TokenUsage
from duplex_es.worker.engine import EngineError, EngineOutput, TickContext, TranscriptionContext, TranscriptionOutput
from duplex_es.worker.speech.tools import answered_outputs, argument_tokens, decide, output_sentence
from duplex_es.worker.speech.tts import ESPEAK_VOICES

__all__ = [
    "CascadeSpeechEngine",
    "PocketsphinxTranscriber",
    "ItemPlan",
    "CallPlan",
    "call_id_of",
    "SpeechPlan",
    "reply_items",
    "reply_text",
    "limit_tokens",
    "MAX_REPLY_CHARS",
    "MAX_REPLY_ITEMS",
    "ARGUMENT_CHARS_PER_TICK",
    "bounded",
]

log = logging.getLogger(__name__)

#: Words per tick when the response is text only.
TEXT_WORDS_PER_CHUNK = 4

#: The longest reply the echo agent gives, in characters (about a minute of speech): a reply is
#: one plan held in memory, so its size must not depend on what a client sends. A longer reply
#: is cut and the response ends ``incomplete`` (``max_output_tokens``).
MAX_REPLY_CHARS = 1000

#: The most output items (sentences) one reply has.
MAX_REPLY_ITEMS = 4

#: Characters of a function call's arguments streamed per tick.
ARGUMENT_CHARS_PER_TICK = 24

_SENTENCE = re.compile(r"[^.!?]+[.!?]*")


def reply_items(transcript: str, typed: str) -> tuple[list[str], bool]:
    """The echo agent's reply: one item per sentence of what was typed and heard, and whether
    the reply was cut to :data:`MAX_REPLY_ITEMS` items / :data:`MAX_REPLY_CHARS` characters."""
    sentences = [s.strip() for s in _SENTENCE.findall(typed.strip()) if s.strip()]
    if transcript.strip():
        sentences.append(transcript.strip())
    if not sentences:
        return ["I did not catch that. Could you say it again?"], False
    return bounded([f"You said: {s.rstrip('.!?')}." for s in sentences])


def bounded(sentences: list[str]) -> tuple[list[str], bool]:
    """``sentences`` (one output item each) cut to :data:`MAX_REPLY_ITEMS` items and
    :data:`MAX_REPLY_CHARS` characters, and whether anything was cut (a sentence cut short
    ends with ``...``)."""
    cut = len(sentences) > MAX_REPLY_ITEMS
    items: list[str] = []
    total = 0
    for text in sentences[:MAX_REPLY_ITEMS]:
        room = MAX_REPLY_CHARS - total
        if len(text) > room:
            text = text[: max(room - 3, 0)].rsplit(" ", 1)[0] + "..."
            cut = True
        items.append(text)
        total += len(text)
        if total >= MAX_REPLY_CHARS - 3:
            cut = cut or len(items) < len(sentences)
            break
    return items, cut


def limit_tokens(texts: list[str], max_tokens: object) -> tuple[list[str], bool]:
    """``texts`` cut to ``max_tokens`` tokens in all (GA ``max_output_tokens``: an int, or
    ``"inf"``), and whether anything was cut. The echo agent's token is a word."""
    if not isinstance(max_tokens, int):
        return texts, False
    out: list[str] = []
    left = max_tokens
    for text in texts:
        words = text.split(" ")
        if len(words) <= left:
            out.append(text)
            left -= len(words)
            continue
        if left > 0:
            out.append(" ".join(words[:left]))
        return out, True
    return out, False


def tokens_of(text: str) -> int:
    """The echo agent's token count of ``text``: its words."""
    return len(text.split())


#: Audio tokens per second as OpenAI's realtime models count them (one per 100 ms of user
#: audio, one per 50 ms of assistant audio); the echo agent reports its audio the same way.
INPUT_AUDIO_TOKENS_PER_S, OUTPUT_AUDIO_TOKENS_PER_S = 10, 20


def reply_text(transcript: str, typed: str) -> str:
    """The whole reply as one string (its items joined with spaces)."""
    return " ".join(reply_items(transcript, typed)[0])


@attrs.frozen
class ItemPlan:
    """One output item: its text, its audio in the output format, and word marks."""

    text: str
    audio: bytes
    marks: tuple[tuple[int, int], ...]  # (char offset of a word, its start in ms)
    duration_ms: int

    def chars_at(self, ms: int) -> int:
        """Characters of the words that start before ``ms``."""
        for offset, start in self.marks:
            if start >= ms:
                return offset
        return len(self.text)


@attrs.frozen
class CallPlan:
    """One ``function_call`` output item: the call's id, the function and its arguments (JSON
    object text), streamed :data:`ARGUMENT_CHARS_PER_TICK` characters per chunk."""

    call_id: str
    name: str
    arguments: str


def call_id_of(response_id: str, index: int) -> str:
    """The id of a response's ``index``-th call (0-based): ``call_<response id without its
    resp_ prefix>_<index>`` — a function of the tick, so every worker and replay names a call
    the same, and unique in the session because response ids are."""
    return f"call_{response_id.removeprefix('resp_')}_{index}"


@attrs.frozen
class SpeechPlan:
    """Everything a response will say and call, and how it is cut into ticks: ``chunks[k]`` is
    ``(item index, chunk index within the item)``. ``transcribed``: the user item's audio was
    transcribed (``transcript``), which the first chunk reports."""

    transcript: str
    items: tuple[ItemPlan | CallPlan, ...]
    cut: bool
    chunks: tuple[tuple[int, int], ...]
    input_audio_ms: int = 0
    cut_reason: str = "max_output_tokens"
    transcribed: bool = False


class CascadeSpeechEngine:
    """ASR (pocketsphinx) → tool calls or a reply → TTS (espeak-ng), streamed in chunks.

    Args:
        chunk_ms: audio per tick, in ms.
        cache_size: responses whose plan is kept in memory.

    The ASR model is loaded once, when the engine is built.
    """

    name = "duplex_es.cascade_echo/1"
    kinds = ("speech",)

    def __init__(self, chunk_ms: int = 500, cache_size: int = 64, recognizer: object = None) -> None:
        from duplex_es.worker.speech.asr import Recognizer
        from duplex_es.worker.speech.tts import Synthesizer

        if chunk_ms <= 0:
            raise ValueError("chunk_ms must be > 0")
        self.chunk_ms = chunk_ms
        self._asr = recognizer or Recognizer()
        self._tts = Synthesizer()
        self._plans: OrderedDict[tuple[str, str], SpeechPlan] = OrderedDict()
        self._cache_size = cache_size

    def plan(self, ctx: TickContext) -> SpeechPlan:
        """The response's plan (computed once per worker, then cached)."""
        key = (ctx.session_id, ctx.tick.response_id)
        plan = self._plans.get(key)
        if plan is not None:
            self._plans.move_to_end(key)
            return plan
        plan = self._make_plan(ctx)
        self._plans[key] = plan
        while len(self._plans) > self._cache_size:
            self._plans.popitem(last=False)
        return plan

    def _make_plan(self, ctx: TickContext) -> SpeechPlan:
        inputs: SpeechInputs = ctx.tick.inputs
        transcript = ""
        input_ms = 0
        calls: list[CallPlan] = []
        outputs = answered_outputs(inputs.history)
        transcribed = bool(inputs.user_audio) and not outputs
        if outputs:
            # The tools have answered: say what they returned (the user's words were read by
            # the response that made the calls, so the audio is not transcribed again).
            texts, cut = bounded([output_sentence(name, output) for name, output in outputs])
        else:
            if transcribed:
                raw = ctx.read_audio(inputs.user_audio)
                pcm = decode_to_pcm16(raw, inputs.input_format.type)
                input_ms = len(pcm) * 1000 // inputs.input_format.rate
                transcript = self._asr.transcribe(pcm.tobytes(), inputs.input_format.rate)
            tools = decide(transcript, inputs.user_text, inputs.tools, inputs.tool_choice, inputs.parallel_tool_calls)
            if tools is None:
                texts, cut = reply_items(transcript, inputs.user_text)
            else:
                calls = [CallPlan(call_id_of(ctx.tick.response_id, n), c.name, c.arguments) for n, c in enumerate(tools.calls)]
                texts, cut = bounded(list(tools.questions))
        texts, cut_tokens = limit_tokens(texts, inputs.max_output_tokens)
        cut = cut or cut_tokens
        if not texts and not calls:
            texts = [""]
        fmt = inputs.output_format
        items: list[ItemPlan | CallPlan] = list(calls)
        for text in texts:
            if "audio" in inputs.output_modalities:
                if inputs.voice not in ESPEAK_VOICES:
                    raise EngineError("unsupported_voice", f"the reference engine has no voice {inputs.voice!r}")
                speech = self._tts.synthesize(text, fmt.rate, inputs.voice, inputs.speed) if text else None
                if speech is None:
                    items.append(ItemPlan(text, b"", (), 0))
                    continue
                audio = encode_from_pcm16(np.frombuffer(speech.pcm, dtype="<i2"), fmt.type)
                items.append(ItemPlan(text, audio, tuple((m.char_offset, m.audio_ms) for m in speech.marks), speech.duration_ms))
            else:
                items.append(ItemPlan(text, b"", (), 0))
        chunks = []
        for i, item in enumerate(items):
            if isinstance(item, CallPlan):
                n = max(1, -(-len(item.arguments) // ARGUMENT_CHARS_PER_TICK))
            elif item.audio:
                n = max(1, -(-item.duration_ms // self.chunk_ms))
            else:
                n = max(1, -(-len(item.text.split(" ")) // TEXT_WORDS_PER_CHUNK))
            chunks += [(i, j) for j in range(n)]
        # Sizes and tool names only: what was said is the session's content, kept out of the
        # process's log (docs/privacy.md); the log holds it, sealed when a master key is set.
        log.info(
            "planned %s/%s: heard %d chars, calling %s, replying %d chars in %d chunk(s)",
            ctx.session_id, ctx.tick.response_id, len(transcript), [c.name for c in calls] or "no tool", sum(len(t) for t in texts), len(chunks),
        )
        return SpeechPlan(transcript, tuple(items), cut, tuple(chunks), input_ms, transcribed=transcribed)

    def step(self, ctx: TickContext) -> EngineOutput:
        """Produce chunk ``ctx.tick.chunk_index`` of the response."""
        plan = self.plan(ctx)
        k = ctx.tick.chunk_index
        if k >= len(plan.chunks):
            raise EngineError("chunk_out_of_range", f"the reply has {len(plan.chunks)} chunks, not {k + 1}")
        i, j = plan.chunks[k]
        item = plan.items[i]
        final = k == len(plan.chunks) - 1
        last_of_item = k + 1 == len(plan.chunks) or plan.chunks[k + 1][0] != i
        heard: tuple[InputTranscript, ...] = ()
        reply_to = ctx.tick.inputs.reply_to_item_id
        if k == 0 and reply_to is not None and plan.transcribed:
            heard = (InputTranscript(item_id=reply_to, transcript=plan.transcript),)
        inputs = ctx.tick.inputs
        common = dict(
            echo=ctx.identity,
            new_item=j == 0 and i > 0,
            final=final,
            incomplete_reason="max_output_tokens" if final and plan.cut else None,
            input_transcripts=heard,
            not_applied=_ignored(inputs) if k == 0 else (),
        )
        read = TokenUsage(
            input_text_tokens=tokens_of(inputs.user_text) + sum(_history_tokens(h) for h in inputs.history if h.item_id != inputs.reply_to_item_id),
            input_audio_tokens=plan.input_audio_ms * INPUT_AUDIO_TOKENS_PER_S // 1000,
        ) if k == 0 else TokenUsage()
        if isinstance(item, CallPlan):
            # A call has no audio or text; its arguments are counted once, when complete.
            delta = item.arguments[j * ARGUMENT_CHARS_PER_TICK : (j + 1) * ARGUMENT_CHARS_PER_TICK]
            chunk = FunctionCallChunk(call_id=item.call_id, name=item.name, arguments_delta=delta, done=last_of_item)
            usage = read + TokenUsage(output_text_tokens=argument_tokens(item.arguments) if last_of_item else 0)
            return EngineOutput(function_call=chunk, usage=usage, **common)  # type: ignore[arg-type]
        if not item.audio:
            words = item.text.split(" ")
            part = words[j * TEXT_WORDS_PER_CHUNK : (j + 1) * TEXT_WORDS_PER_CHUNK]
            delta = " ".join(part) + ("" if last_of_item else " ")
            usage = read + TokenUsage(output_text_tokens=tokens_of(delta))
            return EngineOutput(text_delta=delta, usage=usage, **common)  # type: ignore[arg-type]
        fmt = ctx.tick.inputs.output_format
        per_ms_samples = fmt.rate // 1000
        width = bytes_per_sample(fmt.type)
        start_ms, end_ms = j * self.chunk_ms, min((j + 1) * self.chunk_ms, item.duration_ms)
        a = start_ms * per_ms_samples * width
        b = len(item.audio) if last_of_item else end_ms * per_ms_samples * width
        c0, c1 = item.chars_at(start_ms), (len(item.text) if last_of_item else item.chars_at(end_ms))
        marks = tuple(Mark(text_chars=o, audio_ms=ms) for o, ms in item.marks if start_ms <= ms < end_ms)
        if last_of_item:
            marks += (Mark(text_chars=len(item.text), audio_ms=item.duration_ms),)
        audio = item.audio[a:b]
        usage = read + TokenUsage(
            output_text_tokens=tokens_of(item.text[c0:c1]),
            output_audio_tokens=len(audio) // width * 1000 // fmt.rate * OUTPUT_AUDIO_TOKENS_PER_S // 1000,
        )
        return EngineOutput(audio=audio, text_delta=item.text[c0:c1], marks=marks, usage=usage, **common)  # type: ignore[arg-type]


def _history_tokens(entry: object) -> int:
    """Tokens the agent reads in a history entry: a message's text, a call's arguments, an
    output's text."""
    kind = getattr(entry, "type", "message")
    if kind == "function_call":
        return argument_tokens(getattr(entry, "arguments", None) or "")
    if kind == "function_call_output":
        return tokens_of(getattr(entry, "output", None) or "")
    return tokens_of(getattr(entry, "text", ""))


def _ignored(inputs: SpeechInputs) -> tuple[str, ...]:
    """The response settings the agent does not apply, named as the client set them: it
    answers whatever the instructions and has no sampling temperature (it applies ``tools``,
    ``tool_choice`` and ``parallel_tool_calls``)."""
    out = []
    if inputs.instructions:
        out.append("instructions")
    if inputs.temperature is not None:
        out.append("temperature")
    return tuple(out)


class PocketsphinxTranscriber:
    """Input transcription (``transcription`` ticks) with the reference engine's ASR:
    pocketsphinx's en-US model, whatever ``model`` the session named (the tick's ``settings``
    record the name; the transcript records this engine). Deterministic.

    Args:
        recognizer: a :class:`~duplex_es.worker.speech.asr.Recognizer` to share with the speech
            engine (one decoder process per worker); a new one if ``None``.
    """

    name = "duplex_es.pocketsphinx_transcriber/1"
    kinds = ("transcription",)

    def __init__(self, recognizer: object = None) -> None:
        from duplex_es.worker.speech.asr import Recognizer

        self._asr = recognizer or Recognizer()

    def step(self, ctx: TranscriptionContext) -> TranscriptionOutput:
        """Transcribe the tick's user item."""
        fmt = ctx.tick.input_format
        pcm = decode_to_pcm16(ctx.read_audio(), fmt.type)
        transcript = self._asr.transcribe(pcm.tobytes(), fmt.rate)  # type: ignore[attr-defined]
        return TranscriptionOutput(request_id=ctx.tick.request_id, item_id=ctx.tick.item_id, transcript=transcript, seconds=len(pcm) / fmt.rate)

