"""The reference speech engine on real pocketsphinx and espeak-ng: what it hears, what it says,
and that it says it the same way every time."""

from __future__ import annotations

import json
import threading
import time

import pytest

import attrs

from duplex_es.events import AudioFormat, AudioSegment, HistoryEntry, SpeechInputs, TickIssued
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


# ------------------------------------------------------------------------- the agent's tools

WEATHER = {
    "type": "function",
    "name": "get_weather",
    "description": "Get the current weather for a city.",
    "parameters": {
        "type": "object",
        "properties": {"city": {"type": "string"}, "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
        "required": ["city"],
    },
}
BOOK = {
    "type": "function",
    "name": "book_table",
    "description": "Reserve a restaurant table.",
    "parameters": {
        "type": "object",
        "properties": {"restaurant": {"type": "string"}, "party_size": {"type": "integer"}},
        "required": ["restaurant", "party_size"],
    },
}
TIME = {
    "type": "function",
    "name": "get_time",
    "description": "Local time in a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
}


def _tool_ctx(k: int, response_id: str = "resp_t1", read_audio=None, **fields) -> TickContext:
    fields.setdefault("output_modalities", ("text",))
    tick = TickIssued(request_id=f"req{k}", response_id=response_id, epoch=0, chunk_index=k, inputs=SpeechInputs(**fields))
    return TickContext(session_id="s", tick=tick, read_audio=read_audio or (lambda segs: b""))


def _steps(engine, **kw):
    outs = []
    while True:
        out = engine.step(_tool_ctx(len(outs), **kw))
        outs.append(out)
        if out.final:
            return outs
        assert len(outs) < 200


def _calls(outs):
    """``(name, arguments)`` of each call the outputs stream, in order."""
    return [(it[0].function_call.name, "".join(o.function_call.arguments_delta for o in it)) for it in _items(outs) if it[0].function_call]


def _items(outs):
    """The outputs grouped by output item: a new item where ``new_item`` is set."""
    items: list[list] = []
    for o in outs:
        if o.new_item or not items:
            items.append([])
        items[-1].append(o)
    return items


def test_a_typed_question_naming_a_tool_streams_one_call_and_nothing_else():
    outs = _steps(CascadeSpeechEngine(), user_text="What's the weather in Lisbon tomorrow, in Celsius?", tools=(BOOK, WEATHER))
    args = '{"city":"Lisbon","unit":"celsius"}'
    assert len(outs) == 2  # 34 characters of arguments, 24 a tick: a barge-in can land mid-call
    assert all(o.function_call is not None and o.audio == b"" and o.text_delta == "" and not o.new_item for o in outs)
    assert {(o.function_call.call_id, o.function_call.name) for o in outs} == {("call_t1_0", "get_weather")}
    assert "".join(o.function_call.arguments_delta for o in outs) == args
    assert [o.function_call.done for o in outs] == [False, True] and [o.final for o in outs] == [False, True]
    assert outs[0].not_applied == () and outs[0].incomplete_reason is None and outs[-1].incomplete_reason is None
    assert sum(o.usage.output_text_tokens for o in outs) == 4  # city Lisbon unit celsius
    assert outs[0].usage.input_text_tokens == 8


def test_the_calls_are_the_same_on_any_worker_and_from_any_tick():
    kw = dict(user_text="Weather in Lisbon please. And book a table for two at Nando's", tools=(WEATHER, BOOK), output_modalities=("audio",))
    first = _steps(CascadeSpeechEngine(), **kw)
    other = CascadeSpeechEngine(chunk_ms=500)
    # A worker taking over at the last tick, then replaying from the start.
    assert other.step(_tool_ctx(len(first) - 1, **kw)) == first[-1]
    assert [other.step(_tool_ctx(k, **kw)) for k in range(len(first))] == first


def test_parallel_calls_are_one_item_each_unless_parallel_tool_calls_is_false():
    kw = dict(user_text="Weather in Lisbon please. And book a table for two at Nando's", tools=(WEATHER, BOOK))
    items = _items(_steps(CascadeSpeechEngine(), **kw))
    calls = [(it[0].function_call.call_id, it[0].function_call.name, "".join(o.function_call.arguments_delta for o in it)) for it in items]
    assert calls == [("call_t1_0", "get_weather", '{"city":"Lisbon"}'), ("call_t1_1", "book_table", '{"restaurant":"Nando\'s","party_size":2}')]
    assert [[o.function_call.done for o in it] for it in items] == [[True], [False, True]]
    assert [o.new_item for it in items for o in it] == [False, True, False]
    only = _steps(CascadeSpeechEngine(), parallel_tool_calls=False, **kw)
    assert {o.function_call.name for o in only} == {"book_table"} and not any(o.new_item for o in only)


def test_tool_choice_none_echoes_as_without_tools():
    said = dict(user_text="What's the weather in Lisbon?", output_modalities=("audio",))
    plain = _steps(CascadeSpeechEngine(), **said)
    none = _steps(CascadeSpeechEngine(), tools=(WEATHER,), tool_choice="none", **said)
    assert [(o.audio, o.text_delta, o.function_call) for o in none] == [(o.audio, o.text_delta, o.function_call) for o in plain]
    assert "".join(o.text_delta for o in none) == "You said: What's the weather in Lisbon."
    # Tools declared but none named: the echo too.
    hello = _steps(CascadeSpeechEngine(), tools=(WEATHER, BOOK), user_text="Hello there")
    assert "".join(o.text_delta for o in hello) == "You said: Hello there." and not any(o.function_call for o in hello)


def test_required_and_a_named_choice_always_call():
    outs = _steps(CascadeSpeechEngine(), tools=(BOOK, WEATHER), tool_choice="required", user_text="Hello there")
    # What the words cannot fill takes a value the tool's schema accepts: the user's words, 0.
    assert _calls(outs) == [("book_table", '{"restaurant":"Hello there","party_size":0}')] and outs[-1].function_call.done
    outs = _steps(CascadeSpeechEngine(), tools=(BOOK, WEATHER), tool_choice={"type": "function", "name": "get_weather"}, user_text="A table at Nando's")
    assert "".join(o.function_call.arguments_delta for o in outs) == '{"city":"Nando\'s"}' and outs[-1].function_call.name == "get_weather"


def test_a_required_argument_it_cannot_fill_is_asked_for_aloud():
    engine = CascadeSpeechEngine(chunk_ms=400)
    outs = _steps(engine, tools=(WEATHER,), user_text="What's the weather like?", output_modalities=("audio",))
    assert not any(o.function_call for o in outs) and not any(o.new_item for o in outs)
    assert "".join(o.text_delta for o in outs) == "I can get weather if you tell me the city."
    assert len(b"".join(o.audio for o in outs)) > 24000 * 2  # spoken: more than a second
    forced = _steps(CascadeSpeechEngine(), tools=(WEATHER,), tool_choice="required", user_text="What's the weather like?")
    assert _calls(forced) == [("get_weather", '{"city":"What\'s the weather like?"}')]


def _history(*outputs: tuple[str, str, str]) -> tuple[HistoryEntry, ...]:
    entries = [HistoryEntry(item_id="item_u", role="user", text="weather in Lisbon and a table at Nando's")]
    entries += [HistoryEntry(item_id=f"item_c{i}", role="assistant", text="", type="function_call", call_id=cid, name=name, arguments="{}") for i, (cid, name, _) in enumerate(outputs)]
    entries += [HistoryEntry(item_id=f"item_o{i}", role="tool", text="", type="function_call_output", call_id=cid, output=out) for i, (cid, _, out) in enumerate(outputs)]
    return tuple(entries)


@pytest.mark.parametrize("parallel", [None, False])
def test_each_call_takes_the_place_said_after_its_own_tool(parallel):
    weather_only = _steps(CascadeSpeechEngine(), tools=(WEATHER,), parallel_tool_calls=parallel, user_text="What is the weather in Paris and the time in Tokyo?")
    assert _calls(weather_only) == [("get_weather", '{"city":"Paris"}')]
    both = _steps(CascadeSpeechEngine(), tools=(WEATHER, TIME), parallel_tool_calls=parallel, user_text="What is the weather in Paris and the time in Tokyo?")
    assert _calls(both) == [("get_weather", '{"city":"Paris"}')] + ([("get_time", '{"city":"Tokyo"}')] if parallel is None else [])
    for tools in ((WEATHER,), (WEATHER, TIME)):
        rome = _steps(CascadeSpeechEngine(), tools=tools, parallel_tool_calls=parallel, user_text="What's the weather in Paris? I am in Rome.")
        assert _calls(rome) == [("get_weather", '{"city":"Paris"}')]


def test_after_the_outputs_it_says_each_without_listening_or_calling_again():
    def no_audio(segs):
        raise AssertionError("the user's audio is read again")

    history = _history(("call_t1_0", "get_weather", '{"temperature": "18 C", "sky": "clear"}'), ("call_t1_1", "book_table", '"Booked for 8 pm."'))
    kw = dict(
        response_id="resp_t2", read_audio=no_audio, tools=(WEATHER, BOOK), tool_choice="required", history=history,
        reply_to_item_id="item_u", user_audio=(AudioSegment(seq=3, samples=2400),), output_modalities=("audio",),
    )
    outs = _steps(CascadeSpeechEngine(), **kw)
    assert not any(o.function_call for o in outs) and outs[0].input_transcripts == ()
    items = _items(outs)
    assert ["".join(o.text_delta for o in it) for it in items] == ["Get weather says: temperature 18 C, sky clear.", "Book table says: Booked for 8 pm."]
    assert all(o.audio for o in outs) and [o.new_item for o in outs].count(True) == 1
    # More outputs than a reply has items: cut, and the response ends incomplete.
    many = _history(*[(f"call_{i}", "get_weather", f'"{i}"') for i in range(6)])
    outs = _steps(CascadeSpeechEngine(), **{**kw, "history": many, "output_modalities": ("text",)})
    assert len(_items(outs)) == 4 and outs[-1].incomplete_reason == "max_output_tokens"


def test_a_spoken_question_naming_a_tool_without_its_argument_is_answered_with_a_question(weather_pcm: bytes):
    kw = dict(
        read_audio=lambda segs: weather_pcm, tools=(WEATHER,), reply_to_item_id="item_u",
        user_audio=(AudioSegment(seq=3, samples=len(weather_pcm) // 2),), output_modalities=("text",),
    )
    outs = _steps(CascadeSpeechEngine(), **kw)
    heard = outs[0].input_transcripts[0].transcript
    assert "weather" in heard and "tomorrow afternoon" in heard  # "... like in early tomorrow afternoon": no city
    assert "".join(o.text_delta for o in outs) == "I can get weather if you tell me the city."
    # Named by the words it heard, with required: a call, its city the words heard (64 at most).
    outs = _steps(CascadeSpeechEngine(), tool_choice="required", **kw)
    assert _calls(outs) == [("get_weather", json.dumps({"city": " ".join(heard.split())[:64].strip()}, separators=(",", ":")))]


def test_a_spoken_question_naming_a_tool_and_its_city_makes_the_call():
    # espeak-ng asks, pocketsphinx hears "what's the weather like in london today" (lower case).
    pcm = Synthesizer().synthesize("What's the weather like in London today?", 24000, "alloy").pcm
    kw = dict(read_audio=lambda segs: pcm, tools=(WEATHER,), reply_to_item_id="item_u", user_audio=(AudioSegment(seq=3, samples=len(pcm) // 2),))
    outs = _steps(CascadeSpeechEngine(), **kw)
    assert "london" in outs[0].input_transcripts[0].transcript
    assert [(o.function_call.call_id, o.function_call.name, o.function_call.arguments_delta, o.function_call.done) for o in outs] == [
        ("call_t1_0", "get_weather", '{"city":"london"}', True)
    ]
