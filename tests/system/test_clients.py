"""The four Realtime clients voice-agent developers use, each with its **default** settings —
only the base URL and the key point it at duplex_es — against a real ``serve`` and ``worker``
(issue 10, "Done when"): the official ``openai`` SDK, the OpenAI Agents SDK, pipecat's OpenAI
Realtime service and LiveKit Agents' OpenAI plugin (through LiveKit's documented quick-start).

Each client connects; speaks the fixture question at real time in 20 ms frames and is answered
through the client's default turn detection; takes a text turn; is talked over while a reply
is being generated (barge-in); and asks for a reply its own way. Then nothing may have gone
wrong anywhere: no error or warning logged by the client library, no client event refused in
the log, and the session's audit clean.

The worker stands in for a GPU model that generates at about twice real time
(``--step-delay-ms``), so a long reply is still being generated when the user barges in.
"""

from __future__ import annotations

import asyncio
import base64
import time
from typing import Any

import pytest

from duplex_es.events import InputCommitted, ResponseDone, SessionUpdated, TranscriptionCompleted

from clients_support import (
    LONG_TEXT,
    at_real_time,
    events_of,
    log_net,
    sessions_of,
    silence,
    speech,
    until,
    verdict,
)
from servers import running

pytestmark = pytest.mark.slow

#: Generation about twice as fast as real time, as a GPU speech model streams.
WORKER_ARGS = ["--chunk-ms", "500", "--step-delay-ms", "250"]


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory):
    """One SQLite log with ``serve`` and two workers, shared by the client tests."""
    tmp = tmp_path_factory.mktemp("clients")
    url = f"sqlite:///{tmp / 'log.db'}"
    with running(url, tmp, workers=2, worker_args=WORKER_ARGS) as (port, _server, _workers):
        yield port, url


def new_session(url: str, before: set[str]) -> str:
    (session_id,) = sessions_of(url) - before
    return session_id


def client_log(url: str, before: set[str]) -> list:
    """The events so far of the one session opened since ``before`` (none yet: ``[]``)."""
    new = sessions_of(url) - before
    return events_of(url, next(iter(new))) if len(new) == 1 else []


#: The one refusal a client may provoke without anything being wrong: a ``response.cancel``
#: that arrives after server VAD already cancelled the response (a race OpenAI documents as
#: safe, "send it anyway"; LiveKit's plugin sends one when the user talks over a reply, and
#: treats the answer as the benign race it is).
BENIGN = {("response.cancel", "response_cancel_not_active")}


def assert_clean(url: str, session_id: str, logged: list[str]) -> None:
    """Nothing went wrong: the client logged no warning or error, the server refused none of
    its commands (but the benign cancel race), and the log audits clean."""
    rejected, violations = verdict(url, session_id)
    assert logged == [], logged
    assert [(r.command_type, r.code, r.message) for r in rejected if (r.command_type, r.code) not in BENIGN] == []
    assert violations == []


def answered(url: str, session_id: str) -> list[ResponseDone]:
    return [e for e in events_of(url, session_id) if isinstance(e, ResponseDone)]


# ------------------------------------------------------------------------------- openai SDK


