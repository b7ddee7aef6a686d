"""Event schema evolution (issue 5 item 4, cases 19 and 20): rows written at an older schema
version reach every read path in the current shape; a row of an unknown type or a future version
is an error naming the type and the position, on every read path."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Iterator

import pytest
import sqlalchemy as sa

from duplex_es.audit import audit_session
from duplex_es.domain import OpenSession, SessionState, decide
from duplex_es.domain.kinds import speech
from duplex_es.domain.rules import keep
from duplex_es.events import encode, event, register_upcaster
from duplex_es.events.base import Event
from duplex_es.export import export_lines
from duplex_es.replay import replay
from duplex_es.snapshots import load_state
from duplex_es.store import Database, EventLog, SnapshotStore, StoredEventError, upgrade
from duplex_es.store.chain import GENESIS, event_hash
from duplex_es.store.schema import events as events_t

from conftest import backend_url


@event("test.note", version=2)
class Note(Event):
    """A test-only event at schema version 2: v1 stored ``{"text": ...}``; v2 renamed it to
    ``body`` and added ``lang``. (No real event has a second version yet.)"""

    body: str
    lang: str = "en"


register_upcaster("test.note", 1, lambda d: {"body": d["text"], "lang": "en"})


@pytest.fixture(autouse=True)
def _note_changes_no_state(monkeypatch):  # type: ignore[no-untyped-def]
    """A speech session folds a note as an event that changes nothing (for this module only)."""
    monkeypatch.setitem(speech.EVOLVERS, Note, keep)


def write_rows(log: EventLog, session_id: str, rows: list[tuple[str, int, str]]) -> None:
    """Append raw ``(type, version, data)`` rows with a valid hash chain, as an older release
    of duplex_es would have written them."""
    with log.db.write() as conn:
        head = conn.execute(
            sa.select(events_t.c.seq, events_t.c.hash).where(events_t.c.session_id == session_id).order_by(events_t.c.seq.desc()).limit(1)
        ).first()
        seq, prev = (head.seq, head.hash) if head else (0, GENESIS)
        for type_, version, data in rows:
            seq += 1
            digest = event_hash(prev, session_id, seq, type_, version, data, 1_700_000_000_000_000 + seq)
            conn.execute(
                events_t.insert().values(
                    session_id=session_id, seq=seq, type=type_, version=version, data=data,
                    recorded_at_us=1_700_000_000_000_000 + seq, prev_hash=prev, hash=digest,
                )
            )
            prev = digest


@pytest.fixture(params=["sqlite", "postgresql"])
def log(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[EventLog]:
    with backend_url(request.param, tmp_path) as url:
        db = Database(url)
        upgrade(db)
        yield EventLog(db)
        db.dispose()


def opened(session_id: str) -> tuple[str, int, str]:
    [ev] = decide(SessionState(), OpenSession(session_id=session_id, model="m"))
    return encode(ev)


def test_v1_rows_arrive_in_the_current_shape_on_every_read_path(log: EventLog, tmp_path: Path):
    """Case 20: session load, global tail, replay, audit and export."""
    sid = "sess_evolved"
    write_rows(log, sid, [opened(sid), ("test.note", 1, json.dumps({"text": "hello"})), ("test.note", 2, json.dumps({"body": "hi", "lang": "fr"}))])
    want = [Note(body="hello", lang="en"), Note(body="hi", lang="fr")]

    assert [r.event for r in log.read_session(sid)][1:] == want
    assert [r.event for r in log.tail(0) if r.session_id == sid][1:] == want
    assert [r.event for r in log.read_seqs(sid, (2,))] == want[:1]
    loaded = load_state(log, SnapshotStore(log.db), sid)
    assert loaded.state.seq == 3 and [r.event for r in loaded.records][1:] == want
    assert replay(log, sid).state.seq == 3
    report = audit_session(log, sid)
    assert report.ok, report.violations
    lines = list(export_lines(log, sid))
    assert [(x["type"], x["version"], x["event"]) for x in lines[1:]] == [
        ("test.note", 2, {"body": "hello", "lang": "en"}),
        ("test.note", 2, {"body": "hi", "lang": "fr"}),
    ]
    assert [x["seq"] for x in lines] == [1, 2, 3]


@pytest.mark.parametrize(
    "row, reason",
    [
        (("test.vanished", 1, "{}"), "unknown_type"),
        (("session.heartbeat", 99, "{}"), "future_version"),
        # Not JSON: the standard library's message, whichever parser read it first.
        (("session.heartbeat", 1, "{not json"), "bad_data Expecting property name enclosed in double quotes: line 1 column 2 (char 1)"),
    ],
)
def test_an_unknown_type_or_a_future_version_is_an_error_naming_type_and_position(log: EventLog, row, reason):
    """Case 19, on every read path."""
    sid = "sess_bad"
    write_rows(log, sid, [opened(sid), row])
    position = log.last_position()
    readers = {
        "session load": lambda: log.read_session(sid),
        "global tail": lambda: log.tail(0),
        "state load": lambda: load_state(log, SnapshotStore(log.db), sid),
        "replay": lambda: replay(log, sid),
        "export": lambda: list(export_lines(log)),
    }
    for name, read in readers.items():
        with pytest.raises(StoredEventError) as err:
            read()
        text = str(err.value)
        assert f"position {position}" in text and repr(row[0]) in text and reason in text, (name, text)
    report = audit_session(log, sid)
    [v] = report.violations
    assert v.check == "decode" and v.seq == 2 and row[0] in v.message and reason in v.message


def test_the_cli_reports_an_undecodable_row_without_a_traceback(tmp_path: Path):
    url = f"sqlite:///{tmp_path / 'bad.db'}"
    db = Database(url)
    upgrade(db)
    write_rows(EventLog(db), "sess_cli", [opened("sess_cli"), ("session.heartbeat", 7, "{}")])
    db.dispose()
    for args in (["replay", "sess_cli"], ["export", "sess_cli"]):
        run = subprocess.run([sys.executable, "-m", "duplex_es.cli.main", *args, "--db", url], capture_output=True, text=True, timeout=60)
        assert run.returncode == 2, run.stderr
        out = run.stdout + run.stderr
        assert "position 2" in out and "'session.heartbeat' v7" in out and "Traceback" not in out
