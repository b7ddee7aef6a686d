"""World sessions over a real WebSocket with a real worker process, on SQLite and PostgreSQL:
the cases of issue 4."""

from __future__ import annotations

import base64
import hashlib
import json
import time
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from websockets.sync.client import connect

from duplex_es.audit import audit_session
from duplex_es.domain import Code
from duplex_es.events import WorldChunk
from duplex_es.replay import rerender
from duplex_es.store import Database, EventLog
from duplex_es.store.schema import ticks as ticks_t
from duplex_es_tools.processes import start_worker

from conftest import backend_url
from servers import running

CAMERA = "duplex_es.camera_keys.v1"
TESTS = str(Path(__file__).resolve().parents[1])  # where plugins.py is


class WorldClient:
    """A ``/v1/world`` connection that keeps every message it receives."""

    def __init__(self, port: int, resume: dict[str, Any] | None = None, **start: Any) -> None:
        """Start a session, or (``resume``: the fields of a ``session.resume``) resume one."""
        self.ws = connect(f"ws://127.0.0.1:{port}/v1/world", max_size=None)
        self.events: list[dict[str, Any]] = []
        self._taken: set[int] = set()
        if resume is not None:
            self.send({"type": "session.resume", **resume})
            resumed = self.recv("session.resumed")
            self.session_id, self.token = resumed["session_id"], resumed["resume_token"]
            return
        cfg = {"prompt": "green hills", "seed": 7, "width": 48, "height": 32, "frames_per_chunk": 3, **start}
        self.send({"type": "session.start", **cfg})
        started = self.recv("session.started")
        self.session_id, self.token = started["session_id"], started["resume_token"]

    def last_seq(self) -> int:
        return max((e["server_event_seq"] for e in self.events if "server_event_seq" in e), default=0)

    def send(self, obj: Any) -> None:
        self.ws.send(json.dumps(obj))

    def interact(self, event_id: int, keys: list[str] | None = None, prompt: str | None = None) -> None:
        msg: dict[str, Any] = {"type": "session.interaction", "event_id": event_id}
        if keys is not None:
            msg["controls"] = [{"track": "camera", "schema": CAMERA, "data": {"keys": keys}}]
        if prompt is not None:
            msg["prompt"] = prompt
        self.send(msg)

    def recv(self, kind: str, timeout: float = 30.0, **match: Any) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while True:
            for i, ev in enumerate(self.events):
                if i not in self._taken and ev["type"] == kind and all(ev.get(k) == v for k, v in match.items()):
                    self._taken.add(i)
                    return ev
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"no {kind} {match} within {timeout} s; got {[e['type'] for e in self.events[-10:]]}")
            self.events.append(json.loads(self.ws.recv(timeout=left)))

    def error(self) -> dict[str, Any]:
        return self.recv("error")["error"]

    def chunk(self, **match: Any) -> dict[str, Any]:
        return self.recv("world.chunk", **match)

    def close(self) -> None:
        self.send({"type": "session.close"})
        self.recv("session.closed")
        self.ws.close()


@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
def world(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory):
    """A server and a world worker whose steps take 300 ms (a stand-in for a GPU block), so a
    tick is in flight long enough to interact with."""
    folder = tmp_path_factory.mktemp(f"world-{request.param}")
    with backend_url(request.param, folder) as url:
        args = ["--disconnect-grace-ms", "3000", "--reaper-interval-ms", "100"]
        with running(url, folder, worker_args=["--engine", "world", "--step-delay-ms", "300"], server_args=args) as (port, _, _):
            db = Database(url)
            yield port, EventLog(db)
            db.dispose()


def check(log: EventLog, session_id: str) -> None:
    """Case 7: the log re-renders the same frames, and the audit passes."""
    report = audit_session(log, session_id)
    assert report.ok, report.violations
    rendered = rerender(log, session_id)
    assert rendered.ok and rendered.frames > 0


def test_interactions_before_a_boundary_are_applied_together_sorted(world):
    """Case 1: ids 3, 1, 2 accepted while a tick runs are applied by the next one as [1, 2, 3]."""
    port, log = world
    c = WorldClient(port)
    first = c.chunk()
    for i in (3, 1, 2):
        c.interact(i, keys=["W"])
    accepted = [c.recv("session.interaction.accepted", interaction_event_id=i)["pending"] for i in (3, 1, 2)]
    assert accepted == [1, 2, 3]
    applied = c.chunk(chunk_index=first["chunk_index"] + 2)
    assert applied["applied_event_ids"] == [1, 2, 3] and applied["frame_count"] == 3
    c.close()
    check(log, c.session_id)


