"""pipecat's OpenAI Realtime service in a pipeline with a microphone and a speaker that run in
this process at real time (pipecat's realtime example, with the transport swapped out):

    MicSource → user aggregator → OpenAIRealtimeLLMService → Speaker → assistant aggregator

Only the base URL and the key are given to the service: everything else is pipecat's default.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any, Callable

from pipecat.adapters.llm.schemas.function_schema import FunctionSchema
from pipecat.adapters.llm.schemas.tools_schema import ToolsSchema
from pipecat.frames.frames import (
    EndFrame,
    ErrorFrame,
    Frame,
    InputAudioRawFrame,
    InterruptionFrame,
    LLMMessagesAppendFrame,
    LLMRunFrame,
    StartFrame,
    TTSAudioRawFrame,
)
from pipecat.observers.base_observer import BaseObserver, FramePushed
from pipecat.pipeline.pipeline import Pipeline
from pipecat.pipeline.worker import PipelineParams, PipelineWorker
from pipecat.processors.aggregators.llm_context import LLMContext
from pipecat.processors.aggregators.llm_response_universal import LLMContextAggregatorPair
from pipecat.processors.frame_processor import FrameDirection, FrameProcessor
from pipecat.services.openai.realtime.llm import OpenAIRealtimeLLMService
from pipecat.transports.base_output import BaseOutputTransport
from pipecat.transports.base_transport import TransportParams
from pipecat.services.llm_service import FunctionCallParams
from pipecat.workers.runner import WorkerRunner
from pipecat.utils.types import NOT_GIVEN

from duplex_es.events import ResponseDone, SessionUpdated

from clients_support import LONG_TEXT, RATE, MicBuffer, silence, speech, until


class MicSource(FrameProcessor, MicBuffer):
    """A microphone: a 20 ms ``InputAudioRawFrame`` every 20 ms, speech when some is queued."""

    def __init__(self, **kwargs: Any) -> None:
        FrameProcessor.__init__(self, **kwargs)
        MicBuffer.__init__(self)
        self._task: asyncio.Task | None = None

    async def process_frame(self, frame: Frame, direction: FrameDirection) -> None:
        await super().process_frame(frame, direction)
        await self.push_frame(frame, direction)
        if isinstance(frame, StartFrame) and self._task is None:
            self._task = self.create_task(self._run())
        elif isinstance(frame, EndFrame) and self._task is not None:
            await self.cancel_task(self._task)
            self._task = None

    async def _run(self) -> None:
        async for chunk in self.frames():
            await self.push_frame(InputAudioRawFrame(audio=chunk, sample_rate=RATE, num_channels=1))


class Speaker(BaseOutputTransport):
    """An output transport whose speaker plays in real time (so pipecat tracks bot speech and
    handles interruptions as with a real one); it counts what it played."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(TransportParams(audio_out_enabled=True, audio_out_sample_rate=RATE), **kwargs)
        self.played_bytes = 0
        self._clock = 0.0

    async def start(self, frame: StartFrame) -> None:
        await super().start(frame)
        await self.set_transport_ready(frame)

    async def process_frame(self, frame: Frame, direction: FrameDirection) -> None:
        await super().process_frame(frame, direction)
        if isinstance(frame, InterruptionFrame):
            self._clock = 0.0

    async def write_audio_frame(self, frame: Any) -> bool:
        self.played_bytes += len(frame.audio)
        now = time.monotonic()
        self._clock = max(self._clock, now)
        await asyncio.sleep(self._clock - now)
        self._clock += len(frame.audio) / (2 * frame.sample_rate * frame.num_channels)
        return True


class _Watch(BaseObserver):
    """Counts the reply audio the service produces and keeps every ErrorFrame."""

    def __init__(self, llm: OpenAIRealtimeLLMService) -> None:
        super().__init__()
        self.llm = llm
        self.audio_frames = 0
        self.errors: list[str] = []
        self._seen: set[int] = set()

    async def on_push_frame(self, data: FramePushed) -> None:
        f = data.frame
        if f.id in self._seen:
            return
        if isinstance(f, ErrorFrame):
            self._seen.add(f.id)
            self.errors.append(f.error[:500])
        elif isinstance(f, TTSAudioRawFrame) and data.source is self.llm:
            self._seen.add(f.id)
            self.audio_frames += 1


