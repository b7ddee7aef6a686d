"""``make chaos`` in short (issue 5 item 5): a few SIGKILLs of the server and the workers while
scripted SDK speech sessions and a world session run; the harness's checks must find nothing."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import backend_url


@pytest.mark.slow
@pytest.mark.timeout(480)
@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_a_short_chaos_run_finds_no_violation(tmp_path: Path, backend: str):
    with backend_url(backend, tmp_path) as url:
        args = ["chaos", "--db", url, "--speech", "2", "--world", "1", "--kills", "4", "--window-s", "14", "--turns", "1",
                "--seed", "7", "--out", str(tmp_path / "chaos"), "--log-level", "WARNING", "--timeout-s", "150"]
        # The harness's own deadline (150 s, about 7x a normal run) fires first and reports what
        # stalled; the kill here is for a harness that hangs anyway (it then dumps its stacks).
        proc = subprocess.Popen([sys.executable, "-m", "duplex_es.cli.main", *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            out, err = proc.communicate(timeout=400)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, err = proc.communicate()
            pytest.fail("chaos did not end in 400 s:\n" + out[-4000:] + err[-8000:])
        assert proc.returncode == 0, out[-6000:] + err[-4000:]
        result = json.loads((tmp_path / "chaos" / "chaos-results.json").read_text())
    assert result["violations"] == [] and result["finished"] == result["sessions"] == 3
    assert len(result["kills"]) == 4 and {k["killed"] for k in result["kills"]} == {"server", "worker"}
    assert result["events_checked"] > 100


@pytest.mark.parametrize(
    "bad, message",
    [
        (["--speech", "0", "--world", "0"], "needs at least one session"),
        (["--timeout-s", "abc"], "expected a number, got 'abc'"),
        (["--timeout-s", "nan"], "must be a positive number"),
        (["--window-s", "0"], "must be a positive number"),
        (["--kills", "-1"], "must be 0 or a positive integer"),
    ],
)
def test_chaos_refuses_options_that_would_check_nothing_or_make_no_sense(tmp_path: Path, bad: list[str], message: str):
    run = subprocess.run([sys.executable, "-m", "duplex_es.cli.main", "chaos", "--out", str(tmp_path / "c"), *bad],
                         capture_output=True, text=True, timeout=60)
    said = " ".join((run.stdout + run.stderr).split())  # rich wraps long lines
    assert run.returncode == 2 and message in said, said
    assert not (tmp_path / "c" / "chaos-results.json").exists()