def test_duplicates_while_pending_and_after_applied(world):
    """Case 2."""
    port, log = world
    c = WorldClient(port)
    c.chunk()
    c.interact(1, prompt="dusk")
    c.recv("session.interaction.accepted", interaction_event_id=1)
    c.interact(1, prompt="again")
    err = c.error()
    assert (err["code"], err["event_id"]) == (Code.DUPLICATE_EVENT, 1)
    done = c.chunk(applied_event_ids=[1])
    c.interact(1)
    c.interact(1, keys=["A"])
    err = c.error()
    assert (err["code"], err["event_id"]) == (Code.DUPLICATE_EVENT, 1)
    state = json.loads(_get(port, c.session_id))["state"]
    assert state["pending"] == [] and state["prompt"] == "dusk" and done["epoch"] == 0
    c.close()
    check(log, c.session_id)


def test_events_during_a_tick_wait_and_lower_ids_are_stale(world):
    """Case 3: while tick N (holding ids up to 10) runs, 11 is accepted for tick N+1 and 9 is stale."""
    port, log = world
    c = WorldClient(port)
    k = c.chunk()["chunk_index"]
    for i in (1, 2, 3, 4, 5, 6, 7, 8, 10):
        c.interact(i, keys=["D"] if i % 2 else ["W"])
    c.chunk(chunk_index=k + 1)  # tick k+2, holding 1..10, is now in flight
    c.interact(11, keys=["J"])
    c.interact(9, keys=["L"])
    assert c.recv("session.interaction.accepted", interaction_event_id=11)
    err = c.error()
    assert (err["code"], err["event_id"]) == (Code.STALE_EVENT, 9)
    assert c.chunk(chunk_index=k + 2)["applied_event_ids"] == [1, 2, 3, 4, 5, 6, 7, 8, 10]
    assert c.chunk(chunk_index=k + 3)["applied_event_ids"] == [11]
    c.close()
    check(log, c.session_id)


def test_the_queue_bound_counts_pending_and_in_flight(world):
    """Case 4."""
    port, log = world
    c = WorldClient(port, max_pending=3)
    k = c.chunk()["chunk_index"]
    for i in (1, 2, 3, 4):
        c.interact(i, keys=["W"])
    err = c.error()
    assert (err["code"], err["event_id"]) == (Code.QUEUE_FULL, 4)
    c.chunk(chunk_index=k + 1)  # the tick holding 1, 2, 3 is in flight: they still count
    c.interact(5, keys=["S"])
    err = c.error()
    assert (err["code"], err["event_id"]) == (Code.QUEUE_FULL, 5)
    assert c.chunk(chunk_index=k + 2)["applied_event_ids"] == [1, 2, 3]
    c.interact(6, keys=["S"])
    assert c.recv("session.interaction.accepted", interaction_event_id=6)["pending"] == 1
    c.close()
    check(log, c.session_id)


@pytest.mark.parametrize(
    "controls,param",
    [
        ([{"track": "camera", "schema": CAMERA, "data": 5}], "controls[0].data"),
        ([{"track": "camera", "schema": CAMERA, "data": {}}, {"track": "camera", "schema": CAMERA, "data": {}}], "controls[1].track"),
        ([{"track": "", "schema": CAMERA, "data": {}}], "controls[0].track"),
        ("camera", "controls"),
    ],
    ids=["data-not-an-object", "repeated-track", "empty-track", "not-a-list"],
)
def test_malformed_interactions_are_invalid_and_change_nothing(world, controls, param):
    """Case 5."""
    port, log = world
    c = WorldClient(port)
    c.send({"type": "session.interaction", "event_id": 5, "controls": controls})
    err = c.error()
    assert (err["code"], err["event_id"], err["param"]) == (Code.INVALID_INTERACTION, 5, param)
    c.interact(5, keys=["W"])  # the id was not used up by the refusal
    assert c.recv("session.interaction.accepted", interaction_event_id=5)
    c.chunk(applied_event_ids=[5])
    c.close()
    check(log, c.session_id)


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_identity_mismatch_fails_closed_until_reset(tmp_path: Path, backend: str):
    """Case 6: the worker returns a block for the wrong chunk: nothing is committed, the session
    fails closed, interactions are refused until session.reset, which restarts chunk 0 in the
    next epoch; ids must still increase."""
    with backend_url(backend, tmp_path) as url, running(
        url, tmp_path, worker_args=["--engine-plugin", "plugins:MismatchWorld"], worker_env={"PYTHONPATH": TESTS}
    ) as (port, _, _):
        log = EventLog(Database(url))
        c = WorldClient(port)
        c.chunk(chunk_index=0)
        c.interact(1, keys=["W"])
        c.chunk(chunk_index=1)
        failed = c.recv("session.failed")
        assert failed["code"] == Code.TICK_IDENTITY_MISMATCH
        assert not [e for e in c.events if e["type"] == "world.chunk" and e["chunk_index"] >= 2]
        c.interact(2, keys=["S"])
        err = c.error()
        assert (err["code"], err["event_id"]) == (Code.SESSION_FAILED, 2)
        c.send({"type": "session.reset"})
        reset = c.recv("session.reset_done")
        assert (reset["epoch"], reset["chunk_index"]) == (1, 0)
        first = c.chunk(epoch=1)
        assert first["chunk_index"] == 0
        c.interact(1, keys=["A"])
        err = c.error()
        assert err["code"] in (Code.DUPLICATE_EVENT, Code.STALE_EVENT) and err["event_id"] == 1
        c.interact(3, keys=["A"])
        assert c.recv("session.interaction.accepted", interaction_event_id=3)
        c.close()
        chunks = [r.event for r in log.read_session(c.session_id) if isinstance(r.event, WorldChunk)]
        assert any(ch.chunk_index == 3 and ch.epoch == 0 for ch in chunks)  # logged, never sent, never committed
        report = audit_session(log, c.session_id)
        assert not report.ok and any(v.check == "outputs" for v in report.violations)  # the audit names the bad block
        assert [v.check for v in report.violations] == ["outputs"]


