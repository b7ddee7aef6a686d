"""Session resume over a real WebSocket (issue 5 item 1), on SQLite and PostgreSQL: the token
handshake, byte-exact replay of what the client missed, takeover, and refusals."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import threading
import time
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from duplex_es.audit import audit_session
from duplex_es.domain import Code
from duplex_es.store import Database, EventLog

from conftest import backend_url
from servers import running
from wsclient import WsClient, pcm_b64


@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
def stack(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory):
    folder = tmp_path_factory.mktemp(f"resume-{request.param}")
    args = ["--disconnect-grace-ms", "3000", "--reaper-interval-ms", "100"]
    with backend_url(request.param, folder) as url:
        with running(url, folder, server_args=args, worker_args=["--chunk-ms", "250"]) as (port, _, _):
            db = Database(url)
            yield port, EventLog(db), url
            db.dispose()


def resume_msg(c: WsClient, last: int | None = None, **extra: Any) -> dict[str, Any]:
    msg = {"type": "session.resume", "session_id": c.session_id, "resume_token": c.token, **extra}
    if last is not None:
        msg["last_server_event_seq"] = last
    return msg


def wait_for(log: EventLog, session_id: str, event_type: str, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if any(r.event.TYPE == event_type for r in log.read_session(session_id)):
            return
        time.sleep(0.02)
    raise TimeoutError(f"no {event_type} in {session_id}")


def test_the_resume_token_is_issued_at_session_created_and_stored_only_as_a_digest(stack):
    port, log, url = stack
    c = WsClient(port)
    assert c.token and len(c.token) >= 40
    c.drop()
    wait_for(log, c.session_id, "session.detached")
    digest = hashlib.sha256(c.token.encode()).hexdigest()
    opened = log.read_session(c.session_id)[0].event
    assert opened.resume_token_hash == digest
    engine = sa.create_engine(url)
    with engine.connect() as conn:
        payloads = [row[0] for row in conn.exec_driver_sql("SELECT data FROM events")]
    engine.dispose()
    text = "".join(payloads)
    assert digest in text and c.token not in text


@pytest.mark.invariant("I13")
def test_a_drop_mid_speech_resumes_the_same_buffer_and_re_sends_exactly_what_was_missed(stack):
    """Case 21, and I13: appends on the resumed connection continue the same input buffer and
    audio clock; the events after the client's last seq are re-sent byte for byte; one commit."""
    port, log, _ = stack
    a = WsClient(port)
    a.send({"type": "input_audio_buffer.append", "audio": pcm_b64(300, 100)})
    a.send({"type": "session.heartbeat"})
    a.recv("session.heartbeat_ack")
    last = a.last_seq()
    mark = a.mark()
    a.send({"type": "input_audio_buffer.append", "audio": pcm_b64(200, 200)})
    a.send({"type": "conversation.item.create", "item": {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "hi"}]}})
    a.send({"type": "session.heartbeat"})
    a.recv("conversation.item.done")
    a.recv("session.heartbeat_ack")
    missed = a.frames[mark:]
    old_token = a.token
    a.drop()
    wait_for(log, a.session_id, "session.detached")

    b = WsClient(port, first=resume_msg(a, last))
    assert b.session_id == a.session_id and b.token not in (None, old_token)
    resumed = b.events.index(next(e for e in b.events if e["type"] == "session.resumed"))
    replayed = b.frames[1:resumed]  # after the session.created of the connection's own new session
    assert replayed == missed
    assert b.events[resumed]["lease_generation"] == 1

    b.send({"type": "input_audio_buffer.append", "audio": pcm_b64(250, 300)})
    b.send({"type": "input_audio_buffer.commit"})
    committed = b.recv("input_audio_buffer.committed")
    b.send({"type": "conversation.item.retrieve", "item_id": committed["item_id"]})
    audio = base64.b64decode(b.recv("conversation.item.retrieved")["item"]["content"][0]["audio"])
    want = b"".join(base64.b64decode(pcm_b64(ms, v)) for ms, v in ((300, 100), (200, 200), (250, 300)))
    assert audio == want
    state = b.state()["state"]
    assert state["input_clock"] == 750 * 24 and state["lease"]["generation"] == 1
    b.close()
    events = [r.event.TYPE for r in log.read_session(a.session_id)]
    assert events.count("input_audio_buffer.committed") == 1
    assert audit_session(log, a.session_id).ok


