"""Function calling end to end (issue 13, "Done when"): a voice agent's tool is called, its
output goes back, and the spoken answer carries the tool's result — through a real ``serve``
and ``worker`` (the reference agent's tool rule: docs/protocol.md, "Function calling"), with
the OpenAI Agents SDK at its defaults, the ``openai`` SDK by hand and pipecat's
function-calling API. Then the log tells the whole story: ``replay`` shows the call, its
arguments and the output, and ``audit`` passes.
"""

from __future__ import annotations

import asyncio
import base64
import json
import time
from typing import Any

import pytest

from duplex_es.events import FunctionCallChunk, ItemCreated, TickOutput, UnitOutput
from duplex_es.replay import replay
from duplex_es.store import Database, EventLog
from duplex_es.worker.speech.tts import Synthesizer

from clients_support import RATE, at_real_time, events_of, log_net, sessions_of, silence, until, verdict
from servers import running

pytestmark = pytest.mark.slow

#: What the user asks, spoken by espeak-ng (pocketsphinx hears "london" in it).
QUESTION = "What's the weather like in London today?"


def spoken(text: str) -> bytes:
    """``text`` as real speech: PCM16 mono at 24 kHz."""
    return Synthesizer().synthesize(text, RATE, "alloy").pcm


def weather(city: str) -> str:
    """The tool every client registers: its result must come back in the spoken answer."""
    return f"It is sunny and 21 degrees in {city}."


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory):
    tmp = tmp_path_factory.mktemp("tools")
    url = f"sqlite:///{tmp / 'log.db'}"
    with running(url, tmp, workers=1) as (port, _server, _workers):
        yield port, url


def the_story(url: str, session_id: str) -> dict[str, Any]:
    """What the log says happened: the calls the engine made (name → whole arguments), the
    outputs the client sent, the assistant's words, and the replay timeline's text."""
    events = events_of(url, session_id)
    calls: dict[str, dict] = {}
    for e in events:
        if isinstance(e, (TickOutput, UnitOutput)) and e.function_call is not None:
            c: FunctionCallChunk = e.function_call
            entry = calls.setdefault(c.call_id, {"name": c.name, "arguments": ""})
            entry["arguments"] += c.arguments_delta
    outputs = {e.call_id: e.output for e in events if isinstance(e, ItemCreated) and e.type == "function_call_output"}
    said = "".join(e.text_delta for e in events if isinstance(e, (TickOutput, UnitOutput)))
    log = EventLog(Database(url))
    try:
        timeline = "\n".join(f"{r.type} {r.summary}" for r in replay(log, session_id).timeline)
    finally:
        log.db.dispose()
    return {"calls": calls, "outputs": outputs, "said": said, "timeline": timeline}


def assert_told(story: dict[str, Any], city: str) -> None:
    """One get_weather call for ``city``, answered once with the tool's result, spoken back,
    and all of it in the replay timeline."""
    ((call_id, call),) = story["calls"].items()
    assert call["name"] == "get_weather" and json.loads(call["arguments"]) == {"city": city}
    # pipecat sends a tool's result as JSON (here a JSON string); the others as the text.
    assert story["outputs"] in ({call_id: weather(city)}, {call_id: json.dumps(weather(city))})
    assert weather(city).rstrip(".") in story["said"]
    for shown in ("get_weather", call_id, '"city"', city, "sunny and 21 degrees"):
        assert shown in story["timeline"], shown


def assert_clean(url: str, session_id: str, logged: list[str]) -> None:
    rejected, violations = verdict(url, session_id)
    assert logged == [] and violations == []
    assert [(r.command_type, r.code) for r in rejected] == []


# ----------------------------------------------------------------------- OpenAI Agents SDK


def test_an_agents_sdk_realtime_agent_calls_its_function_tool_when_asked_aloud(stack):
    agents_sdk_conversation(*stack)