def test_the_openai_sdk_holds_a_conversation_with_its_defaults(stack):
    port, url = stack
    before = sessions_of(url)

    async def conversation() -> dict[str, Any]:
        from openai import AsyncOpenAI

        seen: list[dict] = []
        client = AsyncOpenAI(api_key="anything", websocket_base_url=f"ws://127.0.0.1:{port}/v1")
        async with client.realtime.connect(model="gpt-realtime") as conn:

            async def read() -> None:
                async for event in conn:
                    seen.append(event.to_dict())

            reader = asyncio.create_task(read())

            def done_after(mark: int, status: str = "completed") -> bool:
                return any(e["type"] == "response.done" and e["response"]["status"] == status for e in seen[mark:])

            await until(lambda: any(e["type"] == "session.created" for e in seen), 10, "session.created")
            # 1. A spoken turn at real time: the default server VAD ends it and answers it.
            mark = len(seen)
            await at_real_time(speech("weather_question_24k.wav") + silence(1.5), lambda b: conn.input_audio_buffer.append(audio=base64.b64encode(b).decode()))
            await until(lambda: done_after(mark), 40, "the answer to the spoken turn")
            spoken = seen[mark:]
            # 2. A text turn.
            mark = len(seen)
            await conn.conversation.item.create(item={"type": "message", "role": "user", "content": [{"type": "input_text", "text": "What time is it?"}]})
            await conn.response.create()
            await until(lambda: done_after(mark), 30, "the answer to the text turn")
            # 3. Barge-in: the user talks while a long reply is being generated.
            mark = len(seen)
            await conn.conversation.item.create(item={"type": "message", "role": "user", "content": [{"type": "input_text", "text": LONG_TEXT}]})
            await conn.response.create()
            await until(lambda: any(e["type"] == "response.output_audio.delta" for e in seen[mark:]), 30, "the long reply's audio")
            await at_real_time(speech("correction_24k.wav") + silence(1.5), lambda b: conn.input_audio_buffer.append(audio=base64.b64encode(b).decode()))
            await until(lambda: done_after(mark, "cancelled") and done_after(mark), 40, "the interrupted reply and the answer to the correction")
            barge = seen[mark:]
            # 4. The SDK's own "generate a reply".
            mark = len(seen)
            await conn.response.create()
            await until(lambda: done_after(mark), 30, "a reply to response.create")
            reader.cancel()
        return {"seen": seen, "spoken": spoken, "barge": barge}

    with log_net() as net:
        out = asyncio.run(conversation())
    session_id = new_session(url, before)
    types = [e["type"] for e in out["spoken"]]
    assert types.index("input_audio_buffer.speech_started") < types.index("input_audio_buffer.speech_stopped") < types.index("response.created")
    heard = next(e for e in out["spoken"] if e["type"] == "conversation.item.input_audio_transcription.completed")["transcript"]
    assert "weather" in heard
    cancelled = next(e for e in out["barge"] if e["type"] == "response.done" and e["response"]["status"] == "cancelled")
    assert cancelled["response"]["status_details"]["reason"] == "turn_detected"
    for e in out["seen"]:
        if e["type"] == "response.done":
            assert e["response"]["usage"]["total_tokens"] >= 0 and e["response"]["usage"]["duplex"]["output_audio_ms"] >= 0
    assert_clean(url, session_id, net.records)


# ----------------------------------------------------------------------- OpenAI Agents SDK


