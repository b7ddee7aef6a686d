"""No global stalls (docs/security.md, "No global stalls"): a database another process keeps
busy makes the affected commands fail with ``log_unavailable`` after a bounded wait, while the
server goes on answering — ``/healthz`` included, which reports the log as degraded — and the
same command succeeds once the database is free again. Real servers, real databases, a real
second process holding the lock."""

from __future__ import annotations

import base64
import json
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Iterator

import pytest
import sqlalchemy as sa

from conftest import backend_url
from duplex_es.store import Database, EventLog
from duplex_es.store.database import APPEND_LOCK_KEY
from servers import running
from wsclient import WsClient

#: What the servers under test wait for the log before refusing a command (ms).
COMMIT_TIMEOUT_MS = 500

# A second process that takes the database's append lock, says so on stdout, and holds it
# until its stdin closes: what a stuck writer of another process (a worker, another server, an
# operator's shell) does to everyone else.
HOLDER = r"""
import sys, sqlite3, psycopg
backend, target = sys.argv[1], sys.argv[2]
if backend == "sqlite":
    conn = sqlite3.connect(target, isolation_level=None)
    conn.execute("BEGIN IMMEDIATE")
else:
    conn = psycopg.connect(target)
    conn.execute("SELECT pg_advisory_xact_lock(%s)" % sys.argv[3])
print("held", flush=True)
sys.stdin.read()
conn.rollback() if backend != "sqlite" else conn.execute("ROLLBACK")
"""


def _holder_target(url: str) -> tuple[str, str]:
    u = sa.engine.make_url(url)
    if u.get_backend_name() == "sqlite":
        return "sqlite", str(u.database)
    libpq = u.set(drivername="postgresql").render_as_string(hide_password=False)
    return "postgresql", libpq


class LockHolder:
    """The append lock of ``url``'s database, held by another process until :meth:`release`."""

    def __init__(self, url: str) -> None:
        backend, target = _holder_target(url)
        self.proc = subprocess.Popen(
            [sys.executable, "-c", HOLDER, backend, target, str(APPEND_LOCK_KEY)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
        )
        assert self.proc.stdout is not None and self.proc.stdout.readline().strip() == "held"

    def release(self) -> None:
        if self.proc.poll() is None:
            assert self.proc.stdin is not None
            self.proc.stdin.close()
            self.proc.wait(10)


def _healthz(port: int) -> tuple[float, dict]:
    started = time.monotonic()
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=10) as r:
        body = json.loads(r.read())
    return (time.monotonic() - started) * 1000, body


@pytest.fixture(params=["sqlite", "postgresql"])
def server(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[int, str]]:
    args = ["--commit-timeout-ms", str(COMMIT_TIMEOUT_MS)]
    with backend_url(request.param, tmp_path) as url, running(url, tmp_path, workers=0, server_args=args) as (port, _, _):
        yield port, url


def _append(client: WsClient, event_id: str) -> None:
    client.send({"type": "input_audio_buffer.append", "event_id": event_id, "audio": base64.b64encode(b"\0" * 480).decode()})


def test_a_held_write_lock_refuses_commands_after_a_bounded_wait_while_the_server_answers(server: tuple[int, str]) -> None:
    port, url = server
    held_elsewhere = WsClient(port)
    other = WsClient(port)  # a second session: it too must get its answers, not a frozen server
    holder = LockHolder(url)
    try:
        started = time.monotonic()
        _append(held_elsewhere, "evt_blocked")
        err = held_elsewhere.error(timeout=COMMIT_TIMEOUT_MS / 1000 + 10)
        waited_ms = (time.monotonic() - started) * 1000
        assert err["code"] == "log_unavailable"
        assert err["event_id"] == "evt_blocked"
        assert "input_audio_buffer.append" in err["message"]
        # Bounded: refused after the server's commit timeout, not the database's 30 s.
        assert COMMIT_TIMEOUT_MS * 0.8 <= waited_ms < COMMIT_TIMEOUT_MS + 5000

        # While the lock is still held: health answers at once, and says why it is degraded.
        took_ms, health = _healthz(port)
        assert took_ms < 1000, f"/healthz took {took_ms:.0f} ms while the log was locked"
        assert health["status"] == "degraded" and health["log"]["status"] == "degraded"
        assert "busy" in health["log"]["last_failure"]
        assert "://" not in json.dumps(health)  # the database URL is not revealed

        # The other session's command is refused too (one lock per log), but promptly and
        # on its own connection: nothing one client does holds up the other's answers.
        _append(other, "evt_other")
        assert other.error(timeout=COMMIT_TIMEOUT_MS / 1000 + 10)["code"] == "log_unavailable"

        # Commands sent one after another into the stall are each refused within the bound of
        # their own arrival, not one bound after another as they queue behind each other.
        sent: dict[str, float] = {}
        for i in range(5):
            sent[f"evt_q{i}"] = time.monotonic()
            _append(held_elsewhere, f"evt_q{i}")
            time.sleep(0.1)
        for _ in sent:
            err = held_elsewhere.error(timeout=COMMIT_TIMEOUT_MS / 1000 + 10)
            late_ms = (time.monotonic() - sent[err["event_id"]]) * 1000
            assert err["code"] == "log_unavailable"
            assert late_ms < COMMIT_TIMEOUT_MS + 1000, f"{err['event_id']} refused {late_ms:.0f} ms after it was sent"
    finally:
        holder.release()

    # Nothing of the refused commands was applied: the same commands go through now, and the
    # log holds each once, with no trace of the refusals (not the client's fault, not its log).
    _append(held_elsewhere, "evt_blocked")
    _append(other, "evt_other")
    db = Database(url)
    try:
        log = EventLog(db)
        deadline = time.monotonic() + 10
        while True:
            kinds = {c.session_id: [r.event.TYPE for r in log.read_session(c.session_id)] for c in (held_elsewhere, other)}
            if all("input_audio_buffer.appended" in t for t in kinds.values()) or time.monotonic() > deadline:
                break
            time.sleep(0.05)
        for types in kinds.values():
            assert types.count("input_audio_buffer.appended") == 1, types
            assert "command.rejected" not in types, types
    finally:
        db.dispose()
    assert _healthz(port)[1]["log"]["status"] == "ok"  # a commit since the failures: healthy again
    held_elsewhere.close()
    other.close()
