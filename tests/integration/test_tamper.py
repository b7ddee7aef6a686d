"""Tamper evidence against someone who can write the database but holds neither the chain key
nor the checkpoint file (docs/security.md, "Tamper evidence"), on SQLite and PostgreSQL.

Every tampering is done as such an attacker would: raw SQL after removing the append-only
triggers, recomputing the public (unkeyed) chain formula where that helps them.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from duplex_es.audit import audit_all
from duplex_es.events import SessionConfig, SessionOpened, TextAppended
from duplex_es.store import ChainKeyError, Database, EventLog, KeyRing, upgrade
from duplex_es.store.chain import GENESIS, event_hash, key_id_of
from duplex_es.store.checkpoint import CheckpointError, read_checkpoints, verify_checkpoints, write_checkpoint
from tampering import attack

KEY1 = bytes(range(32))
KEY2 = bytes(range(100, 132))
RING = KeyRing.from_keys([KEY1])


def opened(sid: str) -> SessionOpened:
    return SessionOpened(session_id=sid, config=SessionConfig(model="m"))


def text(i: int) -> TextAppended:
    return TextAppended(client_event_id=f"e{i}", text=f"t{i}")


def fill(log: EventLog) -> None:
    """Two sessions: ``a`` with 5 events, ``b`` with 3."""
    log.append("a", [opened("a"), text(1), text(2)], expected_seq=0)
    log.append("b", [opened("b"), text(10), text(11)], expected_seq=0)
    log.append("a", [text(3), text(4)], expected_seq=3)




def recompute_public_chain(db: Database, session_id: str, *, drop_key: bool) -> None:
    """Rewrite ``session_id``'s prev_hash/hash with the public formula (what an attacker without
    the key can do after an edit); ``drop_key`` also clears key_id (a downgrade)."""
    log = EventLog(db)
    rows = log.read_raw(session_id)
    prev, statements = GENESIS, []
    for r in rows:
        h = event_hash(prev, r.session_id, r.seq, r.type, r.version, r.data, r.recorded_at_us)
        key = "NULL" if drop_key or r.key_id is None else f"'{r.key_id}'"
        statements.append(f"UPDATE events SET prev_hash = '{prev}', hash = '{h}', key_id = {key} WHERE position = {r.position}")
        prev = h
    attack(db, *statements)


def _messages(audits) -> str:
    return "\n".join(f"{a.session_id} {v.seq} [{v.check}] {v.message}" for a in audits for v in a.violations)


# --------------------------------------------------------------------------------- keyed chain


@pytest.mark.invariant("I9")
def test_a_keyed_log_stores_hmacs_that_the_public_formula_does_not_give(db: Database):
    """Each event names the signing key's id (never the key) and its hash is not the public
    SHA-256 chain; the untouched log audits clean with the ring and reports the key."""
    log = EventLog(db, keys=RING)
    fill(log)
    raw = log.read_raw("a")
    assert {r.key_id for r in raw} == {key_id_of(KEY1)} and len(key_id_of(KEY1)) == 8
    assert KEY1.hex() not in repr(RING) and all(KEY1.hex() not in str(r) for r in raw)
    r = raw[1]
    assert r.hash != event_hash(r.prev_hash, r.session_id, r.seq, r.type, r.version, r.data, r.recorded_at_us)
    audits = audit_all(log)
    assert [a.ok for a in audits] == [True, True], _messages(audits)
    assert audits[0].key_ids == (key_id_of(KEY1),) and audits[0].unkeyed_events == 0


@pytest.mark.parametrize("drop_key", [False, True], ids=["keep-key-id", "downgrade"])
@pytest.mark.invariant("I9")
def test_an_edit_with_a_recomputed_public_chain_fails_a_keyed_audit_without_a_checkpoint(db: Database, drop_key: bool):
    """(c) Edit an event's data and recompute the rest of the chain with the public formula: the
    unkeyed audit could not see it; with the key the edited session fails, naming the seq."""
    log = EventLog(db, keys=RING)
    fill(log)
    assert all(a.ok for a in audit_all(log))
    attack(db, "UPDATE events SET data = replace(data, 't2', 'tX') WHERE session_id = 'a' AND seq = 3")
    recompute_public_chain(db, "a", drop_key=drop_key)
    audits = {a.session_id: a for a in audit_all(log)}
    assert audits["b"].ok
    assert not audits["a"].ok
    if drop_key:
        # The whole session now looks unkeyed, like one written before keying began; but its
        # events after b's first (keyed) one cannot be that old.
        keyed_since = log.read_raw("b")[0].position
        assert [v.seq for v in audits["a"].violations] == [4, 5], _messages(audits.values())
        assert all(f"keyed from position {keyed_since}" in v.message for v in audits["a"].violations)
    else:
        assert [v.seq for v in audits["a"].violations if "edited" in v.message] == [1, 2, 3, 4, 5]


@pytest.mark.invariant("I9")
def test_a_downgraded_session_after_keying_began_is_flagged(db: Database):
    """A keyed session rewritten wholesale with the public formula and no key id looks like an
    old unkeyed session; it is not one, since the log was keyed before its first event."""
    log = EventLog(db, keys=RING)
    log.append("first", [opened("first")], expected_seq=0)
    fill(log)
    recompute_public_chain(db, "b", drop_key=True)
    audits = {a.session_id: a for a in audit_all(log)}
    assert audits["a"].ok and audits["first"].ok
    assert any("keyed from position" in v.message for v in audits["b"].violations), _messages(audits.values())


@pytest.mark.invariant("I9")
def test_the_unkeyed_chain_misses_a_recomputed_edit_and_says_so(db: Database, tmp_path: Path):
    """Without a key the recomputed edit passes the audit — the documented limit, printed by
    the command — but a checkpoint taken before it still catches it."""
    log = EventLog(db)
    fill(log)
    write_checkpoint(log, tmp_path, RING)
    attack(db, "UPDATE events SET data = replace(data, 't2', 'tX') WHERE session_id = 'a' AND seq = 3")
    recompute_public_chain(db, "a", drop_key=False)
    audits = audit_all(log)
    assert all(a.ok for a in audits) and all(a.unkeyed_events for a in audits)
    [finding] = verify_checkpoints(log, tmp_path, RING)
    assert finding.session_id == "a" and finding.seq == 5 and "edited below the checkpoint" in finding.message


@pytest.mark.invariant("I9")
def test_a_row_moved_to_another_session_fails(db: Database, tmp_path: Path):
    """(d) b's last event re-homed as a's next one, chained with the public formula: a's audit
    fails (the MAC covers the session id and seq) and the checkpoint sees b's tail cut."""
    log = EventLog(db, keys=RING)
    fill(log)
    write_checkpoint(log, tmp_path, RING)
    assert all(a.ok for a in audit_all(log)) and verify_checkpoints(log, tmp_path, RING) == []
    a_head, b_last = log.read_raw("a")[-1], log.read_raw("b")[-1]
    h = event_hash(a_head.hash, "a", 6, b_last.type, b_last.version, b_last.data, b_last.recorded_at_us)
    attack(db, f"UPDATE events SET session_id = 'a', seq = 6, prev_hash = '{a_head.hash}', hash = '{h}' WHERE position = {b_last.position}")
    audits = {a.session_id: a for a in audit_all(log)}
    assert audits["b"].ok  # a cut tail alone verifies ...
    assert {v.seq for v in audits["a"].violations} == {6}
    assert {"edited", "moved"} <= {w.strip("()") for v in audits["a"].violations for w in v.message.split()}, _messages(audits.values())
    findings = verify_checkpoints(log, tmp_path, RING)
    assert any(f.session_id == "b" and "tail cut" in f.message for f in findings)  # ... the checkpoint does not