def test_the_url_form_resumes_without_opening_a_session(stack):
    """The SDK's ``on_reconnecting`` can only change the URL: resume_session & co ride there."""
    port, log, _ = stack
    a = WsClient(port)
    a.send({"type": "session.heartbeat"})
    a.recv("session.heartbeat_ack")
    a.drop()
    query = {"resume_session": a.session_id, "resume_token": a.token, "last_server_event_seq": a.last_seq()}
    b = WsClient(port, query=query)
    assert [e["type"] for e in b.events] == ["session.resumed"] and b.session_id == a.session_id
    b.close()
    sessions = {r.event.session_id for r in log.read_session(a.session_id)[:1]}
    assert sessions == {a.session_id}


def test_a_takeover_replaces_the_old_socket_and_voids_its_token(stack):
    """The later resume wins: the attached socket gets session.replaced and close 4000; a resume
    with the rotated-away token gets session_resume_conflict, a made-up one invalid_resume_token,
    and both leave the resumer on a fresh session of its own; neither is logged in the session
    it named."""
    port, log, _ = stack
    a = WsClient(port)
    first_token = a.token
    b = WsClient(port, first=resume_msg(a, a.last_seq()))
    replaced = a.recv("session.replaced")
    assert replaced["lease_generation"] == 1 and "resume_token" not in replaced
    with pytest.raises(Exception) as closed:
        a.ws.recv(timeout=5)
    assert getattr(closed.value, "rcvd", None) is not None and closed.value.rcvd.code == 4000

    stale = WsClient(port, first={"type": "session.resume", "session_id": a.session_id, "resume_token": first_token, "event_id": "r1"}, wait=False)
    stale.recv("session.created")
    err = stale.error()
    assert (err["code"], err["param"], err["event_id"]) == (Code.RESUME_CONFLICT, "resume_token", "r1")
    wrong = WsClient(port, first={"type": "session.resume", "session_id": a.session_id, "resume_token": "x" * 43}, wait=False)
    assert wrong.error()["code"] == Code.RESUME_TOKEN_INVALID
    # The refused connections still work, on their own sessions.
    assert wrong.session_id != a.session_id
    wrong.say("still here")
    for c in (stale, wrong):
        c.close()
    # b was not disturbed by the refusals.
    b.send({"type": "session.heartbeat"})
    b.recv("session.heartbeat_ack")
    b.close()
    # The refusals went to the connections that tried, not into the session they named.
    rejected = [r.event.code for r in log.read_session(a.session_id) if r.event.TYPE == "command.rejected"]
    assert rejected == []


