"""The shared backend: PostgreSQL through psycopg 3, for many servers and workers (docs/scaling.md).

* Appends take a transaction-level advisory lock (:data:`APPEND_LOCK_KEY`) before anything else,
  which makes commit order equal position order for the global log: a reader tailing by
  position never skips an event that commits late (docs/architecture.md, I8). Other writes
  (claims, ownership, snapshots) use row locks only.
* An append share-locks the ``session_owners`` rows it checks (``FOR SHARE``), so a concurrent
  move of the session waits for it; a claim commit locks its ``ticks`` row (``FOR UPDATE``).
* Workers claim a batch of ticks with one autocommit ``UPDATE … FOR UPDATE SKIP LOCKED …
  RETURNING``: concurrent workers never wait on, or take, each other's ticks (docs/sources.md, "PostgreSQL: SKIP LOCKED").
* Wake-ups are ``LISTEN``/``NOTIFY``: statement-level triggers (migration 0003) notify at commit.
"""

from __future__ import annotations

from typing import Any, Sequence

import psycopg
import sqlalchemy as sa
from sqlalchemy.dialects import postgresql as pg_dialect
from sqlalchemy.engine import Engine

from duplex_es.store.backend import Backend, ClaimedRow, EngineOptions, Transactions, driver_connection

__all__ = ["APPEND_LOCK_KEY", "PostgresBackend", "PostgresListener"]

#: The PostgreSQL advisory lock key that serializes appends (the ASCII of "dxes" as an int).
APPEND_LOCK_KEY = 0x64786573

#: URL prefixes without a driver, and what they become: the psycopg 3 driver.
_DRIVERLESS = ("postgresql://", "postgres://")


