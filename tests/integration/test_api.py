"""The Python API (issue 3, item 7): the same sessions without a WebSocket, on a real log."""

from __future__ import annotations

import asyncio

import pytest

from duplex_es.api import (
    AppendText,
    CancelResponse,
    ClearInput,
    CommandError,
    Commit,
    CreateResponse,
    Database,
    DuplexSessions,
    ResumeRefused,
    command_from_realtime,
    new_id,
)
from duplex_es.audit import audit_session
from duplex_es.domain import Code
from duplex_es.store import upgrade


def test_command_from_realtime_raises_with_the_code_and_the_clients_event_id():
    with pytest.raises(CommandError) as err:
        command_from_realtime({"type": "input_audio_buffer.append", "event_id": "e7", "audio": "%%"}, new_id)
    assert (err.value.code, err.value.param, err.value.event_id) == (Code.INVALID_AUDIO_BASE64, "audio", "e7")
    with pytest.raises(CommandError) as err:
        command_from_realtime({"type": "warp.drive", "event_id": "e8"}, new_id)
    assert (err.value.code, err.value.event_id) == (Code.UNKNOWN_TYPE, "e8")
    cmd = command_from_realtime({"type": "response.cancel", "expected_epoch": 3}, new_id)
    assert isinstance(cmd, CancelResponse) and cmd.expected_epoch == 3


@pytest.mark.invariant("I11")
def test_open_submit_stream_detach_resume_expire(db_url: str):
    db = Database(db_url)
    upgrade(db)

    async def scenario() -> None:
        sessions = DuplexSessions(db, disconnect_grace_ms=60_000, reaper_interval_ms=3_600_000)
        await sessions.start()
        try:
            s = await sessions.open_session(model="api-model")
            seen: list[dict] = []

            async def listen(handle) -> None:
                async for ev in handle.events():
                    seen.append(ev)

            listener = asyncio.create_task(listen(s))
            await s.submit(AppendText(text="hello"))
            await s.submit(Commit(event_id="c", item_id=new_id("item")))
            await s.submit(CreateResponse(response_id=new_id("resp"), item_id=new_id("item"), request_id=new_id("req")))
            await s.submit(ClearInput(event_id="fenced", expected_epoch=7))
            await s.submit(CancelResponse())
            await s.submit(ClearInput(expected_epoch=1))
            await asyncio.sleep(0.05)
            types = [e["type"] for e in seen]
            assert types[0] == "session.created" and "response.created" in types and types.count("response.done") == 1
            stale = [e["error"] for e in seen if e["type"] == "error"]
            assert [(e["code"], e["event_id"]) for e in stale] == [(Code.STALE_FENCE, "fenced")]
            assert types[-1] == "input_audio_buffer.cleared"

            await s.detach()
            await listener  # the stream ends with the listener
            assert s.state.lease.detached_at_ms is not None
            resumed = await sessions.resume_session(s.session_id, expected_generation=0)
            assert resumed.state.lease.generation == 1 and resumed.state.lease.detached_at_ms is None
            with pytest.raises(ResumeRefused) as err:
                await sessions.resume_session(s.session_id, expected_generation=0)  # the loser of two resumes
            assert err.value.code == "session_resume_conflict"
            seen.clear()
            listener = asyncio.create_task(listen(resumed))
            await resumed.submit(AppendText(text="again"))
            await resumed.detach()
            await listener
            assert [e for e in seen if e["type"] == "error"] == [] and resumed.state.buffer.text == "again"

            # Nobody came back within the grace: the reaper expires it with the time it used.
            expired = await sessions.reap(now=resumed.state.lease.detached_at_ms + 60_000)
            assert expired == [s.session_id]
            with pytest.raises(ResumeRefused) as err:
                await sessions.resume_session(s.session_id, expected_generation=1)
            assert err.value.code == "session_closed"
        finally:
            await sessions.stop()

    asyncio.run(scenario())
    from duplex_es.store import EventLog

    log = EventLog(db)
    sid = log.session_ids()[0]
    events = [r.event for r in log.read_session(sid)]
    assert [e.TYPE for e in events if e.TYPE.startswith("session.")] == [
        "session.opened", "session.detached", "session.resumed", "session.detached", "session.expired"
    ]
    assert events[-1].reason == "disconnect_grace_expired" and events[-1].decided_at_ms - events[-1].since_ms == 60_000
    report = audit_session(log, sid)
    assert report.ok, report.violations
    db.dispose()


@pytest.mark.invariant("I11")
def test_idle_sessions_expire_after_their_ttl(db_url: str):
    db = Database(db_url)
    upgrade(db)

    async def scenario() -> list[str]:
        sessions = DuplexSessions(db, idle_ttl_ms=1000, reaper_interval_ms=3_600_000)
        s = await sessions.open_session()
        await s.submit(AppendText(text="x"))
        assert await sessions.reap(now=s.last_activity_ms + 999) == []
        done = await sessions.reap(now=s.last_activity_ms + 1000)
        assert s.state.status == "expired"
        return done

    assert len(asyncio.run(scenario())) == 1
    db.dispose()


def test_the_reaper_leaves_a_session_that_is_still_opening(db_url: str):
    """Regression: a reaper pass between registering a new session and logging its first event
    dropped the host, so worker outputs for it were never picked up."""
    from duplex_es.server.host import SessionHost
    from duplex_es.store import EventLog

    db = Database(db_url)
    upgrade(db)

    async def scenario() -> None:
        sessions = DuplexSessions(db, idle_ttl_ms=1, disconnect_grace_ms=1)
        opening = SessionHost(EventLog(db), "sess_opening")
        sessions.hosts[opening.session_id] = opening
        assert await sessions.reap(now=opening.last_activity_ms + 10**9) == []
        assert opening.session_id in sessions.hosts

    asyncio.run(scenario())
    db.dispose()
