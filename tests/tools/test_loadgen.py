"""The load generator (issue 6 §4) and the serving bench rows, against real servers over real
WebSockets on both backends. Nothing here asserts a speed: the figures live in ``make bench``."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from duplex_es_tools.loadgen import LoadgenError, MAX_SESSIONS, chunk_audio, check_url, run, run_load, run_ramp

from conftest import backend_url
from servers import running


@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
def server(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory):
    folder = tmp_path_factory.mktemp(request.param)
    with backend_url(request.param, folder) as url, running(url, folder, workers=0) as (port, proc, _):
        yield f"ws://127.0.0.1:{port}/v1/realtime"


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
