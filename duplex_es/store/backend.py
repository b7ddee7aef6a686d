"""The storage backend interface: every decision that differs between databases, in one place.

The log's code — :mod:`~duplex_es.store.database` (transactions), :mod:`~duplex_es.store.appendsql`
and :mod:`~duplex_es.store.log` (appends, reads, the tail), :mod:`~duplex_es.store.ticks`
(claims), :mod:`~duplex_es.store.ownership`, :mod:`~duplex_es.store.notify` (wake-ups) and
:mod:`~duplex_es.store.writer` (group commit) — is written once, against :class:`Backend`. What a
particular database needs lives in one module per backend (:mod:`duplex_es.store.sqlite`,
:mod:`duplex_es.store.postgres`), chosen from the URL by :mod:`duplex_es.store.registry`.

A backend must give the guarantees the rest of the engine relies on (docs/architecture.md,
"Storage backends"); ``tests/store_conformance.py`` states each as a test, and every registered
backend runs them all.

* **Global order (I8).** A transaction opened with :attr:`Backend.append_begin` holds a lock
  that serialises every appender (all processes), so positions are drawn in commit order and a
  reader tailing by position never skips an event that commits late.
* **Snapshot reads.** :attr:`Backend.read_begin` opens a transaction in which everything read
  comes from one consistent snapshot.
* **Fences hold to the commit.** Rows an append reads to check a fence or a claim stay as read
  until it commits (:attr:`Backend.share_lock`, :meth:`Backend.lock_rows`).
* **A claim is taken once.** :meth:`Backend.claim_ticks` hands a tick to one worker at a time,
  and never two ticks of one session in one claim.
* **Wake-ups are hints.** A :class:`Listener` may miss a notification; callers re-read after
  every wait, so a backend without notifications only polls.
"""

from __future__ import annotations

import abc
import contextlib
from typing import Any, ClassVar, ContextManager, Mapping, Optional, Protocol, Sequence

import attrs
import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine

from duplex_es.errors import LogError

__all__ = [
    "Backend",
    "ClaimedRow",
    "DatabaseNotFound",
    "WriteLockBusy",
    "EngineOptions",
    "Listener",
    "Transactions",
    "driver_connection",
    "pick_ticks",
]

#: What :meth:`Backend.claim_ticks` returns for each tick it claimed: ``(request_id, session_id,
#: seq, kind, attempts, type, version, data, payload, sealed)`` — the ``ticks`` row after the
#: claim and the stored ``tick.issued`` event it mirrors (``type`` to ``sealed`` as in
#: ``events``: a tick request's payload is its sealed content, if any; docs/privacy.md).
ClaimedRow = tuple[str, str, int, str, int, str, int, str, Optional[bytes], Optional[int]]


class DatabaseNotFound(LogError, FileNotFoundError):
    """A database file (or its folder) that should exist does not (embedded backends)."""


class WriteLockBusy(LogError):
    """A write transaction that must not wait (:meth:`Backend.begin_nowait`) found the write
    lock taken — by another thread of this process or by another process. Nothing was written;
    the caller may try again later."""


def driver_connection(conn: Connection) -> Any:
    """The driver's own connection (``sqlite3.Connection``, ``psycopg.Connection``, ...) under
    a SQLAlchemy connection, for the few fixed statements of the append path."""
    return conn.connection.dbapi_connection


def _claimable(alias: str, marks: str) -> str:
    return f"({alias}.status = 'pending' OR ({alias}.status = 'claimed' AND {alias}.claimed_until_us < ?)) AND {alias}.kind IN ({marks})"


def pick_ticks(now_us: int, kinds: Sequence[str], limit: int, exclude_sessions: Sequence[str] = ()) -> tuple[str, tuple]:
    """The ``SELECT request_id`` of the ticks one claim takes, with its parameters (``?``
    placeholders). Backends wrap it in their claim statement (:meth:`Backend.claim_ticks`),
    or state the same rule in a form their planner runs well.

    The rule: a tick is claimable when it is pending or its claim ran out (before ``now_us``)
    and it is of one of ``kinds``; only the oldest claimable tick of each session may be
    picked, so a claim of many ticks takes at most one per session (one session's backlog
    cannot fill a batch, and a session's ticks start in log order); sessions in
    ``exclude_sessions`` (those a worker's batch already holds a tick of) are left out; of
    what remains, the ``limit`` oldest by position. The picked rows' alias is ``t``.
    """
    marks = ", ".join("?" * len(kinds))
    if limit == 1 and not exclude_sessions:
        # The oldest claimable tick of all is its session's oldest: no grouping needed.
        sql = f"SELECT t.request_id FROM ticks AS t WHERE {_claimable('t', marks)} ORDER BY t.position LIMIT 1"
        return sql, (now_us, *kinds)
    excluded = f" AND t.session_id NOT IN ({', '.join('?' * len(exclude_sessions))})" if exclude_sessions else ""
    # Each session's oldest claimable tick, found by one grouped pass over the claimable rows
    # (which the status index finds) rather than a lookup per candidate: a correlated
    # ``NOT EXISTS`` made a claim quadratic in the ticks waiting.
    sql = f"""SELECT t.request_id FROM ticks AS t
                  WHERE {_claimable("t", marks)}{excluded}
                    AND t.position IN (SELECT MIN(o.position) FROM ticks AS o
                                       WHERE {_claimable("o", marks)} GROUP BY o.session_id)
                  ORDER BY t.position LIMIT {int(limit)}"""
    return sql, (now_us, *kinds, *exclude_sessions, now_us, *kinds)


