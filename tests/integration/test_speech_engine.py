"""The reference speech engine on real pocketsphinx and espeak-ng: what it hears, what it says,
and that it says it the same way every time."""

from __future__ import annotations

import threading
import time

import pytest

import attrs

from duplex_es.events import AudioFormat, SpeechInputs, TickIssued
from duplex_es.worker.engine import EngineError, TickContext
from duplex_es.worker.speech.asr import Recognizer
from duplex_es.worker.speech.engine import MAX_REPLY_CHARS, CascadeSpeechEngine, reply_items, reply_text
from duplex_es.worker.speech.tts import ESPEAK_VOICES, Synthesizer


def test_the_recognizer_hears_the_fixture_question(weather_pcm: bytes):
    heard = Recognizer().transcribe(weather_pcm, 24000)
    assert "weather" in heard and "tomorrow afternoon" in heard


def test_a_long_decode_leaves_the_workers_other_threads_running(weather_pcm: bytes):
    # The claim heartbeat is such a thread: pocketsphinx in the worker's own process kept the GIL
    # for the whole decode (seconds), the claim expired mid-step and workers took the tick from
    # each other. Three questions in a row decode for several seconds on this machine.
    asr = Recognizer()
    gaps: list[float] = []
    stop = threading.Event()

    def beat() -> None:
        last = time.monotonic()
        while not stop.wait(0.02):
            now = time.monotonic()
            gaps.append(now - last)
            last = now

    t = threading.Thread(target=beat)
    t.start()
    started = time.monotonic()
    heard = asr.transcribe(weather_pcm * 3, 24000)
    took = time.monotonic() - started
    stop.set()
    t.join()
    asr.close()
    assert heard.count("tomorrow afternoon") >= 2
    assert took > 1.0 and max(gaps) < 0.5, (took, max(gaps))


def test_a_recognizer_whose_child_died_starts_another(weather_pcm: bytes):
    asr = Recognizer()
    first = asr.transcribe(weather_pcm, 24000)
    asr._child.kill()  # the child process, as a crash or the OOM killer would
    asr._child.wait()
    assert asr.transcribe(weather_pcm, 24000) == first
    asr.close()


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


def test_the_reply_is_one_item_per_sentence_and_bounded_whatever_the_client_sent():
    assert reply_items("hello there", "") == (["You said: hello there."], False)
    assert reply_items("", "") == (["I did not catch that. Could you say it again?"], False)
    assert reply_items("what time is it", "First thing. Second thing!") == (
        ["You said: First thing.", "You said: Second thing.", "You said: what time is it."],
        False,
    )
    items, cut = reply_items("", "word " * 10_000)
    assert cut and sum(len(i) for i in items) <= MAX_REPLY_CHARS and items[0].endswith("...")
    assert reply_items("", "A. B. C. D. E. F.")[1] is True
    assert reply_text("", "x") == "You said: x."


def _ctx(chunk: int, modalities=("audio",), voice="alloy", text="the weather in Porto", fmt=None) -> TickContext:
    inputs = SpeechInputs(user_text=text, output_modalities=modalities, voice=voice)
    if fmt is not None:
        inputs = attrs.evolve(inputs, output_format=fmt)
    tick = TickIssued(request_id=f"req{chunk}", response_id="resp", epoch=0, chunk_index=chunk, inputs=inputs)
    return TickContext(session_id="s", tick=tick, read_audio=lambda seqs: b"")


def _run(engine, **kw):
    outs, k = [], 0
    while True:
        out = engine.step(_ctx(k, **kw))
        outs.append(out)
        assert out.echo.chunk_index == k and out.echo.request_id == f"req{k}"
        if out.final:
            return outs
        k += 1


def test_chunks_tile_the_reply_and_the_last_is_final():
    engine = CascadeSpeechEngine(chunk_ms=300)
    outs = _run(engine)
    plan = engine.plan(_ctx(0))
    assert len(plan.items) == 1 and not any(o.new_item for o in outs)
    assert b"".join(o.audio for o in outs) == plan.items[0].audio
    assert "".join(o.text_delta for o in outs) == plan.items[0].text == "You said: the weather in Porto."
    assert all(len(o.audio) == 300 * 48 for o in outs[:-1])
    marks = [m for o in outs for m in o.marks]
    assert marks[-1].text_chars == len(plan.items[0].text) and [m.audio_ms for m in marks] == sorted(m.audio_ms for m in marks)
    text_only = CascadeSpeechEngine(chunk_ms=300).step(_ctx(0, modalities=("text",)))
    assert text_only.audio == b"" and text_only.text_delta.startswith("You said:")


def test_two_sentences_make_two_output_items_and_g711_has_8_bytes_per_ms():
    engine = CascadeSpeechEngine(chunk_ms=400)
    outs = _run(engine, text="Good morning. See you later.", fmt=AudioFormat(type="audio/pcmu", rate=8000))
    starts = [i for i, o in enumerate(outs) if o.new_item]
    assert len(starts) == 1 and 0 < starts[0] < len(outs)
    plan = engine.plan(_ctx(0, text="Good morning. See you later.", fmt=AudioFormat(type="audio/pcmu", rate=8000)))
    first = outs[: starts[0]]
    assert "".join(o.text_delta for o in first) == "You said: Good morning."
    assert all(len(o.audio) == 400 * 8 for o in first[:-1])
    assert b"".join(o.audio for o in first) == plan.items[0].audio and len(plan.items[0].audio) // 8 == plan.items[0].duration_ms
def test_an_unknown_voice_fails_the_step_with_a_code():
    with pytest.raises(EngineError) as err:
        CascadeSpeechEngine().step(_ctx(0, voice="robot"))
    assert err.value.code == "unsupported_voice"
