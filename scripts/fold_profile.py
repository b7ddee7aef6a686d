"""Where ``fold`` (the reducer) spends its time: cProfile of one fold of a session's events,
decoded beforehand, so the profile holds the reducer alone. docs/performance.md, "The fold".

    .venv/bin/python scripts/fold_profile.py row5 [TOP]
    .venv/bin/python scripts/fold_profile.py sqlite:////tmp/long.db [TOP]

``row5`` folds the 50,000 events of the bench's row 5 (``history_event``: text appends, a
heartbeat, a clear), built in memory; a database URL folds the log's first session (for a
speech session, ``scripts/inspect_long_session.py`` writes one). Prints the ``TOP`` (default
15) entries by own time, after a warm-up fold. cProfile's own overhead inflates every entry:
compare entries with each other, and time with ``scripts/rebuild_time.py``.
"""

from __future__ import annotations

import cProfile
import pstats
import sys

from duplex_es.domain import fold
from duplex_es.events import Event


def events_of(source: str) -> list[tuple[int, Event]]:
    """The ``(seq, event)`` pairs to fold: the bench's row-5 session or a log's first session."""
    if source == "row5":
        from duplex_es_tools.bench.workload import history_event

        return [(s, history_event("bench-rebuild", s)) for s in range(1, 50_001)]
    from duplex_es.store import Database, EventLog

    db = Database(source, create=False)
    try:
        log = EventLog(db)
        return [(r.seq, r.event) for r in log.read_session(log.session_ids()[0])]
    finally:
        db.dispose()


def main(source: str, top: int) -> None:
    events = events_of(source)
    fold(events)  # warm-up: compiled copiers, caches
    profile = cProfile.Profile()
    profile.runcall(fold, events)
    print(f"{len(events):,} events folded")
    pstats.Stats(profile).sort_stats("tottime").print_stats(top)


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 15)
