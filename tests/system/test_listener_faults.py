"""Faults are transparent to the listener (issue 12 item 7), with a real server and a real
worker on SQLite and PostgreSQL: a response in progress survives a dropped connection or a
server SIGKILL within the disconnect grace, and the resumed client hears the whole reply once —
the same audio the log holds and the same reply the question gets undisturbed."""

from __future__ import annotations

import base64
import time
from pathlib import Path
from typing import Iterator

import pytest

from duplex_es.audit import audit_session
from duplex_es.store import Database, EventLog

from conftest import backend_url
from servers import running
from wsclient import WsClient

QUESTION = "please describe the weather in the mountains this afternoon in some detail"

#: A slow engine (a 200 ms chunk every ~150 ms plus the round trip), so a reply of several
#: seconds is still streaming when the connection drops or the server dies.
SLOW_WORKER = ["--chunk-ms", "200", "--step-delay-ms", "150"]


def wait_for(log: EventLog, session_id: str, test, timeout: float = 30.0) -> list:  # noqa: ANN001
    """The session's events once ``test(events)`` holds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        events = [r.event for r in log.read_session(session_id)]
        if test(events):
            return events
        time.sleep(0.02)
    raise TimeoutError(f"{session_id}: condition not met; last events {[e.TYPE for e in events][-8:]}")


def logged_audio(log: EventLog, session_id: str, response_id: str) -> bytes:
    """The audio the log holds for a response: its accepted outputs, in log order."""
    return b"".join(
        base64.b64decode(r.event.audio)
        for r in log.read_session(session_id)
        if r.event.TYPE == "tick.output" and r.event.response_id == response_id
    )


def reference_reply(port: int) -> bytes:
    """The reply the question gets without any fault (the echo engine is deterministic)."""
    c = WsClient(port)
    c.say(QUESTION)
    done = c.respond()
    assert done["status"] == "completed"
    audio = c.audio_of(done["id"])
    c.close()
    assert len(audio) > 24_000 * 2  # over a second: long enough to be cut mid-way
    return audio


def ask(port: int) -> tuple[WsClient, str]:
    """A client that asked the question and heard the first part of the reply."""
    a = WsClient(port)
    a.say(QUESTION)
    a.send({"type": "response.create"})
    response_id = a.recv("response.created")["response"]["id"]
    a.recv("response.output_audio.delta")
    return a, response_id


def resume(port: int, a: WsClient) -> WsClient:
    return WsClient(port, first={"type": "session.resume", "session_id": a.session_id, "resume_token": a.token, "last_server_event_seq": a.last_seq()})


def heard_once(a: WsClient, b: WsClient, response_id: str) -> bytes:
    """Check that what ``a`` got before the fault and what ``b`` got after resuming are one
    stream with nothing twice and one end; returns the reply's audio as the client heard it."""
    done = b.recv("response.done", 60, **{"response.id": response_id})["response"]
    assert done["status"] == "completed" and done["status_details"]["type"] == "completed"
    seqs = [e["server_event_seq"] for e in a.events + b.events[1:] if "server_event_seq" in e]  # b[0]: its own new session
    assert len(seqs) == len(set(seqs)), "an event was delivered twice"
    assert seqs == sorted(seqs), "events out of log order across the resume"
    ends = [e for e in a.events + b.events if e["type"] == "response.done" and e["response"]["id"] == response_id]
    assert len(ends) == 1
    return a.audio_of(response_id) + b.audio_of(response_id)


@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
def stack(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[int, EventLog, bytes]]:
    folder = tmp_path_factory.mktemp(f"listener-{request.param}")
    args = ["--disconnect-grace-ms", "20000", "--reaper-interval-ms", "100"]
    with backend_url(request.param, folder) as url, running(url, folder, server_args=args, worker_args=SLOW_WORKER) as (port, _, _):
        db = Database(url)
        yield port, EventLog(db), reference_reply(port)
        db.dispose()


