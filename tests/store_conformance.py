"""The storage backend conformance suite: what every backend must guarantee, as tests.

:class:`StoreConformance` holds the tests; each backend runs all of them by subclassing it once
(``tests/test_store.py``: ``TestSQLiteFile``, ``TestPostgreSQL``) and giving

* :attr:`StoreConformance.backend`: the backend class under test;
* a ``url`` fixture: a URL of a fresh, empty database on that backend (dropped afterwards);
* :attr:`StoreConformance.extra_refused` and :attr:`StoreConformance.drop_guard`: the
  backend's own SQL for the immutability checks.

Adding a backend (docs/architecture.md, "Storage backends") means implementing
``duplex_es.store.backend.Backend``, registering it, and adding such a subclass that passes.
Each test's docstring states the guarantee; the log's invariants it checks are named as in
docs/architecture.md (I4, I6, I8, I9).

Several of these tests used to live in ``test_store.py``, ``test_log_concurrency.py`` and
``test_scale.py`` and ran on SQLite and PostgreSQL through the ``db``/``log`` fixtures of
``conftest.py``; they moved here unchanged but for the backend hooks.
"""

from __future__ import annotations

import base64
import gc
import threading
import time
from typing import Callable, Iterator

import attrs
import pytest
import sqlalchemy as sa
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext

from duplex_es.audit import audit_session
from duplex_es.events import (
    AudioAppended,
    SessionClosed,
    EpochAdvanced,
    SessionConfig,
    SessionErased,
    SessionOpened,
    TextAppended,
    TickIssued,
    TickOutput,
    TranscriptionRequested,
    encode,
)
from duplex_es.store import (
    ANY_SEQ,
    EVENTS_CHANNEL,
    Claim,
    TICKS_CHANNEL,
    ClaimLost,
    Database,
    EventLog,
    OwnershipLost,
    SessionOwned,
    SessionOwners,
    SnapshotStore,
    TickQueue,
    Wakeup,
    WrongExpectedSeq,
    upgrade,
)
from duplex_es.store.backend import Backend
from duplex_es.store.datakeys import MasterKeyError, MasterKeys, SealingRequired, SessionErasedError, rewrap_all
from duplex_es.store.log import StoredEventError
from duplex_es.events.catalogue import SpeechInputs
from duplex_es.store.chain import GENESIS, event_hash
from duplex_es.store.log import BULK_ROWS
from duplex_es.store.migrate import head_revision
from duplex_es.store.schema import events as events_t
from duplex_es.store.schema import metadata

__all__ = ["StoreConformance", "Tailer", "all_rows", "run_threads"]


def opened(sid: str) -> SessionOpened:
    return SessionOpened(session_id=sid, config=SessionConfig(model="m"))


def text(i: int) -> TextAppended:
    return TextAppended(client_event_id=f"e{i}", text=f"t{i}")


def said(tag: str) -> TextAppended:
    return TextAppended(client_event_id=tag, text=tag)


#: A master key for the sealing tests (docs/privacy.md), and what a spoken session says: words
#: and audio patterns the database must never hold in the clear.
MASTER = bytes(range(32))
USER_AUDIO = b"\x11\x22\x33\x44" * 240
ANSWER_AUDIO = b"\x55\x66\x77\x88" * 100
SECRETS = (b"marmalade", b"quince", b"damson", b"greengage", USER_AUDIO[:64], ANSWER_AUDIO[:64])


def spoken(sid: str) -> list:
    """A session with content in every kind of place: the prompt, user audio and text, a tick's
    inputs, an answer's audio and text."""
    return [
        SessionOpened(session_id=sid, config=SessionConfig(model="m", instructions="PROMPT marmalade")),
        AudioAppended(audio=base64.b64encode(USER_AUDIO).decode(), samples=480, start_sample=0),
        TextAppended(client_event_id="e1", text="WORD quince"),
        TickIssued(request_id=f"req_{sid}", response_id="resp", epoch=0, chunk_index=0, inputs=SpeechInputs(user_text="ASKED greengage")),
        TickOutput(
            session_id=sid, request_id=f"req_{sid}", response_id="resp", epoch=0, chunk_index=0,
            audio=base64.b64encode(ANSWER_AUDIO).decode(), text_delta="ANSWER damson",
        ),
    ]


def _log_checks(report) -> list:
    """An audit's violations of the log's own rules (chain, keys, decoding, sealing)."""
    return [v for v in report.violations if v.check in ("chain", "key", "decode", "sealed")]


def _tick(request_id: str, chunk: int = 0, epoch: int = 0) -> TickIssued:
    return TickIssued(request_id=request_id, response_id="resp", epoch=epoch, chunk_index=chunk)


def _output(request_id: str, chunk: int = 0) -> TickOutput:
    return TickOutput(session_id="s", request_id=request_id, response_id="resp", epoch=0, chunk_index=chunk)


def _issue_ticks(log: EventLog, sid: str, n: int) -> list[str]:
    log.append(sid, [opened(sid)], expected_seq=0)
    ids = [f"req_{sid}_{i}" for i in range(n)]
    for i, rid in enumerate(ids):
        tick = TickIssued(request_id=rid, response_id="resp_1", epoch=0, chunk_index=i)
        log.append(sid, [tick], expected_seq=1 + i)
    return ids


def _issue_interleaved(log: EventLog, order: str) -> list[str]:
    """Open a session per letter of ``order`` and issue one tick per letter, in that order
    (``"aab"``: a's tick 0, a's tick 1, b's tick 0); returns the request ids (``req_a_0``, ...)."""
    issued: dict[str, int] = {}
    ids = []
    for sid in order:
        if sid not in issued:
            log.append(sid, [opened(sid)], expected_seq=0)
            issued[sid] = 0
        rid = f"req_{sid}_{issued[sid]}"
        log.append(sid, [TickIssued(request_id=rid, response_id="resp_1", epoch=0, chunk_index=issued[sid])], expected_seq=ANY_SEQ)
        issued[sid] += 1
        ids.append(rid)
    return ids


def _claim_until_none(queue: TickQueue, on_claim: Callable[[str, Claim], None], workers: int = 4) -> None:
    """``workers`` threads each claim until nothing is claimable, calling ``on_claim(worker, claim)``."""

    def work(name: str) -> None:
        while (claim := queue.claim(name, ttl_ms=60_000)) is not None:
            on_claim(name, claim)

    run_threads(work, [(f"w{i}",) for i in range(workers)])


class Tailer:
    """A global reader as the server's follower is one: it remembers the last position it was
    given (its checkpoint) and asks for what is after it."""

    def __init__(self, log: EventLog) -> None:
        self.log = log
        self.checkpoint = 0
        self.seen: list[tuple[int, str]] = []  # (position, text) in delivery order

    def poll(self) -> int:
        rows = self.log.tail(self.checkpoint, limit=500)
        for r in rows:
            assert r.position > self.checkpoint, "delivered out of order"
            self.checkpoint = r.position
            self.seen.append((r.position, getattr(r.event, "text", r.event.TYPE)))
        return len(rows)

    def follow(self, threads: list[threading.Thread]) -> list[int]:
        """Poll while any of ``threads`` runs, join them, then read to the end of the log.
        Returns the checkpoint after each poll made while they ran."""
        checkpoints = []
        while any(t.is_alive() for t in threads):
            if not self.poll():
                time.sleep(0.002)  # as a follower polls; spinning would starve the writers of the GIL
            checkpoints.append(self.checkpoint)
        for t in threads:
            t.join()
        while self.poll():
            pass
        return checkpoints


def run_threads(target: Callable[..., None], args: list[tuple]) -> None:
    """Run ``target(*a)`` for each ``a`` in ``args`` in threads started together; wait for all."""
    threads = [threading.Thread(target=target, args=a) for a in args]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


def all_rows(log: EventLog) -> list[tuple[int, str]]:
    """Every event of the log as ``(position, text or type)``, in position order."""
    out, after = [], 0
    while page := log.tail(after, limit=1000):
        out += [(r.position, getattr(r.event, "text", r.event.TYPE)) for r in page]
        after = page[-1].position
    return out


