"""Starting ``duplex-es serve`` and ``duplex-es worker`` as separate OS processes (demo, chaos,
bench, tests), and the bench's bare transport peer (:mod:`duplex_es_tools.bare_transport`)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Optional, Sequence

__all__ = ["Proc", "free_port", "start_server", "start_worker", "start_bare_transport", "wait_healthy"]


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Proc:
    """A child Python process, ``python -m <module> <args>`` (``duplex-es`` unless ``module``
    says otherwise), whose output goes to a log file."""

    def __init__(self, args: Sequence[str], log_path: Path, env: Optional[dict] = None, module: str = "duplex_es.cli.main") -> None:
        self.args = list(args)
        self.log_path = log_path
        log_path.parent.mkdir(parents=True, exist_ok=True)
        self._log = open(log_path, "ab")
        full_env = {**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})}
        self.popen = subprocess.Popen(
            [sys.executable, "-m", module, *self.args],
            stdout=self._log,
            stderr=subprocess.STDOUT,
            env=full_env,
        )

    @property
    def pid(self) -> int:
        """The OS process id."""
        return self.popen.pid

    def alive(self) -> bool:
        """True while the process runs."""
        return self.popen.poll() is None

    def kill(self) -> None:
        """SIGKILL: die at once, mid-whatever (crash tests)."""
        if self.alive():
            self.popen.send_signal(signal.SIGKILL)
        self.popen.wait(timeout=10)

    def stop(self, timeout: float = 10.0) -> None:
        """SIGTERM, then SIGKILL if it does not exit in ``timeout`` seconds."""
        if self.alive():
            self.popen.send_signal(signal.SIGTERM)
            try:
                self.popen.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.kill()
        self._log.close()

    def output(self) -> str:
        """Everything the process wrote so far."""
        self._log.flush()
        return self.log_path.read_text(errors="replace")


def start_server(db_url: str, port: int, log_path: Path, extra: Sequence[str] = ()) -> Proc:
    """Start ``duplex-es serve`` on 127.0.0.1:``port``."""
    return Proc(["serve", "--db", db_url, "--host", "127.0.0.1", "--port", str(port), *extra], log_path)


def start_worker(db_url: str, log_path: Path, extra: Sequence[str] = (), env: Optional[dict] = None) -> Proc:
    """Start ``duplex-es worker`` (``env`` adds environment variables, e.g. a PYTHONPATH for
    an ``--engine-plugin``)."""
    return Proc(["worker", "--db", db_url, *extra], log_path, env)


def start_bare_transport(port: int, log_path: Path, extra: Sequence[str] = ()) -> Proc:
    """Start bench row 13's peer (:mod:`duplex_es_tools.bare_transport`: ``serve``'s uvicorn stack
    with no session logic) on 127.0.0.1:``port``; it answers ``/healthz`` as ``serve`` does."""
    return Proc(["--host", "127.0.0.1", "--port", str(port), *extra], log_path, module="duplex_es_tools.bare_transport")


def wait_healthy(port: int, proc: Proc, timeout: float = 30.0) -> None:
    """Wait until the server answers ``/healthz``.

    Raises:
        RuntimeError: the process exited or did not answer in time (its log is in the message).
    """
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not proc.alive():
            raise RuntimeError(f"server exited with {proc.popen.returncode}:\n{proc.output()[-3000:]}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=1) as r:
                if r.status == 200:
                    return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"server did not become healthy in {timeout} s:\n{proc.output()[-3000:]}")
