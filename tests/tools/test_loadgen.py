"""The load generator (issue 6 §4) and the serving bench rows, against real servers over real
WebSockets on both backends. Nothing here asserts a speed: the figures live in ``make bench``."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from duplex_es_tools.loadgen import LoadgenError, MAX_SESSIONS, chunk_audio, check_url, run, run_load, run_ramp
from duplex_es_tools.processes import free_port, start_bare_transport, wait_healthy

from conftest import backend_url
from servers import running


@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
def server(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory):
    folder = tmp_path_factory.mktemp(request.param)
    with backend_url(request.param, folder) as url, running(url, folder, workers=0) as (port, proc, _):
        yield f"ws://127.0.0.1:{port}/v1/realtime"


@pytest.fixture(scope="module")
def bare_transport(tmp_path_factory: pytest.TempPathFactory):
    """Bench row 13's peer (duplex_es_tools.bare_transport), as the bench starts it."""
    port = free_port()
    proc = start_bare_transport(port, tmp_path_factory.mktemp("bare") / "peer.log")
    try:
        wait_healthy(port, proc)
        yield f"ws://127.0.0.1:{port}/v1/realtime"
    finally:
        proc.stop()


@pytest.mark.parametrize(
    "url",
    ["ws://10.0.0.5:8000/v1/realtime", "wss://127.0.0.1:8000/v1/realtime", "http://127.0.0.1:8000/v1/realtime", "ws://example.com/v1/realtime"],
)
def test_only_loopback_websocket_urls_are_driven(url):
    with pytest.raises(LoadgenError, match="loopback"):
        check_url(url)


def test_runs_are_bounded(weather_pcm: bytes):
    url = "ws://127.0.0.1:1/v1/realtime"
    for kwargs in ({"sessions": 0}, {"sessions": MAX_SESSIONS + 1}, {"sessions": 1, "duration_s": 10_000}, {"sessions": 1, "chunk_ms": 1}):
        with pytest.raises(LoadgenError):
            run(run_load(url, pcm=weather_pcm, **kwargs))


def test_the_fixture_is_cut_into_whole_20_ms_chunks(weather_pcm: bytes):
    chunks = chunk_audio(weather_pcm, 20)
    assert len(chunks) == len(weather_pcm) // 960 and {len(c) for c in chunks} == {1280}
    with pytest.raises(LoadgenError):
        chunk_audio(b"\x00" * 100, 20)


def test_every_real_time_append_is_acknowledged_exactly_once(server: str, weather_pcm: bytes):
    result = run(run_load(server, 3, duration_s=1.5, warmup_s=0.2, pcm=weather_pcm))
    # 3 sessions × 50 appends/s × 1.5 s = 225, give or take the edges of the window (and a busy
    # machine delaying the client's own schedule).
    assert 150 <= result.appends <= 300
    assert (result.acked, result.missing, result.errors) == (result.appends, 0, 0)
    assert result.p50_ms is not None and result.p50_ms <= result.p99_ms <= result.max_ms
    assert result.held == (result.p99_ms <= 50.0)


def test_a_ramp_reports_each_step_and_the_largest_that_held(server: str, weather_pcm: bytes):
    ramp = run(run_ramp(server, steps=(2, 1), duration_s=0.5, warmup_s=0.1, pause_s=0.1, refine=0, pcm=weather_pcm, target_p99_ms=10_000))
    assert [t.sessions for t in ramp.trials] == [1, 2] and ramp.best == 2
    assert all(t.acked == t.appends > 0 and t.errors == 0 for t in ramp.trials)


