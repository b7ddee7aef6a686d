"""Running real ``duplex-es serve`` / ``worker`` processes for tests."""

from __future__ import annotations

import contextlib
import json
import time
import urllib.request
from pathlib import Path
from typing import Any, Callable, Iterator, Optional, Sequence

from duplex_es.store import Database, upgrade
from duplex_es_tools.processes import Proc, free_port, start_server, start_worker, wait_healthy


@contextlib.contextmanager
def running(
    db_url: str,
    tmp: Path,
    *,
    workers: int = 1,
    worker_args: Sequence[str] = (),
    server_args: Sequence[str] = (),
    worker_env: Optional[dict] = None,
) -> Iterator[tuple[int, Proc, list[Proc]]]:
    """A migrated database with a server and ``workers`` workers; yields (port, server, workers)."""
    db = Database(db_url)
    upgrade(db)
    db.dispose()
    port = free_port()
    server = start_server(db_url, port, tmp / "serve.log", server_args)
    procs = [start_worker(db_url, tmp / f"worker{i}.log", worker_args, worker_env) for i in range(workers)]
    try:
        wait_healthy(port, server)
        yield port, server, procs
    finally:
        for p in procs:
            p.stop()
        server.stop()


def session_state(port: int, session_id: str) -> dict:
    """``GET /v1/sessions/{id}``."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/sessions/{session_id}", timeout=10) as r:
        return json.loads(r.read())


def wait_for(pred: Callable[[], Any], timeout: float, what: str) -> Any:
    """Poll ``pred`` until it returns something true (returned), or fail naming ``what``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = pred()
        if value:
            return value
        time.sleep(0.02)
    raise AssertionError(f"timed out waiting for {what}")
