"""Archives (docs/privacy.md, "Archives"), on both backends: an ended session moved out of the
log into a compressed file replays and audits from that file exactly as it did from the log; the
database gives the space back; the session's id takes no more appends; erasing it afterwards
destroys its content in the file too; an edited, cut, moved or missing file is named by audit."""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

import attrs
import pytest
import sqlalchemy as sa

from duplex_es.archive import ArchiveRefused, archive_ended, archive_session, open_archive
from duplex_es.audit import audit_all, audit_session
from duplex_es.domain import AppendText, CloseSession, Commit
from duplex_es.erasure import erase_session
from duplex_es.events import SessionClosed, SessionConfig, SessionOpened, TickIssued
from duplex_es.inspect import InspectError, Inspector
from duplex_es.replay import replay
from duplex_es.retention import DAY_US, RetentionPolicy, sweep
from duplex_es.store import ANY_SEQ, Database, EventLog, KeyRing
from duplex_es.store.checkpoint import read_checkpoints, verify_checkpoints, write_checkpoint
from duplex_es.store.archives import SessionArchivedError, compact, read_archive, write_archive
from duplex_es.store.datakeys import MasterKeys

from harness import Harness, append_cmd

MASTER = MasterKeys.from_keys([bytes(range(32))])


def _spoken(log: EventLog, sid: str = "sess_test", *, seconds: int = 20, close: bool = True) -> list:
    """A session the domain decided: ``seconds`` of user audio in 1 s appends, typed words,
    a commit, then its close; appended a command at a time, as a server does."""
    h = Harness.open()
    for _ in range(seconds):
        h.run(append_cmd(1000))
    h.run(AppendText(text="the quartermaster counts plums"))
    h.run(Commit(item_id="item_1"))
    if close:
        h.run(CloseSession())
    events = [ev for _, ev in h.log]
    opened = events[0]
    events[0] = attrs.evolve(opened, session_id=sid, principal="alice")
    seq = 0
    for ev in events:
        log.append(sid, [ev], expected_seq=seq)
        seq += 1
    return events


def _db_bytes(db: Database) -> int:
    if db.backend.name == "sqlite":
        path = sa.engine.make_url(db.url).database
        return sum(os.path.getsize(p) for p in (path, path + "-wal") if os.path.exists(p))
    with db.read() as conn:
        return int(conn.execute(sa.text("SELECT pg_total_relation_size('events')")).scalar_one())


def test_an_archived_session_replays_and_audits_from_its_file_and_the_database_shrinks_by_its_size(db: Database, tmp_path: Path):
    log = EventLog(db, master_keys=MASTER)
    _spoken(log, "sess_kept", seconds=2)
    _spoken(log, "sess_old", seconds=20)
    before = replay(log, "sess_old")
    overview = Inspector(log).overview("sess_old")
    rows = log.read_raw("sess_old")
    compact(db)
    size = _db_bytes(db)

    done = archive_session(log, "sess_old", str(tmp_path))
    assert done.events == len(rows) and done.path == str(tmp_path / "sess_old.dxa") and os.path.getsize(done.path) == done.file_bytes
    assert done.stored_bytes > 900_000  # 20 s of 24 kHz PCM16, sealed
    compact(db)
    assert size - _db_bytes(db) >= 0.9 * done.stored_bytes, (size, _db_bytes(db), done.stored_bytes)

    # The log holds none of it now; the other session is untouched.
    assert log.read_raw("sess_old") == [] and log.head("sess_old") == 0
    assert [s for s in log.every_session_id()] == ["sess_kept"]
    with db.read() as conn:
        for table in ("events", "idempotency", "snapshots", "ticks", "session_owners"):
            assert conn.execute(sa.text(f"SELECT count(*) FROM {table} WHERE session_id = 'sess_old'")).scalar_one() == 0

    # From the file: the same rows as written, the same replay, the inspector's same view.
    header, stored = read_archive(done.path)
    assert stored == rows and header.head_hash == rows[-1].hash and header.principal == "alice"
    with open_archive(done.path, hot=log, master_keys=MASTER) as opened:
        again = replay(opened.log, "sess_old")
        assert again.state == before.state and again.timeline == before.timeline
        assert Inspector(opened.log).overview("sess_old") == overview
        assert opened.mismatches == () and opened.key_known
    audits = {a.session_id: a for a in audit_all(log)}
    assert audits["sess_old"].ok and audits["sess_old"].archive == done.path and audits["sess_old"].events == len(rows)
    assert audits["sess_old"].sealed_events > 0 and audits["sess_kept"].ok and audits["sess_kept"].archive is None