def test_two_resumes_racing_with_one_token_one_wins(stack):
    port, log, _ = stack
    a = WsClient(port)
    a.drop()
    wait_for(log, a.session_id, "session.detached")
    results: list[str] = []

    def go() -> None:
        c = WsClient(port, first=resume_msg(a), wait=False)
        ev = c.first_of("session.resumed", "error")
        results.append("resumed" if ev["type"] == "session.resumed" else ev["error"]["code"])
        c.ws.close()

    threads = [threading.Thread(target=go) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(results) == sorted(["resumed", Code.RESUME_CONFLICT])
    generations = [r.event.lease_generation for r in log.read_session(a.session_id) if r.event.TYPE == "session.resumed"]
    assert generations == [1]


def test_resync_required_when_the_client_claims_events_the_log_does_not_hold(stack):
    port, _, _ = stack
    a = WsClient(port)
    b = WsClient(port, first=resume_msg(a, 10**12))
    types = [e["type"] for e in b.events]
    assert types[-2:] == ["session.resync_required", "session.resumed"]
    notice = b.events[-2]
    assert notice["reason"] == "ahead_of_log" and notice["last_server_event_seq"] == 10**12
    b.close()


@pytest.mark.parametrize(
    "msg, code, param",
    [
        ({"type": "session.resume", "resume_token": "t"}, Code.INVALID_EVENT, "session_id"),
        ({"type": "session.resume", "session_id": "sess_x"}, Code.INVALID_EVENT, "resume_token"),
        ({"type": "session.resume", "session_id": "sess_x", "resume_token": "t", "last_server_event_seq": -1}, Code.INVALID_EVENT, "last_server_event_seq"),
        ({"type": "session.resume", "session_id": "sess_x", "resume_token": "t", "extra": 1}, Code.INVALID_EVENT, "extra"),
        ({"type": "session.resume", "session_id": "sess_nope", "resume_token": "t"}, Code.SESSION_NOT_FOUND, "session_id"),
    ],
)
def test_bad_resumes_are_refused_with_a_code_and_the_connection_stays_usable(stack, msg, code, param):
    port, _, _ = stack
    c = WsClient(port, first=msg, wait=False)
    err = c.error()
    assert (err["code"], err["param"]) == (code, param)
    c.say("works")
    c.close()


def test_resume_after_the_first_message_is_refused_and_changes_nothing(stack):
    port, log, _ = stack
    a = WsClient(port)
    b = WsClient(port)
    b.send({"type": "session.heartbeat"})
    b.recv("session.heartbeat_ack")
    b.send({**resume_msg(a), "event_id": "late"})
    err = b.error()
    assert (err["code"], err["event_id"]) == (Code.RESUME_NOT_FIRST, "late")
    a.send({"type": "session.heartbeat"})
    a.recv("session.heartbeat_ack")  # a still holds its session
    assert not any(r.event.TYPE == "session.resumed" for r in log.read_session(a.session_id))
    for c in (a, b):
        c.close()


def test_a_closed_or_expired_session_cannot_be_resumed(stack):
    port, log, _ = stack
    closed = WsClient(port)
    closed.close()
    c = WsClient(port, first=resume_msg(closed), wait=False)
    assert c.error()["code"] == Code.SESSION_CLOSED
    gone = WsClient(port)
    gone.drop()
    wait_for(log, gone.session_id, "session.expired", timeout=15)
    d = WsClient(port, first=resume_msg(gone), wait=False)
    assert d.error()["code"] == Code.SESSION_CLOSED
    for x in (c, d):
        x.close()


def test_a_response_in_progress_at_the_drop_reaches_the_resuming_client_whole(stack):
    """A drop during a response cancels nothing (issue 12 item 7; main cancelled it, "nobody
    listens"): the response goes on while detached, and the resuming client is re-sent it up to
    its one ``response.done``, completed, never left hanging."""
    port, log, _ = stack
    a = WsClient(port)
    a.send({"type": "input.text.append", "text": "tell me about the weather in the mountains today please"})
    a.send({"type": "input_audio_buffer.commit"})
    a.recv("conversation.item.done")
    last = a.last_seq()
    a.send({"type": "response.create"})
    a.recv("response.created")
    a.drop()
    wait_for(log, a.session_id, "session.detached")
    b = WsClient(port, first=resume_msg(a, last))
    response_id = next(e for e in a.events if e["type"] == "response.created")["response"]["id"]
    assert b.recv("response.created")["response"]["id"] == response_id
    done = b.recv("response.done")["response"]
    assert done["status"] == "completed"
    assert [e["type"] for e in b.events].count("response.done") == 1
    assert not any(r.event.TYPE == "epoch.advanced" for r in log.read_session(a.session_id))
    # and the session goes on: a new response completes.
    assert b.respond()["status"] == "completed"
    b.close()
    assert audit_session(log, a.session_id).ok


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_the_sdk_reconnects_after_a_server_sigkill_and_the_question_arrives_whole(tmp_path: Path, backend: str, weather_pcm: bytes):
    """The official SDK with ``on_reconnecting`` (resume keys in the URL): the server is
    SIGKILLed halfway through the spoken question and restarted; the appends the client queued
    meanwhile continue the same buffer, so the engine hears the whole question, once."""
    from openai import AsyncOpenAI

    from duplex_es_tools.processes import start_server, wait_healthy

    args = ["--disconnect-grace-ms", "30000"]
    with backend_url(backend, tmp_path) as url, running(url, tmp_path, server_args=args) as (port, server, _):
        restarted = []

        async def main() -> tuple[list[dict], str]:
            client = AsyncOpenAI(api_key="x", websocket_base_url=f"ws://127.0.0.1:{port}/v1")
            held: dict[str, Any] = {"last": 0}
            dropped = asyncio.Event()
            events: list[dict] = []

            def on_reconnecting(ev: Any) -> dict:
                dropped.set()
                query = {"resume_session": held["session"], "resume_token": held["token"], "last_server_event_seq": str(held["last"])}
                return {"extra_query": query}

            async with client.realtime.connect(model="test-model", on_reconnecting=on_reconnecting) as conn:

                async def read() -> None:
                    async for ev in conn:
                        d = ev.to_dict()
                        events.append(d)
                        held["last"] = max(held["last"], d.get("server_event_seq", 0))
                        if d.get("resume_token"):
                            held["token"] = d["resume_token"]
                            held["session"] = d["session"]["id"] if d["type"] == "session.created" else d["session_id"]
                        if d["type"] == "response.done":
                            return

                async def seen(kind: str) -> None:
                    while not any(e["type"] == kind for e in events):
                        await asyncio.sleep(0.01)

                reader = asyncio.create_task(read())
                await seen("session.created")
                await conn.session.update(session={"type": "realtime", "audio": {"input": {"turn_detection": None}}})
                half = len(weather_pcm) // 4 * 2
                step = 4800  # 100 ms
                for i in range(0, half, step):
                    await conn.input_audio_buffer.append(audio=base64.b64encode(weather_pcm[i : min(i + step, half)]).decode())
                await conn.send({"type": "session.heartbeat"})
                await seen("session.heartbeat_ack")  # everything so far is in the log
                server.kill()
                restarted.append(start_server(url, port, tmp_path / "serve-2.log", args))
                await asyncio.wait_for(dropped.wait(), 10)
                for i in range(half, len(weather_pcm), step):  # queued by the SDK until it resumes
                    await conn.input_audio_buffer.append(audio=base64.b64encode(weather_pcm[i : i + step]).decode())
                await conn.input_audio_buffer.commit()
                await conn.response.create()
                await asyncio.wait_for(reader, 60)
            return events, held["session"]

        try:
            events, session_id = asyncio.run(main())
            wait_healthy(port, restarted[0])
        finally:
            for p in restarted:
                p.stop()
        db = Database(url)
        log = EventLog(db)
        committed = [r.event for r in log.read_session(session_id) if r.event.TYPE == "input_audio_buffer.committed"]
        assert len(committed) == 1 and committed[0].samples == len(weather_pcm) // 2
        assert audit_session(log, session_id).ok
        db.dispose()
    types = [e["type"] for e in events]
    assert types.count("session.created") == 1 and types.count("session.resumed") == 1
    heard = next(e for e in events if e["type"] == "conversation.item.input_audio_transcription.completed")["transcript"]
    assert "weather" in heard and "afternoon" in heard
    assert next(e for e in events if e["type"] == "response.done")["response"]["status"] == "completed"
    seqs = [e["server_event_seq"] for e in events if "server_event_seq" in e]
    assert len(seqs) == len(set(seqs))  # nothing delivered twice


# ---------------------------------------------------------------- races found by a break-it pass


def test_a_replaced_connection_can_neither_write_nor_detach_the_session(db_url: str):
    """The connection a resume replaced may still have a command or its own disconnect in
    flight; both are dropped, under the same lock the takeover holds."""
    from duplex_es.domain import AppendText
    from duplex_es.server.sessions import DuplexSessions

    db = Database(db_url)
    from duplex_es.store import upgrade

    upgrade(db)

    async def run() -> list[str]:
        sessions = DuplexSessions(db)
        host = await sessions.open_session()
        old = host.listener
        await sessions.resume_session(host.session_id)
        assert host.listener != old
        assert await host.submit(AppendText(text="late"), listener=old) is False
        await host.detach(listener=old)
        assert await host.submit(AppendText(text="mine"), listener=host.listener) is True
        return [r.event.TYPE for r in EventLog(db).read_session(host.session_id)]

    types = asyncio.run(run())
    assert types == ["session.opened", "session.resumed", "input.text.appended"]
    db.dispose()


def test_racing_resumes_hand_the_winner_its_new_token(stack):
    """Two resumes of one session at once (one with a wrong token): the winner's
    session.resumed still carries its rotated token, which then resumes again."""
    port, log, _ = stack
    a = WsClient(port)
    a.drop()
    wait_for(log, a.session_id, "session.detached")
    outcome: dict[str, Any] = {}

    def go(name: str, token: str) -> None:
        c = WsClient(port, first={"type": "session.resume", "session_id": a.session_id, "resume_token": token}, wait=False)
        ev = c.first_of("session.resumed", "error")
        outcome[name] = (ev, c)

    threads = [threading.Thread(target=go, args=("good", a.token)), threading.Thread(target=go, args=("bad", "y" * 43))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    won, c = outcome["good"]
    assert won["type"] == "session.resumed" and won.get("resume_token")
    assert outcome["bad"][0]["error"]["code"] == Code.RESUME_TOKEN_INVALID
    c.drop()
    wait_for(log, a.session_id, "session.detached")
    again = WsClient(port, first={"type": "session.resume", "session_id": a.session_id, "resume_token": won["resume_token"]})
    assert again.session_id == a.session_id
    again.close()
    outcome["bad"][1].close()


def test_resuming_the_connections_own_session_is_refused_and_a_corrected_retry_works(stack):
    port, log, _ = stack
    a = WsClient(port)
    a.drop()
    c = WsClient(port)
    c.send({"type": "session.resume", "session_id": c.session_id, "resume_token": c.token})
    assert c.error()["code"] == Code.RESUME_CONFLICT
    c.send({"type": "session.resume", "session_id": a.session_id, "resume_token": a.token, "last_server_event_seq": "x"})
    assert c.error()["param"] == "last_server_event_seq"
    c.send(resume_msg(a, a.last_seq()))
    c.recv("session.resumed")
    assert c.session_id == a.session_id
    c.close()


def test_a_resume_whose_reply_never_arrived_is_retried_with_the_old_token(stack):
    """The rotated token travels only in session.resumed. A client whose connection (or server)
    died after the resume was logged but before that event arrived holds only the old token:
    retrying with it once the session is detached again must work, or the session is lost."""
    port, log, _ = stack
    a = WsClient(port)
    a.drop()
    wait_for(log, a.session_id, "session.detached")

    def count(kind: str) -> int:
        return sum(1 for r in log.read_session(a.session_id) if r.event.TYPE == kind)

    lost = WsClient(port, first=resume_msg(a), wait=False)
    deadline = time.monotonic() + 10
    while count("session.resumed") < 1 and time.monotonic() < deadline:
        time.sleep(0.02)
    lost.drop()  # never reads the session.resumed carrying the new token
    while count("session.detached") < 2 and time.monotonic() < deadline:
        time.sleep(0.02)
    assert count("session.resumed") == 1 and count("session.detached") == 2

    retry = WsClient(port, first=resume_msg(a))
    resumed = retry.events[-1]
    assert resumed["type"] == "session.resumed" and resumed["session_id"] == a.session_id
    assert resumed["resume_token"] not in (a.token, None)
    retry.send({"type": "session.heartbeat"})
    retry.recv("session.heartbeat_ack")
    retry.drop()
    wait_for(log, a.session_id, "session.resumed")
    while count("session.detached") < 3 and time.monotonic() < deadline + 10:
        time.sleep(0.02)
    # The old token was good for one retry only.
    stale = WsClient(port, first=resume_msg(a), wait=False)
    assert stale.error()["code"] == Code.RESUME_CONFLICT
    stale.close()
    assert not audit_session(log, a.session_id).violations
