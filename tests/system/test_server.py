"""The Realtime server over a real WebSocket: bad input, write-ahead, and the wire as a projection."""

from __future__ import annotations

import base64
import hashlib
import json
from pathlib import Path

import pytest
from websockets.sync.client import connect

from duplex_es.domain import Code, SessionState, evolve
from duplex_es.events import CommandDeduplicated, CommandRejected, to_plain
from duplex_es.protocol import encode_wire, project
from duplex_es.store import Database, EventLog

from conftest import backend_url
from servers import running, session_state


@pytest.fixture(params=["sqlite", "postgresql"])
def server(request: pytest.FixtureRequest, tmp_path: Path):
    # A short disconnect grace, so a dropped connection's session expires within the test.
    args = ["--disconnect-grace-ms", "600", "--reaper-interval-ms", "100"]
    with backend_url(request.param, tmp_path) as url, running(url, tmp_path, workers=0, server_args=args) as (port, proc, _):
        yield port, url


class Client:
    """A raw WebSocket client that keeps every frame it receives."""

    def __init__(self, port: int) -> None:
        self.ws = connect(f"ws://127.0.0.1:{port}/v1/realtime?model=test-model", max_size=None)
        self.frames: list[str] = []
        self.session_id = self.recv("session.created")["session"]["id"]

    def recv(self, until: str) -> dict:
        while True:
            frame = self.ws.recv(timeout=10)
            self.frames.append(frame)
            event = json.loads(frame)
            if event["type"] == until:
                return event

    def send(self, obj) -> None:
        self.ws.send(obj if isinstance(obj, (str, bytes)) else json.dumps(obj))


def pcm_b64(ms: int) -> str:
    return base64.b64encode(b"\x10\x00" * 24 * ms).decode()


BAD_INPUTS = [
    ("not json", "{nope", Code.INVALID_JSON, None),
    ("no type", {"event_id": "e-notype", "audio": "AAAA"}, Code.MISSING_TYPE, "e-notype"),
    ("unknown type", {"type": "response.explode", "event_id": "e-unknown"}, Code.UNKNOWN_TYPE, "e-unknown"),
    ("not base64", {"type": "input_audio_buffer.append", "event_id": "e-b64", "audio": "%%%%"}, Code.INVALID_AUDIO_BASE64, "e-b64"),
    ("odd pcm16", {"type": "input_audio_buffer.append", "event_id": "e-odd", "audio": base64.b64encode(b"\x01\x02\x03").decode()}, Code.INVALID_AUDIO_LENGTH, "e-odd"),
    ("short commit", {"type": "input_audio_buffer.commit", "event_id": "e-commit"}, Code.COMMIT_EMPTY, "e-commit"),
    ("cancel nothing", {"type": "response.cancel", "event_id": "e-cancel"}, Code.CANCEL_NOT_ACTIVE, "e-cancel"),
]


