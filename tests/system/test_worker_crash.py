"""A worker SIGKILLed in the middle of a tick: another worker re-claims it after the claim
expires, produces the same bytes, and the client receives every audio chunk exactly once."""

from __future__ import annotations

import asyncio
import base64
import threading
from pathlib import Path

import pytest
import sqlalchemy as sa

from duplex_es.audit import audit_session
from duplex_es.events import TickIssued, TickOutput
from duplex_es.store import Database, EventLog
from duplex_es.store.schema import ticks as ticks_t
from duplex_es.worker.engine import TickContext
from duplex_es.worker.runner import Worker
from duplex_es.worker.speech.engine import CascadeSpeechEngine
from duplex_es_tools.conversation import speak_and_listen
from duplex_es_tools.processes import start_worker

from servers import running, wait_for as _wait_for


@pytest.mark.slow
@pytest.mark.invariant("I6")
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


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
@pytest.mark.parametrize("point", ["after_claim", "after_step", "after_commit"])
@pytest.mark.invariant("I6")
def test_a_worker_killed_at_each_instrumented_point_commits_each_tick_once(tmp_path: Path, backend: str, point: str):
    """Case 8: worker A SIGKILLs itself at ``point`` of its second tick (after the claim, after
    the engine's effect but before the commit, or after the commit); worker B takes over. Every
    tick has exactly one committed output, and the client gets each chunk once."""
    from conftest import backend_url
    from duplex_es.store.schema import ticks as ticks_t2
    from wsclient import WsClient

    env = {"DUPLEX_ES_CRASH_AT": f"{point}:2"}
    args = ["--claim-ttl-ms", "600", "--chunk-ms", "300", "--worker-id", "worker-A"]
    with backend_url(backend, tmp_path) as url, running(url, tmp_path, worker_args=args, worker_env=env) as (port, _, (worker_a,)):
        db = Database(url)
        c = WsClient(port)
        c.say("tell me how the weather will be this afternoon in the hills")
        c.send({"type": "response.create"})
        rid = c.recv("response.created")["response"]["id"]
        _wait_for(lambda: not worker_a.alive(), 60, f"worker A to die {point}")
        worker_b = start_worker(url, tmp_path / "workerB.log", ["--chunk-ms", "300", "--worker-id", "worker-B"])
        try:
            done = c.recv("response.done", 90, **{"response.id": rid})["response"]
        finally:
            worker_b.stop()
        assert done["status"] == "completed"
        log = EventLog(db)
        records = log.read_session(c.session_id)
        outputs = [r.event for r in records if isinstance(r.event, TickOutput)]
        ticks = [r.event for r in records if isinstance(r.event, TickIssued)]
        assert sorted(o.request_id for o in outputs) == sorted(t.request_id for t in ticks)  # one output per tick
        deltas = [e for e in c.events if e["type"] == "response.output_audio.delta"]
        assert len(deltas) == len(outputs) and len({e["server_event_seq"] for e in c.events if "server_event_seq" in e}) == len(
            [e for e in c.events if "server_event_seq" in e]
        )
        with db.engine.connect() as conn:
            attempts = dict(conn.execute(sa.select(ticks_t2.c.request_id, ticks_t2.c.attempts)).all())
        retried = [a for a in attempts.values() if a > 1]
        assert retried == ([] if point == "after_commit" else [2])
        assert audit_session(log, c.session_id).ok
        c.close()
        db.dispose()


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_a_worker_restarted_ten_times_over_a_log_with_gaps_moves_monotonically_to_the_head(tmp_path: Path, backend: str):
    """Cases 10 and 12: ten workers in turn, each started wherever the previous one stopped and
    each dying right after committing one tick; the log has gaps between the ticks' positions
    (another session's events, and on PostgreSQL sequence values burned by failed inserts).
    The progress each leaves is persisted and only moves forward, up to the last tick."""
    from conftest import backend_url
    from duplex_es.store.schema import events as events_t
    from duplex_es.store.schema import ticks as ticks_t2
    from wsclient import WsClient

    def done_position(db: Database) -> int:
        with db.engine.connect() as conn:
            return conn.execute(sa.select(sa.func.coalesce(sa.func.max(ticks_t2.c.position), 0)).where(ticks_t2.c.status == "done")).scalar_one()

    with backend_url(backend, tmp_path) as url, running(url, tmp_path, workers=0) as (port, _, _):
        db = Database(url)
        c = WsClient(port)
        noise = WsClient(port)
        c.say("tell me how the weather will be this afternoon in the hills and by the sea")
        c.send({"type": "response.create"})
        rid = c.recv("response.created")["response"]["id"]
        progress = [done_position(db)]
        for i in range(10):
            for _ in range(3):  # another session writes between the ticks
                noise.send({"type": "session.heartbeat"})
                noise.recv("session.heartbeat_ack")
            if backend == "postgresql":
                with pytest.raises(sa.exc.IntegrityError), db.write() as conn:
                    conn.execute(events_t.insert().values(session_id=c.session_id, seq=1, type="x", version=1, data="{}", recorded_at_us=0, prev_hash="", hash=""))
            w = start_worker(url, tmp_path / f"w{i}.log", ["--chunk-ms", "300"], {"DUPLEX_ES_CRASH_AT": "after_commit:1"})
            _wait_for(lambda: not w.alive(), 60, f"worker {i} to commit one tick and die")
            progress.append(done_position(db))
            if any(e["type"] == "response.done" for e in c.events):
                break
            c.recv("response.output_audio.delta", 30)
        assert progress == sorted(progress) and len(set(progress)) == len(progress)  # each restart moved forward
        last = start_worker(url, tmp_path / "last.log", ["--chunk-ms", "300"])
        try:
            assert c.recv("response.done", 60, **{"response.id": rid})["response"]["status"] == "completed"
        finally:
            last.stop()
        log = EventLog(db)
        records = log.read_session(c.session_id)
        outputs = [r.event.request_id for r in records if isinstance(r.event, TickOutput)]
        assert sorted(outputs) == sorted(r.event.request_id for r in records if isinstance(r.event, TickIssued))
        assert audit_session(log, c.session_id).ok
        with db.engine.connect() as conn:
            assert conn.execute(sa.select(sa.func.max(ticks_t2.c.attempts))).scalar_one() == 1
        c.close()
        db.dispose()


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_a_failing_tick_is_failed_with_an_event_and_nothing_later_hides_it(tmp_path: Path, backend: str):
    """Case 11: the engine fails on a response's second tick. The failure is logged
    (``tick.failed``), the response ends ``failed`` with its reason, no later tick of that
    response is issued or committed, and the session goes on."""
    from conftest import backend_url
    from duplex_es.events import TickFailed
    from wsclient import WsClient

    tests = str(Path(__file__).resolve().parents[1])  # where plugins.py is
    args = ["--engine", "world", "--engine-plugin", "plugins:FailingSpeech", "--chunk-ms", "300"]
    with backend_url(backend, tmp_path) as url, running(url, tmp_path, worker_args=args, worker_env={"PYTHONPATH": tests}) as (port, _, _):
        db = Database(url)
        c = WsClient(port)
        c.say("tell me how the weather will be this afternoon in the hills")
        done = c.respond()
        assert done["status"] == "failed" and done["status_details"]["error"]["code"] == "engine_failed"
        c.say("and tomorrow")
        assert c.respond()["status"] == "failed"  # the session still takes turns
        log = EventLog(db)
        records = log.read_session(c.session_id)
        failed = [r for r in records if isinstance(r.event, TickFailed)]
        first = failed[0]
        assert first.event.chunk_index == 1 and "fell over" in first.event.message
        later = [r.event for r in records if isinstance(r.event, (TickIssued, TickOutput)) and r.event.response_id == first.event.response_id and r.event.chunk_index > 1]
        assert later == []
        assert audit_session(log, c.session_id).ok
        c.close()
        db.dispose()