def test_the_cli_prints_json(server: str, tmp_path: Path):
    run_ = subprocess.run(
        [sys.executable, "-m", "duplex_es.cli.main", "loadgen", "--url", server, "--sessions", "2", "--duration-s", "0.5",
         "--warmup-s", "0", "--target-p99-ms", "10000", "--json"],
        capture_output=True, text=True, timeout=120,
    )
    assert run_.returncode == 0, run_.stderr
    out = json.loads(run_.stdout)
    assert out["sessions"] == 2 and out["acked"] == out["appends"] > 0 and out["errors"] == 0
    bad = subprocess.run([sys.executable, "-m", "duplex_es.cli.main", "loadgen", "--url", "ws://192.0.2.1:80/v1/realtime"],
                         capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and "loopback" in bad.stdout + bad.stderr and "Traceback" not in bad.stdout + bad.stderr


def test_serving_row_9_has_the_report_shape(tmp_path: Path):
    from duplex_es_tools.bench.serving import run_serving_rows

    [row] = run_serving_rows("sqlite", f"sqlite:///{tmp_path / 'row9.db'}", quick=True, out_dir=tmp_path / "out", rows=(9,))
    assert row["row"] == 9 and row["backend"] == "sqlite" and row["n"] == 30
    assert row["p50_ms"] <= row["p95_ms"] <= row["p99_ms"] and row["met"] in (True, False)
    assert "durability" not in row  # the suite states it


def _conversation(url: str, audio: list[str]) -> list[dict]:
    """session.created, then the load generator's session.update, ``audio`` appended, a bad
    append, session.close: every event the server sent, in order."""
    from websockets.sync.client import connect

    got = []
    with connect(url, compression=None, max_size=None) as ws:
        got.append(json.loads(ws.recv(timeout=30)))
        update = {"type": "session.update", "session": {"type": "realtime", "audio": {"input": {"turn_detection": None}}, "duplex": {"acknowledge_appends": True}}}
        ws.send(json.dumps(update))
        for k, chunk in enumerate(audio):
            ws.send(json.dumps({"type": "input_audio_buffer.append", "event_id": f"a{k}", "audio": chunk}))
        ws.send(json.dumps({"type": "input_audio_buffer.append", "event_id": "bad", "audio": "not base64!"}))
        ws.send(json.dumps({"type": "session.close"}))
        try:
            while True:
                got.append(json.loads(ws.recv(timeout=30)))
        except Exception:  # closed after session.closed
            pass
    return got


def test_the_bare_transport_answers_the_load_generator_in_the_shape_serve_does(server: str, bare_transport: str, weather_pcm: bytes):
    """Row 13 is only comparable with row 10 if the load generator sees the same conversation:
    the same event types in the same order, the acks with the same fields and values."""
    audio = chunk_audio(weather_pcm, 20)[:3]
    ours, peer = _conversation(server, audio), _conversation(bare_transport, audio)
    assert [e["type"] for e in peer] == [e["type"] for e in ours] == [
        "session.created", "session.updated", *["input_audio_buffer.appended"] * 3, "error", "session.closed",
    ]
    assert peer[1]["session"]["duplex"]["acknowledge_appends"] is True and peer[1]["session"]["audio"]["input"]["turn_detection"] is None
    for mine, theirs in zip(ours[2:5], peer[2:5]):
        assert set(theirs) == set(mine)
        assert {k: theirs[k] for k in ("client_event_id", "audio_start_ms", "audio_end_ms")} == {k: mine[k] for k in ("client_event_id", "audio_start_ms", "audio_end_ms")}
    assert peer[5]["error"]["code"] == ours[5]["error"]["code"] == "invalid_audio_base64"


def test_a_ramp_against_the_bare_transport_acknowledges_every_append(bare_transport: str, weather_pcm: bytes):
    ramp = run(run_ramp(bare_transport, steps=(1, 3), duration_s=0.5, warmup_s=0.1, pause_s=0.1, refine=0, pcm=weather_pcm, target_p99_ms=10_000))
    assert [t.sessions for t in ramp.trials] == [1, 3] and ramp.best == 3  # between runs it said sessions: 0 on /healthz
    assert all(t.acked == t.appends > 0 and (t.errors, t.missing) == (0, 0) for t in ramp.trials)