@pytest.mark.invariant("I3")
def test_bad_input_gets_a_specific_error_is_logged_changes_nothing_and_keeps_the_connection(server):
    port, url = server
    c = Client(port)
    c.send({"type": "session.update", "event_id": "probe", "session": {"type": "realtime", "instructions": "x"}})
    c.recv("session.updated")
    for name, frame, code, event_id in BAD_INPUTS:
        # 50 ms of audio in the buffer: the refused commit must keep it.
        c.send({"type": "input_audio_buffer.append", "audio": pcm_b64(50)})
        c.send({"type": "input.text.append", "text": ""})  # refused too; waits for the append
        c.recv("error")
        before = session_state(port, c.session_id)
        c.send(frame)
        err = c.recv("error")["error"]
        assert (err["code"], err["event_id"]) == (code, event_id), name
        assert err["type"] == "invalid_request_error" and err["message"]
        after = session_state(port, c.session_id)
        assert after["seq"] == before["seq"] + 1, name  # the refusal was logged ...
        before["state"]["seq"] = after["state"]["seq"]
        assert after["state"] == before["state"], name  # ... and changed nothing else
        assert after["state"]["buffer"]["samples"] == 50 * 24
        c.send({"type": "input_audio_buffer.clear", "event_id": f"alive-{name}"})
        c.recv("input_audio_buffer.cleared")  # the connection still works
    # A response that never ends (no worker runs): a second one and a truncate past the end.
    c.send({"type": "input_audio_buffer.append", "audio": pcm_b64(300)})
    c.send({"type": "input_audio_buffer.commit"})
    c.recv("conversation.item.done")
    c.send({"type": "response.create", "event_id": "r1"})
    response_id = c.recv("response.created")["response"]["id"]
    # No output came yet, so the wire has not shown the item: the session's state names it.
    (item_id,) = session_state(port, c.session_id)["state"]["responses"][response_id]["item_ids"]
    c.send({"type": "response.create", "event_id": "r2"})
    err = c.recv("error")["error"]
    assert (err["code"], err["event_id"]) == (Code.ACTIVE_RESPONSE, "r2")
    # An item still being generated may be truncated (clients truncate before they cancel),
    # but not past the audio generated so far: none yet.
    c.send({"type": "conversation.item.truncate", "event_id": "t0", "item_id": item_id, "content_index": 0, "audio_end_ms": 10})
    err = c.recv("error")["error"]
    assert (err["code"], err["event_id"], err["param"]) == (Code.TRUNCATE_OUT_OF_RANGE, "t0", "audio_end_ms")
    assert item_id in err["message"] and "10" in err["message"]
    c.send({"type": "response.cancel", "event_id": "c1"})
    done = c.recv("response.done")["response"]
    assert done["status"] == "cancelled" and done["status_details"]["reason"] == "client_cancelled"
    c.send({"type": "conversation.item.truncate", "event_id": "t1", "item_id": item_id, "content_index": 0, "audio_end_ms": 10})
    err = c.recv("error")["error"]
    assert (err["code"], err["event_id"], err["param"]) == (Code.TRUNCATE_OUT_OF_RANGE, "t1", "audio_end_ms")
    c.send({"type": "session.close"})
    c.recv("session.closed")

    log = EventLog(Database(url))
    rejected = [r.event for r in log.read_session(c.session_id) if isinstance(r.event, CommandRejected)]
    expected = []
    for _, _, code, eid in BAD_INPUTS:
        expected += [(Code.INPUT_TEXT_EMPTY, None), (code, eid)]
    assert [(e.code, e.client_event_id) for e in rejected] == expected + [
        (Code.ACTIVE_RESPONSE, "r2"),
        (Code.TRUNCATE_OUT_OF_RANGE, "t0"),
        (Code.TRUNCATE_OUT_OF_RANGE, "t1"),
    ]
    assert rejected[1].excerpt == "{nope"


@pytest.mark.invariant("I4", "I13")
def test_the_wire_is_a_byte_exact_projection_of_the_committed_log(server):
    """I4 + I13: every frame the client got is derived from a committed log event, in order,
    and re-deriving it from the log gives the same bytes."""
    port, url = server
    c = Client(port)
    c.send({"type": "session.update", "session": {"type": "realtime", "instructions": "hello", "output_modalities": ["audio"]}})
    c.send({"type": "input_audio_buffer.append", "audio": pcm_b64(200)})
    c.send({"type": "input_audio_buffer.commit", "event_id": "commit-1"})
    c.send({"type": "bogus"})
    c.send({"type": "response.create"})
    c.send({"type": "response.cancel"})
    c.send({"type": "session.close"})
    c.recv("session.closed")
    with pytest.raises(Exception):
        c.recv("never")  # the server closes the socket after session.closed

    log = EventLog(Database(url))
    state, expected = SessionState(), []
    for r in log.read_session(c.session_id):
        after = evolve(state, r.seq, r.event)
        expected += [encode_wire(w) for w in project(state, r.seq, r.event, after)]
        state = after
    # The one addition to the projection: session.created hands over the resume token, which
    # the log keeps only as a digest.
    created = json.loads(c.frames[0])
    token = created.pop("resume_token")
    assert hashlib.sha256(token.encode()).hexdigest() == state.lease.token_hash
    assert [encode_wire(created)] + c.frames[1:] == expected
    seqs = [json.loads(f)["server_event_seq"] for f in c.frames]
    assert seqs == sorted(seqs) and len(set(seqs)) == len(seqs)
    # The server's view after close equals the replayed state.
    assert session_state(port, c.session_id)["state"] == to_plain(state)