@attrs.frozen
class EngineOptions:
    """What the caller of :class:`~duplex_es.store.Database` may tune; a backend ignores what
    does not apply to it.

    Attributes:
        synchronous: durability of a commit on an embedded database (SQLite's ``PRAGMA
            synchronous``; ``FULL``: an acknowledged append survives power loss).
        busy_timeout_ms: how long a writer waits for another process's write lock (ms).
        create: a missing embedded database file may be created; ``False`` for commands that
            only read.
        write_timeout_ms: if set, the longest a write transaction may wait for a lock or run
            one statement before it fails (ms): SQLite's busy timeout becomes at most this,
            PostgreSQL's writes run with ``lock_timeout`` and ``statement_timeout`` set to it.
            So a stuck writer holds up the others for a bounded time (docs/security.md, "No
            global stalls"). A server sets it; migrations, which may legitimately run long,
            use a database without it.
    """

    synchronous: str = "FULL"
    busy_timeout_ms: int = 30_000
    create: bool = True
    write_timeout_ms: Optional[int] = None


class Transactions(Protocol):
    """What :meth:`Backend.claim_ticks` needs of the database (:class:`~duplex_es.store.Database`
    provides it; named here so that backend modules do not import ``database``)."""

    engine: Engine

    def read(self) -> ContextManager[Connection]:
        """A read-only snapshot transaction."""

    def write(self) -> ContextManager[Connection]:
        """A write transaction that appends in global order."""


class Listener(Protocol):
    """One open subscription to a notification channel (:meth:`Backend.open_listener`)."""

    def wait(self, timeout_s: float) -> bool:
        """Block until a notification arrives (``True``) or ``timeout_s`` seconds pass
        (``False``); notifications queued since the last wait end it at once and are all
        consumed. Raises on a broken connection (the caller reconnects later)."""

    def close(self) -> None:
        """Release the connection."""