class StoreConformance:
    """The tests every storage backend passes. Subclass once per backend (see the module)."""

    #: The backend class under test; the ``url`` fixture's URLs must select it.
    backend: type[Backend]
    #: Statements on ``events`` the database must also refuse, beyond ``UPDATE`` and ``DELETE``
    #: (``TRUNCATE`` where the database has it).
    extra_refused: tuple[str, ...] = ()
    #: DDL that removes the immutability guard from ``events`` (what an attacker with DDL rights
    #: could do), so the audit's own detection can be tested.
    drop_guard: tuple[str, ...] = ()

    @pytest.fixture
    def url(self) -> Iterator[str]:
        """A URL of a fresh, empty database on the backend under test."""
        raise NotImplementedError("a backend's conformance class gives a `url` fixture")

    @pytest.fixture
    def db(self, url: str) -> Iterator[Database]:
        database = Database(url)
        upgrade(database)
        yield database
        database.dispose()

    @pytest.fixture
    def log(self, db: Database) -> EventLog:
        return EventLog(db)

    # ---------------------------------------------------------------------------- migrations

    def test_the_url_selects_this_backend(self, db: Database):
        """The registry picks the backend under test from its URLs."""
        assert type(db.backend) is self.backend

    def test_schema_comes_from_the_migration_and_matches_the_query_tables(self, db: Database):
        """The migrations create exactly the tables, columns and indexes store/schema.py describes."""
        with db.engine.connect() as conn:
            diff = compare_metadata(MigrationContext.configure(conn), metadata)
        assert diff == []

    def test_upgrading_again_is_a_no_op_at_the_head_revision(self, db: Database):
        """Every process upgrades at start: a second upgrade changes nothing and reports the head."""
        assert upgrade(db) == head_revision()
        assert upgrade(db) == head_revision()

    # ------------------------------------------------------------------------------- appends

    @pytest.mark.invariant("I8")
    def test_batch_append_is_gapless_and_positions_follow_commits(self, log: EventLog):
        """Seqs are gapless per session; positions rise in commit order across sessions; the
        tail, the head and the session list agree with what was appended."""
        r1 = log.append("s1", [opened("s1"), text(1), text(2)], expected_seq=0)
        log.append("s2", [opened("s2")], expected_seq=0)
        r3 = log.append("s1", [text(3)], expected_seq=3)
        assert [r.seq for r in r1.records] == [1, 2, 3] and r3.records[0].seq == 4
        assert [r.seq for r in log.read_session("s1")] == [1, 2, 3, 4]
        tail = log.tail()
        assert [(r.session_id, r.seq) for r in tail] == [("s1", 1), ("s1", 2), ("s1", 3), ("s2", 1), ("s1", 4)]
        positions = [r.position for r in tail]
        assert positions == sorted(positions)
        assert [r.event for r in log.tail(after_position=positions[2])] == [opened("s2"), text(3)]
        assert log.head("s1") == 4 and log.head("nope") == 0
        assert log.session_ids() == ["s1", "s2"]

    @pytest.mark.invariant("I4")
    def test_wrong_expected_seq_writes_nothing(self, log: EventLog):
        """An append whose expected seq is not the session's head raises WrongExpectedSeq and
        writes none of its events."""
        log.append("s", [opened("s")], expected_seq=0)
        with pytest.raises(WrongExpectedSeq) as err:
            log.append("s", [text(1), text(2)], expected_seq=0)
        assert (err.value.expected, err.value.actual) == (0, 1)
        assert log.head("s") == 1
        with pytest.raises(WrongExpectedSeq):
            log.append("new", [opened("new")], expected_seq=5)
        assert log.head("new") == 0

    def test_a_rolled_back_batch_leaves_nothing_behind(self, log: EventLog):
        """Batch atomicity: the events, the idempotency key and the tick rows of an append stand
        or fall with its transaction; a failure after the statements ran writes none of them."""
        log.append("s", [opened("s")], expected_seq=0)
        with pytest.raises(RuntimeError):
            with log.db.write() as conn:
                log.append_in(conn, "s", [text(1), _tick("r0")], expected_seq=1, idempotency_key="evt-1")
                raise RuntimeError("the caller fails before the commit")
        assert log.head("s") == 1 and [r.seq for r in log.tail()] == [1]
        assert log.applied_key("s", "evt-1") is None
        assert TickQueue(log).count() == 0
        assert log.append("s", [text(2)], expected_seq=1, idempotency_key="evt-1").records[0].seq == 2

    def test_idempotency_key_returns_the_first_batch_and_writes_nothing(self, log: EventLog):
        """Repeating an idempotency key in a session returns the first batch with duplicate=True
        and writes nothing; keys are per session."""
        log.append("s", [opened("s")], expected_seq=0)
        first = log.append("s", [text(1), text(2)], expected_seq=1, idempotency_key="evt-1")
        again = log.append("s", [text(9)], expected_seq=1, idempotency_key="evt-1")
        assert not first.duplicate and again.duplicate
        assert [r.seq for r in again.records] == [2, 3] and again.records == first.records
        assert log.head("s") == 3
        assert log.applied_key("s", "evt-1") == (2, 3)
        # Keys are per session: the same client event id in another session is a new command.
        other = log.append("t", [opened("t")], expected_seq=0, idempotency_key="evt-1")
        assert not other.duplicate

    def test_concurrent_appends_to_one_session_never_claim_a_seq_they_did_not_write(self, log: EventLog):
        """Fifty threads racing read-check-append on one session: every winner's reported seq
        holds its own event, and the session stays gapless."""
        log.append("s", [opened("s")], expected_seq=0)
        wins: list[int] = []
        conflicts = 0
        lock = threading.Lock()

        def writer(i: int) -> None:
            nonlocal conflicts
            for attempt in range(2000):
                head = log.head("s")
                try:
                    r = log.append("s", [text(i)], expected_seq=head)
                except WrongExpectedSeq:
                    with lock:
                        conflicts += 1
                    continue
                with lock:
                    wins.append(r.records[0].seq)
                return

        run_threads(writer, [(i,) for i in range(50)])
        stored = log.read_session("s")
        assert len(wins) == 50 and sorted(wins) == list(range(2, 52))
        assert [r.seq for r in stored] == list(range(1, 52))
        # Each writer's reported seq holds its own event.
        by_seq = {r.seq: r.event for r in stored}
        assert sorted(by_seq[s].text for s in wins) == sorted(f"t{i}" for i in range(50))

    def test_two_writers_racing_on_a_new_session_one_wins(self, log: EventLog):
        """Two creators of one session at once: exactly one succeeds, the other gets a conflict."""
        results: list[str] = []
        barrier = threading.Barrier(2)

        def create(tag: str) -> None:
            barrier.wait()
            try:
                log.append("race", [SessionOpened(session_id="race", config=SessionConfig(model=tag))], expected_seq=0)
                results.append("ok")
            except WrongExpectedSeq:
                results.append("conflict")
            except sa.exc.IntegrityError:
                results.append("conflict")

        run_threads(create, [(t,) for t in ("a", "b")])
        assert sorted(results) == ["conflict", "ok"]
        assert log.head("race") == 1

    def test_sixteen_writer_threads_in_one_process(self, log: EventLog):
        """Case 14: sixteen threads appending to their own sessions: no exception escapes; every
        append lands."""
        errors: list[BaseException] = []

        def writer(i: int) -> None:
            sid = f"t{i}"
            try:
                log.append(sid, [opened(sid)], expected_seq=0)
                for n in range(40):
                    log.append(sid, [said(f"{sid}-{n}")], expected_seq=n + 1)
            except BaseException as exc:
                errors.append(exc)

        run_threads(writer, [(i,) for i in range(16)])
        assert errors == []
        assert all(log.head(f"t{i}") == 41 for i in range(16))

    def test_the_session_head_never_moves_back_and_equals_the_highest_seq(self, log: EventLog):
        """Case 7: empty appends and real appends racing; the head (what expected-seq checks read)
        is monotonic and always the highest stored seq."""
        log.append("h", [opened("h")], expected_seq=0)
        stop = time.monotonic() + 1.5
        heads: list[int] = []

        def empties() -> None:
            while time.monotonic() < stop:
                head = log.head("h")
                try:
                    assert log.append("h", [], expected_seq=head).records == ()
                except WrongExpectedSeq:
                    pass

        def writes(tag: str) -> None:
            n = 0
            while time.monotonic() < stop:
                try:
                    log.append("h", [said(f"{tag}{n}")], expected_seq=log.head("h"))
                    n += 1
                except WrongExpectedSeq:
                    pass

        threads = [threading.Thread(target=empties), threading.Thread(target=writes, args=("a",)), threading.Thread(target=writes, args=("b",))]
        for t in threads:
            t.start()
        while any(t.is_alive() for t in threads):
            heads.append(log.head("h"))
        for t in threads:
            t.join()
        assert heads == sorted(heads)
        seqs = [r.seq for r in log.read_session("h")]
        assert log.head("h") == max(seqs) and seqs == list(range(1, len(seqs) + 1))

    # -------------------------------------------------------------------- immutability (I9)

    @pytest.mark.invariant("I9")
    def test_the_database_refuses_to_update_delete_or_truncate_events(self, log: EventLog):
        """UPDATE and DELETE on events (and the backend's extra_refused statements) fail with an
        'immutable' error and change nothing."""
        log.append("s", [opened("s"), text(1)], expected_seq=0)
        statements = ["UPDATE events SET data = '{}' WHERE seq = 2", "DELETE FROM events WHERE seq = 2", "DELETE FROM events"]
        for stmt in statements + list(self.extra_refused):
            with pytest.raises(sa.exc.DBAPIError) as err:
                with log.db.write() as conn:
                    conn.exec_driver_sql(stmt)
            assert "immutable" in str(err.value)
        assert [r.seq for r in log.read_session("s")] == [1, 2]

    def _without_triggers(self, db: Database, stmt: str) -> None:
        """What an attacker with DDL rights could do: drop the guard and edit the table."""
        with db.write() as conn:
            for ddl in self.drop_guard:
                conn.exec_driver_sql(ddl)
            conn.exec_driver_sql(stmt)

    @pytest.mark.parametrize(
        "tamper,expect",
        [
            ("UPDATE events SET data = replace(data, 't2', 'tX') WHERE seq = 3", "edited"),
            ("DELETE FROM events WHERE seq = 2", "gap"),
            ("UPDATE events SET seq = seq + 100 WHERE seq = 2", "gap"),
        ],
        ids=["edit", "delete", "reorder"],
    )
    @pytest.mark.invariant("I9")
    def test_audit_detects_edits_deletions_and_reordering(self, log: EventLog, tamper: str, expect: str):
        """The stored hash chain verifies as written, and an edit, a deletion or a reordering
        made behind the guard's back breaks it where the audit looks."""
        log.append("s", [opened("s"), text(1), text(2), text(3)], expected_seq=0)
        assert audit_session(log, "s").ok
        self._without_triggers(log.db, tamper)
        report = audit_session(log, "s")
        assert not report.ok
        assert any(v.check == "chain" for v in report.violations)
        assert any(expect in v.message for v in report.violations)

    # ---------------------------------------------------------------------- audio as bytes

    def test_audio_is_stored_as_its_bytes_and_read_back_as_it_was_logged(self, log: EventLog):
        """An append's audio and an engine's audio output sit in the row's payload as bytes (the
        JSON holds ``"audio": ""``); text that is not canonical base64 stays in the JSON. Every
        read path gives back the logged events, and the audit passes (docs/performance.md,
        "Audio as bytes")."""
        pcm = bytes(range(256)) * 4  # 1024 bytes, every byte value
        canonical = base64.b64encode(pcm).decode()
        events = [
            opened("s"),
            AudioAppended(client_event_id="e1", audio=canonical, samples=512, start_sample=0),
            AudioAppended(audio=canonical.rstrip("="), samples=1, start_sample=512),  # unpadded: not canonical
            attrs.evolve(_output("req_1"), audio=base64.b64encode(pcm[:6]).decode()),
            AudioAppended(audio="", samples=0, start_sample=513),
        ]
        log.append("s", events, expected_seq=0)
        raw = log.read_raw("s")
        assert [r.payload for r in raw] == [None, pcm, None, pcm[:6], None]
        assert '"audio":""' in raw[1].data and canonical not in raw[1].data and canonical.rstrip("=") in raw[2].data
        assert len(raw[1].data) < 120 and len(raw[3].data) < 400  # the bytes are not also in the JSON
        assert [r.event for r in log.read_session("s")] == events
        assert [r.event for r in log.read_seqs("s", [2, 4])] == [events[1], events[3]]
        assert [r.event for r in log.tail(0)] == events
        report = audit_session(log, "s")  # an output of a tick never issued: only the tick check objects
        assert [v.check for v in report.violations] == ["outputs"], report.violations

    def test_audit_detects_an_edited_payload(self, log: EventLog):
        """The chain covers the payload: a byte cut from it breaks the event's hash."""
        log.append("s", [opened("s"), AudioAppended(audio=base64.b64encode(b"\x01\x02" * 240).decode(), samples=240, start_sample=0)], expected_seq=0)
        assert audit_session(log, "s").ok
        self._without_triggers(log.db, "UPDATE events SET payload = substr(payload, 2) WHERE seq = 2")
        report = audit_session(log, "s")
        assert not report.ok and any(v.check == "chain" and v.seq == 2 and "edited" in v.message for v in report.violations)

    @pytest.mark.parametrize("edit", ["bytes", "number"])
    def test_a_payload_edited_into_another_type_is_named_by_the_audit_not_a_crash(self, log: EventLog, edit: str):
        """SQLite keeps whatever type a statement writes: ``X'ff' || ...`` is TEXT that is not
        UTF-8 (which made the fetch itself fail, found by a break-it run), ``7`` an integer. The
        audit reads them as bytes and names the row."""
        log.append("s", [opened("s"), AudioAppended(audio=base64.b64encode(b"\x01\x02" * 240).decode(), samples=240, start_sample=0)], expected_seq=0)
        sqlite = log.db.backend.name == "sqlite"
        value = {
            "bytes": "X'ff' || substr(payload, 2)" if sqlite else "'\\xff'::bytea || substring(payload from 2)",
            "number": "7" if sqlite else "'\\x37'::bytea",
        }[edit]
        self._without_triggers(log.db, f"UPDATE events SET payload = {value} WHERE seq = 2")
        report = audit_session(log, "s")
        assert not report.ok and any(v.check == "chain" and v.seq == 2 for v in report.violations), report.violations
        assert len(log.read_session("s")) == 2  # replay reads it (as whatever bytes it now holds)

    def test_rows_written_before_the_payload_column_read_and_audit_as_before(self, log: EventLog):
        """Rows from before migration 0005 hold their audio in the JSON, no payload, and a hash
        over the JSON alone: read and audited as they always were."""
        audio = base64.b64encode(b"\x05\x00" * 480).decode()
        events = [opened("old"), AudioAppended(audio=audio, samples=480, start_sample=0)]
        prev, rows = GENESIS, []
        for seq, ev in enumerate(events, start=1):
            type_, version, data = encode(ev)  # everything in the JSON, as then
            digest = event_hash(prev, "old", seq, type_, version, data, 1_000_000 + seq)
            rows.append(dict(session_id="old", seq=seq, type=type_, version=version, data=data, recorded_at_us=1_000_000 + seq, prev_hash=prev, hash=digest))
            prev = digest
        with log.db.write() as conn:
            conn.execute(events_t.insert(), rows)
        assert [r.payload for r in log.read_raw("old")] == [None, None]
        assert [r.event for r in log.read_session("old")] == events
        assert audit_session(log, "old").ok
        log.append("old", [AudioAppended(audio=audio, samples=480, start_sample=480)], expected_seq=2)  # new rows go on the old chain
        assert log.read_raw("old")[2].payload == b"\x05\x00" * 480 and audit_session(log, "old").ok

    def test_a_downgrade_past_the_payload_column_refuses_while_audio_is_in_it(self, log: EventLog):
        """Migration 0005's downgrade drops the column only when no row holds audio in it."""
        from alembic import command

        from duplex_es.store.migrate import _config

        def downgrade() -> None:
            cfg = _config(log.db)
            with log.db.write() as conn:
                cfg.attributes["connection"] = conn
                command.downgrade(cfg, "0004")

        log.append("s", [opened("s"), AudioAppended(audio="AAAA", samples=1, start_sample=0)], expected_seq=0)
        with pytest.raises(RuntimeError, match="payload"):
            downgrade()
        with log.db.read() as conn:  # nothing was dropped (0006's column may be: it held nothing)
            assert bytes(conn.execute(sa.text("SELECT payload FROM events WHERE seq = 2")).scalar_one()) == b"\x00\x00\x00"

    # ------------------------------------------------------------- sealed content (docs/privacy.md)

    def _sealed(self, db: Database) -> EventLog:
        return EventLog(db, master_keys=MasterKeys.from_keys([MASTER]))

    def _stored_bytes(self, db: Database) -> bytes:
        """Everything the tables hold that could carry content, as bytes."""
        out = []
        with db.read() as conn:
            for table, cols in (("events", ("data", "payload")), ("snapshots", ("data",)), ("session_keys", ("wrapped",))):
                for row in conn.execute(sa.text(f"SELECT {', '.join(cols)} FROM {table}")):
                    out += [v.encode() if isinstance(v, str) else bytes(v) for v in row if v is not None]
        return b"\n".join(out)

    def test_sealed_content_reads_back_and_is_nowhere_in_the_clear(self, db: Database):
        """With a master key, every read path (session, seqs, tail, tick claims) gives back the
        events appended, while the stored rows hold no word and no audio of them; audit
        verifies the chain without opening anything."""
        log = self._sealed(db)
        events = spoken("s")
        log.append("s", events, expected_seq=0)
        assert [r.event for r in log.read_session("s")] == events and not any(r.withheld for r in log.read_session("s"))
        assert [r.event for r in log.read_seqs("s", [2, 5])] == [events[1], events[4]]
        assert [r.event for r in log.tail(0)] == events
        assert [r.sealed for r in log.read_raw("s")] == [1] * 5
        claim = TickQueue(log).claim("w", ttl_ms=10_000)
        assert claim is not None and claim.tick == events[3]  # a worker with the key reads its inputs
        stored = self._stored_bytes(db)
        assert [s for s in SECRETS if s in stored] == []
        # (these events are no conversation the reducer could fold: only the log's checks apply)
        report = audit_session(log, "s")
        assert _log_checks(report) == [] and report.sealed_events == 5, report.violations
        assert _log_checks(audit_session(EventLog(db), "s")) == []  # the chain needs no data key

    def test_without_the_master_key_a_sealed_session_shows_its_structure(self, db: Database):
        """A reader without the key gets every event with its ids, counts and times, empty
        text where the content was and silence of the same length where the audio was."""
        self._sealed(db).append("s", spoken("s"), expected_seq=0)
        recs = EventLog(db).read_session("s")
        assert [type(r.event) for r in recs] == [type(e) for e in spoken("s")] and all(r.withheld for r in recs)
        opened_, audio, typed, tick, out = (r.event for r in recs)
        assert opened_.config.instructions == "" and opened_.config.model == "m"
        assert base64.b64decode(audio.audio) == bytes(len(USER_AUDIO)) and audio.samples == 480
        assert typed.text == "" and typed.client_event_id == "e1" and tick.inputs.user_text == ""
        assert base64.b64decode(out.audio) == bytes(len(ANSWER_AUDIO)) and out.text_delta == "" and out.request_id == "req_s"

    @pytest.mark.parametrize("source", ["same session", "other session"])
    def test_a_sealed_payload_moved_to_another_row_does_not_open_and_audit_says_which(self, db: Database, source: str):
        """A ciphertext is bound to its session and seq: copied onto another row it does not
        open (the read fails naming the row), and audit reports it as ``sealed`` (and the chain
        as edited) at that seq."""
        log = self._sealed(db)
        log.append("s", [opened("s"), said("one"), said("two")], expected_seq=0)
        log.append("t", [opened("t"), said("one")], expected_seq=0)
        src = "session_id = 's' AND seq = 3" if source == "same session" else "session_id = 't' AND seq = 2"
        self._without_triggers(db, f"UPDATE events SET payload = (SELECT payload FROM events WHERE {src}) WHERE session_id = 's' AND seq = 2")
        with pytest.raises(StoredEventError) as err:
            log.read_session("s")
        assert err.value.seq == 2 and "does not open" in str(err.value)
        report = audit_session(log, "s")
        assert {(v.check, v.seq) for v in report.violations} >= {("sealed", 2), ("chain", 2)}, report.violations

    def test_erasure_destroys_the_key_and_snapshots_and_keeps_the_chain(self, db: Database):
        """Erasing a session appends its ``session.erased``, destroys its data key and deletes
        its snapshots in one transaction: afterwards even a reader with the master key sees
        only the structure, the audit passes and reports the erasure, and content appended
        later is refused."""
        log = self._sealed(db)
        log.append("s", spoken("s"), expected_seq=0)
        log.append("keep", spoken("keep"), expected_seq=0)
        SnapshotStore(db, data_keys=log.data_keys).save("s", 5, 1, '{"said": "marmalade"}')
        assert b"marmalade" not in self._stored_bytes(db)  # sealed like the events
        assert SnapshotStore(db, data_keys=log.data_keys).recent("s")[0].data == '{"said": "marmalade"}'
        result, destroyed, dropped = log.erase("s", [SessionErased(at_us=1_700_000_000_000_000, by="operator", sealed_events=5)], expected_seq=5)
        assert destroyed and dropped == 1 and result.records[0].seq == 6
        for reader in (log, self._sealed(db), EventLog(db)):  # this process's log, a fresh one, one without the key
            recs = reader.read_session("s")
            assert [r.withheld for r in recs] == [True] * 5 + [False]
            assert recs[2].event.text == "" and isinstance(recs[5].event, SessionErased)
        assert [r.event for r in log.read_session("keep")] == spoken("keep")  # the others untouched
        report = audit_session(self._sealed(db), "s")
        assert _log_checks(report) == [] and report.erased_at_us == 1_700_000_000_000_000, report.violations
        assert SnapshotStore(db, data_keys=log.data_keys).recent("s") == []
        with pytest.raises(SessionErasedError):
            log.append("s", [said("again")], expected_seq=6)
        assert log.head("s") == 6
        with db.read() as conn:
            assert conn.execute(sa.text("SELECT wrapped, erased_at_us IS NOT NULL FROM session_keys WHERE session_id = 's'")).one() == (None, True)

    def test_an_erasure_by_another_process_takes_effect_at_once_for_readers_and_writers(self, db: Database):
        """Two logs stand for two processes that have both used the session's key: after one
        erases it, the other reads the content as withheld and cannot append content to it
        (the key's row is checked in every transaction, not a cached key trusted)."""
        here, there = self._sealed(db), self._sealed(db)
        here.append("s", spoken("s")[:3], expected_seq=0)
        assert there.read_session("s")[2].event.text == "WORD quince"  # `there` holds the key now
        here.append("s", [SessionClosed()], expected_seq=3)
        here.erase("s", [SessionErased(at_us=1, by="operator")], expected_seq=4)
        assert [r.withheld for r in there.read_session("s")][:3] == [True, True, True]
        assert there.read_seqs("s", [3])[0].event.text == ""
        with pytest.raises(SessionErasedError):
            there.append("s", [said("late")], expected_seq=ANY_SEQ)
        assert there.head("s") == 5

    def test_a_worker_output_for_a_session_erased_meanwhile_is_dropped_and_its_tick_cancelled(self, db: Database):
        """A worker claimed a tick, the session was erased while it ran: its output is refused
        (a ``ClaimLost`` naming the erasure, nothing appended, the tick cancelled) and the
        other outputs of the same batch commit."""
        log = self._sealed(db)
        for sid in ("s", "t"):
            log.append(sid, [opened(sid), _tick(f"req_{sid}")], expected_seq=0)
        queue = TickQueue(log)
        claims = {c.session_id: c for c in queue.claim_batch("w", ttl_ms=60_000, max_ticks=2)}
        log.append("s", [SessionClosed()], expected_seq=2)
        log.erase("s", [SessionErased(at_us=1, by="operator")], expected_seq=3)
        answers = [TickOutput(session_id=sid, request_id=f"req_{sid}", response_id="resp", epoch=0, chunk_index=0, text_delta="secret answer") for sid in ("s", "t")]
        lost, done = queue.commit_batch([(claims["s"], [answers[0]]), (claims["t"], [answers[1]])])
        assert isinstance(lost, ClaimLost) and "erased" in str(lost) and done.records[0].event == answers[1]
        assert log.head("s") == 4 and queue.status("req_s")["status"] == "cancelled"

    def test_an_appender_without_the_master_key_cannot_write_content_into_a_sealed_session(self, db: Database):
        """A process started without --master-key-file on a sealed deployment: its content
        for a sealed session is refused (``sealing_required``), not stored in the clear; what
        holds no content still goes in, and unsealed sessions are untouched."""
        self._sealed(db).append("s", [opened("s")], expected_seq=0)
        keyless = EventLog(db)
        with pytest.raises(SealingRequired):
            keyless.append("s", [said("in the clear")], expected_seq=1)
        keyless.append("s", [SessionClosed()], expected_seq=1)
        keyless.append("plain", [opened("plain"), said("fine")], expected_seq=0)
        assert b"in the clear" not in self._stored_bytes(db) and keyless.read_session("plain")[1].event.text == "fine"

    def test_audit_names_a_cleared_sealed_flag_a_key_deleted_outside_an_erasure_and_a_wrong_master_key(self, db: Database):
        """Tampering with what sealing rests on, each named by audit (with or without the
        master key): a sealed flag cleared on an audio row (whose ciphertext must not play as
        audio: the read refuses it), a data key deleted without a logged erasure; and a master
        key file that lacks the session's key is reported once, not once per row."""
        log = self._sealed(db)
        log.append("s", spoken("s"), expected_seq=0)
        log.append("t", spoken("t"), expected_seq=0)
        self._without_triggers(db, "UPDATE events SET sealed = NULL WHERE session_id = 's' AND seq = 2")
        with pytest.raises(StoredEventError, match="sealed flag was cleared"):
            log.read_session("s")
        for reader in (log, EventLog(db)):
            found = {(v.check, v.seq) for v in audit_session(reader, "s").violations}
            assert ("sealed", 2) in found and ("chain", 2) in found, found
        with db.write() as conn:
            conn.exec_driver_sql("DELETE FROM session_keys WHERE session_id = 't'")
        for reader in (log, EventLog(db)):
            assert [(v.check, v.seq) for v in _log_checks(audit_session(reader, "t"))] == [("sealed", 1)]
        self._sealed(db).append("u", spoken("u"), expected_seq=0)
        wrong = audit_session(EventLog(db, master_keys=MasterKeys.from_keys([bytes(32)])), "u")
        assert [v.check for v in wrong.violations if v.check in ("key", "sealed")] == ["key"], wrong.violations

    def test_rotating_the_master_key_rewraps_every_data_key(self, db: Database):
        """``master-key rewrap``: after it, the new master key alone opens every session, the
        old one none, and erased sessions stay erased; a ring without the wrapping key fails
        the read naming the key, instead of reading the content as erased."""
        old, new = MASTER, bytes(range(32, 64))
        self._sealed(db).append("s", spoken("s"), expected_seq=0)
        self._sealed(db).append("gone", spoken("gone"), expected_seq=0)
        self._sealed(db).erase("gone", [SessionErased(at_us=1, by="operator")], expected_seq=5)
        stranger = EventLog(db, master_keys=MasterKeys.from_keys([new]))
        with pytest.raises(MasterKeyError, match="does not hold"):
            stranger.read_session("s")
        assert rewrap_all(db, MasterKeys.from_keys([new, old])) == (1, 0)
        assert rewrap_all(db, MasterKeys.from_keys([new, old])) == (0, 1)
        assert [r.event for r in EventLog(db, master_keys=MasterKeys.from_keys([new])).read_session("s")] == spoken("s")
        with pytest.raises(MasterKeyError, match="does not hold"):
            EventLog(db, master_keys=MasterKeys.from_keys([old])).read_session("s")
        assert all(r.withheld for r in EventLog(db, master_keys=MasterKeys.from_keys([new])).read_session("gone")[:5])

    # ----------------------------------------------------------------------------------- reads

    def test_every_read_path_returns_the_asked_range_in_order(self, log: EventLog):
        """read_session's (after_seq, up_to_seq] range, read_seqs, read_raw, tail_raw,
        tail_sessions, last_position and the session lookups return the stored rows, in order."""
        log.append("a1", [opened("a1"), text(1), text(2), text(3)], expected_seq=0)
        log.append("b1", [opened("b1"), TextAppended(text="bye")], expected_seq=0)
        assert [r.seq for r in log.read_session("a1", after_seq=1, up_to_seq=3)] == [2, 3]
        assert [r.seq for r in log.read_session("a1", after_seq=3)] == [4]
        assert log.read_session("a1", after_seq=4) == [] and log.read_session("none") == []
        assert [r.seq for r in log.read_seqs("a1", [4, 2, 9])] == [2, 4] and log.read_seqs("a1", []) == []
        raw = log.read_raw("a1")
        assert [r.seq for r in raw] == [1, 2, 3, 4] and raw[1].prev_hash == raw[0].hash
        tail = log.tail_raw(0)
        assert [(r.session_id, r.seq) for r in tail] == [("a1", 1), ("a1", 2), ("a1", 3), ("a1", 4), ("b1", 1), ("b1", 2)]
        assert log.tail_sessions(tail[3].position) == [(r.position, r.session_id, r.seq) for r in tail[4:]]
        assert [r.seq for r in log.tail(0, limit=2)] == [1, 2]
        assert log.last_position() == tail[-1].position
        assert log.find_session("a") == ["a1"]
        assert log.sessions_without(["input.text.appended"]) == [] and log.sessions_without(["nothing"]) == ["a1", "b1"]

    def test_a_long_read_returns_every_event_as_appended_and_gives_the_collector_back(self, log: EventLog):
        """A read long enough to be decoded in bulk (``BULK_ROWS``, with the cyclic collector
        paused) returns what was appended, as the per-row path (``read_seqs``) reads it."""
        events = [opened("long"), *(text(i) for i in range(BULK_ROWS + 10))]
        log.append("long", events, expected_seq=0)
        got = log.read_session("long")
        assert [r.event for r in got] == events and [r.seq for r in got] == list(range(1, len(events) + 1))
        assert got[5:8] == log.read_seqs("long", [6, 7, 8])
        assert [r.event for r in log.read_session("long", after_seq=10, up_to_seq=BULK_ROWS + 5)] == events[10 : BULK_ROWS + 5]
        assert gc.isenabled()

    def test_a_read_transaction_sees_one_snapshot(self, log: EventLog):
        """Everything read inside one Database.read() comes from one snapshot: an append that
        commits meanwhile is not seen until the next read transaction."""
        log.append("s", [opened("s")], expected_seq=0)
        count = sa.select(sa.func.count()).select_from(events_t)
        with log.db.read() as conn:
            assert conn.execute(count).scalar_one() == 1
            writer = threading.Thread(target=lambda: log.append("s", [text(1)], expected_seq=1))
            writer.start()
            writer.join(30)
            assert log.head("s") == 2  # committed, as a new transaction sees
            assert conn.execute(count).scalar_one() == 1
        assert log.head("s") == 2

    # ------------------------------------------------------------------ the global tail (I8)

    @pytest.mark.parametrize("writers", [2, 8])
    @pytest.mark.invariant("I8")
    def test_a_transaction_that_commits_late_is_still_delivered_in_order(self, db: Database, writers: int):
        """Case 1: writer A draws its position and holds its transaction open; the other writers
        try to commit meanwhile; a tailing reader running throughout gets A's event and nothing
        out of order, because positions follow commit order."""
        log = EventLog(db)
        for i in range(writers):
            log.append(f"s{i}", [opened(f"s{i}")], expected_seq=0)
        reader = Tailer(log)
        reader.poll()
        a_holds = threading.Event()
        release = threading.Event()

        def writer_a() -> None:
            with db.write() as conn:
                log.append_in(conn, "s0", [said("A")], expected_seq=1)
                a_holds.set()
                release.wait(10)

        def writer(i: int) -> None:
            a_holds.wait(10)
            log.append(f"s{i}", [said(f"B{i}")], expected_seq=1)

        threads = [threading.Thread(target=writer_a)] + [threading.Thread(target=writer, args=(i,)) for i in range(1, writers)]
        for t in threads:
            t.start()
        a_holds.wait(10)
        deadline = time.monotonic() + 0.5
        while time.monotonic() < deadline:  # the others are trying to commit now
            reader.poll()
            time.sleep(0.01)
        assert all(t != "A" for _, t in reader.seen)
        release.set()
        for t in threads:
            t.join()
        while reader.poll():
            pass
        assert reader.seen == all_rows(log)  # every event, each once, in position order
        texts = [t for _, t in reader.seen]
        assert texts.index("A") < min(texts.index(f"B{i}") for i in range(1, writers))

    @pytest.mark.invariant("I8")
    def test_concurrent_writers_on_many_sessions_lose_nothing_for_a_global_reader(self, log: EventLog):
        """Cases 2 and 3: writers on different sessions for a few seconds while a reader tails;
        zero missing, zero duplicates, and its checkpoint only ever moved over what it was given."""
        stop = time.monotonic() + 3.0
        reader = Tailer(log)
        errors: list[BaseException] = []

        def writer(i: int) -> None:
            sid, seq = f"w{i}", 0
            try:
                log.append(sid, [opened(sid)], expected_seq=0)
                seq = 1
                while time.monotonic() < stop:
                    log.append(sid, [said(f"{sid}-{seq}")], expected_seq=seq)
                    seq += 1
            except BaseException as exc:  # pragma: no cover - reported below
                errors.append(exc)

        threads = [threading.Thread(target=writer, args=(i,)) for i in range(4)]
        for t in threads:
            t.start()
        checkpoints = reader.follow(threads)
        assert not errors
        assert reader.seen == all_rows(log) and len(reader.seen) > 20
        assert checkpoints == sorted(checkpoints)
        assert len({p for p, _ in reader.seen}) == len(reader.seen)

    def test_a_thousand_version_conflicts_do_not_stall_readers(self, log: EventLog):
        """Case 4: forced conflicts, and a failed insert (which burns sequence values on
        PostgreSQL), leave no hole a reader waits on: its lag is back to zero as soon as it polls."""
        log.append("c", [opened("c")], expected_seq=0)
        for _ in range(1000):
            with pytest.raises(WrongExpectedSeq):
                log.append("c", [said("stale")], expected_seq=0)
        with pytest.raises(sa.exc.IntegrityError):
            with log.db.write() as conn:
                conn.execute(events_t.insert().values(session_id="c", seq=1, type="x", version=1, data="{}", recorded_at_us=0, prev_hash="", hash=""))
        log.append("c", [said("after")], expected_seq=1)
        reader = Tailer(log)
        started = time.monotonic()
        while reader.poll():
            pass
        assert reader.checkpoint == log.last_position() and time.monotonic() - started < 5
        assert [t for _, t in reader.seen] == ["session.opened", "after"]

    # ------------------------------------------------------------------ the tick queue (I6)

    @pytest.mark.invariant("I6")
    def test_a_tick_is_claimable_only_after_its_event_commits_and_only_once(self, log: EventLog):
        """A ticks row appears with its tick.issued event; a held claim is not handed out again;
        a commit marks it done, and a redelivered committed tick is only acknowledged."""
        q = TickQueue(log)
        assert q.claim("w", ttl_ms=1000) is None
        log.append("s", [opened("s"), _tick("r0")], expected_seq=0)
        c = q.claim("w1", ttl_ms=60_000)
        assert c is not None and c.request_id == "r0" and c.tick == _tick("r0") and c.attempts == 1
        assert q.claim("w2", ttl_ms=60_000) is None  # held
        res = q.commit(c, [_output("r0")])
        assert res.status == "committed" and res.records[0].seq == 3
        assert q.status("r0")["status"] == "done"
        # A redelivered, already-committed tick is only acknowledged.
        again = q.commit(c, [_output("r0")])
        assert again.status == "already_committed" and again.records == res.records
        assert log.head("s") == 3

    def test_a_worker_claims_only_the_kinds_it_runs(self, log: EventLog):
        """A claim names the tick kinds the worker's engines run and takes no other kind."""
        q = TickQueue(log)
        log.append("s", [opened("s"), TranscriptionRequested(request_id="tr0", item_id="item_1"), _tick("r0")], expected_seq=0)
        speech = q.claim("w1", ttl_ms=60_000, kinds=("speech",))
        assert speech is not None and speech.request_id == "r0" and speech.kind == "speech"
        assert q.claim("w1", ttl_ms=60_000, kinds=("speech", "world")) is None
        heard = q.claim("w2", ttl_ms=60_000, kinds=("transcription",))
        assert heard is not None and heard.request_id == "tr0" and isinstance(heard.tick, TranscriptionRequested)

    @pytest.mark.invariant("I6")
    def test_an_expired_claim_is_taken_over_and_the_old_worker_cannot_commit(self, log: EventLog):
        """A claim is a lease: after it runs out another worker takes the tick with a new token,
        and the old holder can neither commit nor extend."""
        q = TickQueue(log)
        log.append("s", [opened("s"), _tick("r0")], expected_seq=0)
        t0 = 1_000_000_000_000
        old = q.claim("w1", ttl_ms=1000, now_us=t0)
        assert q.claim("w2", ttl_ms=1000, now_us=t0 + 500_000) is None
        new = q.claim("w2", ttl_ms=1000, now_us=t0 + 1_500_000)
        assert new is not None and new.token != old.token and new.attempts == 2
        with pytest.raises(ClaimLost):
            q.commit(old, [_output("r0")], now_us=t0 + 1_600_000)
        with pytest.raises(ClaimLost):
            q.extend(old, ttl_ms=1000, now_us=t0 + 1_600_000)
        assert q.commit(new, [_output("r0")], now_us=t0 + 1_700_000).status == "committed"
        assert [r.event.TYPE for r in log.read_session("s")] == ["session.opened", "tick.issued", "tick.output"]

    def test_an_expired_claim_is_taken_over_and_the_old_holders_commit_refused(self, log: EventLog):
        """The same on the wall clock, with the commit's own now: the stale output is not logged."""
        [rid] = _issue_ticks(log, "s1", 1)
        queue = TickQueue(log)
        now = time.time_ns() // 1000
        old = queue.claim("slow", ttl_ms=100, now_us=now)
        assert old is not None and queue.claim("other", ttl_ms=100, now_us=now + 50_000) is None
        new = queue.claim("other", ttl_ms=60_000, now_us=now + 200_000)
        assert new is not None and new.request_id == rid and new.token != old.token
        with pytest.raises(ClaimLost):
            queue.commit(old, [TextAppended(text="stale output")])
        assert queue.commit(new, [TextAppended(text="output")]).status == "committed"
        assert [r.event.text for r in log.read_session("s1") if isinstance(r.event, TextAppended)] == ["output"]

    def test_an_expired_claim_cannot_commit_even_before_anyone_reclaims(self, log: EventLog):
        """An extension moves the expiry; a commit after the expiry is refused even if nobody
        took the tick over, and writes nothing."""
        q = TickQueue(log)
        log.append("s", [opened("s"), _tick("r0")], expected_seq=0)
        t0 = 2_000_000_000_000
        c = q.claim("w1", ttl_ms=1000, now_us=t0)
        extended = q.extend(c, ttl_ms=1000, now_us=t0 + 900_000)
        assert extended.claimed_until_us == t0 + 1_900_000
        with pytest.raises(ClaimLost):
            q.commit(extended, [_output("r0")], now_us=t0 + 2_000_000)
        assert log.head("s") == 2

    def test_cancelled_ticks_are_not_handed_out_but_a_running_one_still_logs_its_output(self, log: EventLog):
        """epoch.advanced cancels the ticks it names in the same transaction; a cancelled tick is
        never claimed, but a running one's output is still logged (I7: the reducer discards it)."""
        q = TickQueue(log)
        log.append("s", [opened("s"), _tick("r0"), _tick("r1", chunk=1)], expected_seq=0)
        running = q.claim("w1", ttl_ms=60_000)
        assert running.request_id == "r0"
        log.append("s", [EpochAdvanced(epoch=1, reason="client_cancelled", cancelled_request_ids=("r0", "r1"))], expected_seq=ANY_SEQ)
        assert q.claim("w2", ttl_ms=60_000) is None
        assert q.count("cancelled") == 2
        # The output is logged (the reducer marks it discarded: docs/architecture.md, I7).
        assert q.commit(running, [_output("r0")]).status == "committed"
        assert log.read_session("s")[-1].event.TYPE == "tick.output"

    @pytest.mark.invariant("I6")
    def test_concurrent_workers_claim_each_tick_once(self, log: EventLog):
        """Four workers claiming and committing 30 ticks at once: each tick is committed once."""
        q = TickQueue(log)
        log.append("s", [opened("s")] + [_tick(f"r{i}", chunk=i) for i in range(30)], expected_seq=0)
        claimed: list[str] = []
        lock = threading.Lock()

        def commit(name: str, c: Claim) -> None:
            q.commit(c, [_output(c.request_id, c.tick.chunk_index)])
            with lock:
                claimed.append(c.request_id)

        _claim_until_none(q, commit)
        assert sorted(claimed) == sorted(f"r{i}" for i in range(30))
        assert q.count("done") == 30

    def test_concurrent_workers_never_claim_a_tick_another_holds(self, log: EventLog):
        """Four workers claiming 60 ticks without committing: no tick is handed to two of them."""
        ids = _issue_ticks(log, "s1", 60)
        queue = TickQueue(log)
        held: dict[str, str] = {}
        doubles: list[str] = []
        lock = threading.Lock()

        def hold(name: str, claim: Claim) -> None:
            with lock:
                if claim.request_id in held:
                    doubles.append(claim.request_id)
                held[claim.request_id] = name

        _claim_until_none(queue, hold)
        assert doubles == [] and sorted(held) == sorted(ids)

    # ------------------------------------------------------------- batched claims (I6)

    def test_a_batch_claim_takes_the_oldest_tick_of_each_session_and_one_per_session(self, log: EventLog):
        """One claim of up to 10 ticks over sessions a (3 ticks), b (1), c (2) takes a's, b's and
        c's oldest, in log order; a session's next tick comes in a later batch, and a session
        the worker names as already held is left out."""
        _issue_interleaved(log, "abacca")
        q = TickQueue(log)
        first = q.claim_batch("w1", ttl_ms=60_000, max_ticks=10)
        assert [c.request_id for c in first] == ["req_a_0", "req_b_0", "req_c_0"]
        assert len({c.token for c in first}) == 1 and all(c.attempts == 1 for c in first)
        assert [c.tick.chunk_index for c in first] == [0, 0, 0]
        held_elsewhere = q.claim_batch("w1", ttl_ms=60_000, max_ticks=10, exclude_sessions=["a"])
        assert [c.request_id for c in held_elsewhere] == ["req_c_1"]
        assert [c.request_id for c in q.claim_batch("w1", ttl_ms=60_000, max_ticks=10)] == ["req_a_1"]
        assert [c.request_id for c in q.claim_batch("w1", ttl_ms=60_000, max_ticks=10)] == ["req_a_2"]
        assert q.claim_batch("w1", ttl_ms=60_000, max_ticks=10) == []
        with pytest.raises(ValueError, match="max_ticks=0"):
            q.claim_batch("w1", ttl_ms=60_000, max_ticks=0)

    def test_a_session_with_a_backlog_cannot_fill_a_batch(self, log: EventLog):
        """Fairness: twenty ticks of one busy session issued before one tick each of three quiet
        sessions; a batch of four serves the busy session once and every quiet one."""
        _issue_interleaved(log, "b" * 20 + "xyz")
        q = TickQueue(log)
        batch = q.claim_batch("w", ttl_ms=60_000, max_ticks=4)
        assert [c.request_id for c in batch] == ["req_b_0", "req_x_0", "req_y_0", "req_z_0"]
        assert q.count("claimed") == 4

    @pytest.mark.invariant("I6")
    def test_workers_claiming_batches_at_once_never_take_a_tick_twice(self, log: EventLog):
        """Four workers start together and claim batches of up to 8 without committing, from 30
        sessions of 3 ticks: every tick is held by exactly one worker, no batch holds two
        ticks of a session, and every tick is claimed in the end."""
        ids = _issue_interleaved(log, "".join(chr(0x100 + i) * 3 for i in range(30)))
        q = TickQueue(log)
        held: dict[str, str] = {}
        doubles: list[str] = []
        mixed: list[list[str]] = []
        lock = threading.Lock()
        start = threading.Barrier(4)

        def work(name: str) -> None:
            start.wait()
            while batch := q.claim_batch(name, ttl_ms=60_000, max_ticks=8):
                with lock:
                    if len({c.session_id for c in batch}) != len(batch):
                        mixed.append([c.request_id for c in batch])
                    for c in batch:
                        if c.request_id in held:
                            doubles.append(c.request_id)
                        held[c.request_id] = name

        run_threads(work, [(f"w{i}",) for i in range(4)])
        assert doubles == [] and mixed == []
        assert sorted(held) == sorted(ids) and q.count("claimed") == len(ids)

    @pytest.mark.invariant("I6")
    def test_expired_claims_of_a_batch_are_taken_over_and_extended_ones_are_not(self, log: EventLog):
        """A batch's claims are leases: the heartbeat extends two of three in one statement;
        after the lease another worker takes only the third over (new token, attempt 2), and
        the first worker can extend neither it nor anything it lost."""
        _issue_interleaved(log, "abc")
        q = TickQueue(log)
        t0 = 3_000_000_000_000
        a, b, c = q.claim_batch("w1", ttl_ms=1000, max_ticks=3, now_us=t0)
        assert q.claim_batch("w2", ttl_ms=1000, max_ticks=3, now_us=t0 + 500_000) == []
        a2, b2 = q.extend_batch([a, b], ttl_ms=1000, now_us=t0 + 900_000)
        assert a2.claimed_until_us == b2.claimed_until_us == t0 + 1_900_000
        [taken] = q.claim_batch("w2", ttl_ms=1000, max_ticks=3, now_us=t0 + 1_500_000)
        assert taken.request_id == c.request_id and taken.token != c.token and taken.attempts == 2
        assert q.status(c.request_id)["claimed_by"] == "w2"
        a3, b3, lost = q.extend_batch([a2, b2, c], ttl_ms=1000, now_us=t0 + 1_600_000)
        assert isinstance(lost, ClaimLost) and lost.request_id == c.request_id
        assert a3.claimed_until_us == t0 + 2_600_000 and b3.claimed_until_us == t0 + 2_600_000

    @pytest.mark.invariant("I6")
    def test_a_batch_commit_skips_its_stale_claims_and_commits_the_rest_in_one_transaction(self, log: EventLog):
        """A batch of four: one claim taken over by another worker, one expired (nobody took
        it); the commit reports both lost and writes nothing for them, commits the other two in
        one transaction (one commit time, adjacent positions), and a redelivery of the batch
        is only acknowledged."""
        _issue_interleaved(log, "abcd")
        q = TickQueue(log)
        t0 = 4_000_000_000_000
        batch = q.claim_batch("w1", ttl_ms=1000, max_ticks=4, now_us=t0)
        a, b, c, d = q.extend_batch(batch[:2], ttl_ms=5000, now_us=t0 + 900_000) + batch[2:]
        [usurper] = q.claim_batch("w2", ttl_ms=60_000, max_ticks=1, kinds=("speech",), now_us=t0 + 1_500_000)
        assert usurper.request_id == c.request_id
        outputs = [(claim, [said(f"output of {claim.session_id}")]) for claim in (a, b, c, d)]
        ra, rb, rc, rd = q.commit_batch(outputs, now_us=t0 + 2_000_000)
        assert (ra.status, rb.status) == ("committed", "committed")
        assert isinstance(rc, ClaimLost) and rc.reason == "re-claimed by another worker"
        assert isinstance(rd, ClaimLost) and rd.reason == "claim expired"
        assert ra.records[0].recorded_at_us == rb.records[0].recorded_at_us
        assert rb.records[0].position == ra.records[0].position + 1
        assert [q.status(x.request_id)["status"] for x in (a, b, c, d)] == ["done", "done", "claimed", "claimed"]
        assert [log.head(s) for s in "abcd"] == [3, 3, 2, 2]
        again = q.commit_batch(outputs, now_us=t0 + 2_100_000)
        assert [getattr(x, "status", None) for x in again] == ["already_committed", "already_committed", None, None]
        assert again[0].records == ra.records and again[1].records == rb.records
        assert q.commit(usurper, [said("output of c")], now_us=t0 + 2_200_000).status == "committed"
        assert [r.event.text for r in log.read_session("c") if isinstance(r.event, TextAppended)] == ["output of c"]
        with pytest.raises(ValueError, match="more than once"):
            q.commit_batch([outputs[0], outputs[0]])

    # ------------------------------------------------------------------------------ ownership

    def test_a_taken_over_session_refuses_the_former_owners_append(self, log: EventLog):
        """A live owner's session is taken only with take_over; then the former owner's fenced
        append raises OwnershipLost naming the new owner, and writes nothing."""
        owners = SessionOwners(log.db)
        log.append("s1", [opened("s1")], expected_seq=0)
        a = owners.acquire("s1", "server-a")
        log.append("s1", [TextAppended(text="from a")], expected_seq=1, fence=a)
        with pytest.raises(SessionOwned):
            owners.acquire("s1", "server-b")  # a is alive: only a resume may take the session
        b = owners.acquire("s1", "server-b", take_over=True)
        assert (a.generation, b.generation) == (1, 2)
        with pytest.raises(OwnershipLost) as lost:
            log.append("s1", [TextAppended(text="late from a")], expected_seq=2, fence=a)
        assert (lost.value.owner_id, lost.value.generation) == ("server-b", b.generation)
        assert log.head("s1") == 2  # nothing of the refused append was written
        log.append("s1", [TextAppended(text="from b")], expected_seq=2, fence=b)
        assert [r.event.text for r in log.read_session("s1")[1:]] == ["from a", "from b"]

    def test_an_owner_that_stops_renewing_leaves_an_orphan_another_server_takes(self, log: EventLog):
        """Renewal extends all of an owner's leases at once; a lease that ran out makes an orphan
        anyone may acquire; release succeeds only with the current fence."""
        owners = SessionOwners(log.db, ttl_ms=1000)
        now = 1_000_000_000
        a = owners.acquire("s1", "server-a", now_us=now)
        owners.acquire("s2", "server-a", now_us=now)
        assert owners.renew("server-a", now_us=now + 500_000) == 2
        assert owners.orphans(now_us=now + 1_000_000) == []  # renewed until now + 1.5 s
        assert sorted(owners.orphans(now_us=now + 1_600_000)) == ["s1", "s2"]
        b = owners.acquire("s1", "server-b", now_us=now + 1_600_000)  # expired: no takeover needed
        assert owners.orphans(now_us=now + 1_600_000) == ["s2"]
        assert not owners.release(a) and owners.release(b)
        assert owners.current("s1") is None

    def test_a_restarted_server_with_the_same_id_fences_out_its_former_self(self, log: EventLog):
        """Every acquisition raises the generation, even by the same owner id."""
        owners = SessionOwners(log.db)
        log.append("s1", [opened("s1")], expected_seq=0)
        before = owners.acquire("s1", "host:8000")
        after = owners.acquire("s1", "host:8000")
        assert after.generation == before.generation + 1
        with pytest.raises(OwnershipLost):
            log.append("s1", [TextAppended(text="zombie")], expected_seq=1, fence=before)

    def test_acquiring_at_an_expected_generation_is_a_compare_and_swap(self, log: EventLog):
        """acquire(expected_generation=g) takes the session only if its generation is still g
        (0: it has no owner row), so a resume decided on what it read cannot overrule a move."""
        owners = SessionOwners(log.db)
        assert owners.acquire("s1", "a", expected_generation=0).generation == 1
        with pytest.raises(SessionOwned):
            owners.acquire("s1", "b", expected_generation=0, take_over=True)
        assert owners.acquire("s1", "b", expected_generation=1, take_over=True).generation == 2
        with pytest.raises(SessionOwned):
            owners.acquire("s1", "a", expected_generation=1, take_over=True)
        with pytest.raises(SessionOwned):
            owners.acquire("s2", "a", expected_generation=3)
        assert owners.current("s1")[0].owner_id == "b" and owners.current("s2") is None

    def test_two_servers_creating_one_sessions_owner_at_once_one_wins(self, log: EventLog):
        """The first acquisition inserts the owner row or does nothing if another got there
        first: of two racing servers exactly one owns the session, at generation 1."""
        owners = SessionOwners(log.db)
        barrier = threading.Barrier(2)
        outcomes: dict[str, object] = {}

        def take(server: str) -> None:
            barrier.wait()
            try:
                outcomes[server] = owners.acquire("race", server)
            except SessionOwned as exc:
                outcomes[server] = exc

        run_threads(take, [(s,) for s in ("a", "b")])
        fences = [o for o in outcomes.values() if not isinstance(o, SessionOwned)]
        assert len(fences) == 1 and fences[0].generation == 1
        assert owners.current("race")[0] == fences[0]

    # ---------------------------------------------------------------------- wake-ups, snapshots

    @pytest.mark.parametrize("channel", [TICKS_CHANNEL, EVENTS_CHANNEL])
    def test_an_idle_reader_is_woken_by_a_commit_or_polls(self, db: Database, channel: str):
        """Where the backend listens, a commit that issues a tick ends a wait on either channel
        long before its timeout; where it does not, a wait sleeps its timeout and says so. Either
        way the reader re-reads after the wait and finds the tick."""
        wakeup = Wakeup(db, channel)
        log = EventLog(db)
        if not wakeup.listens:
            started = time.monotonic()
            assert wakeup.wait(0.05) is False
            assert time.monotonic() - started >= 0.04
            _issue_ticks(log, "s1", 1)
            assert TickQueue(log).claim("w", ttl_ms=1000) is not None
            wakeup.close()
            return
        assert wakeup.wait(0.01) is False  # connects and listens; nothing yet
        woke: list[float] = []

        def wait() -> None:
            t0 = time.monotonic()
            if wakeup.wait(20.0):
                woke.append(time.monotonic() - t0)

        waiter = threading.Thread(target=wait)
        waiter.start()
        time.sleep(0.2)
        _issue_ticks(log, "s1", 1)
        waiter.join(25)
        wakeup.close()
        assert woke and woke[0] < 10.0  # woken by the tick's commit, not by the 20 s timeout
        assert TickQueue(log).claim("w", ttl_ms=1000) is not None

    def test_snapshots_keep_the_newest_and_flag_a_changed_row(self, db: Database):
        """A snapshot at an existing key replaces it; only the newest `keep` per session stay;
        a row whose data no longer matches its digest reads as not intact."""
        snaps = SnapshotStore(db, keep=2)
        for seq in (10, 20, 30):
            snaps.save("s", seq, 1, f'{{"seq": {seq}}}')
        snaps.save("s", 30, 1, '{"seq": 30, "again": true}')
        assert [(s.seq, s.data) for s in snaps.recent("s")] == [(30, '{"seq": 30, "again": true}'), (20, '{"seq": 20}')]
        assert [s.seq for s in snaps.recent("s", max_seq=25)] == [20] and snaps.all_of("other") == []
        with db.transaction() as conn:
            conn.exec_driver_sql("UPDATE snapshots SET data = '{}' WHERE seq = 20")
        assert [(s.seq, s.intact) for s in snaps.all_of("s")] == [(20, False), (30, True)]
