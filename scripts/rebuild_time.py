"""How long rebuilding one session from the log takes, and where: ``EventLog.read_raw`` (the
select), decoding those rows (JSON and structuring, as ``read_session`` does), ``fold``, and
``read_session`` + ``fold`` together (what a rebuild costs). docs/performance.md, "Read path".

    .venv/bin/python scripts/inspect_long_session.py sqlite:////tmp/long.db 60
    .venv/bin/python scripts/rebuild_time.py sqlite:////tmp/long.db [SESSION] [REPEATS]
    .venv/bin/py-spy record -r 500 -f speedscope -o rebuild.json -- .venv/bin/python scripts/rebuild_time.py sqlite:////tmp/long.db

SESSION defaults to the log's first session; prints the best of REPEATS (default 3) runs of each
part in events per second.
"""

from __future__ import annotations

import sys
import time
from typing import Callable

from duplex_es.domain import fold
from duplex_es.events import decode
from duplex_es.store import Database, EventLog


def best(label: str, n: int, repeats: int, fn: Callable[[], object]) -> None:
    """Run ``fn`` ``repeats`` times; print its best time and ``n`` / that time."""
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    t = min(times)
    print(f"{label:<34} {t * 1000:8.0f} ms  {n / t:10,.0f} ev/s")


def main(url: str, session_id: str | None, repeats: int) -> None:
    db = Database(url, create=False)
    log = EventLog(db)
    sid = session_id or log.session_ids()[0]
    raws = log.read_raw(sid)
    records = log.read_session(sid)
    n = len(records)
    print(f"session {sid}: {n:,} events, {sum(len(r.data) for r in raws) / 1e6:.1f} MB of JSON")
    best("read_raw (select, no decode)", n, repeats, lambda: log.read_raw(sid))
    best("decode (JSON + structure)", n, repeats, lambda: [decode(r.type, r.version, r.data) for r in raws])
    best("read_session (select + decode)", n, repeats, lambda: log.read_session(sid))
    best("fold", n, repeats, lambda: fold((r.seq, r.event) for r in records))
    best("rebuild (read_session + fold)", n, repeats, lambda: fold((r.seq, r.event) for r in log.read_session(sid)))
    db.dispose()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else None, int(sys.argv[3]) if len(sys.argv) > 3 else 3)