@pytest.mark.invariant("I9")
def test_a_row_moved_to_another_position_fails(db: Database, tmp_path: Path):
    """(d) An event moved to a later global position (its session and seq untouched, so every
    hash still verifies) breaks the session's position order, and the checkpoint's pin."""
    log = EventLog(db, keys=RING)
    fill(log)
    write_checkpoint(log, tmp_path, RING)
    last = log.last_position()
    a5 = log.read_raw("a")[-1]
    a3 = log.read_raw("a")[2]
    attack(
        db,
        f"UPDATE events SET position = {last + 10} WHERE position = {a5.position}",
        f"UPDATE events SET position = {last + 20} WHERE position = {a3.position}",
    )
    audits = {a.session_id: a for a in audit_all(log)}
    assert [v.seq for v in audits["a"].violations] == [4] and "moved" in audits["a"].violations[0].message, _messages(audits.values())
    findings = verify_checkpoints(log, tmp_path, RING)
    assert any(f.session_id == "a" and f.seq == 5 and "moved" in f.message for f in findings), findings


# --------------------------------------------------------------------------------- checkpoints


@pytest.mark.invariant("I9")
def test_a_cut_tail_passes_the_chain_audit_but_not_the_checkpoint(db: Database, tmp_path: Path):
    """(a) Deleting a session's newest events leaves a chain that verifies, keyed or not; the
    checkpoint names the session, the seq it had and where the log now ends."""
    log = EventLog(db, keys=RING)
    fill(log)
    write_checkpoint(log, tmp_path / "cps", RING)
    assert verify_checkpoints(log, tmp_path / "cps", RING) == []
    attack(db, "DELETE FROM events WHERE session_id = 'a' AND seq > 3")
    assert all(a.ok for a in audit_all(log))
    findings = verify_checkpoints(log, tmp_path / "cps", RING)
    assert [(f.session_id, f.seq) for f in findings if f.session_id] == [("a", 5)]
    assert "tail cut" in findings[-1].message and "ends at seq 3" in findings[-1].message
    assert any("events at positions" in f.message for f in findings if not f.session_id)