def test_a_full_duplex_model_calls_the_agents_sdks_function_tool_by_itself(tmp_path):
    """The same agent against the full-duplex reference engine (docs/duplex.md, "Function
    calls and client items"): nobody commits, the model calls the tool when the user's turn
    ends, reads the output in its next unit and speaks it once the SDK asks for the turn."""
    url = f"sqlite:///{tmp_path / 'log.db'}"
    served = ("--model", "gpt-realtime-2.1=duplex-es-duplex", "--model", "*=duplex-es-echo")
    with running(url, tmp_path, workers=1, server_args=served) as (port, _server, _workers):
        session_id = agents_sdk_conversation(port, url)
    events = events_of(url, session_id)
    assert any(isinstance(e, UnitOutput) and e.function_call is not None for e in events)
    assert not any(isinstance(e, TickOutput) for e in events)  # no turn-based response: the model took its turns


def agents_sdk_conversation(port: int, url: str) -> str:
    """The Agents SDK's ``RealtimeAgent`` with a ``get_weather`` tool, asked aloud: the tool runs
    once for ``london`` and the answer after it is heard; the log tells it and audits clean.
    Returns the session's id."""
    before = sessions_of(url)
    question = spoken(QUESTION) + silence(2.0)

    async def conversation() -> dict[str, Any]:
        from agents import function_tool
        from agents.realtime import RealtimeAgent, RealtimeRunner

        ran: list[str] = []

        @function_tool
        def get_weather(city: str) -> str:
            """Get the current weather for a city."""
            ran.append(city)
            return weather(city)

        agent = RealtimeAgent(name="Assistant", instructions="You are a helpful voice assistant.", tools=[get_weather])
        seen: list[tuple[str, float]] = []
        errors: list[str] = []
        session = await RealtimeRunner(agent).run(model_config={"url": f"ws://127.0.0.1:{port}/v1/realtime", "api_key": "anything"})
        async with session:

            async def consume() -> None:
                async for event in session:
                    seen.append((event.type, time.monotonic()))
                    if event.type == "error":
                        errors.append(repr(event.error)[:500])

            consumer = asyncio.create_task(consume())
            await asyncio.sleep(1.0)  # its session.update (with the tool) goes out on connect
            await at_real_time(question, session.send_audio)

            def answered_after_tool() -> bool:
                # The answer's audio after the tool ran, and the agent's turn ending after it
                # (the turn that made the call may end after the tool ran too).
                ended = [t for k, t in seen if k == "tool_end"]
                spoke = [t for k, t in seen if k == "audio" and ended and t > ended[0]]
                return bool(spoke) and any(k == "agent_end" and t > spoke[0] for k, t in seen)

            await until(answered_after_tool, 60, "the tool to run and the spoken answer after it")
            consumer.cancel()
        return {"ran": ran, "errors": errors, "kinds": [k for k, _ in seen]}

    with log_net() as net:
        out = asyncio.run(asyncio.wait_for(conversation(), 120))
    (session_id,) = sessions_of(url) - before
    assert out["errors"] == [] and out["ran"] == ["london"]
    assert out["kinds"].index("tool_start") < out["kinds"].index("tool_end")
    assert_told(the_story(url, session_id), "london")
    assert_clean(url, session_id, net.records)
    return session_id


# ------------------------------------------------------------------------ openai SDK by hand


