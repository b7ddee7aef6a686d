"""The event log: atomic batch appends with an expected seq and an idempotency key, session reads,
and the global tail.

A batch of events for one session is written in one transaction: gapless ``seq`` continuing the
session, a global ``position``, a hash chained to the session's previous event, and (when given)
an idempotency key that maps to the batch. The tick queue rows mirroring ``tick.issued`` and
``epoch.advanced`` are written in the same transaction, so a worker never sees a tick whose
event did not commit (docs/architecture.md, I4).
"""

from __future__ import annotations

import time
from typing import Iterable, Optional, Sequence

import attrs
import sqlalchemy as sa
from sqlalchemy.engine import Connection

from duplex_es.errors import LogError
from duplex_es.events import Event, TickCanceller, TickRequest, decode
from duplex_es.events.codec import encode_row, encode_sealed_row, has_content
from duplex_es.store.chain import GENESIS, KeyRing, event_hash
from duplex_es.store.datakeys import (
    SEALED_V1,
    DataKeys,
    KeyState,
    MasterKeys,
    SealError,
    SealingRequired,
    SessionErasedError,
    decode_stored,
    destroy_key_in,
    sealed_session_ids,
    seal,
)
from duplex_es.store.appendsql import AppendSql
from duplex_es.store.database import Database, driver_connection
from duplex_es.store.gcpause import collector_paused
from duplex_es.store.ownership import Fence, OwnershipLost
from duplex_es.store.schema import archived_sessions as archived_sessions_t
from duplex_es.store.schema import events as events_t
from duplex_es.store.schema import session_keys as session_keys_t
from duplex_es.store.schema import ticks as ticks_t
from duplex_es.store.snapshots import SnapshotStore

__all__ = [
    "ANY_SEQ",
    "AppendRequest",
    "Recorded",
    "RawRecord",
    "AppendResult",
    "WrongExpectedSeq",
    "StoredEventError",
    "EventLog",
    "SessionStats",
]

#: ``expected_seq`` for writers that append at the session's head whatever it is (workers).
ANY_SEQ = -1


@attrs.frozen
class Recorded:
    """A committed event with its log coordinates."""

    position: int
    session_id: str
    seq: int
    event: Event
    recorded_at_us: int
    hash: str
    #: the event's content is sealed and was not opened here (its session was erased, or this
    #: reader holds no master key): its content fields read empty (docs/privacy.md)
    withheld: bool = False


@attrs.frozen
class RawRecord:
    """A stored row exactly as the database holds it (for audit, which must not trust decoding)."""

    position: int
    session_id: str
    seq: int
    type: str
    version: int
    data: str
    recorded_at_us: int
    prev_hash: str
    hash: str
    key_id: Optional[str] = None  # the chain key whose HMAC ``hash`` is; None: unkeyed
    payload: Optional[bytes] = None  # the audio as bytes (duplex_es.events.codec.encode_row); None: all in ``data``
    sealed: Optional[int] = None  # the payload is sealed content in this format (duplex_es.store.datakeys)


@attrs.frozen
class AppendRequest:
    """One command's append, as :meth:`EventLog.append` takes it (for batches)."""

    session_id: str
    events: tuple[Event, ...]
    expected_seq: int
    idempotency_key: str | None = None
    fence: Fence | None = None


@attrs.frozen
class AppendResult:
    """What an append wrote, or (``duplicate``) what the earlier append with the same key wrote."""

    records: tuple[Recorded, ...]
    duplicate: bool = False

    @property
    def last_seq(self) -> int:
        """The session seq of the batch's last event (0 for an empty batch)."""
        return self.records[-1].seq if self.records else 0


class WrongExpectedSeq(LogError):
    """The session moved past the seq the writer expected (optimistic concurrency conflict).

    Attributes:
        session_id: the session.
        expected: the seq the writer based its decision on.
        actual: the session's seq at append time.
    """

    def __init__(self, session_id: str, expected: int, actual: int) -> None:
        self.session_id, self.expected, self.actual = session_id, expected, actual
        super().__init__(f"session {session_id}: expected seq {expected}, log is at {actual}")