def test_the_openai_agents_sdk_realtime_runner_holds_a_conversation_with_its_defaults(stack):
    port, url = stack
    before = sessions_of(url)

    async def conversation() -> dict[str, Any]:
        from agents.realtime import RealtimeAgent, RealtimeRunner
        from agents.realtime.model_inputs import RealtimeModelSendRawMessage

        agent = RealtimeAgent(name="Assistant", instructions="You are a helpful voice assistant.")
        runner = RealtimeRunner(agent)
        turns_ended: list[float] = []
        first_audio: list[float] = []
        sdk_errors: list[str] = []
        kinds: list[str] = []
        transcripts: list[str] = []

        session = await runner.run(model_config={"url": f"ws://127.0.0.1:{port}/v1/realtime", "api_key": "anything"})
        async with session:

            async def consume() -> None:
                async for event in session:
                    kinds.append(event.type)
                    if event.type == "audio":
                        first_audio.append(time.monotonic())
                    elif event.type == "agent_end":
                        turns_ended.append(time.monotonic())
                    elif event.type == "error":
                        sdk_errors.append(repr(event.error)[:500])
                    elif event.type == "raw_model_event" and event.data.type == "input_audio_transcription_completed":
                        transcripts.append(event.data.transcript)

            consumer = asyncio.create_task(consume())

            async def turn(action, what: str, timeout: float = 40) -> None:  # noqa: ANN001
                t = time.monotonic()
                await action()
                await until(lambda: any(x > t for x in turns_ended), timeout, what)

            await asyncio.sleep(1.0)  # its session.update goes out on connect
            # 1. A spoken turn at real time (the SDK's default turn detection: semantic VAD).
            await turn(lambda: at_real_time(speech("weather_question_24k.wav") + silence(2.0), session.send_audio), "the answer to the spoken turn")
            # 2. A text turn.
            await turn(lambda: session.send_message("What is the weather like in Paris?"), "the answer to the text turn")
            # 3. Barge-in while a long reply is generated.
            t = time.monotonic()
            await session.send_message(LONG_TEXT)
            await until(lambda: any(x > t for x in first_audio), 30, "the long reply's audio")
            interrupted_before = kinds.count("audio_interrupted")
            await at_real_time(speech("correction_24k.wav") + silence(2.0), session.send_audio)
            await until(lambda: kinds.count("audio_interrupted") > interrupted_before, 10, "the SDK's audio_interrupted")
            await until(lambda: sum(1 for x in turns_ended if x > t) >= 2, 40, "the answer to the correction")
            # 4. The SDK's documented way to ask for a reply: a raw response.create.
            await turn(lambda: session.model.send_event(RealtimeModelSendRawMessage(message={"type": "response.create"})), "a reply to response.create")
            consumer.cancel()
        return {"errors": sdk_errors, "transcripts": transcripts}

    with log_net() as net:
        out = asyncio.run(conversation())
    session_id = new_session(url, before)
    assert out["errors"] == []
    events = events_of(url, session_id)
    updates = [e for e in events if isinstance(e, SessionUpdated)]
    td = updates[0].config.turn_detection
    # Its session.update was applied whole: its model name, voice, semantic VAD, transcription.
    assert (updates[0].config.model, updates[0].config.voice, td.type) == ("gpt-realtime-2.1", "ash", "semantic_vad")
    # The session's transcription answered for every user audio item, once.
    commits = [e.item_id for e in events if isinstance(e, InputCommitted)]
    transcribed = [e.item_id for e in events if isinstance(e, TranscriptionCompleted)]
    assert sorted(transcribed) == sorted(commits) and any("weather" in t for t in out["transcripts"])
    statuses = [d.status for d in answered(url, session_id)]
    assert "cancelled" in statuses and statuses.count("completed") >= 4
    assert_clean(url, session_id, net.records)


def test_the_agents_sdk_realtime_quickstart_changed_only_in_url_and_key_holds_a_spoken_conversation(stack):
    """docs/realtime/quickstart.md of openai-agents-python: its agent and runner config as
    published, ``runner.run`` given the URL and key (its "Connection options")."""
    port, url = stack
    before = sessions_of(url)

    async def quickstart() -> list[str]:
        from agents.realtime import RealtimeAgent, RealtimeRunner

        agent = RealtimeAgent(name="Assistant", instructions="You are a helpful voice assistant. Keep responses short and conversational.")
        runner = RealtimeRunner(
            starting_agent=agent,
            config={
                "model_settings": {
                    "model_name": "gpt-realtime-2.1",
                    "audio": {
                        "input": {
                            "format": "pcm16",
                            "transcription": {"model": "gpt-4o-mini-transcribe"},
                            "turn_detection": {"type": "semantic_vad", "interrupt_response": True},
                        },
                        "output": {"format": "pcm16", "voice": "ash"},
                    },
                }
            },
        )
        session = await runner.run(model_config={"url": f"ws://127.0.0.1:{port}/v1/realtime", "api_key": "anything"})
        said: list[str] = []
        async with session:
            await session.send_message("Say hello in one short sentence.")
            speak: asyncio.Task | None = None
            async for event in session:
                if event.type == "error":
                    said.append(f"error: {event.error}")
                elif event.type == "history_added" and getattr(event.item, "role", None) == "assistant":
                    pass
                elif event.type == "agent_end":
                    said.append("turn")
                    if speak is None:  # then the user speaks (the quick-start's mic input)
                        speak = asyncio.create_task(at_real_time(speech("weather_question_24k.wav") + silence(2.0), session.send_audio))
                    else:
                        break
        return said

    with log_net() as net:
        said = asyncio.run(asyncio.wait_for(quickstart(), 90))
    assert said == ["turn", "turn"]
    session_id = new_session(url, before)
    transcripts = [e.transcript for e in events_of(url, session_id) if isinstance(e, TranscriptionCompleted)]
    assert any("weather" in t for t in transcripts)
    assert_clean(url, session_id, net.records)


