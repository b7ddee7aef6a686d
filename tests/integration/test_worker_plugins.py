"""``duplex-es worker --engine-plugin module:Class`` refuses what is not an engine with one line on
stderr, exit 2 and nothing created: a module not found (with the PYTHONPATH hint), a class that
cannot be built, an object without the engine protocol, a tick kind no worker runs."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest


@pytest.mark.parametrize(
    "spec, said",
    [
        ("no_such_plugin_module:Engine", "No module named 'no_such_plugin_module' (is its folder on PYTHONPATH?)"),
        ("datetime:date", "date() failed: TypeError"),
        ("json:JSONDecoder", "not an engine"),
        ("plugins:WrongKind", "unknown tick kinds ['video']"),
    ],
)
def test_a_plugin_that_is_not_an_engine_is_refused_in_one_line_and_creates_nothing(tmp_path: Path, spec: str, said: str):
    db = tmp_path / "worker.db"
    tests = str(Path(__file__).resolve().parents[1])  # where plugins.py is
    done = subprocess.run(
        [sys.executable, "-m", "duplex_es.cli.main", "worker", "--db", f"sqlite:///{db}", "--engine-plugin", spec],
        capture_output=True, text=True, timeout=60, env={**os.environ, "PYTHONPATH": tests},
    )
    assert done.returncode == 2, done.stderr
    assert said in " ".join(done.stderr.split()) and "Traceback" not in done.stderr
    assert done.stdout == "" and not db.exists()
