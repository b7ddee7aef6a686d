"""A real server and worker started with a chain key write a keyed log that `duplex-es
checkpoint` pins and `duplex-es audit --checkpoint` checks (docs/security.md, "Tamper
evidence"), on SQLite and PostgreSQL."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from websockets.sync.client import connect

from duplex_es.store import Database, EventLog, KeyRing
from duplex_es.store.chain import GENESIS, event_hash

from conftest import backend_url
from servers import running
from tampering import attack as _attack


def _cli(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "COLUMNS": "200", "DUPLEX_ES_CHAIN_KEY_FILE": "", "DUPLEX_ES_CHECKPOINTS": ""}
    return subprocess.run([sys.executable, "-m", "duplex_es.cli.main", *args], capture_output=True, text=True, timeout=120, env=env)


def _world_session(port: int) -> str:
    """Start a world session, wait for two chunks (the worker's appends), interact, close."""
    ws = connect(f"ws://127.0.0.1:{port}/v1/world", max_size=None)
    ws.send(json.dumps({"type": "session.start", "prompt": "hills", "seed": 1, "width": 32, "height": 32, "frames_per_chunk": 2}))
    seen: list[dict] = []
    deadline = time.monotonic() + 60

    def until(kind: str, n: int = 1) -> dict:
        while sum(e["type"] == kind for e in seen) < n:
            seen.append(json.loads(ws.recv(timeout=max(0.1, deadline - time.monotonic()))))
        return [e for e in seen if e["type"] == kind][n - 1]

    sid = until("session.started")["session_id"]
    until("world.chunk")
    ws.send(json.dumps({"type": "session.interaction", "event_id": 1, "prompt": "dusk"}))
    until("session.interaction.accepted")
    until("world.chunk", 3)
    ws.send(json.dumps({"type": "session.close"}))
    until("session.closed")
    ws.close()
    return sid




@pytest.mark.slow
@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
@pytest.mark.invariant("I9")
def test_serve_and_worker_with_a_key_file_then_checkpoint_tamper_audit(backend: str, tmp_path: Path):
    """serve and worker sign every event they append (both writers' events carry the key id);
    the log audits clean against a checkpoint; an edit with a recomputed public chain fails the
    audit without the checkpoint, and a cut tail fails it with the checkpoint, naming the session."""
    key = tmp_path / "chain.key"
    assert _cli("chain-key", "new", str(key)).returncode == 0
    ring = KeyRing.load(key)
    keyed = ["--chain-key-file", str(key)]
    with backend_url(backend, tmp_path) as url:
        with running(url, tmp_path, worker_args=["--engine", "world", *keyed], server_args=keyed) as (port, _, _):
            sid = _world_session(port)
            other = _world_session(port)
        db = Database(url)
        rows = EventLog(db).read_raw(sid)
        assert {r.key_id for r in rows} == {ring.signing_id}
        assert {r.type for r in rows} >= {"world.chunk", "world.tick.issued"}  # the worker's and the server's appends
        cps = tmp_path / "cps"
        done = _cli("checkpoint", "--db", url, *keyed, "--out", str(cps) + "/")
        assert done.returncode == 0, done.stderr
        clean = _cli("audit", "--db", url, *keyed, "--checkpoint", str(cps))
        assert clean.returncode == 0, clean.stdout + clean.stderr

        # An edit in `other`, its chain recomputed with the public formula: the key finds it.
        _attack(db, f"UPDATE events SET data = replace(data, 'dusk', 'dawn') WHERE session_id = '{other}'")
        prev, fix = GENESIS, []
        for r in EventLog(db).read_raw(other):
            h = event_hash(prev, r.session_id, r.seq, r.type, r.version, r.data, r.recorded_at_us)
            fix.append(f"UPDATE events SET prev_hash = '{prev}', hash = '{h}' WHERE position = {r.position}")
            prev = h
        _attack(db, *fix)
        edited = _cli("audit", "--db", url, *keyed)
        assert edited.returncode == 1, edited.stdout
        assert f"{other} seq 1 [chain] hash does not verify under chain key {ring.signing_id}" in edited.stdout, edited.stdout

        # sid's last two events cut: its chain still verifies; the checkpoint names it.
        _attack(db, f"DELETE FROM events WHERE session_id = '{sid}' AND seq > {len(rows) - 2}")
        cut = _cli("audit", "--db", url, *keyed, "--checkpoint", str(cps))
        assert cut.returncode == 1
        assert f"{sid} seq {len(rows)} [checkpoint] tail cut" in cut.stdout, cut.stdout
        db.dispose()
