"""The ``duplex-es`` subcommands of the tooling: ``demo``, ``chaos``, ``bench`` and ``loadgen``.

``pyproject.toml`` names each :class:`~duplex_es.cli.discovery.ToolCommand` below in the
entry-point group ``duplex_es.commands``, where the CLI finds it. Every ``duplex-es`` invocation
(``serve`` and ``worker`` included) loads this module to build its parser, so it imports nothing
heavy: each command imports its implementation when it runs. ``requires`` lists the modules of
the extra ``tools`` a command needs, so that without them it stops at once with what to install.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from duplex_es.cli.arguments import CliError, non_negative_int, port, positive_float, positive_int
from duplex_es.cli.discovery import ToolCommand
from duplex_es_tools.bench.command import add_bench_arguments, bench_command

__all__ = ["DEMO", "CHAOS", "BENCH", "LOADGEN"]


def _demo_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--audio", default=None, help="a mono PCM16 WAV to send (default: the shared weather question)")
    p.add_argument("--out", default="demo-output", help="folder for the database, logs and reply WAV")
    p.add_argument("--port", type=port, default=0, help="server port (default: a free one)")
    p.add_argument("--chunk-ms", type=positive_int, default=500)


def _demo(args: argparse.Namespace, console: Any) -> int:
    from duplex_es_tools.demo import run_demo

    return run_demo(console, db_url=args.db, audio=args.audio, out_dir=args.out, port=args.port, chunk_ms=args.chunk_ms)


def _chaos_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--speech", type=non_negative_int, default=4, help="speech sessions (official openai SDK, fixture audio)")
    p.add_argument("--world", type=non_negative_int, default=2, help="world sessions")
    p.add_argument("--kills", type=non_negative_int, default=12, help="SIGKILLs of the server or a worker")
    p.add_argument("--window-s", type=positive_float, default=40.0, help="the kills fall at random instants within this many seconds")
    p.add_argument("--turns", type=positive_int, default=2, help="spoken questions per speech session")
    p.add_argument("--seed", type=int, default=1, help="seed of the kill schedule")
    p.add_argument("--timeout-s", type=positive_float, default=600.0, help="a client that has not finished its script by then is a violation (default 600)")
    p.add_argument("--out", default="chaos-output", help="folder for the database, process logs and chaos-results.json")


def _chaos(args: argparse.Namespace, console: Any) -> int:
    if args.speech + args.world == 0:
        raise CliError("chaos needs at least one session (--speech or --world): with none it would check nothing")
    from duplex_es_tools.chaos import run_chaos

    report = run_chaos(
        console,
        db_url=args.db,
        out_dir=args.out,
        speech_sessions=args.speech,
        world_sessions=args.world,
        kills=args.kills,
        seed=args.seed,
        window_s=args.window_s,
        turns=args.turns,
        timeout_s=args.timeout_s,
    )
    return 0 if report.ok else 1


def _loadgen_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--url", default="ws://127.0.0.1:8000/v1/realtime", help="the server's realtime endpoint (loopback only)")
    p.add_argument("--sessions", type=positive_int, default=25, help="concurrent sessions of a single run (default 25)")
    p.add_argument("--ramp", action="store_true", help="find the largest session count whose append → ack p99 holds the target")
    p.add_argument("--steps", default="1,2,5,10,25,50,100,150,200,250,300,400,500", help="session counts a ramp tries, in order")
    p.add_argument("--duration-s", type=float, default=10.0, help="measured seconds per run (after the warm-up)")
    p.add_argument("--warmup-s", type=float, default=1.0, help="seconds of load before measuring")
    p.add_argument("--chunk-ms", type=positive_int, default=20, help="audio per append (ms of PCM16 24 kHz)")
    p.add_argument("--audio", default=None, help="a mono PCM16 WAV to loop (default: the shared weather question)")
    p.add_argument("--target-p99-ms", type=float, default=50.0, help="the append → ack p99 a run must hold (ms)")
    p.add_argument("--time-budget-s", type=float, default=300.0, help="a ramp stops before exceeding this many seconds")
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")


def _loadgen(args: argparse.Namespace, console: Any) -> int:
    from duplex_es_tools.loadgen import LoadgenError
    from duplex_es_tools.loadgen_command import parse_steps, run_loadgen

    try:
        return run_loadgen(
            console, url=args.url, sessions=args.sessions, ramp=args.ramp, steps=parse_steps(args.steps), duration_s=args.duration_s,
            warmup_s=args.warmup_s, chunk_ms=args.chunk_ms, audio=Path(args.audio) if args.audio else None,
            target_p99_ms=args.target_p99_ms, time_budget_s=args.time_budget_s, as_json=args.json,
        )
    except LoadgenError as exc:
        raise CliError(str(exc)) from exc


#: ``duplex-es demo``: the spoken question through the ``openai`` SDK, and a steered world session.
DEMO = ToolCommand(
    help="speak the fixture question through serve + worker and show replay and audit",
    add_arguments=_demo_arguments,
    run=_demo,
    requires=("openai",),
)

#: ``duplex-es chaos``: scripted SDK and world sessions while processes are SIGKILLed.
CHAOS = ToolCommand(
    help="scripted sessions while servers and workers are SIGKILLed; check the log (exit 1 on a violation)",
    add_arguments=_chaos_arguments,
    run=_chaos,
    requires=("openai",),
)

#: ``duplex-es bench``: against ``eventsourcing`` (the peer), HDR histograms (``hdrh``), and a
#: spoken turn through the ``openai`` SDK among the extra figures.
BENCH = ToolCommand(
    help="benchmark the log against eventsourcing and raw drivers on SQLite and PostgreSQL",
    add_arguments=add_bench_arguments,
    run=bench_command,
    requires=("eventsourcing", "hdrh", "openai"),
)

#: ``duplex-es loadgen``: needs only the runtime's own dependencies (websockets, numpy).
LOADGEN = ToolCommand(
    help="drive a running server with concurrent realtime speech sessions; print append → ack latency",
    add_arguments=_loadgen_arguments,
    run=_loadgen,
)
