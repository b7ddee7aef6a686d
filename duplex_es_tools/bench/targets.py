"""Issue 6 §3's table (with row 14 from issue 12, row 15 from issue 14, and row 13 and the new
targets of rows 1, 4, 5 and 10 from issue 16): what each row measures, on which backends, and its target (a goal on
a 2-core machine, reported as met or short, never asserted).

Row 13, the bare transport ceiling, has no backend (nothing is logged): it is measured once per
run, listed with backend :data:`NO_BACKEND`, and row 10 of each backend is compared with it.
"""

from __future__ import annotations

__all__ = ["MEASUREMENTS", "BACKENDS", "NO_BACKEND", "target", "ALL_ROWS", "OUR_ROWS", "SERVING_ROWS"]

#: The ``backend`` of a row that has none (row 13).
NO_BACKEND = "none"

#: What each row measures.
MEASUREMENTS: dict[int, str] = {
    1: "durable append, one event per command (one client)",
    2: "durable append, one event per command, one client",
    3: "4 concurrent writers, one event per command, commit-ordered positions",
    4: "batched append, 100 events per transaction",
    5: "full rebuild through decode + reducer",
    6: "load of a session (snapshot + tail) at 10k / 100k / 1M events",
    7: "tick claim latency",
    8: "wake-up: commit of a tick → idle worker claiming it",
    9: "worker output commit → the client's WebSocket frame",
    10: "realtime load: concurrent speech sessions, 20 ms PCM16 chunks at real time, one server",
    11: "cost of durability: row 10 against an in-memory log",
    12: "append latency as the log grows",
    13: (
        "bare transport ceiling: row 10's ramp against the same Starlette + uvicorn WebSocket stack with no session logic "
        "(a peer that parses each append, decodes its base64 and acknowledges it)"
    ),
    14: "steady light load: 10 real-time speech sessions for 60 s, append → ack latency, one server",
    15: (
        "full-duplex sessions one worker process holds in real time (reference engine, 20 ms appends of a spoken "
        "question at real time; held: append → input_audio_buffer.processed p99 ≤ 1 s and every question answered)"
    ),
}

#: The backends each row is measured on.
BACKENDS: dict[int, tuple[str, ...]] = {
    1: ("sqlite",),
    2: ("postgresql",),
    3: ("postgresql",),
    **{r: ("sqlite", "postgresql") for r in (4, 5, 6, 7, 8, 9, 10, 11, 12, 14)},
    13: (NO_BACKEND,),
    15: ("sqlite",),
}

_TARGETS: dict[tuple[int, str], str] = {
    (1, "sqlite"): "≥ 2,500 ev/s, p99 ≤ 2 ms; ≥ 1.5× eventsourcing (issue 16)",
    (2, "postgresql"): "≥ 800 ev/s, p99 ≤ 4 ms; ≥ 1.45× eventsourcing",
    (3, "postgresql"): "≥ 2,000 ev/s, positions in commit order",
    (4, "sqlite"): "≥ 80,000 ev/s; ≥ 0.8× the raw driver loop (issue 16)",
    (4, "postgresql"): "≥ 20,000 ev/s; ≥ 0.8× the raw driver loop (issue 16)",
    (5, "sqlite"): "≥ 150,000 ev/s; ≥ 0.5× raw select + json.loads + trivial fold (issue 16)",
    (5, "postgresql"): "≥ 150,000 ev/s; ≥ 0.5× raw select + json.loads + trivial fold (issue 16)",
    (6, "sqlite"): "p99 ≤ 5 ms at 1M events, flat in history length (≤ 1.5× the p99 at 10k)",
    (6, "postgresql"): "p99 ≤ 5 ms at 1M events, flat in history length (≤ 1.5× the p99 at 10k)",
    (7, "sqlite"): "p50 ≤ 100 µs, p99 ≤ 1 ms",
    (7, "postgresql"): "p50 ≤ 1 ms, p99 ≤ 3 ms",
    (8, "sqlite"): "p99 ≤ 20 ms (polling)",
    (8, "postgresql"): "p99 ≤ 2 ms (LISTEN/NOTIFY)",
    (9, "sqlite"): "p99 ≤ 20 ms",
    (9, "postgresql"): "p99 ≤ 10 ms",
    (10, "sqlite"): "≥ 150 sessions with append → logged → acknowledged p99 ≤ 50 ms, and ≥ 0.5× the bare transport ceiling (row 13) of the same run",
    (10, "postgresql"): "≥ 100 sessions with append → logged → acknowledged p99 ≤ 50 ms",
    (11, "sqlite"): "report the ratio; aim for ≥ 0.8",
    (11, "postgresql"): "report the ratio; aim for ≥ 0.8",
    (12, "sqlite"): "p50 at 10M events ≤ 1.5× p50 at 10k events",
    (12, "postgresql"): "p50 at 10M events ≤ 1.5× p50 at 10k events",
    (13, NO_BACKEND): "report beside row 10 (issue 16: row 10 on SQLite ≥ 0.5× this ceiling)",
    (14, "sqlite"): "p99 < 20 ms (issue 12: no global stalls)",
    (14, "postgresql"): "report (issue 12 sets no target on PostgreSQL)",
    (15, "sqlite"): "report B = 1 and B = 16 beside the turn-based path; aim for ≥ 8 sessions with B = 16",
}

#: Every row of the table.
ALL_ROWS = tuple(range(1, 16))
#: The rows this package measures itself.
OUR_ROWS = (1, 2, 3, 4, 5, 6, 7, 8, 12)
#: The rows :mod:`duplex_es_tools.bench.serving` measures.
SERVING_ROWS = (9, 10, 11, 13, 14, 15)


def target(row: int, backend: str) -> str:
    """The issue's target for ``row`` on ``backend``."""
    return _TARGETS.get((row, backend), "")
