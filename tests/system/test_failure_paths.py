"""Every failure path ends cleanly: a session the log refuses, refusals of huge fields, two
upgrades at once, a handshake that never finishes (docs/security.md, "Failure paths and bounds")."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
from pathlib import Path
from urllib.parse import urlencode

import pytest
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import connect

from duplex_es.domain import Code
from duplex_es.store import Database, upgrade
from duplex_es.store.migrate import current_revision, head_revision

from conftest import backend_url
from servers import running
from wsclient import WsClient

#: A PostgreSQL trigger (and a SQLite one) that refuses every new event: the database says no,
#: as a full disk or a revoked grant would.
REFUSE_EVENTS = {
    "sqlite": ["CREATE TRIGGER refuse_events BEFORE INSERT ON events BEGIN SELECT RAISE(ABORT, 'no space left for events'); END"],
    "postgresql": [
        "CREATE FUNCTION refuse_events() RETURNS trigger AS $$ BEGIN RAISE EXCEPTION 'no space left for events'; END $$ LANGUAGE plpgsql",
        "CREATE TRIGGER refuse_events BEFORE INSERT ON events FOR EACH ROW EXECUTE FUNCTION refuse_events()",
    ],
}
ALLOW_EVENTS = {"sqlite": ["DROP TRIGGER refuse_events"], "postgresql": ["DROP TRIGGER refuse_events ON events"]}


def _run_sql(url: str, statements: list[str]) -> None:
    db = Database(url)
    with db.engine.connect() as conn:
        for sql in statements:
            conn.exec_driver_sql(sql)
    db.dispose()


def _count(url: str, sql: str) -> int:
    db = Database(url)
    with db.engine.connect() as conn:
        n = conn.exec_driver_sql(sql).scalar()
    db.dispose()
    return int(n)


def _closed(ws) -> ConnectionClosed:  # noqa: ANN001
    """Read until the server closes the connection; the close it sent."""
    with pytest.raises(ConnectionClosed) as closed:
        for _ in range(20):
            ws.recv(timeout=10)
    return closed.value


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_a_session_the_log_refuses_gets_a_coded_error_and_leaves_nothing(backend: str, tmp_path: Path) -> None:
    with backend_url(backend, tmp_path) as url:
        db = Database(url)
        upgrade(db)
        db.dispose()
        _run_sql(url, REFUSE_EVENTS[backend])
        with running(url, tmp_path, workers=0) as (port, proc, _):
            # A Realtime client: the error, then a close, since a connection without a session is useless.
            ws = connect(f"ws://127.0.0.1:{port}/v1/realtime?model=m", max_size=None)
            error = json.loads(ws.recv(timeout=30))
            assert error["type"] == "error"
            assert error["error"]["code"] == Code.SESSION_OPEN_FAILED and error["error"]["type"] == "server_error"
            assert "could not record" in error["error"]["message"]
            closed = _closed(ws)
            assert closed.rcvd is not None and (closed.rcvd.code, closed.rcvd.reason) == (1011, Code.SESSION_OPEN_FAILED)
            # A world client: the same, for its session.start.
            ws = connect(f"ws://127.0.0.1:{port}/v1/world", max_size=None)
            ws.send(json.dumps({"type": "session.start", "event_id": "start-1"}))
            error = json.loads(ws.recv(timeout=30))
            assert (error["error"]["code"], error["error"]["event_id"]) == (Code.SESSION_OPEN_FAILED, "start-1")
            assert _closed(ws).rcvd.code == 1011  # type: ignore[union-attr]
            # Nothing of either half-opened session is left: no ownership row, no event.
            assert _count(url, "SELECT count(*) FROM session_owners") == 0
            assert _count(url, "SELECT count(*) FROM events") == 0
            # Once the database takes events again, the same server opens sessions as usual.
            _run_sql(url, ALLOW_EVENTS[backend])
            client = WsClient(port)
            assert client.session_id.startswith("sess_")
            client.ws.close()
            out = proc.output()
        assert "Exception in ASGI application" not in out and "Traceback" not in out
        assert out.count("could not be opened") == 2


def test_a_resume_the_log_refuses_gets_a_coded_error(sqlite_url: str, tmp_path: Path) -> None:
    with running(sqlite_url, tmp_path, workers=0) as (port, proc, _):
        client = WsClient(port)
        client.drop()
        time.sleep(0.5)  # its session.detached is logged
        _run_sql(sqlite_url, REFUSE_EVENTS["sqlite"])
        query = urlencode({"model": "m", "resume_session": client.session_id, "resume_token": client.token})
        ws = connect(f"ws://127.0.0.1:{port}/v1/realtime?{query}", max_size=None)
        codes = [json.loads(ws.recv(timeout=30))["error"]["code"] for _ in range(2)]
        # The resume is refused with a code; the new session the connection then opens fails too.
        assert codes == [Code.SESSION_RESUME_FAILED, Code.SESSION_OPEN_FAILED]
        assert _closed(ws).rcvd.code == 1011  # type: ignore[union-attr]
        _run_sql(sqlite_url, ALLOW_EVENTS["sqlite"])
        resumed = WsClient(port, query={"resume_session": client.session_id, "resume_token": client.token})
        assert resumed.session_id == client.session_id
        resumed.ws.close()
        out = proc.output()
    assert "Exception in ASGI application" not in out and "Traceback" not in out


BIG = 15 * 1024 * 1024 - 1024  # a field just under the 16 MiB frame limit


def _replies(ws, wait: float = 1.5) -> list[str]:  # noqa: ANN001
    out = []
    try:
        while True:
            out.append(ws.recv(timeout=wait))
    except TimeoutError:
        return out


def test_refusals_of_huge_fields_store_echo_and_log_bounded_excerpts(sqlite_url: str, tmp_path: Path) -> None:
    huge = "x" * BIG
    with running(sqlite_url, tmp_path, workers=0) as (port, proc, _):
        world = connect(f"ws://127.0.0.1:{port}/v1/world", max_size=None)
        # Before session.start nothing is stored, but the reply echoed the whole event_id.
        world.send(json.dumps({"type": "session.frobnicate", "event_id": huge}))
        before_start = _replies(world)
        world.send(json.dumps({"type": "session.start", "event_id": "start"}))
        assert json.loads(world.recv(timeout=10))["type"] == "session.started"
        refused = [
            {"type": "session.frobnicate", "event_id": huge},  # an unknown type with a huge id
            {"type": "session.reset", "event_id": huge},  # was accepted and stored whole
            {"type": "session.start", "event_id": huge},  # session_already_open, echoing the id
            {"type": "session.interaction", "event_id": 1, "controls": [{"track": huge[: BIG // 2 - 100], "schema": "s"}] * 2},
            {"type": "session.interaction", "event_id": 2, "controls": [{"track": "camera", "schema": huge}]},
        ]
        replies = list(before_start)
        for msg in refused:
            world.send(json.dumps(msg))
            got = _replies(world)
            assert [json.loads(r)["type"] for r in got] == ["error"], msg["type"]
            replies += got
        realtime = WsClient(port)
        for msg in (
            {"type": "conversation.item.delete", "event_id": "d", "item_id": huge},
            {"type": huge, "event_id": "t"},
            {"type": "session.update", "event_id": "u", "session": {"voice": huge}},
        ):
            realtime.send(msg)
            replies += _replies(realtime.ws)
        time.sleep(0.3)
        log_lines = proc.output().splitlines()
    assert len(replies) == 1 + len(refused) + 3
    for r in replies:
        assert json.loads(r)["type"] == "error" and json.loads(r)["error"]["code"]
        assert len(r) < 2048, r[:300]
    assert max(len(line) for line in log_lines) < 2048
    db = Database(sqlite_url)
    with db.engine.connect() as conn:
        largest = conn.exec_driver_sql("SELECT max(length(data)) FROM events").scalar()
    db.dispose()
    assert largest < 4096


#: ``duplex-es db upgrade`` run at a given wall-clock time, once its imports are done: the
#: processes of a round then race within milliseconds instead of a second of start-up jitter.
UPGRADE_AT = """
import sys, time
from duplex_es.cli.main import main
time.sleep(max(0.0, float(sys.argv[1]) - time.time()))
sys.exit(main(["db", "upgrade", "--db", sys.argv[2]]))
"""


def test_concurrent_upgrades_of_a_new_sqlite_file_all_succeed(tmp_path: Path) -> None:
    for round_ in range(5):
        url = f"sqlite:///{tmp_path / f'new{round_}.db'}"
        start = str(time.time() + 3.0)
        procs = [
            subprocess.Popen([sys.executable, "-c", UPGRADE_AT, start, url], stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
            for _ in range(4)
        ]
        outputs = [p.communicate(timeout=120)[0].decode() for p in procs]
        assert [p.returncode for p in procs] == [0] * 4, outputs
        db = Database(url)
        assert current_revision(db) == head_revision()
        with db.engine.connect() as conn:
            assert conn.exec_driver_sql("SELECT count(*) FROM alembic_version").scalar() == 1
        db.dispose()


def _upgrade(target: str, extra_headers: list[str] = []) -> bytes:  # noqa: B006
    lines = [
        f"GET {target} HTTP/1.1", "Host: 127.0.0.1", "Upgrade: websocket", "Connection: Upgrade",
        "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==", "Sec-WebSocket-Version: 13", *extra_headers,
    ]
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def test_a_handshake_that_never_finishes_is_closed(sqlite_url: str, tmp_path: Path) -> None:
    with running(sqlite_url, tmp_path, workers=0, server_args=["--handshake-timeout-ms", "800"]) as (port, proc, _):
        slow = socket.create_connection(("127.0.0.1", port))
        slow.sendall(b"GET /v1/realtime?model=m HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websock")  # and nothing more
        silent = socket.create_connection(("127.0.0.1", port))  # opens TCP and says nothing
        # A whole upgrade request the WebSocket library refuses without a word (over 128 headers):
        # the handshake never completes, and used to hang for ever.
        crowded = socket.create_connection(("127.0.0.1", port))
        crowded.sendall(_upgrade("/v1/realtime?model=m", [f"X-Pad-{i}: {i}" for i in range(130)]))
        opened = time.monotonic()
        # Meanwhile other clients are served as usual.
        client = WsClient(port)
        client.send({"type": "input_audio_buffer.clear", "event_id": "c1"})
        client.recv("input_audio_buffer.cleared")
        for sock in (slow, silent):
            sock.settimeout(10)
            assert sock.recv(100) == b""  # the server closed it
        # The crowded request: closed, or refused with a 4xx first (newer uvicorn / websockets
        # answer a request with too many headers) — never left hanging.
        crowded.settimeout(10)
        answer = crowded.recv(100)
        assert answer == b"" or answer.startswith(b"HTTP/1.1 4"), answer
        took = time.monotonic() - opened
        assert 0.5 < took < 5, took
        # A request line too long for the WebSocket library is answered at once (it used to hang).
        with socket.create_connection(("127.0.0.1", port)) as long_url:
            long_url.sendall(_upgrade("/v1/realtime?model=" + "m" * 9000))
            long_url.settimeout(0.5)
            assert long_url.recv(100).startswith(b"HTTP/1.1 400 ")
        # A WebSocket that completed its handshake is not cut off by the deadline.
        time.sleep(1.0)
        client.send({"type": "input_audio_buffer.clear", "event_id": "c2"})
        client.recv("input_audio_buffer.cleared")
        client.ws.close()
        for sock in (slow, silent, crowded):
            sock.close()