class SessionArchivedError(LogError):
    """An append to a session whose events were moved to an archive: its id cannot start a new
    chain, nor continue the old one (except by its erasure: :meth:`EventLog.erase`). Nothing was written.

    Attributes:
        code: ``session_archived``.
        session_id: the session.
    """

    code = "session_archived"

    def __init__(self, session_id: str) -> None:
        self.session_id = session_id
        super().__init__(f"session {session_id} is archived: its events left the log, and it takes no more")


class StoredEventError(LogError):
    """A stored event could not be decoded; names its position so it can be found."""

    def __init__(self, position: int, session_id: str, seq: int, cause: Exception) -> None:
        self.position, self.session_id, self.seq = position, session_id, seq
        super().__init__(f"event at position {position} (session {session_id}, seq {seq}): {cause}")


@attrs.frozen
class SessionStats:
    """One session's row counts, without decoding its events (:meth:`EventLog.session_stats`):
    ``events`` rows, the first row's ``first_position``, the first and last ``recorded_at_us``
    (µs since the epoch), and ``counts[i]``, how many of its rows have the i-th type asked for."""

    session_id: str
    events: int
    first_position: int
    first_us: int
    last_us: int
    counts: tuple[int, ...]


def _now_us() -> int:
    return time.time_ns() // 1000


_COLUMNS = (
    events_t.c.position,
    events_t.c.session_id,
    events_t.c.seq,
    events_t.c.type,
    events_t.c.version,
    events_t.c.data,
    events_t.c.recorded_at_us,
    events_t.c.prev_hash,
    events_t.c.hash,
    events_t.c.key_id,
    events_t.c.payload,
    events_t.c.sealed,
)


#: A session's rows in seq order, for the driver (``?`` placeholders; the backend turns them into
#: its driver's): the columns of :data:`_COLUMNS`, in their order.
_RANGE_SQL = (
    "SELECT position, session_id, seq, type, version, data, recorded_at_us, prev_hash, hash, key_id, payload, sealed "
    "FROM events WHERE session_id = ? AND seq > ?"
)

#: The same rows with only what a decoded read keeps (:class:`Recorded`): the session id is the
#: one asked for, and ``prev_hash`` and ``key_id`` only the audit reads. One string fewer per
#: column left out: a fifth of a one-hour session's select (docs/performance.md, "Audio as
#: bytes").
_DECODE_SQL = "SELECT position, seq, type, version, data, recorded_at_us, hash, payload, sealed FROM events WHERE session_id = ? AND seq > ?"

#: Reads of at least this many rows decode with the cyclic garbage collector paused
#: (:mod:`duplex_es.store.gcpause`): rebuilds, audits, the inspector's pages of 5000 events —
#: not a server's snapshot tail (under 1000 events at the default ``--snapshot-every``).
BULK_ROWS = 2000


def _raw(row: sa.Row) -> RawRecord:
    return RawRecord(*row)


def _recorded(
    position: int,
    session_id: str,
    seq: int,
    type_: str,
    version: int,
    data: str,
    recorded_at_us: int,
    hash_: str,
    payload: Optional[bytes],
    sealed: Optional[int] = None,
    key: Optional[KeyState] = None,
) -> Recorded:
    """One stored event decoded, with its log coordinates: a sealed row opened with its
    session's ``key`` (:meth:`DataKeys.states`), or read as withheld without one.

    A row in the clear with a payload, recorded after its session's data key was created,
    cannot have been written so (every content of a sealed session is sealed): its sealed flag
    was cleared, and its payload is ciphertext — refused, not played as audio.

    Raises:
        StoredEventError: the event cannot be decoded or its sealed content does not open
            (its position named).
    """
    try:
        if sealed is None:
            if payload is not None and key is not None and key.created_at_us is not None and recorded_at_us >= key.created_at_us:
                raise SealError(session_id, seq, "a payload in the clear recorded after the session was sealed (its sealed flag was cleared)")
            return Recorded(position, session_id, seq, decode(type_, version, data, payload), recorded_at_us, hash_)
        ev, withheld = decode_stored(key.cipher if key is not None else None, session_id, seq, type_, version, data, payload, sealed)
    except Exception as exc:
        raise StoredEventError(position, session_id, seq, exc) from exc
    return Recorded(position, session_id, seq, ev, recorded_at_us, hash_, withheld)


