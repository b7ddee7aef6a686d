"""``duplex-es loadgen``: drive a running server with concurrent realtime speech sessions and
print append → acknowledged latency (see :mod:`duplex_es_tools.loadgen`)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional, Sequence

from rich.console import Console
from rich.table import Table

from duplex_es_tools.loadgen import DEFAULT_RAMP, RunResult, load_pcm, run, run_load, run_ramp

__all__ = ["run_loadgen", "parse_steps"]


def parse_steps(text: str) -> tuple[int, ...]:
    """``"25,50,100"`` → ``(25, 50, 100)``.

    Raises:
        ValueError: not a comma-separated list of positive integers.
    """
    try:
        steps = tuple(int(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise ValueError(f"--steps must be comma-separated positive integers, got {text!r}") from None
    if not steps or min(steps) < 1:
        raise ValueError(f"--steps must be comma-separated positive integers, got {text!r}")
    return steps


def _table(results: Sequence[RunResult], title: str) -> Table:
    table = Table(title=title)
    for col in ("sessions", "appends/s", "appends", "acked", "missing", "late", "errors", "p50 ms", "p95 ms", "p99 ms", "max ms", "client lag p99 ms", "held"):
        table.add_column(col, justify="right")
    for r in results:
        table.add_row(
            str(r.sessions), f"{r.appends_per_s:.0f}", str(r.appends), str(r.acked), str(r.missing), str(r.late), str(r.errors),
            str(r.p50_ms), str(r.p95_ms), str(r.p99_ms), str(r.max_ms), str(r.send_lag_p99_ms), "yes" if r.held else "no",
        )
    return table


def run_loadgen(
    console: Console,
    *,
    url: str,
    sessions: Optional[int],
    ramp: bool,
    steps: Sequence[int] = DEFAULT_RAMP,
    duration_s: float,
    warmup_s: float,
    chunk_ms: int,
    audio: Optional[Path],
    target_p99_ms: float,
    time_budget_s: float,
    as_json: bool,
) -> int:
    """Run one load (``sessions``) or a ramp; print a table (or JSON). Exit status 0 when the
    run (or the ramp's first step) held the target, else 1."""
    pcm = load_pcm(audio)
    common = dict(duration_s=duration_s, warmup_s=warmup_s, chunk_ms=chunk_ms, pcm=pcm, target_p99_ms=target_p99_ms)
    note = f"{chunk_ms} ms PCM16 24 kHz appends at real time, turn_detection null, acknowledge_appends on; target p99 ≤ {target_p99_ms:g} ms"
    if ramp:
        def show(r: RunResult) -> None:
            if not as_json:
                console.print(f"{r.sessions} sessions: p99 {r.p99_ms} ms, {r.errors} errors, {r.missing} missing → {'held' if r.held else 'missed'}", highlight=False)

        result = run(run_ramp(url, steps=steps, time_budget_s=time_budget_s, on_trial=show, **common))
        if as_json:
            print(json.dumps(result.as_dict(), indent=2))
        else:
            console.print(_table(result.trials, f"ramp against {url}"))
            console.print(f"{note}\nlargest session count that held: [bold]{result.best}[/] ({result.stopped})", highlight=False)
        return 0 if result.best is not None else 1
    one = run(run_load(url, sessions or 25, **common))
    if as_json:
        print(json.dumps(one.as_dict(), indent=2))
    else:
        console.print(_table([one], f"load against {url}"))
        console.print(note, highlight=False)
    return 0 if one.held else 1