class PostgresBackend(Backend):
    """PostgreSQL servers (``postgresql://``, ``postgres://`` or ``postgresql+psycopg://`` URLs)."""

    name = "postgresql"
    driver_errors = (psycopg.Error,)
    # The lock rides in the same round trip as BEGIN (one simple query).
    append_begin = f"BEGIN; SELECT pg_advisory_xact_lock({APPEND_LOCK_KEY})"
    write_begin = "BEGIN"
    read_begin = "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY"
    share_lock = " FOR SHARE"
    # A commit waits on the network and on the other servers' append lock: never on the loop.
    group_commit_inline = False
    listens = True

    @classmethod
    def normalize_url(cls, url: str) -> str:
        for prefix in _DRIVERLESS:
            if url.startswith(prefix):
                return "postgresql+psycopg://" + url[len(prefix) :]
        return url

    def create_engine(self, url: str, options: EngineOptions) -> Engine:
        """A plain autocommit engine. Of ``options`` only ``write_timeout_ms`` applies: each
        write transaction then sets ``lock_timeout`` and ``statement_timeout`` (``SET LOCAL``,
        in the same round trip as its ``BEGIN``), so a writer stuck on a lock or a slow
        statement gives up after that long and releases the append lock, instead of stalling
        the appends of every session of every server behind it.

        No pre-ping: it costs a round trip per transaction; a connection found broken is
        invalidated when its transaction fails, and the caller's retry gets a fresh one."""
        if options.write_timeout_ms is not None:
            bound = f"SET LOCAL lock_timeout = {int(options.write_timeout_ms)}; SET LOCAL statement_timeout = {int(options.write_timeout_ms)}"
            self.append_begin = f"BEGIN; {bound}; SELECT pg_advisory_xact_lock({APPEND_LOCK_KEY})"
            self.write_begin = f"BEGIN; {bound}"
        return sa.create_engine(url, isolation_level="AUTOCOMMIT")

    def is_busy(self, exc: BaseException) -> bool:
        """A lock not granted within ``lock_timeout`` (SQLSTATE 55P03) or a statement cancelled
        by ``statement_timeout`` (57014)."""
        if isinstance(exc, sa.exc.DBAPIError):
            exc = exc.orig  # type: ignore[assignment]
        return isinstance(exc, (psycopg.errors.LockNotAvailable, psycopg.errors.QueryCanceled)) or super().is_busy(exc)

    def in_transaction(self, raw: Any) -> bool:
        return raw.info.transaction_status != psycopg.pq.TransactionStatus.IDLE

    def sql(self, text: str) -> str:
        return text.replace("?", "%s")

    def executemany(self, raw: Any, sql: str, rows: Sequence[tuple]) -> None:
        with raw.cursor() as cur:
            cur.executemany(sql, rows)

    def lock_rows(self, query: sa.Select) -> sa.Select:
        return query.with_for_update()

    def insert_or_nothing(self, table: sa.Table, index_elements: Sequence[str], **values: Any) -> Any:
        return pg_dialect.insert(table).values(**values).on_conflict_do_nothing(index_elements=list(index_elements))

    def claim_ticks(
        self,
        db: Transactions,
        *,
        kinds: Sequence[str],
        now_us: int,
        token: str,
        worker_id: str,
        until_us: int,
        limit: int,
        exclude_sessions: Sequence[str] = (),
    ) -> list[ClaimedRow]:
        """One autocommit round trip picks, claims and reads the ticks, by the rule of
        :func:`~duplex_es.store.backend.pick_ticks`, in steps the planner cannot turn quadratic (with a fresh or
        stale table it chose nested loops over the claimable rows, hundreds of ms for a
        thousand waiting sessions): each session's oldest claimable tick (``DISTINCT ON``,
        one sort of the rows the status index finds), the oldest ``limit`` of those, then
        those rows locked by primary key with ``FOR UPDATE SKIP LOCKED``, so concurrent
        workers never wait on, or take, each other's. A row another claim changed meanwhile is
        re-checked before it is locked (PostgreSQL re-evaluates the conditions on its newest
        version), so a tick just claimed elsewhere is not taken, and its session's next tick is
        not either (it was not its session's first). ``MATERIALIZED`` runs each step once."""
        marks = ", ".join(["%s"] * len(kinds))
        claimable = "({a}.status = 'pending' OR ({a}.status = 'claimed' AND {a}.claimed_until_us < %s)) AND {a}.kind IN (" + marks + ")"
        excluded = f" AND o.session_id NOT IN ({', '.join(['%s'] * len(exclude_sessions))})" if exclude_sessions else ""
        sql = f"""WITH firsts AS MATERIALIZED (
                      SELECT DISTINCT ON (o.session_id) o.request_id, o.position, o.session_id FROM ticks AS o
                      WHERE {claimable.format(a="o")}
                      ORDER BY o.session_id, o.position),
                  chosen AS MATERIALIZED (
                      SELECT request_id FROM firsts AS o WHERE TRUE{excluded} ORDER BY position LIMIT %s),
                  picked AS MATERIALIZED (
                      SELECT t.request_id FROM ticks AS t
                      WHERE t.request_id = ANY(ARRAY(SELECT request_id FROM chosen)) AND {claimable.format(a="t")}
                      FOR UPDATE OF t SKIP LOCKED)
                  UPDATE ticks SET status = 'claimed', claim_token = %s, claimed_by = %s, claimed_until_us = %s,
                      attempts = ticks.attempts + 1
                  FROM events
                  WHERE ticks.request_id = ANY(ARRAY(SELECT request_id FROM picked))
                    AND events.session_id = ticks.session_id AND events.seq = ticks.seq
                  RETURNING ticks.position, ticks.request_id, ticks.session_id, ticks.seq, ticks.kind, ticks.attempts,
                            events.type, events.version, events.data, events.payload, events.sealed"""
        params = (now_us, *kinds, *exclude_sessions, limit, now_us, *kinds, token, worker_id, until_us)
        with db.engine.connect() as conn:
            rows = driver_connection(conn).execute(sql, params).fetchall()
        return [tuple(r[1:]) for r in sorted(rows)]  # type: ignore[misc]

    def open_listener(self, url: str, channel: str) -> "PostgresListener":
        return PostgresListener(url, channel)


class PostgresListener:
    """``LISTEN channel`` on a dedicated autocommit psycopg connection (a :class:`Listener`).

    Raises:
        psycopg.Error: the server cannot be reached (from the constructor).
    """

    def __init__(self, url: str, channel: str) -> None:
        libpq = sa.engine.make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)
        self._conn = psycopg.connect(libpq, autocommit=True)
        self._conn.execute(f'LISTEN "{channel}"')

    def wait(self, timeout_s: float) -> bool:
        got = False
        for _ in self._conn.notifies(timeout=timeout_s, stop_after=1):
            got = True
        if got:  # drain what else is queued, so the next wait does not return at once
            for _ in self._conn.notifies(timeout=0):
                pass
        return got

    def close(self) -> None:
        self._conn.close()
