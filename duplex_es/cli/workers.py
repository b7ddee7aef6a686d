"""``duplex-es serve --workers N``: N server processes behind one port, on one database.

One Python process runs its event loop on one core; a machine with more cores runs more servers.
They share the log as any servers sharing a database do (docs/scaling.md): each is a full
``serve`` with its own server id, writer, log follower and ownership leases, so a session lives in
the process that opened it and a resume that lands on another process moves it there.

The parent binds the listening socket once and starts each child as ``duplex-es serve`` with the
same options and that socket passed down by file descriptor (``--listen-fd``); every child
accepts on it, so a connection queued while a child restarts waits for the others instead of
being refused. Child ``i`` is named ``<server id>#<i>`` (the server id defaults to
``HOST:PORT``), the same name after a restart, so a restarted child takes its own sessions up
at once and fences out what its former process had in flight. A child stops when the parent
dies, however it dies. The parent restarts a child that
exits (after a pause that doubles on quick successive failures, up to :data:`MAX_RESTART_DELAY_S`)
and, on SIGTERM or SIGINT, passes the signal on and waits for the children to close their
sessions' connections, then exits.
"""

from __future__ import annotations

import logging
import signal
import socket
import subprocess
import sys
import time
from typing import Optional, Sequence

__all__ = ["MAX_RESTART_DELAY_S", "STOP_TIMEOUT_S", "child_argv", "listen_socket", "supervise", "worker_server_id"]

log = logging.getLogger("duplex_es.serve")

#: The longest pause before restarting a child that keeps failing (s).
MAX_RESTART_DELAY_S = 10.0
#: How long the children get to stop after the parent is asked to (s); then they are killed.
STOP_TIMEOUT_S = 30.0
#: A child that ran at least this long before it exited is restarted at once (s).
_HEALTHY_S = 10.0


def worker_server_id(base: str, index: int) -> str:
    """The server id of child ``index`` (from 0) of a server named ``base``."""
    return f"{base}#{index}"


def listen_socket(host: str, port: int, backlog: int = 2048) -> socket.socket:
    """A listening TCP socket on ``host``:``port`` (IPv6 when ``host`` is an IPv6 address),
    inheritable by the children.

    Raises:
        OSError: the address cannot be bound (in use, not this machine's).
    """
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(backlog)
    sock.set_inheritable(True)
    return sock


def child_argv(argv: Sequence[str], fd: int, server_id: str) -> list[str]:
    """The command line of one child: the parent's ``serve`` options without ``--workers`` (and
    without a ``--server-id`` of its own), with the socket's descriptor and the child's id."""
    out: list[str] = []
    skip = False
    for arg in argv:
        if skip:
            skip = False
            continue
        if arg in ("--workers", "--server-id", "--listen-fd"):
            skip = True
            continue
        if arg.startswith(("--workers=", "--server-id=", "--listen-fd=")):
            continue
        out.append(arg)
    return [sys.executable, "-m", "duplex_es.cli.main", *out, "--listen-fd", str(fd), "--server-id", server_id]


def _die_with_parent() -> None:
    """In the child before it runs: SIGTERM when the parent dies, even by SIGKILL (Linux's
    ``PR_SET_PDEATHSIG``), so no child goes on serving the port without a supervisor. (A
    break-it run found children left running after ``kill -9`` of the parent.) Elsewhere a
    no-op."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG = 1
    except (OSError, AttributeError):
        pass


class _Child:
    def __init__(self, index: int, argv: list[str], fd: int) -> None:
        self.index, self.argv, self.fd = index, argv, fd
        self.proc: Optional[subprocess.Popen[bytes]] = None
        self.started = 0.0
        self.delay = 0.5
        self.due = 0.0  # when to start it again (monotonic s), after a failure

    def start(self) -> None:
        self.proc = subprocess.Popen(self.argv, pass_fds=(self.fd,), preexec_fn=_die_with_parent)
        self.started = time.monotonic()
        log.info("serve worker %d started (pid %d)", self.index, self.proc.pid)


def supervise(argv: Sequence[str], sock: socket.socket, base_id: str, workers: int) -> int:
    """Run ``workers`` children on ``sock`` until SIGTERM or SIGINT; restart any that exits.

    Args:
        argv: the parent's command line after the program name (``serve ...``).
        sock: the listening socket (:func:`listen_socket`).
        base_id: the server id the children's ids are made from.
        workers: how many children (at least 2).

    Returns:
        0 once every child has stopped after a stop signal.
    """
    fd = sock.fileno()
    children = [_Child(i, child_argv(argv, fd, worker_server_id(base_id, i)), fd) for i in range(workers)]
    stopping = False

    def stop(signum: int, _frame: object) -> None:
        nonlocal stopping
        stopping = True

    previous = {s: signal.signal(s, stop) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        for c in children:
            c.start()
        while not stopping:
            time.sleep(0.2)
            now = time.monotonic()
            for c in children:
                if c.proc is None:
                    if now >= c.due:
                        c.start()
                    continue
                code = c.proc.poll()
                if code is None or stopping:
                    continue
                ran = now - c.started
                c.delay = 0.5 if ran >= _HEALTHY_S else min(MAX_RESTART_DELAY_S, c.delay * 2)
                log.warning("serve worker %d (pid %d) exited with %s after %.1f s; restarting in %.1f s", c.index, c.proc.pid, code, ran, c.delay)
                c.proc, c.due = None, now + c.delay
    finally:
        for c in children:
            if c.proc is not None and c.proc.poll() is None:
                c.proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + STOP_TIMEOUT_S
        for c in children:
            if c.proc is None:
                continue
            try:
                c.proc.wait(max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                log.warning("serve worker %d did not stop within %.0f s: killed", c.index, STOP_TIMEOUT_S)
                c.proc.kill()
                c.proc.wait()
        for s, handler in previous.items():
            signal.signal(s, handler)
        sock.close()
    return 0
