"""The append path under load: one ``duplex-es serve`` on a new SQLite file (WAL,
``synchronous=FULL``), ``duplex-es loadgen`` with N real-time speech sessions (20 ms PCM16
appends, ``acknowledge_appends`` on, no VAD), and the server's CPU per append; optionally a
``py-spy`` profile of the server while the load runs.

    .venv/bin/python scripts/append_load.py 20                   # sessions
    .venv/bin/python scripts/append_load.py 20 --profile /tmp/append.txt   # + py-spy raw stacks
    .venv/bin/python scripts/append_load.py 40 --workers 2       # serve --workers 2 (CPU: its children's)
    PYTHONPATH=/path/to/another/checkout .venv/bin/python scripts/append_load.py 20   # to compare

Prints the load generator's append → ack percentiles (ms), appends acknowledged, and the
server process's CPU time (user + system, from /proc) per 1000 appends (ms): the figure that
does not depend on what else the machine runs. (py-spy: ``pip install py-spy``.)
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from duplex_es_tools.processes import free_port, start_server, wait_healthy


def _cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _server_cpu_s(pid: int) -> float:
    """CPU of ``pid`` and its children (the processes of ``serve --workers``)."""
    try:
        kids = [int(p) for p in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except FileNotFoundError:
        kids = []
    return _cpu_s(pid) + sum(_cpu_s(k) for k in kids)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("sessions", type=int)
    ap.add_argument("--duration-s", type=float, default=20.0)
    ap.add_argument("--profile", help="write py-spy raw stacks of the server here")
    ap.add_argument("--workers", type=int, default=1, help="serve --workers N")
    ap.add_argument("--db", help="this database instead of a new SQLite file (e.g. a fresh PostgreSQL schema)")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        url = args.db or f"sqlite:///{tmp}/log.db"
        port = free_port()
        server = start_server(url, port, Path(tmp) / "serve.log", ["--workers", str(args.workers)] if args.workers > 1 else [])
        try:
            wait_healthy(port, server)
            spy = None
            if args.profile:
                spy = subprocess.Popen(
                    [str(Path(sys.executable).with_name("py-spy")), "record", "-r", "200", "--nonblocking", "--gil", "-f", "raw", "-p", str(server.pid), "-o", args.profile],
                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                )
            time.sleep(2 if args.workers > 1 else 0)  # /healthz answered by one child: let the others start too
            cpu0 = _server_cpu_s(server.pid)
            out = subprocess.run(
                [sys.executable, "-m", "duplex_es.cli.main", "loadgen", "--url", f"ws://127.0.0.1:{port}/v1/realtime",
                 "--sessions", str(args.sessions), "--duration-s", str(args.duration_s), "--warmup-s", "3", "--json"],
                capture_output=True, text=True,  # exit 1: the run did not hold its p99 target (still measured)
            )
            cpu = _server_cpu_s(server.pid) - cpu0
            if spy is not None:
                spy.send_signal(2)
                spy.wait(30)
        finally:
            server.stop()
    run = json.loads(out.stdout)
    print(json.dumps({
        "sessions": args.sessions,
        "acked": run["acked"],
        "p50_ms": run["p50_ms"], "p99_ms": run["p99_ms"], "send_lag_p99_ms": run["send_lag_p99_ms"],
        # The warm-up's appends are served too: CPU over everything the server was sent.
        "server_cpu_ms_per_1000_appends": round(cpu * 1e6 / (run["appends"] * (args.duration_s + 3) / args.duration_s), 1),
    }))

if __name__ == "__main__":
    main()