@pytest.mark.invariant("I9")
def test_a_deleted_session_passes_the_chain_audit_but_not_the_checkpoint(db: Database, tmp_path: Path):
    """(b) A whole session deleted: nothing left to audit, but the checkpoint remembers it."""
    log = EventLog(db, keys=RING)
    fill(log)
    write_checkpoint(log, tmp_path, RING)
    attack(db, "DELETE FROM events WHERE session_id = 'b'")
    assert [a.session_id for a in audit_all(log)] == ["a"] and all(a.ok for a in audit_all(log))
    findings = verify_checkpoints(log, tmp_path, RING)
    assert any(f.session_id == "b" and "session deleted" in f.message for f in findings), findings


@pytest.mark.invariant("I9")
def test_events_after_the_checkpoint_are_checked_against_it_and_checkpoints_chain(db: Database, tmp_path: Path):
    """A log that grew after a checkpoint still verifies against it; a later checkpoint names
    the earlier one's signature; a session cut below an older checkpoint but re-grown past the
    newer one is found by the older one's pin."""
    log = EventLog(db, keys=RING)
    fill(log)
    write_checkpoint(log, tmp_path, RING)
    log.append("a", [text(5)], expected_seq=5)
    log.append("c", [opened("c")], expected_seq=0)
    assert verify_checkpoints(log, tmp_path, RING) == []
    write_checkpoint(log, tmp_path, RING)
    first, second = read_checkpoints(tmp_path)
    assert second.prev == first.mac and first.prev is None
    assert [s[0] for s in second.sessions] == ["a", "b", "c"] and second.sessions[0][1] == 6
    assert verify_checkpoints(log, tmp_path, RING) == []
    attack(db, "DELETE FROM events WHERE session_id = 'c'")
    assert [f.session_id for f in verify_checkpoints(log, tmp_path, RING) if f.session_id] == ["c"]


@pytest.mark.invariant("I9")
def test_an_edited_or_removed_checkpoint_is_reported(db: Database, tmp_path: Path):
    """The checkpoint file is outside the attacker's reach by assumption; should it be edited
    anyway, its signature or its chain of checkpoints says so."""
    log = EventLog(db, keys=RING)
    fill(log)
    path, _ = write_checkpoint(log, tmp_path, RING)
    write_checkpoint(log, tmp_path, RING)
    write_checkpoint(log, tmp_path, RING)
    lines = path.read_text().splitlines()
    path.write_text("\n".join([lines[0], lines[2]]) + "\n")
    assert any("does not follow checkpoint 1" in f.message for f in verify_checkpoints(log, tmp_path, RING))
    path.write_text("\n".join([lines[0], lines[1].replace('"events":8', '"events":7')]) + "\n")
    assert any("checkpoint 2's signature does not verify" in f.message for f in verify_checkpoints(log, tmp_path, RING))
    path.write_text("not json\n")
    with pytest.raises(CheckpointError, match="line 1: not a checkpoint"):
        verify_checkpoints(log, tmp_path, RING)


# ------------------------------------------------------------------------- keys and old logs


