"""Ticks per second one worker drains at batch size 1 and 16: N sessions with one ready speech tick
each, a real :class:`~duplex_es.worker.runner.Worker` (claims, heartbeat, one-transaction commits)
and an engine that costs nothing, so the figure is the queue's and the log's share of a step —
what batching saves a GPU plugin per tick. SQLite (a file in a temporary folder,
``synchronous=FULL``) and PostgreSQL (a fresh schema of ``DUPLEX_ES_TEST_PG_URL`` or the local
server), B = 1 and B = 16 alternated, twice each.

    .venv/bin/python scripts/batched_drain.py [N]       # N sessions (default 512)

Prints one line per run: backend, B, ticks/s and the batch sizes the worker stepped.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import sys
import tempfile
import time
from typing import Iterator

import sqlalchemy as sa

from duplex_es.events import SessionConfig, SessionOpened, TickIssued
from duplex_es.store import Database, EventLog, upgrade
from duplex_es.worker.engine import EngineOutput, TickContext
from duplex_es.worker.runner import Worker

PG = os.environ.get("DUPLEX_ES_TEST_PG_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/test")


class Free:
    """One text chunk per tick, ending the response: no model time at all."""

    name = "free"
    kinds = ("speech",)

    def step(self, ctx: TickContext) -> EngineOutput:
        return EngineOutput(echo=ctx.identity, text_delta="x", final=True)


@contextlib.contextmanager
def pg_schema() -> Iterator[str]:
    schema = f"dxes_drain_{secrets.token_hex(4)}"
    admin = sa.create_engine(PG, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.exec_driver_sql(f'CREATE SCHEMA "{schema}"')
    try:
        yield f"{PG}{'&' if '?' in PG else '?'}options=-csearch_path%3D{schema}"
    finally:
        with admin.connect() as conn:
            conn.exec_driver_sql(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
        admin.dispose()


def drain(url: str, sessions: int, batch: int) -> tuple[float, dict[int, int]]:
    db = Database(url)
    upgrade(db)
    log = EventLog(db)
    tag = secrets.token_hex(3)
    for i in range(sessions):
        sid = f"drain_{tag}_{i}"
        tick = TickIssued(request_id=f"req_{tag}_{i}", response_id=f"resp_{tag}_{i}", epoch=0, chunk_index=0)
        log.append(sid, [SessionOpened(session_id=sid, config=SessionConfig(model="m")), tick], expected_seq=0)
    worker = Worker(log, [Free()], batch_size=batch)
    started = time.perf_counter()
    while worker.run_once():
        pass
    rate = sessions / (time.perf_counter() - started)
    worker.wakeup.close()
    db.dispose()
    return rate, dict(worker.stats.sizes)


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 512
    with tempfile.TemporaryDirectory() as folder:
        for name, place in (("sqlite", contextlib.nullcontext(f"sqlite:///{folder}/drain.db")), ("postgresql", pg_schema())):
            with place as url:
                for batch in (1, 16, 1, 16):
                    rate, sizes = drain(url, n, batch)
                    print(f"{name:10} B={batch:<2} {rate:7.0f} ticks/s  (batches stepped: {sizes})")


if __name__ == "__main__":
    main()
