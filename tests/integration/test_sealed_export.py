"""Export and import of sealed sessions (docs/privacy.md): with the master key an export holds
the content and imports into another sealed log whole; without it each sealed event is marked
``withheld`` and an import refuses it, naming the line."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from duplex_es.events import SessionClosed, SessionConfig, SessionOpened, TextAppended
from duplex_es.export import ImportFileError, import_jsonl, write_jsonl
from duplex_es.store import Database, EventLog, upgrade
from duplex_es.store.datakeys import MasterKeys

KEY = MasterKeys.from_keys([bytes(range(32))])
EVENTS = [SessionOpened(session_id="s", config=SessionConfig(model="m", instructions="be kind")), TextAppended(text="figs"), SessionClosed()]


def _export(log: EventLog) -> str:
    out = io.StringIO()
    write_jsonl(log, out, "s")
    return out.getvalue()


def test_a_sealed_session_exports_with_the_key_and_imports_whole(db: Database, tmp_path: Path):
    EventLog(db, master_keys=KEY).append("s", EVENTS, expected_seq=0)
    text = _export(EventLog(db, master_keys=KEY))
    assert "figs" in text and "withheld" not in text
    other = Database(f"sqlite:///{tmp_path / 'other.db'}")
    upgrade(other)
    target = EventLog(other, master_keys=KEY)
    assert import_jsonl(target, text.splitlines()) == {"s": 3}
    assert [r.event for r in target.read_session("s")] == EVENTS and [r.sealed for r in target.read_raw("s")][:2] == [1, 1]
    other.dispose()


def test_an_export_without_the_key_marks_what_it_could_not_read_and_an_import_refuses_it(db: Database, tmp_path: Path):
    EventLog(db, master_keys=KEY).append("s", EVENTS, expected_seq=0)
    lines = [json.loads(line) for line in _export(EventLog(db)).splitlines()]
    assert [line.get("withheld", False) for line in lines] == [True, True, False]
    assert lines[1]["event"]["text"] == ""
    other = Database(f"sqlite:///{tmp_path / 'other.db'}")
    upgrade(other)
    with pytest.raises(ImportFileError, match="line 1: .*exported without its content"):
        import_jsonl(EventLog(other), [json.dumps(line) for line in lines])
    assert EventLog(other).head("s") == 0  # nothing recorded
    other.dispose()
