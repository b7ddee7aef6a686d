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
@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_a_short_chaos_run_finds_no_violation(tmp_path: Path, backend: str):
    with backend_url(backend, tmp_path) as url:
        args = ["chaos", "--db", url, "--speech", "2", "--world", "1", "--kills", "4", "--window-s", "14", "--turns", "1",
                "--seed", "7", "--out", str(tmp_path / "chaos"), "--log-level", "WARNING"]
        run = subprocess.run([sys.executable, "-m", "duplex_es.cli.main", *args], capture_output=True, text=True, timeout=270)
        assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-4000:]
        result = json.loads((tmp_path / "chaos" / "chaos-results.json").read_text())
    assert result["violations"] == [] and result["finished"] == result["sessions"] == 3
    assert len(result["kills"]) == 4 and {k["killed"] for k in result["kills"]} == {"server", "worker"}
    assert result["events_checked"] > 100