def test_an_event_id_is_a_correlation_id_only_a_retry_of_the_same_command_is_deduplicated(server):
    """Issue 10 §4: a repeat of an applied command (same event_id, same content) is not applied
    again and is answered with command.deduplicated, no error; a different command reusing the
    id is applied normally; read-only commands are never refused for a repeated id."""
    port, url = server
    c = Client(port)
    frame = {"type": "input_audio_buffer.append", "event_id": "same", "audio": pcm_b64(40)}
    c.send(frame)
    c.send(frame)
    dup = c.recv("command.deduplicated")
    assert (dup["client_event_id"], dup["command_type"]) == ("same", "input_audio_buffer.append")
    state = session_state(port, c.session_id)["state"]
    assert state["buffer"]["samples"] == 40 * 24 and len(state["buffer"]["append_seqs"]) == 1
    # The same id on other content is another command: applied.
    c.send({"type": "input_audio_buffer.append", "event_id": "same", "audio": pcm_b64(60)})
    c.send({"type": "session.heartbeat", "event_id": "hb"})
    c.recv("session.heartbeat_ack")
    state = session_state(port, c.session_id)["state"]
    assert state["buffer"]["samples"] == 100 * 24 and len(state["buffer"]["append_seqs"]) == 2
    # A refused command's event_id can be reused: refusals are not keyed.
    c.send({"type": "input_audio_buffer.commit", "event_id": "again", "final": "yes"})
    assert c.recv("error")["error"]["code"] == Code.INVALID_EVENT
    c.send({"type": "input_audio_buffer.commit", "event_id": "again"})
    item_id = c.recv("input_audio_buffer.committed")["item_id"]
    # A retry that today's state would refuse (the buffer it committed is gone) is still a
    # retry: deduplicated, not an error.
    c.send({"type": "input_audio_buffer.commit", "event_id": "again"})
    assert c.recv("command.deduplicated")["client_event_id"] == "again"
    # Read-only commands answer every time (pipecat retrieves an item twice with one id).
    for _ in range(2):
        c.send({"type": "conversation.item.retrieve", "event_id": f"rci_{item_id}", "item_id": item_id})
        assert c.recv("conversation.item.retrieved")["item"]["id"] == item_id
    c.send({"type": "session.heartbeat", "event_id": "hb"})
    c.recv("session.heartbeat_ack")
    errors = [json.loads(f) for f in c.frames if json.loads(f)["type"] == "error"]
    assert [e["error"]["event_id"] for e in errors] == ["again"]  # only the malformed commit
    log = EventLog(Database(url))
    dedups = [r.event for r in log.read_session(c.session_id) if isinstance(r.event, CommandDeduplicated)]
    assert [(d.client_event_id, d.command_type) for d in dedups] == [("same", "input_audio_buffer.append"), ("again", "input_audio_buffer.commit")]