def test_the_openai_sdk_by_hand_gets_a_call_answers_it_and_hears_the_result(stack):
    port, url = stack
    before = sessions_of(url)

    async def conversation() -> dict[str, Any]:
        from openai import AsyncOpenAI

        client = AsyncOpenAI(api_key="anything", websocket_base_url=f"ws://127.0.0.1:{port}/v1")
        seen: list[Any] = []
        async with client.realtime.connect(model="gpt-realtime") as conn:

            async def read() -> None:
                async for event in conn:
                    seen.append(event)

            reader = asyncio.create_task(read())

            def first(kind: str, mark: int = 0):  # noqa: ANN202
                return next((e for e in seen[mark:] if e.type == kind), None)

            tool = {
                "type": "function",
                "name": "get_weather",
                "description": "Get the current weather for a city.",
                "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"], "additionalProperties": False},
            }
            await conn.session.update(session={"type": "realtime", "tools": [tool], "tool_choice": "auto"})
            await until(lambda: first("session.updated"), 10, "session.updated")
            echoed = first("session.updated").session.tools
            await conn.conversation.item.create(item={"type": "message", "role": "user", "content": [{"type": "input_text", "text": "What is the weather in Paris?"}]})
            await conn.response.create()
            await until(lambda: first("response.done"), 30, "the response with the call")
            args_done = first("response.function_call_arguments.done")
            call_done = first("response.done")
            # The SDK's own types parsed everything: the call is there, completed.
            result = weather(json.loads(args_done.arguments)["city"])
            mark = len(seen)
            await conn.conversation.item.create(item={"type": "function_call_output", "call_id": args_done.call_id, "output": result})
            await conn.response.create()
            await until(lambda: first("response.done", mark), 30, "the spoken answer")
            mark2 = len(seen)
            # Answering it again, or answering a call nobody made, is refused with its code.
            await conn.send({"type": "conversation.item.create", "event_id": "again", "item": {"type": "function_call_output", "call_id": args_done.call_id, "output": "x"}})
            await conn.send({"type": "conversation.item.create", "event_id": "nobody", "item": {"type": "function_call_output", "call_id": "call_nobody", "output": "x"}})
            await until(lambda: sum(1 for e in seen[mark2:] if e.type == "error") == 2, 10, "two refusals")
            reader.cancel()
        return {
            "echoed": [t.model_dump(exclude_none=True) for t in echoed],
            "tool": tool,
            "args_done": args_done,
            "call_done": call_done,
            "answer": [e for e in seen[mark:mark2] if e.type in ("response.output_audio_transcript.done", "response.output_audio.delta")],
            "errors": [(e.error.event_id, e.error.code) for e in seen[mark2:] if e.type == "error"],
        }

    with log_net() as net:
        out = asyncio.run(asyncio.wait_for(conversation(), 90))
    (session_id,) = sessions_of(url) - before
    assert out["echoed"] == [out["tool"]]  # echoed exactly
    assert (out["args_done"].name, json.loads(out["args_done"].arguments)) == ("get_weather", {"city": "Paris"})
    output = out["call_done"].response.output
    assert [(o.type, o.status, o.call_id) for o in output] == [("function_call", "completed", out["args_done"].call_id)]
    transcript = next(e.transcript for e in out["answer"] if e.type == "response.output_audio_transcript.done")
    assert "sunny and 21 degrees in Paris" in transcript
    assert sum(len(base64.b64decode(e.delta)) for e in out["answer"] if e.type == "response.output_audio.delta") > RATE  # over 0.5 s spoken
    assert out["errors"] == [("again", "function_call_already_answered"), ("nobody", "function_call_not_found")]
    assert_told(the_story(url, session_id), "Paris")
    rejected, violations = verdict(url, session_id)
    assert violations == [] and net.records == []
    assert sorted(r.code for r in rejected) == ["function_call_already_answered", "function_call_not_found"]


# ---------------------------------------------------------------------------------- pipecat


def test_pipecats_function_calling_api_runs_the_tool_and_speaks_its_result(stack):
    """pipecat's documented way: tools in the ``LLMContext``, a handler registered with
    ``register_function``; the question spoken into the microphone."""
    port, url = stack
    before = sessions_of(url)
    from loguru import logger

    from pipecat_pipeline import PipecatHarness

    warnings: list[str] = []
    sink = logger.add(lambda m: warnings.append(str(m).rstrip()[:1000]), level="WARNING")
    try:
        with log_net() as net:
            harness = PipecatHarness(f"ws://127.0.0.1:{port}/v1/realtime", lambda: _log(url, before), weather_tool=weather)
            out = asyncio.run(asyncio.wait_for(harness.tool_call(spoken(QUESTION) + silence(1.5)), 120))
    finally:
        logger.remove(sink)
    (session_id,) = sessions_of(url) - before
    assert out["error_frames"] == [] and warnings == []
    assert out["ran"] == [{"city": "london"}]
    assert_told(the_story(url, session_id), "london")
    assert_clean(url, session_id, net.records)