@pytest.mark.invariant("I9")
def test_a_wrong_key_is_told_apart_from_an_edit(db: Database):
    """Auditing with a ring that lacks the signing key says which key signed and which the ring
    holds, once per session — not that every event was edited."""
    fill(EventLog(db, keys=RING))
    other = KeyRing.from_keys([KEY2])
    audits = audit_all(EventLog(db, keys=other))
    assert [len(a.violations) for a in audits] == [1, 1]
    v = audits[0].violations[0]
    assert v.check == "key" and key_id_of(KEY1) in v.message and key_id_of(KEY2) in v.message and "edited" not in v.message.split(":")[0]
    [v] = audit_all(EventLog(db))[0].violations
    assert v.check == "key" and "no key ring was given" in v.message


@pytest.mark.invariant("I9")
def test_rotation_keeps_old_sessions_verifying_with_the_old_key_in_the_ring(db: Database):
    """Rotation: the new key signs from now on, the old one stays in the ring to verify; a
    session spanning the rotation verifies event by event under each key."""
    log = EventLog(db, keys=RING)
    fill(log)
    rotated = KeyRing.from_keys([KEY2, KEY1])
    log2 = EventLog(db, keys=rotated)
    log2.append("a", [text(5)], expected_seq=5)
    log2.append("c", [opened("c")], expected_seq=0)
    assert [r.key_id for r in log2.read_raw("a")] == [key_id_of(KEY1)] * 5 + [key_id_of(KEY2)]
    audits = {a.session_id: a for a in audit_all(log2)}
    assert all(a.ok for a in audits.values()), _messages(audits.values())
    assert audits["a"].key_ids == (key_id_of(KEY1), key_id_of(KEY2))
    dropped_old = {a.session_id: a for a in audit_all(EventLog(db, keys=KeyRing.from_keys([KEY2])))}
    assert audits["c"].ok and dropped_old["c"].ok and not dropped_old["b"].ok


@pytest.mark.invariant("I9")
def test_an_old_unkeyed_log_upgrades_and_audits_as_before_and_keying_continues_it(db_url: str):
    """A log written at revision 0003 (no key_id column) migrates and audits clean, with or
    without a ring; keyed appends continue its sessions; an unkeyed append after keyed ones is
    a downgrade."""
    database = Database(db_url)
    try:
        upgrade(database, "0003")
        with database.write() as conn:
            prev = GENESIS
            for seq, data in enumerate(['{"x":1}', '{"x":2}'], start=1):
                h = event_hash(prev, "old", seq, "text.appended", 1, data, 1000 + seq)
                conn.exec_driver_sql(
                    "INSERT INTO events (session_id, seq, type, version, data, recorded_at_us, prev_hash, hash) "
                    f"VALUES ('old', {seq}, 'text.appended', 1, '{data}', {1000 + seq}, '{prev}', '{h}')"
                )
                prev = h
        upgrade(database)
        chain_only = lambda a: [v for v in a.violations if v.check in ("chain", "key")]  # noqa: E731
        [before] = audit_all(EventLog(database))
        assert chain_only(before) == [] and before.unkeyed_events == 2
        keyed = EventLog(database, keys=RING)
        keyed.append("old", [text(3)], expected_seq=2)
        [after] = audit_all(keyed)
        assert chain_only(after) == [] and after.key_ids == (key_id_of(KEY1),) and after.unkeyed_events == 2
        EventLog(database).append("old", [text(4)], expected_seq=3)
        [downgraded] = audit_all(keyed)
        assert [v.seq for v in chain_only(downgraded)] == [4] and "downgraded" in chain_only(downgraded)[0].message
    finally:
        database.dispose()


@pytest.mark.invariant("I9")
def test_a_session_whose_first_event_was_deleted_is_still_audited(db: Database):
    """The audit lists sessions by any row, not by seq 1, so removing a session's first event
    does not take the session out of the audit."""
    log = EventLog(db, keys=RING)
    fill(log)
    attack(db, "DELETE FROM events WHERE session_id = 'b' AND seq = 1")
    audits = {a.session_id: a for a in audit_all(log)}
    assert set(audits) == {"a", "b"} and not audits["b"].ok