def test_an_archived_id_takes_no_appends_and_the_trigger_still_refuses_every_other_delete(db: Database, tmp_path: Path):
    log = EventLog(db)
    _spoken(log, "sess_a", seconds=1)
    _spoken(log, "sess_b", seconds=1)
    archive_session(log, "sess_a", str(tmp_path))
    kept = log.read_raw("sess_b")
    for expected in (0, ANY_SEQ):
        with pytest.raises(SessionArchivedError) as err:
            log.append("sess_a", [SessionOpened(session_id="sess_a", config=SessionConfig(model="m"))], expected_seq=expected)
        assert err.value.code == "session_archived"
    assert log.read_raw("sess_a") == []
    for statement in (
        "DELETE FROM events WHERE session_id = 'sess_b'",
        "UPDATE events SET data = '{}' WHERE session_id = 'sess_b'",
    ):
        with pytest.raises(sa.exc.DBAPIError, match="immutable"):
            with db.write() as conn:
                conn.execute(sa.text(statement))
    assert log.read_raw("sess_b") == kept


def test_only_ended_sessions_without_pending_ticks_are_archived_and_only_once(db: Database, tmp_path: Path):
    log = EventLog(db)
    _spoken(log, "sess_live", seconds=1, close=False)
    with pytest.raises(ArchiveRefused) as err:
        archive_session(log, "sess_live", str(tmp_path))
    assert err.value.code == "session_live" and "has not ended" in str(err.value)
    with pytest.raises(ArchiveRefused) as err:
        archive_session(log, "nope", str(tmp_path))
    assert err.value.code == "session_not_found"

    # A tick nobody answered (its worker died and the session was closed under it).
    log.append("sess_tick", [SessionOpened(session_id="sess_tick", config=SessionConfig(model="m"))], expected_seq=0)
    log.append(
        "sess_tick",
        [TickIssued(request_id="req_1", response_id="r", epoch=0, chunk_index=0, applied_event_ids=()), SessionClosed(reason="client_close")],
        expected_seq=1,
    )
    with pytest.raises(ArchiveRefused) as err:
        archive_session(log, "sess_tick", str(tmp_path))
    assert err.value.code == "ticks_pending" and log.head("sess_tick") == 3
    assert not list(tmp_path.glob("*.dxa*")) and not list(tmp_path.glob(".*.part"))  # refused before any file was written

    _spoken(log, "sess_done", seconds=1)
    archive_session(log, "sess_done", str(tmp_path))
    with pytest.raises(ArchiveRefused) as err:
        archive_session(log, "sess_done", str(tmp_path))
    assert err.value.code == "session_archived"

    # By age: the ended ones only; the refused ones named.
    done, refused = archive_ended(log, str(tmp_path), ended_before_us=time.time_ns() // 1000 + 1)
    assert [a.session_id for a in done] == [] and [(r.session_id, r.code) for r in refused] == [("sess_tick", "ticks_pending")]


def test_erasing_an_archived_session_destroys_its_content_in_the_file_and_continues_its_chain(db: Database, tmp_path: Path):
    log = EventLog(db, master_keys=MASTER)
    _spoken(log, "sess_x", seconds=1)
    done = archive_session(log, "sess_x", str(tmp_path))
    copy = tmp_path / "elsewhere"
    copy.mkdir()
    shutil.copy(done.path, copy / "sess_x.dxa")  # a copy in cold storage: the key is not in it

    erased = erase_session(log, "sess_x", by="operator")
    assert erased.key_destroyed and erased.seq == done.events + 1 and not erased.already
    assert erase_session(log, "sess_x", by="operator").already
    assert [r.seq for r in log.read_raw("sess_x")] == [done.events + 1]  # its erasure, after the archived head
    for path in (done.path, str(copy / "sess_x.dxa")):
        with open_archive(path, hot=log, master_keys=MASTER) as opened:
            recs = opened.log.read_session("sess_x")
            assert [r.seq for r in recs] == list(range(1, done.events + 2)) and type(recs[-1].event).__name__ == "SessionErased"
            assert any(r.withheld for r in recs) and not any("quartermaster" in repr(r.event) for r in recs)
            report = audit_session(opened.log, "sess_x")
            assert report.ok and report.erased_at_us == erased.at_us
    [report] = audit_all(log)
    assert report.ok and report.erased_at_us == erased.at_us and report.archive == done.path
    # Listed once, as archived: the log's erasure row is not a session of its own.
    [row] = Inspector(log).sessions()
    assert row["id"] == "sess_x" and row["status"] == "archived"
    shown = Inspector(log, archive_dirs=(str(copy),))
    assert shown.overview("sess_x")["content"]["erased"]["by"] == "operator"
    shown.close()


def test_retention_erases_archived_sessions_past_their_age(db: Database, tmp_path: Path):
    log = EventLog(db, master_keys=MASTER)
    _spoken(log, "sess_x", seconds=1)
    _spoken(log, "sess_y", seconds=1)
    archive_session(log, "sess_x", str(tmp_path))
    now = time.time_ns() // 1000
    assert sweep(log, RetentionPolicy(3), now_us=now + DAY_US) == []
    done = sweep(log, RetentionPolicy(None, {"alice": 3}), now_us=now + 4 * DAY_US)
    assert sorted(e.session_id for e in done) == ["sess_x", "sess_y"] and all(e.key_destroyed for e in done)
    assert sweep(log, RetentionPolicy(3), now_us=now + 5 * DAY_US) == []
    assert all(a.ok and a.erased_at_us == now + 4 * DAY_US for a in audit_all(log))


def test_audit_names_an_edited_cut_moved_or_missing_archive(db: Database, tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    log = EventLog(db)
    _spoken(log, "sess_x", seconds=1)
    done = archive_session(log, "sess_x", str(tmp_path))
    header, rows = read_archive(done.path)
    original = Path(done.path).read_bytes()

    # An edited event, rewritten into a well-formed file: the chain and the digest say so.
    edited = [attrs.evolve(r, data=r.data.replace("quartermaster", "quartermistress")) if r.type == "input.text.appended" else r for r in rows]
    write_archive(done.path, header, edited, replace=True)
    [report] = audit_all(log)
    seq = next(r.seq for r in rows if r.type == "input.text.appended")
    assert (("chain", seq) in {(v.check, v.seq) for v in report.violations}) and any(v.check == "archive" and "SHA-256" in v.message for v in report.violations)

    # Cut short.
    Path(done.path).write_bytes(original[: len(original) // 2])
    [report] = audit_all(log)
    assert [v.check for v in report.violations] == ["archive"] and "sess_x.dxa" in report.violations[0].message

    # Moved: missing where it was written, found by name in another directory.
    Path(done.path).unlink()
    moved = tmp_path / "cold"
    moved.mkdir()
    (moved / "sess_x.dxa").write_bytes(original)
    [report] = audit_all(log)
    assert not report.ok and "no such file" in report.violations[0].message
    [report] = audit_all(log, archive_dirs=[str(moved)])
    assert report.ok and report.archive == str(moved / "sess_x.dxa")

    # Another session's archive under this one's name.
    _spoken(log, "sess_y", seconds=2)
    other = archive_session(log, "sess_y", str(tmp_path))
    shutil.copy(other.path, moved / "sess_x.dxa")
    report = next(a for a in audit_all(log, archive_dirs=[str(moved)]) if a.session_id == "sess_x")
    assert not report.ok and any("holds session sess_y, not sess_x" in v.message for v in report.violations)

    # The command line: readers refuse a file that is not the one archived; audit of that one
    # session reports it as a violation (exit 1), as a missing file.
    from duplex_es.cli.main import main

    url = db.url
    assert main(["replay", "--db", url, "sess_x", "--archive-dir", str(moved)]) == 2
    assert "archive_mismatch" in capsys.readouterr().err
    assert main(["audit", "--db", url, "sess_x", "--archive-dir", str(moved)]) == 1
    assert "holds session sess_y" in capsys.readouterr().out
    assert main(["audit", "--db", url, "sess_x"]) == 1
    assert "no such file" in capsys.readouterr().out


def test_checkpoints_taken_before_and_after_archiving_still_verify_and_pin_the_file(db: Database, tmp_path: Path):
    """A signed checkpoint (docs/security.md, "Tamper evidence") pins every session's head and
    counts the log's events: an archive is not a deleted session — before or after archiving,
    the checkpoints verify, with the events checked in the file — but an edited file is found."""
    ring = KeyRing.from_keys([bytes(range(32, 64))])
    log = EventLog(db, keys=ring)
    _spoken(log, "sess_a", seconds=1)
    _spoken(log, "sess_b", seconds=1)
    checkpoints = tmp_path / "checkpoints"
    write_checkpoint(log, checkpoints, ring)
    _spoken(log, "sess_c", seconds=1, close=False)  # a session still going: its head moves on
    done = archive_session(log, "sess_a", str(tmp_path))
    assert verify_checkpoints(log, checkpoints, ring) == []
    write_checkpoint(log, checkpoints, ring)
    archive_session(log, "sess_b", str(tmp_path))
    assert verify_checkpoints(log, checkpoints, ring) == [] and all(a.ok for a in audit_all(log))

    # The archived head, edited in the file and in its record: the file no longer matches the
    # record (audit), and the record no longer matches the checkpoints' pin.
    header, rows = read_archive(done.path)
    write_archive(done.path, attrs.evolve(header, head_hash="0" * 64), rows[:-1] + [attrs.evolve(rows[-1], hash="0" * 64)], replace=True)
    report = next(a for a in audit_all(log) if a.session_id == "sess_a")
    assert not report.ok and {v.check for v in report.violations} >= {"archive", "chain"}
    with db.write() as conn:
        conn.execute(sa.text("UPDATE archived_sessions SET head_hash = :h WHERE session_id = 'sess_a'"), {"h": "0" * 64})
    [finding] = verify_checkpoints(log, checkpoints, ring)
    assert finding.session_id == "sess_a" and f"seq {done.events} differs" in finding.message


def test_archiving_the_newest_session_does_not_look_like_a_cut_log(db: Database, tmp_path: Path):
    """The newest positions moved into a file are still the log's history: checkpoints taken
    before and after verify, and one taken with every session archived keeps the head."""
    ring = KeyRing.from_keys([bytes(range(32, 64))])
    log = EventLog(db, keys=ring)
    _spoken(log, "sess_a", seconds=1)
    _spoken(log, "sess_b", seconds=1)
    head = log.read_raw("sess_b")[-1].position
    checkpoints = tmp_path / "checkpoints"
    write_checkpoint(log, checkpoints, ring)
    archive_session(log, "sess_b", str(tmp_path))  # the session holding the newest positions
    assert verify_checkpoints(log, checkpoints, ring) == []
    archive_session(log, "sess_a", str(tmp_path))
    write_checkpoint(log, checkpoints, ring)
    assert read_checkpoints(checkpoints)[-1].head_position == head
    assert verify_checkpoints(log, checkpoints, ring) == []


def test_the_inspector_over_the_log_reads_an_archived_session_from_its_file(db: Database, tmp_path: Path):
    """The inspector `serve` mounts (over the log, not over one archive) lists an archived
    session and shows it from its file as it showed it from the log: same overview, same audio,
    same counts once opened; the owner is the one recorded; a missing file is named."""
    log = EventLog(db, master_keys=MASTER)
    _spoken(log, "sess_old", seconds=3)
    before = Inspector(log)
    [row] = before.sessions()
    overview, wav, events = before.overview("sess_old"), before.wav("sess_old", "user"), before.events("sess_old", 1, 50)
    done = archive_session(log, "sess_old", str(tmp_path))

    inspector = Inspector(log)
    try:
        [listed] = inspector.sessions()
        assert listed["status"] == "archived" and listed["events"] == row["events"] and listed["kind"] is None
        assert listed["archived"]["location"] == done.path and inspector.sessions(status="closed") == []
        assert inspector.owner("sess_old") == (True, "alice") and inspector.owner("sess_none") == (False, None)
        shown = inspector.overview("sess_old")
        archived = shown.pop("archived")
        assert archived["file_bytes"] == done.file_bytes and archived["mismatches"] == [] and shown == overview
        assert inspector.wav("sess_old", "user") == wav and inspector.events("sess_old", 1, 50) == events
        [listed] = inspector.sessions(kind="speech")  # counted once opened
        assert {k: v for k, v in listed.items() if k not in ("status", "archived")} == {k: v for k, v in {**row, "audit": listed["audit"]}.items() if k != "status"}
        audit = inspector.audit("sess_old")
        assert audit["ok"] and audit["checks"]["archive"] == "ok"
    finally:
        inspector.close()

    Path(done.path).rename(tmp_path / "elsewhere.dxa")
    gone = Inspector(log)
    with pytest.raises(InspectError) as err:
        gone.overview("sess_old")
    assert err.value.code == "archive_missing" and err.value.status == 404 and "sess_old" in err.value.message
    (tmp_path / "cold").mkdir()
    Path(tmp_path / "elsewhere.dxa").rename(tmp_path / "cold" / "sess_old.dxa")
    found = Inspector(log, archive_dirs=(str(tmp_path / "cold"),))
    assert found.overview("sess_old")["head"] == overview["head"]
    found.close()


def test_an_existing_file_is_never_overwritten_and_two_runs_at_once_archive_a_session_once(db: Database, tmp_path: Path):
    """An archive may be the only copy of its events: a file already at the name (a copy of
    this database archived it, another run is writing it) is left as it is and the session is
    refused ``archive_exists``, the log unchanged; of two runs at once, one archives and the
    other is refused, and the file is the one recorded."""
    import threading

    log = EventLog(db)
    _spoken(log, "sess_a", seconds=1)
    tmp_path = tmp_path / "archive"
    tmp_path.mkdir()
    (tmp_path / "sess_a.dxa").write_bytes(b"another copy's archive")
    with pytest.raises(ArchiveRefused) as err:
        archive_session(log, "sess_a", str(tmp_path))
    assert err.value.code == "archive_exists" and str(tmp_path / "sess_a.dxa") in str(err.value)
    assert (tmp_path / "sess_a.dxa").read_bytes() == b"another copy's archive" and log.head("sess_a") > 3
    assert sorted(p.name for p in tmp_path.iterdir()) == ["sess_a.dxa"]  # no .part left
    (tmp_path / "sess_a.dxa").unlink()

    for n in range(4):
        sid = f"sess_race{n}"
        _spoken(log, sid, seconds=1)
        outcomes: list = []
        barrier = threading.Barrier(2)

        def run() -> None:
            barrier.wait()
            try:
                outcomes.append(archive_session(log, sid, str(tmp_path)))
            except ArchiveRefused as exc:
                outcomes.append(exc.code)

        threads = [threading.Thread(target=run) for _ in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        refusals = [o for o in outcomes if isinstance(o, str)]
        assert len(outcomes) == 2 and len(refusals) == 1 and refusals[0] in ("archive_exists", "session_archived"), outcomes
    assert all(a.ok for a in audit_all(log)), [a.violations for a in audit_all(log) if not a.ok]
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".part")]


def test_a_crafted_archive_with_fields_of_the_wrong_type_is_unreadable(tmp_path: Path):
    import msgspec
    import zstandard

    from duplex_es.store.archives import ArchiveError

    log_db = Database(f"sqlite:///{tmp_path / 'log.db'}", create=True)
    from duplex_es.store import upgrade

    upgrade(log_db)
    log = EventLog(log_db)
    _spoken(log, "sess_c", seconds=1)
    done = archive_session(log, "sess_c", str(tmp_path))
    header, rows = read_archive(done.path)
    body = [[r.position, r.seq, r.type, r.version, {"not": "a string"}, r.recorded_at_us, r.prev_hash, r.hash, r.key_id, r.payload, r.sealed] for r in rows]
    crafted = tmp_path / "crafted.dxa"
    with open(crafted, "wb") as raw, zstandard.ZstdCompressor().stream_writer(raw) as out:
        for obj in (attrs.asdict(header), body):
            frame = msgspec.msgpack.encode(obj)
            out.write(len(frame).to_bytes(4, "big") + frame)
    with pytest.raises(ArchiveError) as err:
        read_archive(str(crafted))
    assert err.value.code == "archive_unreadable" and "Expected `str`, got `object`" in str(err.value)