class PipecatHarness:
    """One pipecat voice agent on ``url``; :meth:`conversation` runs the issue's steps, watching
    the server's log (``log()``: the session's events so far) for what happened."""

    def __init__(self, url: str, log: Callable[[], list], weather_tool: Callable[[str], str] | None = None) -> None:
        # The only lines a pipecat user changes: where the service connects, and the key.
        self.llm = OpenAIRealtimeLLMService(api_key="anything", base_url=url)
        self.ran: list[dict] = []
        tools: Any = NOT_GIVEN
        if weather_tool is not None:
            # pipecat's function-calling API: a schema in the context, a handler on the service.
            tools = ToolsSchema(
                standard_tools=[
                    FunctionSchema(
                        name="get_weather",
                        description="Get the current weather for a city.",
                        properties={"city": {"type": "string", "description": "The city"}},
                        required=["city"],
                    )
                ]
            )

            async def get_weather(params: FunctionCallParams) -> None:
                self.ran.append(dict(params.arguments))
                await params.result_callback(weather_tool(params.arguments["city"]))

            self.llm.register_function("get_weather", get_weather)
        context = LLMContext([{"role": "developer", "content": "Say hello!"}], tools=tools)
        user, assistant = LLMContextAggregatorPair(context)
        self.mic, self.speaker = MicSource(name="mic"), Speaker(name="speaker")
        self.watch = _Watch(self.llm)
        self.worker = PipelineWorker(
            Pipeline([self.mic, user, self.llm, self.speaker, assistant]),
            params=PipelineParams(audio_in_sample_rate=RATE, audio_out_sample_rate=RATE),
            observers=[self.watch],
            idle_timeout_secs=None,
        )
        self.log = log

    def _ended(self, status: str | None = None) -> int:
        return sum(1 for e in self.log() if isinstance(e, ResponseDone) and status in (None, e.status))

    async def _answered(self, before: int, what: str, timeout: float = 40) -> None:
        await until(lambda: self._ended("completed") > before, timeout, what)
        await asyncio.sleep(0.3)  # let pipecat take the response.done in before the next step

    async def conversation(self) -> dict[str, Any]:
        runner = WorkerRunner(handle_sigint=False)
        await runner.add_workers(self.worker)
        task = asyncio.create_task(runner.run())
        try:
            await until(lambda: any(isinstance(e, SessionUpdated) for e in self.log()), 15, "pipecat's session.update")
            # 1. pipecat's own "generate a reply", as its example starts a conversation.
            n = self._ended("completed")
            await self.worker.queue_frames([LLMRunFrame()])
            await self._answered(n, "the reply to LLMRunFrame")
            # 2. A spoken turn at real time, ended by pipecat's default (the server's VAD).
            n = self._ended("completed")
            self.mic.say(speech("weather_question_24k.wav") + silence(1.5))
            await self._answered(n, "the answer to the spoken turn", 60)
            # 3. A text turn: messages appended and run, from where the service sits.
            n = self._ended("completed")
            await self.llm.queue_frame(LLMMessagesAppendFrame(messages=[{"role": "user", "content": "What is the capital of France?"}], run_llm=True))
            await self._answered(n, "the answer to the text turn")
            # 4. Barge-in: the user talks while a long reply is being generated.
            n, c, heard = self._ended("completed"), self._ended("cancelled"), self.watch.audio_frames
            await self.llm.queue_frame(LLMMessagesAppendFrame(messages=[{"role": "user", "content": LONG_TEXT}], run_llm=True))
            await until(lambda: self.watch.audio_frames > heard, 30, "the long reply's audio")
            self.mic.say(speech("correction_24k.wav") + silence(1.5))
            await until(lambda: self._ended("cancelled") > c, 20, "the long reply to be cancelled")
            await until(lambda: self._ended("completed") > n and not self.mic.speaking, 60, "the answer to the correction")
            await asyncio.sleep(1.0)
        finally:
            await self.worker.queue_frame(EndFrame())
            try:
                await asyncio.wait_for(task, 20)
            except asyncio.TimeoutError:
                await self.worker.cancel()
        return {"error_frames": self.watch.errors, "played_ms": self.speaker.played_bytes * 1000 // (2 * RATE)}

    async def tool_call(self, question: bytes) -> dict[str, Any]:
        """The user asks ``question`` aloud; the service calls the registered tool, sends its
        result and the answer is spoken."""
        runner = WorkerRunner(handle_sigint=False)
        await runner.add_workers(self.worker)
        task = asyncio.create_task(runner.run())
        try:
            await until(lambda: any(isinstance(e, SessionUpdated) for e in self.log()), 15, "pipecat's session.update")
            # As pipecat's examples start: its "generate a reply" sends the context (and tools).
            n = self._ended("completed")
            await self.worker.queue_frames([LLMRunFrame()])
            await self._answered(n, "the reply to LLMRunFrame")
            n = self._ended("completed")
            self.mic.say(question)
            # The response with the call, then the one speaking its result.
            await until(lambda: self._ended("completed") >= n + 2, 60, "the call and the spoken answer")
            await asyncio.sleep(1.0)
        finally:
            await self.worker.queue_frame(EndFrame())
            try:
                await asyncio.wait_for(task, 20)
            except asyncio.TimeoutError:
                await self.worker.cancel()
        return {"error_frames": self.watch.errors, "ran": self.ran, "played_ms": self.speaker.played_bytes * 1000 // (2 * RATE)}
