"""The architecture's import rules hold (docs/architecture.md, Layers): the server over the
protocol over the domain over the events; the store never imports the domain; workers talk to
the log, never to a server; the runtime imports neither the tooling (``duplex_es_tools``) nor
its own command line; the inspector reads the log and never imports a server, a worker
or the wire protocol; no import cycles in the runtime nor in the tooling.
The contracts are in pyproject.toml; import-linter checks them."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_layer_contracts_hold():
    lint = Path(sys.executable).with_name("lint-imports")
    done = subprocess.run([str(lint)], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert "0 broken" in done.stdout and "8 kept" in done.stdout
