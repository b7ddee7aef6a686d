"""``duplex-es serve --workers N`` (docs/scaling.md, "Several processes on one port"): N server
processes on one port and one PostgreSQL database, each with its own server id; a process that
dies is restarted under the same id and its sessions resume; the parent's SIGTERM stops them
all. On a SQLite file it is refused before anything is created."""

from __future__ import annotations

import os
import signal
import socket
from pathlib import Path

import pytest

from duplex_es.audit import audit_session
from duplex_es.store import Database, EventLog, SessionOwners, upgrade
from duplex_es_tools.processes import free_port, start_server, start_worker, wait_healthy

from servers import wait_for
from wsclient import WsClient


def _children(parent: int) -> dict[str, int]:
    """The parent's live children by server id (read from their command lines)."""
    out: dict[str, int] = {}
    with open(f"/proc/{parent}/task/{parent}/children") as f:
        pids = [int(p) for p in f.read().split()]
    for pid in pids:
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                argv = f.read().decode().split("\0")
        except FileNotFoundError:
            continue
        if "--server-id" in argv:
            out[argv[argv.index("--server-id") + 1]] = pid
    return out


def _wait(what, timeout: float = 30.0):  # noqa: ANN001, ANN202
    return wait_for(what, timeout, "the server processes")


@pytest.mark.slow
def test_two_server_processes_share_a_port_and_a_killed_one_comes_back_with_its_sessions(pg_schema_url: str, tmp_path: Path):
    db_url = pg_schema_url
    db = Database(db_url)
    upgrade(db)
    port = free_port()
    base = f"{socket.gethostname()}:{port}"
    server = start_server(db_url, port, tmp_path / "serve.log", ["--workers", "2"])
    worker = start_worker(db_url, tmp_path / "worker.log", ["--chunk-ms", "250"])
    try:
        wait_healthy(port, server)
        children = _wait(lambda: c if len(c := _children(server.pid)) == 2 else None)
        assert sorted(children) == [f"{base}#0", f"{base}#1"]
        assert len(set(children.values())) == 2 and server.pid not in children.values()

        # Sessions open on whichever process accepts them, and are answered.
        clients = [WsClient(port) for _ in range(6)]
        owners = SessionOwners(db)
        held = {c.session_id: owners.current(c.session_id)[0] for c in clients}
        assert {o.owner_id for o in held.values()} <= set(children)
        for c in clients[:2]:
            c.say("What is the weather like?")
            assert c.respond()["status"] == "completed"

        # kill -9 the process holding the first session: the parent starts it again under the
        # same id, and the client resumes its session wherever its new connection lands.
        victim = clients[0]
        owner = held[victim.session_id].owner_id
        os.kill(children[owner], signal.SIGKILL)
        restarted = _wait(lambda: c if (c := _children(server.pid)).get(owner) not in (None, children[owner]) and len(c) == 2 else None)
        assert sorted(restarted) == sorted(children)
        wait_healthy(port, server)
        resumed = WsClient(
            port,
            first={"type": "session.resume", "session_id": victim.session_id, "resume_token": victim.token,
                   "last_server_event_seq": victim.last_seq()},
        )
        after = owners.current(resumed.session_id)[0]
        assert after.owner_id in restarted and after.generation > held[victim.session_id].generation
        resumed.say("And tomorrow?")
        assert resumed.respond()["status"] == "completed"
        resumed.close()
        # The other sessions of the killed process were taken up by its restart (same name, a
        # new generation: it fenced out its former self); the rest never noticed.
        for c in clients[1:]:
            if held[c.session_id].owner_id == owner:
                now = _wait(lambda sid=c.session_id: (o := owners.current(sid)) and o[0].generation > held[sid].generation and o[0])
                assert now.owner_id == owner
            else:
                c.close()
        report = audit_session(EventLog(db), victim.session_id)
        assert report.ok, report.violations

        # SIGTERM to the parent stops every process and frees the port.
        server.stop(timeout=30)
        assert server.popen.returncode == 0
        for pid in restarted.values():
            _wait(lambda pid=pid: not os.path.exists(f"/proc/{pid}") or open(f"/proc/{pid}/stat").read().split()[2] == "Z", 10)
        with socket.socket() as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            s.bind(("127.0.0.1", port))
    finally:
        worker.stop()
        server.stop()
        db.dispose()


def test_the_childrens_command_line_keeps_every_option_but_the_workers_own(tmp_path: Path):
    from duplex_es.cli.workers import child_argv

    argv = ["serve", "--db", "sqlite:///x.db", "--workers", "3", "--server-id=edge", "--api-key", "k", "--workers=4"]
    got = child_argv(argv, 7, "edge#1")
    assert got[1:] == ["-m", "duplex_es.cli.main", "serve", "--db", "sqlite:///x.db", "--api-key", "k", "--listen-fd", "7", "--server-id", "edge#1"]


def test_workers_on_a_sqlite_file_are_refused_before_anything_is_created(tmp_path: Path, capsys):
    from duplex_es.cli.main import main

    path = tmp_path / "log.db"
    assert main(["serve", "--db", f"sqlite:///{path}", "--port", str(free_port()), "--workers", "2"]) == 2
    err = capsys.readouterr().err
    assert "--workers 2" in err and "SQLite" in err and "PostgreSQL" in err
    assert not path.exists()


@pytest.mark.slow
def test_the_children_stop_when_the_parent_is_killed(pg_schema_url: str, tmp_path: Path):
    """SIGKILL of the parent leaves no child serving the port without a supervisor."""
    db = Database(pg_schema_url)
    upgrade(db)
    db.dispose()
    port = free_port()
    server = start_server(pg_schema_url, port, tmp_path / "serve.log", ["--workers", "2"])
    try:
        wait_healthy(port, server)
        children = _wait(lambda: c if len(c := _children(server.pid)) == 2 else None)
        server.kill()
        for pid in children.values():
            _wait(lambda pid=pid: not os.path.exists(f"/proc/{pid}") or open(f"/proc/{pid}/stat").read().split()[2] == "Z", 20)
    finally:
        for pid in children.values() if "children" in locals() else ():
            if os.path.exists(f"/proc/{pid}"):
                os.kill(pid, signal.SIGKILL)
        server.stop()