@pytest.mark.slow
@pytest.mark.parametrize("resume_at", ["mid_reply", "after_the_reply_ended"])
def test_a_client_that_drops_mid_reply_and_resumes_hears_the_whole_reply_once(stack, resume_at: str):
    """The connection closes without ``session.close`` while the reply streams: the worker goes
    on generating into the log (on main the detach cancelled it); the resumed client is re-sent
    what it missed, then the rest live — or all of it, when the reply ended while it was away."""
    port, log, reference = stack
    a, response_id = ask(port)
    a.drop()
    if resume_at == "mid_reply":
        # Generation goes on while nobody listens: an output is logged after the detach.
        def more_after_detach(events: list) -> bool:
            kinds = [e.TYPE for e in events]
            return "session.detached" in kinds and "tick.output" in kinds[kinds.index("session.detached") :]

        events = wait_for(log, a.session_id, more_after_detach)
        assert "response.done" not in [e.TYPE for e in events], "the reply ended before the resume: make the worker slower"
    else:
        events = wait_for(log, a.session_id, lambda evs: "session.detached" in [e.TYPE for e in evs] and "response.done" in [e.TYPE for e in evs])
        kinds = [e.TYPE for e in events]
        assert kinds.index("session.detached") < kinds.index("response.done")
    b = resume(port, a)
    audio = heard_once(a, b, response_id)
    assert audio == logged_audio(log, a.session_id, response_id)
    assert audio == reference
    # What the client played is what it acks: all of it, and the history keeps the whole reply.
    played_ms = len(audio) // 48
    b.send({"type": "playback.ack", "response_id": response_id, "played_ms": played_ms})
    acked = b.recv("playback.acknowledged")
    assert acked["committed_ms"] == played_ms and acked["transcript"]
    assert not any(e.TYPE == "epoch.advanced" for e in [r.event for r in log.read_session(a.session_id)])
    b.close()
    assert audit_session(log, a.session_id).ok


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_a_server_sigkilled_mid_reply_is_restarted_and_the_resumed_client_hears_the_whole_reply_once(tmp_path: Path, backend: str):
    """Case 22 and restart recovery: the server dies while a reply streams. The restarted
    server (same database, same port) finds the session open, logs ``session.detached``
    (``server_restart``) and pumps it on: the worker's outputs keep being folded and the next
    ticks issued (on main the restart cancelled the reply). The resumed client hears it all,
    once. A session detached before the crash whose grace ran out while the server was down is
    expired at once, its cause recorded."""
    from duplex_es_tools.processes import start_server, wait_healthy

    grace_ms = 4000
    args = ["--disconnect-grace-ms", str(grace_ms), "--reaper-interval-ms", "100"]
    with backend_url(backend, tmp_path) as url, running(url, tmp_path, server_args=args, worker_args=SLOW_WORKER) as (port, server, _):
        log = EventLog(Database(url))
        reference = reference_reply(port)
        gone, gone_response = ask(port)
        gone.drop()
        wait_for(log, gone.session_id, lambda evs: "session.detached" in [e.TYPE for e in evs])
        a, response_id = ask(port)
        server.kill()
        time.sleep(grace_ms / 1000 + 0.5)  # longer than the grace: gone's lease runs out while down
        restarted = start_server(url, port, tmp_path / "serve-2.log", args)
        try:
            wait_healthy(port, restarted)
            b = resume(port, a)
            audio = heard_once(a, b, response_id)
            b.close()
            wait_for(log, gone.session_id, lambda evs: "session.expired" in [e.TYPE for e in evs])
        finally:
            restarted.stop()
        assert audio == logged_audio(log, a.session_id, response_id)
        assert audio == reference
        events = [r.event for r in log.read_session(a.session_id)]
        kinds = [e.TYPE for e in events]
        detach = next(e for e in events if e.TYPE == "session.detached")
        assert detach.reason == "server_restart"
        after = kinds[kinds.index("session.detached") :]
        assert "tick.issued" in after and "tick.output" in after  # the reply went on after the restart
        assert "epoch.advanced" not in kinds and kinds.count("response.done") == 1
        assert audit_session(log, a.session_id).ok
        # The session whose client never came back: its reply ended with the real cause.
        gone_events = [r.event for r in log.read_session(gone.session_id)]
        expired = next(e for e in gone_events if e.TYPE == "session.expired")  # a worker may still answer a fenced tick after it
        detached = next(e for e in gone_events if e.TYPE == "session.detached")
        assert expired.reason == "disconnect_grace_expired" and expired.since_ms == detached.at_ms
        ends = [e for e in gone_events if e.TYPE == "response.done" and e.response_id == gone_response]
        assert len(ends) == 1
        if ends[0].status != "completed":  # it may have finished before the grace ran out
            assert (ends[0].status, ends[0].reason, ends[0].error_code) == ("cancelled", "client_cancelled", "session_expired")
        log.db.dispose()
