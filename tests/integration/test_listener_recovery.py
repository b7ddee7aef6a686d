"""A restarted server carries on a response whose client was already gone when the old server
died (issue 12 item 7): with a real log and a real worker loop, no WebSocket."""

from __future__ import annotations

import asyncio

from duplex_es.api import AppendText, Commit, CreateResponse, Database, DuplexSessions, new_id
from duplex_es.audit import audit_session
from duplex_es.events import Mark, TickIssued
from duplex_es.store import EventLog, upgrade
from duplex_es.worker.engine import EngineOutput, TickContext
from duplex_es.worker.runner import Worker

from harness import pcm


class ThreeChunks:
    """Stands in for a speech model: three 200 ms chunks per response."""

    name = "test.three-chunks/1"
    kinds = ("speech",)

    def step(self, ctx: TickContext) -> EngineOutput:
        k = ctx.tick.chunk_index
        return EngineOutput(echo=ctx.identity, audio=pcm(200, value=k + 1), text_delta=f"w{k} ", marks=(Mark(text_chars=3 * k, audio_ms=200 * k),), final=k == 2)


def test_a_restarted_server_pumps_a_detached_session_whose_output_came_in_while_it_was_down(db_url: str):
    """The client dropped mid-reply, then the server died; the worker answered the tick in
    flight while no server ran. The restarted server must fold that output and issue the next
    tick by itself (nobody is connected to ask), so the reply is ready when the client resumes:
    it completes with no client command at all."""
    db = Database(db_url)
    upgrade(db)
    log = EventLog(db)
    worker = Worker(log, [ThreeChunks()])

    async def scenario() -> str:
        first = DuplexSessions(db, server_id="srv-1", reaper_interval_ms=3_600_000)
        await first.start()
        s = await first.open_session()
        await s.submit(AppendText(text="hello"))
        await s.submit(Commit(item_id=new_id("item")))
        await s.submit(CreateResponse(response_id=new_id("resp"), item_id=new_id("item"), request_id=new_id("req")))
        await s.detach()
        await first.stop()  # the server is gone: nothing hosts the session any more
        assert await asyncio.to_thread(worker.run_once)  # chunk 0, committed while no server runs
        restarted = DuplexSessions(db, server_id="srv-1", reaper_interval_ms=3_600_000)
        await restarted.start()
        try:
            for _ in range(200):
                if await asyncio.to_thread(worker.run_once):
                    continue
                host = restarted.get(s.session_id)
                if host is not None and host.state.active_response is None:
                    break
                await asyncio.sleep(0.02)
        finally:
            await restarted.stop()
        return s.session_id

    session_id = asyncio.run(scenario())
    events = [r.event for r in log.read_session(session_id)]
    kinds = [e.TYPE for e in events]
    assert [e.chunk_index for e in events if isinstance(e, TickIssued)] == [0, 1, 2]
    assert kinds.count("response.done") == 1 and "epoch.advanced" not in kinds
    assert next(e for e in events if e.TYPE == "response.done").status == "completed"
    assert kinds.index("session.detached") < kinds.index("response.done")
    assert audit_session(log, session_id).ok
    db.dispose()