def test_binary_frames_and_prompt_changes(world):
    port, log = world
    c = WorldClient(port, binary=True, max_chunks=2)
    c.interact(1, prompt="a night sky")
    chunks = []
    while len(chunks) < 2:
        msg = c.ws.recv(timeout=30)
        assert isinstance(msg, str)
        ev = json.loads(msg)
        if ev["type"] != "world.chunk":
            continue
        assert ev["frames"] is None and ev["binary_frames"] == 3
        frames = [c.ws.recv(timeout=30) for _ in range(3)]
        assert all(isinstance(f, bytes) and f[:8] == b"\x89PNG\r\n\x1a\n" for f in frames)
        chunks.append(ev)
    c.send({"type": "session.close"})
    c.ws.close()
    check(log, c.session_id)


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_a_killed_worker_leaves_one_block_per_chunk(tmp_path: Path, backend: str):
    """Case 8: a worker SIGKILLed mid-tick; another re-claims it after the claim expires, renders
    the same frames, and the client gets each chunk once."""
    slow = ["--engine", "world", "--step-delay-ms", "1500", "--claim-ttl-ms", "800", "--worker-id", "world-A"]
    with backend_url(backend, tmp_path) as url, running(url, tmp_path, worker_args=slow) as (port, _, (worker_a,)):
        db = Database(url)
        log = EventLog(db)
        c = WorldClient(port, max_chunks=4)
        c.interact(1, keys=["W", "J"])

        def claimed_by_a_after_first() -> bool:
            with db.engine.connect() as conn:
                rows = conn.execute(sa.select(ticks_t.c.status, ticks_t.c.claimed_by)).all()
            return any(s == "done" for s, _ in rows) and any(s == "claimed" and w == "world-A" for s, w in rows)

        deadline = time.monotonic() + 30
        while not claimed_by_a_after_first():
            assert time.monotonic() < deadline
            time.sleep(0.02)
        worker_a.kill()
        worker_b = start_worker(url, tmp_path / "worker-B.log", ["--engine", "world", "--worker-id", "world-B"])
        try:
            got = [c.chunk(chunk_index=i)["chunk_index"] for i in range(4)]
        finally:
            worker_b.stop()
        assert got == [0, 1, 2, 3]
        assert sorted(e["chunk_index"] for e in c.events if e["type"] == "world.chunk") == [0, 1, 2, 3]
        c.close()
        blocks = [r.event for r in log.read_session(c.session_id) if isinstance(r.event, WorldChunk)]
        assert sorted(b.chunk_index for b in blocks) == [0, 1, 2, 3]  # one committed block per chunk
        with db.engine.connect() as conn:
            attempts = [a for (a,) in conn.execute(sa.select(ticks_t.c.attempts))]
        assert 2 in attempts
        # The frames the client got are the frames the log re-renders, bit for bit.
        sent = {e["chunk_index"]: [hashlib.sha256(base64.b64decode(f)).hexdigest() for f in e["frames"]] for e in c.events if e["type"] == "world.chunk"}
        logged = {b.chunk_index: [hashlib.sha256(base64.b64decode(f)).hexdigest() for f in b.frames] for b in blocks}
        assert sent == logged
        check(log, c.session_id)
        db.dispose()


def _get(port: int, session_id: str) -> str:
    import urllib.request

    with urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/sessions/{session_id}", timeout=10) as r:
        return r.read().decode()