def _log(url: str, before: set[str]) -> list:
    new = sessions_of(url) - before
    return events_of(url, next(iter(new))) if len(new) == 1 else []


# ------------------------------------------------------------------------- a model plugin


def test_a_model_plugin_calls_tools_through_the_unchanged_worker(tmp_path):
    """A GPU model's plugin (``--engine-plugin``) gets the tools in its tick and streams a call
    back through ``EngineOutput.function_call``; nothing else of the worker is involved."""
    from pathlib import Path

    from wsclient import WsClient

    tests = str(Path(__file__).resolve().parents[1])  # where plugins.py is
    url = f"sqlite:///{tmp_path / 'log.db'}"
    args = ["--engine-plugin", "plugins:ToolCallingModel"]
    with running(url, tmp_path, worker_args=args, worker_env={"PYTHONPATH": tests}) as (port, _, _):
        c = WsClient(port)
        c.update({"output_modalities": ["text"], "tools": [{"type": "function", "name": "search", "parameters": {"type": "object", "properties": {"q": {"type": "string"}}}}]})
        c.say("opening hours")
        done = c.respond()
        (call,) = done["output"]
        assert (call["type"], call["name"], json.loads(call["arguments"])) == ("function_call", "search", {"q": "opening hours"})
        deltas = [e["delta"] for e in c.since(0) if e["type"] == "response.function_call_arguments.delta"]
        assert len(deltas) == 2 and "".join(deltas) == call["arguments"]
        c.send({"type": "conversation.item.create", "item": {"type": "function_call_output", "call_id": call["call_id"], "output": "9 to 5"}})
        c.recv("conversation.item.done")
        answer = c.respond()
        assert answer["output"][0]["content"][0]["text"] == "The tool said: 9 to 5"
        session_id = c.session_id
        c.close()
    rejected, violations = verdict(url, session_id)
    assert rejected == [] and violations == []


def test_a_barge_in_while_a_calls_arguments_stream_cancels_the_call_like_audio(tmp_path):
    """The user talks over the assistant while the reference agent streams a call's arguments
    (24 characters a tick, slowed to a GPU's pace): the response ends cancelled, the call's
    item incomplete with no ``function_call_arguments.done``, and its output is refused."""
    from wsclient import WsClient

    url = f"sqlite:///{tmp_path / 'log.db'}"
    with running(url, tmp_path, worker_args=["--step-delay-ms", "400"]) as (port, _, _):
        c = WsClient(port)
        booking = {
            "type": "function",
            "name": "book_table",
            "description": "Book a restaurant table.",
            "parameters": {
                "type": "object",
                "properties": {
                    "restaurant": {"type": "string"},
                    "people": {"type": "integer"},
                    "time": {"type": "string", "enum": ["lunch", "dinner"]},
                },
                "required": ["restaurant", "people"],
            },
        }
        c.update({"output_modalities": ["text"], "tools": [booking]})
        c.say("Book a table for four people for dinner at Chez Panisse.")
        c.send({"type": "response.create"})
        delta = c.recv("response.function_call_arguments.delta")
        c.send({"type": "barge_in"})
        done = c.recv("response.done")["response"]
        assert (done["status"], done["status_details"]["reason"]) == ("cancelled", "turn_detected")
        (item,) = done["output"]
        assert (item["type"], item["status"], item["call_id"]) == ("function_call", "incomplete", delta["call_id"])
        assert item["arguments"].startswith(delta["delta"]) and len(item["arguments"]) < len('{"restaurant":"Chez Panisse","people":4,"time":"dinner"}')
        assert not [e for e in c.since(0) if e["type"] == "response.function_call_arguments.done"]
        c.send({"type": "conversation.item.create", "event_id": "late", "item": {"type": "function_call_output", "call_id": delta["call_id"], "output": "booked"}})
        err = c.error()
        assert (err["code"], err["event_id"], err["param"]) == ("function_call_cancelled", "late", "item.call_id")
        session_id = c.session_id
        c.close()
    rejected, violations = verdict(url, session_id)
    assert violations == [] and [r.code for r in rejected] == ["function_call_cancelled"]
