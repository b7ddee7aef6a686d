"""The reference speech engine on real pocketsphinx and espeak-ng: what it hears, what it says,
and that it says it the same way every time."""

from __future__ import annotations

import pytest

from duplex_es.events import SpeechInputs, TickIssued
from duplex_es.worker.engine import EngineError, TickContext
from duplex_es.worker.speech.asr import Recognizer
from duplex_es.worker.speech.engine import MAX_REPLY_CHARS, CascadeSpeechEngine, reply_text
from duplex_es.worker.speech.tts import ESPEAK_VOICES, Synthesizer


def test_the_recognizer_hears_the_fixture_question(weather_pcm: bytes):
    heard = Recognizer().transcribe(weather_pcm, 24000)
    assert "weather" in heard and "tomorrow afternoon" in heard


def test_synthesis_is_deterministic_across_calls_and_voices_differ():
    tts = Synthesizer()
    a = tts.synthesize("You said: the weather in Lisbon.", 24000, "alloy")
    tts.synthesize("Something else first, to disturb any state.", 24000, "coral")
    b = tts.synthesize("You said: the weather in Lisbon.", 24000, "alloy")
    assert a == b and a.rate == 24000 and a.duration_ms > 1000
    assert tts.synthesize("You said: the weather in Lisbon.", 24000, "echo").pcm != a.pcm
    offsets = [m.char_offset for m in a.marks]
    times = [m.audio_ms for m in a.marks]
    assert offsets == sorted(offsets) and times == sorted(times) and len(a.marks) == 6
    assert set(ESPEAK_VOICES) == {"alloy", "ash", "ballad", "coral", "echo", "sage", "shimmer", "verse", "marin", "cedar"}


def test_the_reply_is_bounded_whatever_the_client_sent():
    assert reply_text("hello there", "") == "You said: hello there."
    assert reply_text("", "") == "I did not catch that. Could you say it again?"
    long = reply_text("", "word " * 10_000)
    assert len(long) <= MAX_REPLY_CHARS and long.endswith("...") and long.startswith("You said: word word")


def _ctx(chunk: int, modalities=("audio",), voice="alloy") -> TickContext:
    tick = TickIssued(
        request_id=f"req{chunk}",
        response_id="resp",
        epoch=0,
        chunk_index=chunk,
        inputs=SpeechInputs(user_text="the weather in Porto", output_modalities=modalities, voice=voice),
    )
    return TickContext(session_id="s", tick=tick, read_audio=lambda seqs: b"")


def test_chunks_tile_the_reply_and_the_last_is_final():
    engine = CascadeSpeechEngine(chunk_ms=300)
    outs, k = [], 0
    while True:
        out = engine.step(_ctx(k))
        outs.append(out)
        assert out.echo.chunk_index == k and out.echo.request_id == f"req{k}"
        if out.final:
            break
        k += 1
    plan = engine._plan(_ctx(0))
    assert b"".join(o.audio for o in outs) == plan.pcm
    assert "".join(o.text_delta for o in outs) == plan.text == "You said: the weather in Porto."
    assert all(len(o.audio) == 300 * 48 for o in outs[:-1])
    marks = [m for o in outs for m in o.marks]
    assert marks[-1].text_chars == len(plan.text) and [m.audio_ms for m in marks] == sorted(m.audio_ms for m in marks)
    text_only = CascadeSpeechEngine(chunk_ms=300).step(_ctx(0, modalities=("text",)))
    assert text_only.audio == b"" and text_only.text_delta.startswith("You said:")


def test_an_unknown_voice_fails_the_step_with_a_code():
    with pytest.raises(EngineError) as err:
        CascadeSpeechEngine().step(_ctx(0, voice="robot"))
    assert err.value.code == "unsupported_voice"
