"""A worker SIGKILLed in the middle of a tick: another worker re-claims it after the claim
expires, produces the same bytes, and the client receives every audio chunk exactly once."""

from __future__ import annotations

import asyncio
import base64
import threading
import time
from pathlib import Path

import pytest
import sqlalchemy as sa

from duplex_es.audit import audit_session
from duplex_es.cli.conversation import speak_and_listen
from duplex_es.cli.processes import start_worker
from duplex_es.events import TickIssued, TickOutput
from duplex_es.store import Database, EventLog
from duplex_es.store.schema import ticks as ticks_t
from duplex_es.worker.engine import TickContext
from duplex_es.worker.runner import Worker
from duplex_es.worker.speech.engine import CascadeSpeechEngine

from servers import running


def _wait_for(pred, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = pred()
        if value:
            return value
        time.sleep(0.02)
    raise AssertionError(f"timed out waiting for {what}")


@pytest.mark.slow
def test_sigkilled_worker_mid_tick_loses_nothing_and_duplicates_nothing(sqlite_url: str, tmp_path: Path, weather_pcm: bytes):
    db = Database(sqlite_url)
    # Worker A is slow (it stands in for a GPU step of 1.5 s) and holds claims for 1 s at a time.
    slow = ["--step-delay-ms", "1500", "--claim-ttl-ms", "1000", "--worker-id", "worker-A"]
    with running(sqlite_url, tmp_path, workers=1, worker_args=slow) as (port, server, (worker_a,)):
        result: dict = {}

        def client() -> None:
            result["turn"] = asyncio.run(speak_and_listen(f"ws://127.0.0.1:{port}/v1", weather_pcm, timeout=90))

        t = threading.Thread(target=client)
        t.start()

        def claimed_second_chunk():
            with db.engine.connect() as conn:
                return conn.execute(
                    sa.select(ticks_t.c.request_id, ticks_t.c.claimed_by)
                    .where(ticks_t.c.status == "claimed", ticks_t.c.claimed_by == "worker-A")
                    .order_by(ticks_t.c.position.desc())
                ).first() if _committed(db) >= 1 else None

        victim = _wait_for(claimed_second_chunk, 60, "worker A to claim the second tick")
        worker_a.kill()  # SIGKILL while the tick is claimed and running
        assert not worker_a.alive()
        worker_b = start_worker(sqlite_url, tmp_path / "workerB.log", ["--worker-id", "worker-B"])
        try:
            t.join(timeout=90)
            assert not t.is_alive(), "the client never got response.done"
        finally:
            worker_b.stop()
    turn = result["turn"]
    assert turn.response_status == "completed"

    log = EventLog(db)
    with db.engine.connect() as conn:
        row = conn.execute(sa.select(ticks_t).where(ticks_t.c.request_id == victim.request_id)).one()
    assert row.status == "done" and row.attempts == 2 and row.claimed_by == "worker-B"

    records = log.read_session(turn.session_id)
    outputs = [r.event for r in records if isinstance(r.event, TickOutput)]
    assert len({o.request_id for o in outputs}) == len(outputs)  # one output per tick
    deltas = [e for e in turn.events if e["type"] == "response.output_audio.delta"]
    assert len(deltas) == len(outputs)  # each chunk delivered exactly once
    assert b"".join(base64.b64decode(o.audio) for o in outputs) == turn.reply_audio

    # Determinism: the reply is exactly what one uninterrupted engine would have produced.
    first_tick = next(r.event for r in records if isinstance(r.event, TickIssued))
    engine = CascadeSpeechEngine()
    reader = Worker(log, [engine])
    plan = engine.plan(TickContext(session_id=turn.session_id, tick=first_tick, read_audio=lambda s: reader.read_audio(turn.session_id, s)))
    assert b"".join(item.audio for item in plan.items) == turn.reply_audio

    report = audit_session(log, turn.session_id)
    assert report.ok, report.violations
    db.dispose()


def _committed(db: Database) -> int:
    with db.engine.connect() as conn:
        return conn.execute(sa.select(sa.func.count()).select_from(ticks_t).where(ticks_t.c.status == "done")).scalar_one()