# ---------------------------------------------------------------------------------- pipecat


def test_pipecats_openai_realtime_service_holds_a_conversation_with_its_defaults(stack):
    """pipecat's OpenAIRealtimeLLMService between a microphone and a speaker, as in pipecat's
    realtime example (transport swapped for an in-process one that plays at real time)."""
    port, url = stack
    before = sessions_of(url)
    from loguru import logger

    from pipecat_pipeline import PipecatHarness

    warnings: list[str] = []
    sink = logger.add(lambda m: warnings.append(str(m).rstrip()[:1000]), level="WARNING")
    try:
        with log_net() as net:
            harness = PipecatHarness(f"ws://127.0.0.1:{port}/v1/realtime", lambda: client_log(url, before))
            out = asyncio.run(asyncio.wait_for(harness.conversation(), 150))
    finally:
        logger.remove(sink)
    session_id = new_session(url, before)
    assert out["error_frames"] == [] and warnings == []
    statuses = [d.status for d in answered(url, session_id)]
    assert statuses.count("completed") >= 4 and "cancelled" in statuses, statuses
    assert out["played_ms"] > 1000
    assert_clean(url, session_id, net.records)


# ---------------------------------------------------------------------------------- LiveKit


def test_livekits_realtime_quickstart_changed_only_in_url_and_key_holds_a_spoken_conversation(stack):
    """LiveKit Agents with its OpenAI plugin's ``RealtimeModel`` (its defaults: semantic VAD,
    transcription, ``generate_reply`` matched by metadata), as its quick-start builds it."""
    port, url = stack
    before = sessions_of(url)
    from livekit_agent import quickstart_conversation

    with log_net() as net:
        out = asyncio.run(asyncio.wait_for(quickstart_conversation(f"http://127.0.0.1:{port}/v1"), 200))
    session_id = new_session(url, before)
    assert out["errors"] == [] and out["interrupted"]
    assert any("weather" in t for t in out["transcripts"])
    statuses = [d.status for d in answered(url, session_id)]
    assert statuses.count("completed") >= 4 and "cancelled" in statuses, statuses
    assert_clean(url, session_id, net.records)


def test_livekits_realtime_quickstart_holds_the_same_conversation_with_a_full_duplex_model(tmp_path):
    """The same quick-start against the full-duplex reference engine (docs/duplex.md): the
    greeting and the text turn are ``generate_reply`` (a turn request whose metadata the model's
    turn echoes, so LiveKit finds its reply), the spoken turn is answered by the model itself,
    and the user talking over a long reply barges in (the overlap policy)."""
    from livekit_agent import quickstart_conversation

    url = f"sqlite:///{tmp_path / 'log.db'}"
    served = ("--model", "gpt-realtime=duplex-es-duplex", "--model", "*=duplex-es-echo")
    with running(url, tmp_path, workers=1, worker_args=WORKER_ARGS, server_args=served) as (port, _server, _workers):
        before = sessions_of(url)
        with log_net() as net:
            out = asyncio.run(asyncio.wait_for(quickstart_conversation(f"http://127.0.0.1:{port}/v1"), 200))
        session_id = new_session(url, before)
    from clients_support import events_of
    from duplex_es.events import TurnRequested, UnitOutput

    events = events_of(url, session_id)
    assert any(isinstance(e, UnitOutput) and e.audio for e in events)  # the full-duplex model spoke
    assert sum(isinstance(e, TurnRequested) for e in events) >= 2  # the greeting, the text turn
    assert out["errors"] == [] and out["interrupted"]
    assert any("weather" in t for t in out["transcripts"])
    statuses = [d.status for d in answered(url, session_id)]
    assert statuses.count("completed") >= 4 and "cancelled" in statuses, statuses
    assert_clean(url, session_id, net.records)
