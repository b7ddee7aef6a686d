"""The reference speech engine: a deterministic cascade echo agent on the CPU.

Per response: pocketsphinx transcribes the user item's audio, the reply is built from the
transcript ("You said: ..."), espeak-ng speaks it with word marks, and the audio is streamed one
chunk of ``chunk_ms`` per tick. The plan of a response (transcript, reply, audio) is a pure
function of its tick inputs and is cached per worker, so tick ``k`` on any worker produces the
same bytes — a worker that takes over a tick after a crash continues the same audio.
"""

from __future__ import annotations

import logging
from collections import OrderedDict

import attrs

from duplex_es.events import InputTranscript, Mark, SpeechInputs
from duplex_es.worker.engine import EngineError, EngineOutput, TickContext
from duplex_es.worker.speech.tts import ESPEAK_VOICES

__all__ = ["CascadeSpeechEngine", "SpeechPlan", "reply_text"]

log = logging.getLogger(__name__)

#: Words per tick when the response is text only.
TEXT_WORDS_PER_CHUNK = 4

#: The longest reply the echo agent speaks, in characters (about a minute of speech): a reply
#: is one tick's plan, held in memory, so its size must not depend on what a client sends.
MAX_REPLY_CHARS = 1000


def reply_text(transcript: str, typed: str) -> str:
    """The echo agent's reply to what it heard (``transcript``) and what was typed, at most
    :data:`MAX_REPLY_CHARS` characters (cut at a word, ending with "...")."""
    heard = " ".join(x for x in (typed.strip(), transcript.strip()) if x)
    if not heard:
        return "I did not catch that. Could you say it again?"
    reply = f"You said: {heard}."
    if len(reply) > MAX_REPLY_CHARS:
        cut = reply[: MAX_REPLY_CHARS - 3].rsplit(" ", 1)[0]
        reply = cut + "..."
    return reply


@attrs.frozen
class SpeechPlan:
    """Everything a response will say: its text, its audio and their alignment."""

    transcript: str
    text: str
    pcm: bytes
    rate: int
    marks: tuple[tuple[int, int], ...]  # (char offset of a word, its start in ms)

    @property
    def total_ms(self) -> int:
        """Length of the reply audio in ms."""
        return len(self.pcm) // 2 * 1000 // self.rate

    def chars_at(self, ms: int) -> int:
        """Characters of the words that start before ``ms``."""
        for offset, start in self.marks:
            if start >= ms:
                return offset
        return len(self.text)


class CascadeSpeechEngine:
    """ASR (pocketsphinx) → echo reply → TTS (espeak-ng), streamed in chunks.

    Args:
        chunk_ms: audio per tick, in ms.
        cache_size: responses whose plan is kept in memory.

    The ASR model is loaded once, when the engine is built.
    """

    name = "duplex_es.cascade_echo/1"
    kinds = ("speech",)

    def __init__(self, chunk_ms: int = 500, cache_size: int = 64) -> None:
        from duplex_es.worker.speech.asr import Recognizer
        from duplex_es.worker.speech.tts import Synthesizer

        if chunk_ms <= 0:
            raise ValueError("chunk_ms must be > 0")
        self.chunk_ms = chunk_ms
        self._asr = Recognizer()
        self._tts = Synthesizer()
        self._plans: OrderedDict[tuple[str, str], SpeechPlan] = OrderedDict()
        self._cache_size = cache_size

    def _plan(self, ctx: TickContext) -> SpeechPlan:
        key = (ctx.session_id, ctx.tick.response_id)
        plan = self._plans.get(key)
        if plan is not None:
            self._plans.move_to_end(key)
            return plan
        inputs: SpeechInputs = ctx.tick.inputs
        if inputs.input_format.type != "audio/pcm" or inputs.output_format.type != "audio/pcm":
            raise EngineError("unsupported_audio_format", "the reference engine speaks audio/pcm only")
        transcript = ""
        if inputs.user_audio_seqs:
            transcript = self._asr.transcribe(ctx.read_audio(inputs.user_audio_seqs), inputs.input_format.rate)
        text = reply_text(transcript, inputs.user_text)
        rate = inputs.output_format.rate
        if "audio" in inputs.output_modalities:
            if inputs.voice not in ESPEAK_VOICES:
                raise EngineError("unsupported_voice", f"the reference engine has no voice {inputs.voice!r}")
            speech = self._tts.synthesize(text, rate, inputs.voice)
            plan = SpeechPlan(transcript, text, speech.pcm, rate, tuple((m.char_offset, m.audio_ms) for m in speech.marks))
        else:
            plan = SpeechPlan(transcript, text, b"", rate, ())
        log.info("planned %s/%s: heard %r, replying %r (%d ms)", ctx.session_id, ctx.tick.response_id, transcript, text, plan.total_ms)
        self._plans[key] = plan
        while len(self._plans) > self._cache_size:
            self._plans.popitem(last=False)
        return plan

    def step(self, ctx: TickContext) -> EngineOutput:
        """Produce chunk ``ctx.tick.chunk_index`` of the response."""
        plan = self._plan(ctx)
        k = ctx.tick.chunk_index
        heard: tuple[InputTranscript, ...] = ()
        reply_to = ctx.tick.inputs.reply_to_item_id
        if k == 0 and reply_to is not None and ctx.tick.inputs.user_audio_seqs:
            heard = (InputTranscript(item_id=reply_to, transcript=plan.transcript),)
        if not plan.pcm:
            words = plan.text.split(" ")
            part = words[k * TEXT_WORDS_PER_CHUNK : (k + 1) * TEXT_WORDS_PER_CHUNK]
            final = (k + 1) * TEXT_WORDS_PER_CHUNK >= len(words)
            delta = " ".join(part) + ("" if final else " ")
            return EngineOutput(echo=ctx.identity, text_delta=delta, final=final, input_transcripts=heard)
        start_ms, end_ms = k * self.chunk_ms, min((k + 1) * self.chunk_ms, plan.total_ms)
        if start_ms >= plan.total_ms and k > 0:
            raise EngineError("chunk_out_of_range", f"chunk {k} starts after the reply's {plan.total_ms} ms")
        final = end_ms >= plan.total_ms
        a = start_ms * plan.rate // 1000 * 2
        b = len(plan.pcm) if final else end_ms * plan.rate // 1000 * 2
        c0, c1 = plan.chars_at(start_ms), (len(plan.text) if final else plan.chars_at(end_ms))
        marks = tuple(Mark(text_chars=o, audio_ms=ms) for o, ms in plan.marks if start_ms <= ms < end_ms)
        if final:
            marks += (Mark(text_chars=len(plan.text), audio_ms=plan.total_ms),)
        return EngineOutput(
            echo=ctx.identity,
            audio=plan.pcm[a:b],
            text_delta=plan.text[c0:c1],
            marks=marks,
            final=final,
            input_transcripts=heard,
        )