@pytest.mark.invariant("I9")
def test_key_files_are_checked_line_by_line(tmp_path: Path):
    """A key file's problems are named by file and line, never by the key's content."""
    with pytest.raises(ChainKeyError, match="cannot read it"):
        KeyRing.load(tmp_path / "missing")
    (tmp_path / "k").write_text("# comment\n\nzz-not-hex\n")
    with pytest.raises(ChainKeyError, match=r"k, line 3: not a hex key"):
        KeyRing.load(tmp_path / "k")
    (tmp_path / "k").write_text("abcd\n")
    with pytest.raises(ChainKeyError, match=r"line 1: 2 bytes; a chain key needs at least 32"):
        KeyRing.load(tmp_path / "k")
    (tmp_path / "k").write_text("# only a comment\n")
    with pytest.raises(ChainKeyError, match="no key in it"):
        KeyRing.load(tmp_path / "k")
    (tmp_path / "k").write_text(f"{KEY2.hex()}  # new\n{KEY1.hex()}\n")
    ring = KeyRing.load(tmp_path / "k")
    assert ring.signing_id == key_id_of(KEY2) and set(ring.keys) == {key_id_of(KEY1), key_id_of(KEY2)}


# ------------------------------------------------------------------------------ command line


def _cli(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "duplex_es.cli.main", *args],
        capture_output=True, text=True, timeout=120, env={**os.environ, "COLUMNS": "200", **(env or {})},
    )


@pytest.mark.invariant("I9")
def test_the_cli_round_trip_checkpoint_tamper_audit(db_url: str, tmp_path: Path):
    """chain-key new, a keyed log, `duplex-es checkpoint`, a cut tail: `duplex-es audit
    --checkpoint` exits 1 naming the session and seq; it was 0 before the cut; without the
    checkpoint the cut goes unseen (exit 0)."""
    key = tmp_path / "chain.key"
    assert _cli("chain-key", "new", str(key)).returncode == 0
    assert oct(key.stat().st_mode & 0o777) == "0o600"
    database = Database(db_url)
    upgrade(database)
    fill(EventLog(database, keys=KeyRing.load(key)))
    cps = tmp_path / "checkpoints"
    cps.mkdir()
    done = _cli("checkpoint", "--db", db_url, "--chain-key-file", str(key), "--out", str(cps))
    assert done.returncode == 0, done.stderr
    assert "2 session(s), 8 events" in done.stdout
    ok = _cli("audit", "--db", db_url, "--checkpoint", str(cps), env={"DUPLEX_ES_CHAIN_KEY_FILE": str(key)})
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert "everything they pinned" in ok.stdout
    attack(database, "DELETE FROM events WHERE session_id = 'b' AND seq = 3")
    database.dispose()
    unseen = _cli("audit", "--db", db_url, "--chain-key-file", str(key))
    assert unseen.returncode == 0 and "no checkpoint given" in unseen.stdout
    cut = _cli("audit", "--db", db_url, "--chain-key-file", str(key), "--checkpoint", str(cps))
    assert cut.returncode == 1, cut.stdout + cut.stderr
    assert "b seq 3 [checkpoint] tail cut" in cut.stdout
    as_json = _cli("audit", "--json", "--db", db_url, "--chain-key-file", str(key), "--checkpoint", str(cps))
    assert as_json.returncode == 1 and '"session_id": "b"' in as_json.stdout


@pytest.mark.invariant("I9")
def test_the_cli_says_when_the_chain_is_not_keyed_and_refuses_a_checkpoint_without_a_key(sqlite_url: str, tmp_path: Path):
    """An unkeyed log audits as before (exit 0) with the plain warning; checkpoint and audit
    --checkpoint without a key, and a bad key file, exit 2 with one line naming the problem."""
    database = Database(sqlite_url)
    upgrade(database)
    fill(EventLog(database))
    database.dispose()
    env = {"DUPLEX_ES_CHAIN_KEY_FILE": "", "DUPLEX_ES_CHECKPOINTS": ""}
    done = _cli("audit", "--db", sqlite_url, env=env)
    assert done.returncode == 0 and "chain not keyed: edits with a recomputed chain are not detected" in done.stdout
    no_key = _cli("checkpoint", "--db", sqlite_url, "--out", str(tmp_path), env=env)
    assert no_key.returncode == 2 and "--chain-key-file" in no_key.stderr
    no_key = _cli("audit", "--db", sqlite_url, "--checkpoint", str(tmp_path), env=env)
    assert no_key.returncode == 2 and "--chain-key-file" in no_key.stderr
    (tmp_path / "bad.key").write_text("nope\n")
    bad = _cli("audit", "--db", sqlite_url, "--chain-key-file", str(tmp_path / "bad.key"), env=env)
    assert bad.returncode == 2 and "bad.key, line 1: not a hex key" in bad.stderr