class EventLog:
    """The log on one :class:`~duplex_es.store.database.Database`.

    Args:
        db: the database.
        keys: the chain key ring (:class:`~duplex_es.store.chain.KeyRing`): events this log
            appends are signed with its signing key, and audits verify with all of its keys.
            ``None``: the unkeyed chain, which detects edits only by someone who does not
            recompute it (docs/security.md, "Tamper evidence").
        master_keys: the master key ring (:class:`~duplex_es.store.datakeys.MasterKeys`):
            the content of the events this log appends is sealed under per-session data keys
            it wraps, and sealed content is opened when read. ``None``: content is stored in
            the clear, and sealed content reads as withheld (docs/privacy.md).
    """

    def __init__(self, db: Database, keys: Optional[KeyRing] = None, master_keys: Optional[MasterKeys] = None) -> None:
        self.db = db
        self.keys = keys
        self.data_keys = DataKeys(master_keys, db) if master_keys is not None else None
        self._sql = AppendSql(db.backend)
        # SQLite lets any column hold any type: a payload edited into TEXT (an attack, or a
        # careless fix) would make sqlite3 fail the whole fetch ("Could not decode to UTF-8"),
        # so the raw reads take it as bytes, and the chain check names the edited row.
        blob = "CAST(payload AS BLOB)" if db.backend.name == "sqlite" else "payload"
        self._range_sql, self._decode_sql = (q.replace(" payload, sealed FROM", f" {blob}, sealed FROM") for q in (_RANGE_SQL, _DECODE_SQL))

    def _key_states(self, conn: Optional[Connection], session_ids: Iterable[str]) -> dict[str, KeyState]:
        """The data key state of each session (none without a master key), read in ``conn``'s
        transaction, or in one of its own."""
        if self.data_keys is None:
            return {}
        sids = list(dict.fromkeys(session_ids))
        if not sids:
            return {}
        if conn is None:
            return self.data_keys.states_now(sids)
        return self.data_keys.states(driver_connection(conn), sids)

    def _decode_raws(self, raws: Sequence[RawRecord], conn: Optional[Connection] = None) -> list[Recorded]:
        """Stored rows decoded (see :func:`_recorded`), their sessions' keys checked once."""
        states = self._key_states(conn, (r.session_id for r in raws))
        return [
            _recorded(r.position, r.session_id, r.seq, r.type, r.version, r.data, r.recorded_at_us, r.hash, r.payload, r.sealed, states.get(r.session_id))
            for r in raws
        ]

    # ---------------------------------------------------------------------------------- writes

    def append(
        self,
        session_id: str,
        events: Sequence[Event],
        *,
        expected_seq: int,
        idempotency_key: str | None = None,
        fence: Fence | None = None,
    ) -> AppendResult:
        """Append ``events`` to ``session_id`` atomically.

        Args:
            session_id: the session (stream) to append to.
            events: the batch, in order; may be empty only with an idempotency key check in mind.
            expected_seq: the session's seq the caller decided on (0: the session must be new),
                or :data:`ANY_SEQ` to append at whatever the head is.
            idempotency_key: a client ``event_id`` or a tick ``request_id``. If a batch with
                this key was already appended to the session, nothing is written and that
                batch is returned with ``duplicate=True``.
            fence: the appending server's ownership of the session
                (:class:`~duplex_es.store.ownership.Fence`), checked in this transaction;
                ``None`` for writers fenced otherwise (workers, by their tick claim).

        Raises:
            WrongExpectedSeq: the session's seq is not ``expected_seq``; nothing was written.
            OwnershipLost: ``fence`` is no longer current; nothing was written.
        """
        with self.db.write() as conn:
            return self.append_in(
                conn, session_id, events, expected_seq=expected_seq, idempotency_key=idempotency_key, fence=fence
            )

    def append_in(
        self,
        conn: Connection,
        session_id: str,
        events: Sequence[Event],
        *,
        expected_seq: int,
        idempotency_key: str | None = None,
        fence: Fence | None = None,
        continue_archived: bool = False,
    ) -> AppendResult:
        """:meth:`append` inside a write transaction the caller holds (``Database.write``).
        Its checks raise before anything is written. ``continue_archived``: as for
        :meth:`append_batch_in` (an erasure's)."""
        request = AppendRequest(session_id, tuple(events), expected_seq, idempotency_key, fence)
        [outcome] = self.append_batch_in(conn, [request], continue_archived=continue_archived)
        if isinstance(outcome, Exception):
            raise outcome
        return outcome

    def append_batch_in(
        self, conn: Connection, requests: Sequence["AppendRequest"], *, continue_archived: bool = False
    ) -> list["AppendResult | Exception"]:
        """Several appends in the write transaction the caller holds (group commit), with as
        few statements as one: the fences, idempotency keys and heads of all the batch's
        sessions are read in one query each, and all events inserted in one.

        Each request is checked as :meth:`append` checks it, in order — a later request sees
        the events of earlier ones in the batch — and a refused request writes nothing, so its
        outcome is the exception (``OwnershipLost``, ``WrongExpectedSeq``) instead of a result
        while the others go ahead. Database errors propagate (the caller rolls back).

        A session whose events were archived (:mod:`duplex_es.store.archives`) is refused
        (``SessionArchivedError``): its id must not start a second chain. Only its erasure,
        ``continue_archived``, appends to it, continuing the archived chain from its head.

        Returns:
            one outcome per request, in order: an :class:`AppendResult` or the exception.
        """
        sql, raw = self._sql, driver_connection(conn)
        sids = list(dict.fromkeys(r.session_id for r in requests))
        fenced = list(dict.fromkeys(r.session_id for r in requests if r.fence is not None))
        owners = sql.owners(raw, fenced) if fenced else {}
        keyed = [r for r in requests if r.idempotency_key is not None]
        known: dict[tuple[str, str], tuple] = {}
        if keyed:
            known = sql.known_keys(
                raw, list(dict.fromkeys(r.session_id for r in keyed)), list(dict.fromkeys(r.idempotency_key for r in keyed))  # type: ignore[arg-type]
            )
        heads = sql.heads(raw, sids)
        fresh = [s for s in sids if s not in heads]
        archived = sql.archived_heads(raw, fresh) if fresh else {}
        if continue_archived:
            heads.update(archived)
            archived = {}

        outcomes: list[AppendResult | Exception | None] = [None] * len(requests)
        rows: list[dict] = []
        spans: list[tuple[int, int, int]] = []  # (request index, first row, end row)
        new_keys: list[dict] = []
        repeats: list[tuple[int, int]] = []  # (request index, index of the earlier one)
        now = _now_us()
        keys = self.keys
        key_id = keys.signing_id if keys is not None else None
        # Sealing (docs/privacy.md): each session's data key, created here for a new session;
        # an appender without the master key must not write content into a sealed session.
        ciphers = self.data_keys.for_write(raw, sids, now) if self.data_keys is not None else None
        sealed_elsewhere = sealed_session_ids(raw, self.db.backend.sql, sids) if ciphers is None else ()
        for i, r in enumerate(requests):
            if r.fence is not None:
                owner = owners.get(r.session_id)
                if owner is None or owner != (r.fence.owner_id, r.fence.generation):
                    outcomes[i] = OwnershipLost(r.fence, *(owner or (None, None)))
                    continue
            if r.idempotency_key is not None and (r.session_id, r.idempotency_key) in known:
                first, last = known[(r.session_id, r.idempotency_key)]
                if first is None:  # written earlier in this very batch: answered below
                    repeats.append((i, last))
                else:
                    stored = self._read_range(conn, r.session_id, first - 1, last)
                    outcomes[i] = AppendResult(tuple(self._decode_raws(stored, conn)), duplicate=True)
                continue
            if r.session_id in archived:
                outcomes[i] = SessionArchivedError(r.session_id)
                continue
            head_seq, prev_hash = heads.get(r.session_id, (0, GENESIS))
            if r.expected_seq != ANY_SEQ and r.expected_seq != head_seq:
                outcomes[i] = WrongExpectedSeq(r.session_id, r.expected_seq, head_seq)
                continue
            if not r.events:
                outcomes[i] = AppendResult(())
                continue
            first_row = len(rows)
            refused = None
            for ev in r.events:
                sealed = None
                if ciphers is None:
                    if r.session_id in sealed_elsewhere and has_content(ev):
                        refused = SealingRequired(r.session_id)
                        break
                    type_, version, data, payload = encode_row(ev)
                else:
                    type_, version, data, payload, plaintext = encode_sealed_row(ev)
                    if plaintext is not None:
                        cipher = ciphers.get(r.session_id)
                        if cipher is None:  # erased: its content must not be recorded again
                            refused = SessionErasedError(r.session_id)
                            break
                        payload, sealed = seal(cipher, r.session_id, head_seq + 1, type_, version, plaintext), SEALED_V1
                head_seq += 1
                if keys is None:
                    digest = event_hash(prev_hash, r.session_id, head_seq, type_, version, data, now, payload, sealed)
                else:  # the signing key is in the ring by construction
                    digest = keys.sign(key_id, prev_hash, r.session_id, head_seq, type_, version, data, now, payload, sealed)  # type: ignore[arg-type,assignment]
                rows.append(
                    {
                        "session_id": r.session_id,
                        "seq": head_seq,
                        "type": type_,
                        "version": version,
                        "data": data,
                        "recorded_at_us": now,
                        "prev_hash": prev_hash,
                        "hash": digest,
                        "key_id": key_id,
                        "payload": payload,
                        "sealed": sealed,
                        "_event": ev,
                    }
                )
                prev_hash = digest
            if refused is not None:
                del rows[first_row:]
                outcomes[i] = refused
                continue
            heads[r.session_id] = (head_seq, prev_hash)
            spans.append((i, first_row, len(rows)))
            if r.idempotency_key is not None:
                known[(r.session_id, r.idempotency_key)] = (None, i)
                new_keys.append(
                    {"session_id": r.session_id, "key": r.idempotency_key, "first_seq": rows[first_row]["seq"], "last_seq": head_seq}
                )
        if rows:
            columns = ("session_id", "seq", "type", "version", "data", "recorded_at_us", "prev_hash", "hash", "key_id", "payload", "sealed")
            positions = sql.insert_events(raw, [tuple(row[c] for c in columns) for row in rows])
            if new_keys:
                sql.insert_keys(raw, [(k["session_id"], k["key"], k["first_seq"], k["last_seq"]) for k in new_keys])
            for row, pos in zip(rows, positions):
                row["_position"] = pos
            for i, a, b in spans:
                recs = tuple(
                    Recorded(row["_position"], row["session_id"], row["seq"], row["_event"], now, row["hash"]) for row in rows[a:b]
                )
                outcomes[i] = AppendResult(recs)
            self._mirror_ticks(conn, [rec for i, _, _ in spans for rec in outcomes[i].records])  # type: ignore[union-attr]
        for i, earlier in repeats:
            outcomes[i] = AppendResult(outcomes[earlier].records, duplicate=True)  # type: ignore[union-attr]
        return outcomes  # type: ignore[return-value]

    def erase(
        self, session_id: str, events: Sequence[Event], *, expected_seq: int, archived: bool = False
    ) -> tuple[AppendResult, bool, int]:
        """Erase a session's content (docs/privacy.md, "Erasure"), in one transaction: append
        ``events`` (the erasure's own: the session's end if it had none, then its
        ``session.erased``), destroy its data key, delete its snapshots. On SQLite the freed
        pages are overwritten (``secure_delete``) and the WAL is checkpointed after the commit,
        so the destroyed wrapped key is not left in the file.

        ``archived``: the session's events are in an archive file; ``events`` continue its
        chain here, after the archived head (``expected_seq``).

        Returns:
            ``(the append's result, whether a data key was destroyed, snapshots deleted)``.

        Raises:
            WrongExpectedSeq: the session moved on; nothing was done.
        """
        sqlite = self.db.backend.name == "sqlite"
        with self.db.write() as conn:
            raw = driver_connection(conn)
            if sqlite:
                raw.execute("PRAGMA secure_delete = ON")
            result = self.append_in(conn, session_id, events, expected_seq=expected_seq, continue_archived=archived)
            destroyed = destroy_key_in(raw, self.db.backend.sql, session_id, _now_us())
            dropped = SnapshotStore(self.db).delete_in(conn, session_id)
        if self.data_keys is not None:
            self.data_keys.forget(session_id)
        if sqlite:  # outside any transaction: a checkpoint inside one cannot reset the WAL
            with self.db.engine.connect() as conn:
                driver_connection(conn).execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
        return result, destroyed, dropped

    @staticmethod
    def _mirror_ticks(conn: Connection, records: Iterable[Recorded]) -> None:
        for rec in records:
            ev = rec.event
            # Ticks are found by role, whatever their kind (docs/architecture.md, "Ticks").
            if isinstance(ev, TickRequest):
                conn.execute(
                    ticks_t.insert().values(
                        request_id=ev.request_id,
                        session_id=rec.session_id,
                        seq=rec.seq,
                        position=rec.position,
                        kind=ev.kind,
                        status="pending",
                        attempts=0,
                    )
                )
            elif isinstance(ev, TickCanceller) and ev.cancelled_request_ids:
                conn.execute(
                    ticks_t.update()
                    .where(
                        ticks_t.c.request_id.in_(ev.cancelled_request_ids),
                        ticks_t.c.status.in_(("pending", "claimed")),
                    )
                    .values(status="cancelled")
                )

    # ----------------------------------------------------------------------------------- reads

    def _range_rows(self, conn: Connection, session_id: str, after_seq: int, up_to_seq: int | None, sql: Optional[str] = None) -> list[tuple]:
        """The session's stored rows with ``after_seq < seq <= up_to_seq`` as the driver's
        tuples (:data:`_COLUMNS`' order, or :data:`_DECODE_SQL`'s), in seq order.

        Fetched in one ``fetchall`` on the driver's own cursor: SQLAlchemy's per-row result
        processing cost as much as the select (docs/performance.md, "Read path")."""
        sql = sql or self._range_sql
        params = [session_id, after_seq]
        if up_to_seq is not None:
            sql += " AND seq <= ?"
            params.append(up_to_seq)
        return driver_connection(conn).execute(self.db.backend.sql(sql + " ORDER BY seq"), tuple(params)).fetchall()

    def _read_range(self, conn: Connection, session_id: str, after_seq: int, up_to_seq: int | None) -> list[RawRecord]:
        rows = self._range_rows(conn, session_id, after_seq, up_to_seq)
        with collector_paused(len(rows) >= BULK_ROWS):
            return [RawRecord(*r) for r in rows]

    def read_session(self, session_id: str, *, after_seq: int = 0, up_to_seq: int | None = None) -> list[Recorded]:
        """A session's events with ``after_seq < seq <= up_to_seq``, in seq order.

        Raises:
            StoredEventError: an event cannot be decoded (unknown type, future version, bad data).
        """
        with self.db.read() as conn:
            rows = self._range_rows(conn, session_id, after_seq, up_to_seq, self._decode_sql)
            key = self._key_states(conn, [session_id]).get(session_id) if rows else None
        out: list[Recorded] = []
        with collector_paused(len(rows) >= BULK_ROWS):
            for i, (position, seq, type_, version, data, recorded_at_us, hash_, payload, sealed) in enumerate(rows):
                out.append(_recorded(position, session_id, seq, type_, version, data, recorded_at_us, hash_, payload, sealed, key))
                rows[i] = None  # type: ignore[call-overload]  # decoded: free its text now, not with the list
        return out

    def read_seqs(self, session_id: str, seqs: Sequence[int]) -> list[Recorded]:
        """The session's events at exactly ``seqs``, in seq order (missing seqs are skipped)."""
        if not seqs:
            return []
        with self.db.read() as conn:
            rows = conn.execute(
                sa.select(*_COLUMNS)
                .where(events_t.c.session_id == session_id, events_t.c.seq.in_(tuple(seqs)))
                .order_by(events_t.c.seq)
            )
            return self._decode_raws([RawRecord(*r) for r in rows], conn)

    def applied_key(self, session_id: str, key: str) -> tuple[int, int] | None:
        """The ``(first_seq, last_seq)`` a batch appended under idempotency ``key`` wrote in the
        session, or ``None`` if no batch used it."""
        with self.db.read() as conn:
            return self._sql.known_keys(driver_connection(conn), [session_id], [key]).get((session_id, key))

    def read_raw(self, session_id: str) -> list[RawRecord]:
        """A session's stored rows, undecoded, in seq order."""
        with self.db.read() as conn:
            return self._read_range(conn, session_id, 0, None)

    def head(self, session_id: str) -> int:
        """The session's last seq (0 if the session has no events)."""
        with self.db.read() as conn:
            return conn.execute(
                sa.select(sa.func.coalesce(sa.func.max(events_t.c.seq), 0)).where(events_t.c.session_id == session_id)
            ).scalar_one()

    def tail(self, after_position: int = 0, limit: int = 1000) -> list[Recorded]:
        """Events of every session with ``position > after_position``, in position order.

        Positions follow commit order on both backends, so a reader that remembers the last
        position it saw never skips a committed event (docs/architecture.md, I8).
        """
        return self._decode_raws(self.tail_raw(after_position, limit))

    def tail_raw(self, after_position: int = 0, limit: int = 1000) -> list[RawRecord]:
        """:meth:`tail` without decoding."""
        with self.db.read() as conn:
            rows = conn.execute(
                sa.select(*_COLUMNS)
                .where(events_t.c.position > after_position)
                .order_by(events_t.c.position)
                .limit(limit)
            )
            return [_raw(r) for r in rows]

    def tail_sessions(self, after_position: int = 0, limit: int = 5000) -> list[tuple[int, str, int]]:
        """``(position, session_id, seq)`` of events after ``after_position``: a cheap way for a
        server to learn which of its sessions have events it has not folded yet, without
        decoding them."""
        with self.db.read() as conn:
            return self._sql.tail_sessions(driver_connection(conn), after_position, limit)

    def last_position(self) -> int:
        """The highest committed position (0 for an empty log)."""
        with self.db.read() as conn:
            return conn.execute(sa.select(sa.func.coalesce(sa.func.max(events_t.c.position), 0))).scalar_one()

    def session_ids(self) -> list[str]:
        """Every session that has events, ordered by its first position."""
        with self.db.read() as conn:
            rows = conn.execute(
                sa.select(events_t.c.session_id).where(events_t.c.seq == 1).order_by(events_t.c.position)
            )
            return [r[0] for r in rows]

    def every_session_id(self) -> list[str]:
        """Every session id that has any stored row, even one whose first event is missing
        (:meth:`session_ids` finds sessions by their seq 1), ordered by its first position:
        what an audit must look at. Archived sessions are not among them, even those whose
        erasure the log holds after their archived events (their audit reads their file)."""
        with self.db.read() as conn:
            rows = conn.execute(
                sa.select(events_t.c.session_id)
                .where(events_t.c.session_id.not_in(sa.select(archived_sessions_t.c.session_id)))
                .group_by(events_t.c.session_id)
                .order_by(sa.func.min(events_t.c.position))
            )
            return [r[0] for r in rows]

    def first_keyed_position(self) -> Optional[int]:
        """The position of the first event signed with a chain key (``None``: no event is)."""
        with self.db.read() as conn:
            return conn.execute(sa.select(sa.func.min(events_t.c.position)).where(events_t.c.key_id.is_not(None))).scalar_one()

    def sessions_without(self, end_types: Sequence[str]) -> list[str]:
        """Sessions none of whose events has a type in ``end_types`` (the sessions still open,
        when those are the terminal event types), ordered by their first position. The store
        knows no event semantics: the caller names the types."""
        ended = sa.select(events_t.c.session_id).where(events_t.c.type.in_(list(end_types)))
        with self.db.read() as conn:
            rows = conn.execute(
                sa.select(events_t.c.session_id)
                .where(events_t.c.seq == 1, events_t.c.session_id.not_in(ended))
                .order_by(events_t.c.position)
            )
            return [r[0] for r in rows]

    def sessions_ended_before(
        self, end_types: Sequence[str], before_us: int, limit: int = 1000, offset: int = 0, *, sealed_only: bool = False
    ) -> list[tuple[str, int]]:
        """``(session_id, ended_at_us)`` of sessions with an event of a type in ``end_types``
        recorded before ``before_us`` (µs): what ``archive`` may move. Oldest end first (then
        by id), ``limit`` from ``offset``. ``sealed_only``: only sessions that have a data key
        (their content is sealed, docs/privacy.md), not destroyed: what retention may erase."""
        query = (
            sa.select(events_t.c.session_id, sa.func.min(events_t.c.recorded_at_us).label("ended"))
            .where(events_t.c.type.in_(list(end_types)), events_t.c.recorded_at_us < before_us)
            .group_by(events_t.c.session_id)
            .order_by(sa.text("ended"), events_t.c.session_id)
            .limit(limit)
            .offset(offset)
        )
        if sealed_only:
            keys = session_keys_t
            query = query.join(keys, keys.c.session_id == events_t.c.session_id).where(keys.c.wrapped.is_not(None))
        with self.db.read() as conn:
            return [(r[0], r[1]) for r in conn.execute(query)]

    def session_stats(self, count_types: Sequence[str]) -> list[SessionStats]:
        """Every session's :class:`SessionStats`, ordered by first position, in one grouped
        query; ``counts`` follows ``count_types`` (the store knows no event semantics: the
        caller names the types it wants counted, e.g. refusals). Archived sessions are not
        among them (the log may hold their erasure, not their events)."""
        c = events_t.c
        counted = [sa.func.sum(sa.case((c.type == t, 1), else_=0)) for t in count_types]
        q = (
            sa.select(c.session_id, sa.func.count(), sa.func.min(c.position), sa.func.min(c.recorded_at_us), sa.func.max(c.recorded_at_us), *counted)
            .where(c.session_id.not_in(sa.select(archived_sessions_t.c.session_id)))
            .group_by(c.session_id)
            .order_by(sa.func.min(c.position))
        )
        with self.db.read() as conn:
            rows = conn.execute(q).all()
        return [SessionStats(r[0], r[1], r[2], r[3], r[4], tuple(int(n or 0) for n in r[5:])) for r in rows]

    def first_events(self, session_ids: Sequence[str]) -> dict[str, Recorded]:
        """The first event (seq 1) of each of ``session_ids`` that has one, decoded.

        Raises:
            StoredEventError: a first event cannot be decoded.
        """
        out: dict[str, Recorded] = {}
        ids = list(session_ids)
        with self.db.read() as conn:
            for i in range(0, len(ids), 500):  # bounded IN lists
                q = sa.select(*_COLUMNS).where(events_t.c.seq == 1, events_t.c.session_id.in_(ids[i : i + 500]))
                for rec in self._decode_raws([RawRecord(*row) for row in conn.execute(q)], conn):
                    out[rec.session_id] = rec
        return out

    def find_session(self, prefix: str) -> list[str]:
        """Session ids that start with ``prefix`` (for CLI arguments)."""
        with self.db.read() as conn:
            rows = conn.execute(
                sa.select(events_t.c.session_id).where(events_t.c.seq == 1, events_t.c.session_id.startswith(prefix))
            )
            return [r[0] for r in rows]