class Backend(abc.ABC):
    """One database's answers to every dialect-specific question of the log.

    A backend is instantiated once per :class:`~duplex_es.store.Database` (it may keep per-engine
    state, such as SQLite's in-process writer lock). Class attributes are the fixed choices;
    methods the ones that run SQL or build statements. SQL given to or returned by a backend is
    written with ``?`` placeholders (:meth:`sql` turns it into the driver's).

    To add a backend: subclass this in ``duplex_es/store/<name>.py``, add it to
    :data:`duplex_es.store.registry.BACKENDS`, and subclass ``StoreConformance`` in the tests.
    """

    #: The SQLAlchemy backend name of its URLs (``make_url(url).get_backend_name()``); the
    #: released migrations in ``migrations/versions`` branch on this same dialect name.
    name: ClassVar[str]

    #: What the driver raises for a statement run on :func:`driver_connection` (SQLAlchemy's own
    #: statements raise ``sqlalchemy.exc.DBAPIError`` instead).
    driver_errors: ClassVar[tuple[type[Exception], ...]]

    #: SQL that opens a write transaction that appends events: it must serialise all appenders
    #: (every process) until commit, so positions follow commit order (I8). Several statements
    #: may be joined with ``;`` when the driver runs them as one simple query. Migrations run
    #: inside such a transaction too (:func:`~duplex_es.store.migrate.upgrade`), so processes
    #: starting at once migrate one after the other.
    append_begin: ClassVar[str]

    #: SQL that opens a write transaction that appends no events (tick claims and extensions,
    #: ownership, snapshots), where row locks are enough if the database has them.
    write_begin: ClassVar[str]

    #: SQL that opens a read-only transaction reading one consistent snapshot.
    read_begin: ClassVar[str]

    #: Appended to the append path's ``SELECT`` of ``session_owners`` rows: a lock that keeps
    #: the rows as read until commit, so a concurrent move of the session waits for the append
    #: (empty where :attr:`append_begin` already excludes every other writer).
    share_lock: ClassVar[str] = ""

    #: Whether a server's :class:`~duplex_es.store.GroupCommitWriter` commits on its event loop
    #: (``inline``) rather than in its thread: right when a commit is a local sub-millisecond
    #: fsync; wrong when it waits on the network or on other servers' append lock.
    group_commit_inline: ClassVar[bool] = False

    #: Whether :meth:`open_listener` gives notifications; if not, wake-ups are timed polls.
    listens: ClassVar[bool] = False

    #: Keyword arguments for Alembic's ``context.configure`` in ``migrations/env.py``.
    migration_options: ClassVar[Mapping[str, Any]] = {}

    @classmethod
    def normalize_url(cls, url: str) -> str:
        """``url`` with this backend's default driver where the user named none (a URL of another
        backend is returned unchanged)."""
        return url

    @abc.abstractmethod
    def create_engine(self, url: str, options: EngineOptions) -> Engine:
        """The SQLAlchemy engine for ``url`` in ``AUTOCOMMIT`` mode (transactions are opened
        explicitly with :attr:`append_begin`, :attr:`write_begin` and :attr:`read_begin`), with
        the connect arguments and per-connection settings the backend needs.

        Raises:
            DatabaseNotFound: an embedded database file (or its folder) that must exist does not.
        """

    def write_guard(self) -> ContextManager[Any]:
        """Held around every write transaction of this database in this process, before the
        transaction begins (for databases with one file-level write lock, so that only one
        connection per process waits on it). None by default."""
        return contextlib.nullcontext()

    def start_maintenance(self, engine: Engine) -> Optional[Any]:
        """Start what a long-running server needs done beside its commits (SQLite: WAL
        checkpoints in a thread of their own); returns an object with ``close()``, or ``None``."""
        return None

    def write_guard_nowait(self) -> ContextManager[Any]:
        """:meth:`write_guard` taken without waiting.

        Raises:
            WriteLockBusy: another thread of this process holds it.
        """
        return self.write_guard()

    def begin_nowait(self, raw: Any, begin_sql: str) -> None:
        """Run ``begin_sql`` on the driver connection ``raw`` without waiting for the write lock
        (for a commit on an event loop, which must never block on a lock).

        Raises:
            WriteLockBusy: the lock is held elsewhere; no transaction is open.
        """
        raw.execute(begin_sql)

    def is_busy(self, exc: BaseException) -> bool:
        """Whether ``exc``, raised by a write, means the database was busy (a lock not granted
        in time, a statement cancelled by its timeout) rather than that the write itself was
        refused: the same write may succeed later, and the others of its batch need not be
        retried one by one."""
        return isinstance(exc, WriteLockBusy)

    @abc.abstractmethod
    def in_transaction(self, raw: Any) -> bool:
        """Whether the driver connection ``raw`` is inside a transaction (a migration run inside
        a write may have committed it already)."""

    @abc.abstractmethod
    def sql(self, text: str) -> str:
        """``text``, written with ``?`` placeholders, in the driver's paramstyle."""

    @abc.abstractmethod
    def executemany(self, raw: Any, sql: str, rows: Sequence[tuple]) -> None:
        """Run the driver-ready ``sql`` once per row on the driver connection ``raw``."""

    def lock_rows(self, query: sa.Select) -> sa.Select:
        """``query`` made to lock the rows it reads until commit (``FOR UPDATE``), where
        :attr:`write_begin` does not already exclude other writers. Unchanged by default."""
        return query

    @abc.abstractmethod
    def insert_or_nothing(self, table: sa.Table, index_elements: Sequence[str], **values: Any) -> Any:
        """An ``INSERT`` of ``values`` into ``table`` that does nothing when a row with the same
        ``index_elements`` exists; the caller may add ``.returning(...)`` (no row: it existed)."""

    @abc.abstractmethod
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
        """Claim up to ``limit`` ticks, those :func:`pick_ticks` selects, in one statement,
        and return them in position order (empty if none is claimable).

        The claim sets ``status = 'claimed'``, ``claim_token = token``, ``claimed_by =
        worker_id``, ``claimed_until_us = until_us`` and adds one to ``attempts`` on each,
        atomically: two concurrent claims never take the same tick, and one claim takes at
        most one tick per session. Concurrent claims need not wait for each other (a tick
        another claim is taking may be skipped; the caller claims again later).

        Args:
            db: the database (for its transactions and engine).
            kinds: the tick kinds the worker can run (at least one).
            now_us: the current time (µs since the Unix epoch); claims older than it are expired.
            limit: the most ticks to claim (at least 1).
            exclude_sessions: sessions none of whose ticks may be claimed.
        """

    def open_listener(self, url: str, channel: str) -> Listener:
        """A new subscription to ``channel`` (notified at the commit of each transaction that
        appended events, or issued a tick — see :mod:`duplex_es.store.notify`). Called only
        when :attr:`listens` is true.

        Raises:
            Exception: whatever the driver raises when the database cannot be reached.
        """
        raise NotImplementedError(f"the {self.name} backend has no notifications (listens is false)")

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name}>"

