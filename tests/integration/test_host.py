"""The session host against a real log and a real worker loop: after every command the live
state equals the fold of the log (docs/architecture.md, I1), and the audit holds at the end."""

from __future__ import annotations

import pytest

import asyncio
import json

from duplex_es.audit import audit_session
from duplex_es.domain import fold
from duplex_es.events import Mark
from duplex_es.protocol import parse_frame
from duplex_es.server.host import SessionHost, new_id
from duplex_es.store import EventLog
from duplex_es.worker.engine import EngineOutput, TickContext
from duplex_es.worker.runner import Worker

from harness import pcm
import base64


class CountingEngine:
    """Stands in for a GPU speech model: three 200 ms chunks per response, word marks included."""

    name = "test.counting/1"
    kinds = ("speech",)

    def step(self, ctx: TickContext) -> EngineOutput:
        k = ctx.tick.chunk_index
        heard = ctx.read_audio(ctx.tick.inputs.user_audio) if k == 0 else b""
        assert k > 0 or len(heard) > 0
        return EngineOutput(
            echo=ctx.identity,
            audio=pcm(200, value=k + 1),
            text_delta=f"w{k} ",
            marks=(Mark(text_chars=3 * k, audio_ms=200 * k),),
            final=k == 2,
        )


@pytest.mark.invariant("I1")
def test_live_state_is_the_fold_of_the_log_after_every_command(log: EventLog):
    sent: list[dict] = []
    worker = Worker(log, [CountingEngine()])

    async def scenario() -> SessionHost:
        host = SessionHost(log, new_id("sess"))
        host.attach()
        from duplex_es.domain import OpenSession

        async def listen() -> None:
            async for wire in host.events():
                sent.append(wire)

        listener = asyncio.create_task(listen())
        await host.submit(OpenSession(session_id=host.session_id, model="m"))

        async def check(*, caught_up: bool) -> None:
            records = await asyncio.to_thread(log.read_session, host.session_id)
            assert fold((r.seq, r.event) for r in records if r.seq <= host.state.seq) == host.state
            if caught_up:
                assert host.state.seq == records[-1].seq

        audio = base64.b64encode(pcm(300)).decode()
        frames = [
            {"type": "session.update", "session": {"type": "realtime", "instructions": "hi"}},
            {"type": "input_audio_buffer.append", "audio": audio},
            {"type": "input_audio_buffer.commit", "event_id": "c1"},
            {"type": "input_audio_buffer.commit", "event_id": "c2"},  # refused: empty
            {"type": "response.create", "event_id": "r1"},
            "RUN_WORKER",
            {"type": "response.create", "event_id": "r2"},  # refused while r1 is active
            "RUN_WORKER",
            {"type": "playback.ack", "played_ms": 300},
            "RUN_WORKER",
            {"type": "input_audio_buffer.append", "audio": audio},
            {"type": "input_audio_buffer.commit"},
            {"type": "response.create"},
            {"type": "response.cancel"},  # before any worker ran its first tick
            "RUN_WORKER",  # nothing to run: the tick was cancelled
            {"type": "response.cancel"},  # refused: nothing active
            {"type": "session.close"},
        ]
        for f in frames:
            if f == "RUN_WORKER":
                # The worker appends behind the host's back; the host must catch up before its
                # next decision (its expected seq is stale).
                await asyncio.to_thread(worker.run_once)
            else:
                await host.submit(parse_frame(json.dumps(f), new_id))
            await check(caught_up=f != "RUN_WORKER")
            await host.catch_up()
            await check(caught_up=True)
        await listener
        return host

    host = asyncio.run(scenario())
    assert host.ended.is_set()
    types = [w["type"] for w in sent]
    assert types.count("response.done") == 2 and types.count("error") == 3
    assert types[-1] == "session.closed"
    report = audit_session(log, host.session_id)
    assert report.ok, report.violations
    assert report.discarded_events >= 1  # the cancelled second response's inputs
