"""LiveKit Agents' documented realtime quick-start, run without a LiveKit room: the
quick-start's ``AgentSession(llm=openai.realtime.RealtimeModel(...))`` and ``Agent``, with the
session's audio input and output set to an in-process microphone and a speaker that plays in
real time — as LiveKit's own tests run an ``AgentSession`` (``tests/fake_io.py``) — instead of a
room. ``RealtimeModel`` gets only the base URL and the key.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from livekit import rtc
from livekit.agents import Agent, AgentSession, utils
from livekit.agents.voice import io
from livekit.plugins import openai

from clients_support import FRAME_BYTES, LONG_TEXT, RATE, MicBuffer, silence, speech, until

_SAMPLES = FRAME_BYTES // 2


class Microphone(io.AudioInput, MicBuffer):
    """20 ms frames in real time: speech when some is queued, silence otherwise."""

    def __init__(self) -> None:
        io.AudioInput.__init__(self, label="Microphone")
        MicBuffer.__init__(self)
        self._frames = utils.aio.Chan[rtc.AudioFrame]()
        self._task = asyncio.create_task(self._run())

    async def _run(self) -> None:
        async for chunk in self.frames():
            self._frames.send_nowait(rtc.AudioFrame(data=chunk, sample_rate=RATE, num_channels=1, samples_per_channel=_SAMPLES))

    async def __anext__(self) -> rtc.AudioFrame:
        return await self._frames.__anext__()

    async def aclose(self) -> None:
        self._task.cancel()


class Speaker(io.AudioOutput):
    """Plays what the agent says in real time, can pause (as a room's audio track can, which
    LiveKit's false-interruption handling uses) and reports where playback stopped, so an
    interruption truncates what was really heard."""

    def __init__(self) -> None:
        super().__init__(label="Speaker", capabilities=io.AudioOutputCapabilities(pause=True), sample_rate=RATE)
        self._pushed = 0.0  # seconds of the current segment handed over
        self._played = 0.0  # seconds of it played before the current run
        self._since: float | None = None  # when the current run started (None: paused or idle)
        self._flushed = False
        self._timer: asyncio.TimerHandle | None = None
        self.interruptions = 0

    def _position(self) -> float:
        running = time.monotonic() - self._since if self._since is not None else 0.0
        return min(self._pushed, self._played + running)

    async def capture_frame(self, frame: rtc.AudioFrame) -> None:
        await super().capture_frame(frame)
        if not self._pushed:
            self._since, self._played, self._flushed = time.monotonic(), 0.0, False
            self.on_playback_started(created_at=time.time())
        self._pushed += frame.duration

    def _schedule(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self._timer = None
        if self._flushed and self._since is not None:
            self._timer = asyncio.get_running_loop().call_later(max(0.0, self._pushed - self._position()), self._finish)

    def _finish(self, interrupted: bool = False) -> None:
        position = self._position() if interrupted else self._pushed
        if self._timer is not None:
            self._timer.cancel()
        self._timer, self._since, self._pushed, self._played = None, None, 0.0, 0.0
        self.on_playback_finished(playback_position=position, interrupted=interrupted)

    def flush(self) -> None:
        super().flush()
        if self._pushed:
            self._flushed = True
            self._schedule()

    def clear_buffer(self) -> None:
        if self._pushed:
            self.interruptions += 1
            self._finish(interrupted=True)

    def pause(self) -> None:
        if self._since is not None:
            self._played, self._since = self._position(), None
            self._schedule()

    def resume(self) -> None:
        if self._pushed and self._since is None:
            self._since = time.monotonic()
            self._schedule()


class Assistant(Agent):
    """The quick-start's agent."""

    def __init__(self) -> None:
        super().__init__(instructions="You are a helpful voice AI assistant.")


async def quickstart_conversation(base_url: str) -> dict[str, Any]:
    """The quick-start's session, then the issue's steps: the greeting (``generate_reply``), a
    spoken turn, a text turn, a barge-in. Returns what the session reported."""
    # The quick-start's model, changed only in where it connects and the key.
    session = AgentSession(llm=openai.realtime.RealtimeModel(base_url=base_url, api_key="anything"))
    mic, speaker = Microphone(), Speaker()
    session.input.audio = mic
    session.output.audio = speaker
    errors: list[str] = []
    transcripts: list[str] = []
    session.on("error", lambda ev: errors.append(repr(ev.error)[:500]))
    session.on("user_input_transcribed", lambda ev: transcripts.append(ev.transcript) if ev.is_final else None)
    states: list[str] = []
    session.on("agent_state_changed", lambda ev: states.append(ev.new_state))

    def spoke_since(n: int) -> bool:
        return "speaking" in states[n:]

    async def settled(what: str, timeout: float = 40) -> None:
        await until(lambda: session.agent_state == "listening" and session.current_speech is None and not mic.speaking, timeout, what)

    async def reply(what: str, **kwargs: str) -> None:
        """``generate_reply`` (LiveKit's own way to ask for one) and its reply played out."""
        n = len(states)
        handle = session.generate_reply(**kwargs)
        await asyncio.wait_for(handle.wait_for_playout(), 40)
        assert spoke_since(n), f"{what} was never spoken"
        await settled(f"{what} to end")

    await session.start(agent=Assistant())
    try:
        # 1. The quick-start's greeting.
        await reply("the greeting", instructions="Greet the user and offer your assistance.")
        # 2. A spoken turn at real time, ended by the plugin's default turn detection.
        n = len(states)
        mic.say(speech("weather_question_24k.wav") + silence(1.5))
        await until(lambda: spoke_since(n), 40, "the answer to the spoken turn")
        await settled("the answer to the spoken turn to end")
        # 3. A text turn.
        await reply("the answer to the text turn", user_input="What is the weather like in Paris today?")
        # 4. Barge-in: the user talks over a long reply.
        n = len(states)
        handle = session.generate_reply(user_input=LONG_TEXT)
        await until(lambda: spoke_since(n), 30, "the long reply")
        await asyncio.sleep(1.0)
        interrupted = speaker.interruptions
        mic.say(speech("correction_24k.wav") + silence(1.5))
        await until(lambda: speaker.interruptions > interrupted, 15, "the long reply to be interrupted")
        n = len(states)
        await until(lambda: spoke_since(n), 40, "the answer to the correction")
        await settled("the answer to the correction to end", 60)
        return {
            "errors": errors,
            "transcripts": transcripts,
            "interrupted": handle.interrupted,
            "history": [(getattr(i, "role", None), getattr(i, "interrupted", None)) for i in session.history.items],
        }
    finally:
        await session.aclose()
        await mic.aclose()