def test_before_session_start_there_is_no_session_to_log_into(world):
    port, _ = world
    ws = connect(f"ws://127.0.0.1:{port}/v1/world")
    ws.send(json.dumps({"type": "session.interaction", "event_id": 1}))
    assert json.loads(ws.recv(timeout=10))["error"]["code"] == Code.SESSION_NOT_STARTED
    ws.send(json.dumps({"type": "session.start", "width": 5}))
    err = json.loads(ws.recv(timeout=10))["error"]
    assert (err["code"], err["param"]) == (Code.INVALID_EVENT, "width")
    ws.close()



def _types(log: EventLog, session_id: str) -> list[str]:
    return [r.event.TYPE for r in log.read_session(session_id)]


def _wait_for(log: EventLog, session_id: str, event_type: str, timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    while event_type not in _types(log, session_id):
        assert time.monotonic() < deadline, f"no {event_type}"
        time.sleep(0.02)


def test_a_dropped_world_pauses_and_its_resume_re_sends_each_missed_chunk_once(world):
    """session.resume on /v1/world: a detached world issues no new ticks; the resuming client
    gets the chunks it missed (none it already had), session.resumed, then fresh chunks."""
    port, log = world
    c = WorldClient(port)
    c.interact(1, keys=["W"])
    c.chunk(chunk_index=1)
    had = {e["chunk_index"] for e in c.events if e["type"] == "world.chunk"}
    last = c.last_seq()
    c.ws.close()
    _wait_for(log, c.session_id, "session.detached")
    time.sleep(0.7)  # the tick in flight at the drop (300 ms) commits; no other starts
    paused = _types(log, c.session_id).count("world.tick.issued")
    time.sleep(0.8)
    assert _types(log, c.session_id).count("world.tick.issued") == paused

    r = WorldClient(port, resume={"session_id": c.session_id, "resume_token": c.token, "last_server_event_seq": last})
    assert r.token != c.token
    replayed = [e["chunk_index"] for e in r.events if e["type"] == "world.chunk"]
    assert not set(replayed) & had
    assert replayed == list(range(max(had) + 1, max(had) + 1 + len(replayed)))
    nxt = max(had | set(replayed)) + 1
    assert r.chunk(chunk_index=nxt)["epoch"] == 0
    r.interact(2, keys=["D"])
    assert r.recv("session.interaction.accepted", interaction_event_id=2)["pending"] == 1
    r.close()
    check(log, c.session_id)


def test_a_world_resumes_from_the_url_too(world):
    port, log = world
    c = WorldClient(port, max_chunks=2)
    c.chunk(chunk_index=0)
    last, token = c.last_seq(), c.token
    c.ws.close()
    _wait_for(log, c.session_id, "session.detached")
    ws = connect(f"ws://127.0.0.1:{port}/v1/world?resume_session={c.session_id}&resume_token={token}&last_server_event_seq={last}")
    seen = []
    while not seen or seen[-1]["type"] != "session.resumed":
        seen.append(json.loads(ws.recv(timeout=30)))
    assert seen[-1]["session_id"] == c.session_id and seen[-1]["resume_token"] != token
    ws.send(json.dumps({"type": "session.close"}))
    while json.loads(ws.recv(timeout=30))["type"] != "session.closed":
        pass
    ws.close()
    check(log, c.session_id)


def test_world_resume_refusals(world):
    port, log = world
    c = WorldClient(port)
    ws = connect(f"ws://127.0.0.1:{port}/v1/world")
    ws.send(json.dumps({"type": "session.resume", "session_id": c.session_id, "resume_token": "nope"}))
    assert json.loads(ws.recv(timeout=10))["error"]["code"] == Code.RESUME_TOKEN_INVALID
    ws.send(json.dumps({"type": "session.resume", "session_id": "world_missing", "resume_token": "nope"}))
    assert json.loads(ws.recv(timeout=10))["error"]["code"] == Code.SESSION_NOT_FOUND
    ws.close()
    speech = connect(f"ws://127.0.0.1:{port}/v1/realtime")  # a world session is not resumed as speech
    speech.send(json.dumps({"type": "session.resume", "session_id": c.session_id, "resume_token": c.token}))
    replies = [json.loads(speech.recv(timeout=10)) for _ in range(2)]
    assert replies[0]["type"] == "session.created" and replies[1]["error"]["code"] == Code.SESSION_NOT_FOUND
    speech.close()
    c.send({"type": "session.resume", "session_id": c.session_id, "resume_token": c.token, "event_id": "x"})
    err = c.error()
    assert (err["code"], err["event_id"]) == (Code.RESUME_NOT_FIRST, "x")
    c.close()


def test_a_world_nobody_resumes_closes_after_the_grace(world):
    port, log = world
    c = WorldClient(port)
    c.chunk(chunk_index=0)
    c.ws.close()
    _wait_for(log, c.session_id, "world.session.closed")
    closed = log.read_session(c.session_id)[-1].event
    assert closed.reason == "disconnect_grace_expired"
    check(log, c.session_id)