@pytest.mark.invariant("I11")
def test_a_dropped_connection_leaves_its_response_running_until_the_grace_ends_it_with_that_cause(server):
    """Case 21 of issue 3 and issue 12 item 7: a disconnect during a response, no resume within
    the grace. The detach alone cancels nothing (no worker runs here, so the response waits);
    the expiry ends it, and says so: GA's reason on the wire, ``session_expired`` as the cause
    in the log, in ``GET /v1/sessions/{id}`` and in ``duplex-es replay``."""
    import subprocess
    import sys
    import time

    port, url = server
    c = Client(port)
    c.send({"type": "input_audio_buffer.append", "audio": pcm_b64(300)})
    c.send({"type": "input_audio_buffer.commit"})
    c.send({"type": "response.create"})
    response_id = c.recv("response.created")["response"]["id"]
    c.ws.close()
    log = EventLog(Database(url))
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and log.read_session(c.session_id)[-1].event.TYPE != "session.detached":
        time.sleep(0.05)
    detached = log.read_session(c.session_id)[-1].event
    assert detached.TYPE == "session.detached"
    assert log.read_session(c.session_id)[-2].event.TYPE == "tick.issued"  # nothing was cancelled
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and log.read_session(c.session_id)[-1].event.TYPE != "session.expired":
        time.sleep(0.05)
    last = [r.event for r in log.read_session(c.session_id)][-3:]
    assert last[0].TYPE == "epoch.advanced" and last[0].reason == "session_expired"
    done = last[1]
    assert (done.TYPE, done.response_id, done.status, done.reason, done.error_code) == (
        "response.done", response_id, "cancelled", "client_cancelled", "session_expired"
    )
    assert "disconnect grace" in done.error_message
    expired = last[2]
    assert expired.TYPE == "session.expired" and expired.reason == "disconnect_grace_expired"
    assert expired.decided_at_ms - expired.since_ms >= 600 and expired.since_ms == detached.at_ms
    resp = session_state(port, c.session_id)["state"]["responses"][response_id]
    assert (resp["status"], resp["status_reason"], resp["status_error_code"]) == ("cancelled", "client_cancelled", "session_expired")
    # The wire event a resume (or an export) would carry, projected from the log.
    state, wire = SessionState(), None
    for r in log.read_session(c.session_id):
        after = evolve(state, r.seq, r.event)
        wire = next((w for w in project(state, r.seq, r.event, after) if w["type"] == "response.done"), wire)
        state = after
    assert wire["response"]["status_details"] == {
        "type": "cancelled", "reason": "client_cancelled",
        "error": {"type": "session_ended", "code": "session_expired", "message": done.error_message},
    }
    shown = subprocess.run(
        [sys.executable, "-m", "duplex_es.cli.main", "replay", c.session_id, "--db", url, "--json"], capture_output=True, text=True, timeout=60
    )
    assert shown.returncode == 0, shown.stderr
    line = next(row["summary"] for row in json.loads(shown.stdout)["timeline"] if row["type"] == "response.done")
    assert "reason=client_cancelled" in line and "cause=session_expired" in line
    log.db.dispose()
    state = session_state(port, c.session_id)
    assert state["live"] is False and state["state"]["status"] == "expired"
    from duplex_es.audit import audit_session

    report = audit_session(log, c.session_id)
    assert report.ok, report.violations


def test_an_api_key_guards_the_websockets_and_the_session_state(tmp_path: Path):
    import urllib.error
    import urllib.request

    url = f"sqlite:///{tmp_path / 'keyed.db'}"
    with running(url, tmp_path, workers=0, server_args=["--api-key", "sekrit"]) as (port, _, _):
        with pytest.raises(Exception):
            connect(f"ws://127.0.0.1:{port}/v1/realtime").recv(timeout=5)  # closed with 1008
        ws = connect(f"ws://127.0.0.1:{port}/v1/realtime", additional_headers={"Authorization": "Bearer sekrit"})
        session_id = json.loads(ws.recv(timeout=10))["session"]["id"]
        state_url = f"http://127.0.0.1:{port}/v1/sessions/{session_id}"
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(state_url, timeout=10)
        assert refused.value.code == 401
        request = urllib.request.Request(state_url, headers={"Authorization": "Bearer sekrit"})
        with urllib.request.urlopen(request, timeout=10) as r:
            assert json.loads(r.read())["session_id"] == session_id
        ws.close()
