"""Function calls in a real log (issue 13, "Done when"): ``duplex-es audit`` fails on a log in
which an output answers a call twice or answers a call of another session, and passes the log
of a call and its output; ``duplex-es replay`` shows the call, its arguments and its output.

The logs are written straight into a SQLite log, as a writer bypassing the decider would write
them (tests/tool_call_logs.py builds them).
"""

from __future__ import annotations

import os
import subprocess
import sys
from typing import Iterator

import pytest

from duplex_es.audit import audit_all, audit_session
from duplex_es.replay import replay
from duplex_es.store import Database, EventLog, upgrade
from harness import Harness
from tool_call_logs import answer, call_turn, restored_call, with_weather_tool


@pytest.fixture
def log(sqlite_url: str) -> Iterator[EventLog]:
    """A fresh SQLite log."""
    database = Database(sqlite_url)
    upgrade(database)
    yield EventLog(database)
    database.dispose()


def _write(log: EventLog, h: Harness, *, since: int = 0) -> None:
    """Append the harness's events after seq ``since`` to its session in ``log``."""
    log.append(h.state.session_id, [ev for seq, ev in h.log if seq > since], expected_seq=since)


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "duplex_es.cli.main", *args],
        capture_output=True, text=True, timeout=120,
        env={**os.environ, "COLUMNS": "400", "DUPLEX_ES_CHAIN_KEY_FILE": "", "DUPLEX_ES_CHECKPOINTS": ""},
    )


def test_audit_passes_a_call_and_its_output_and_fails_a_second_output_for_it(log: EventLog, sqlite_url: str):
    """The command exits 0 on a call and its output, and 1 once a second output answers the
    same call, naming both outputs' seqs."""
    h = with_weather_tool()
    call_turn(h, "call_1")
    answer(h, "call_1")
    _write(log, h)
    clean = _cli("audit", "--db", sqlite_url)
    assert clean.returncode == 0, clean.stdout + clean.stderr
    first_seq = len(h.log)
    answer(h, "call_1", "a second answer")
    _write(log, h, since=first_seq)
    twice = _cli("audit", "--db", sqlite_url)
    assert twice.returncode == 1, twice.stdout + twice.stderr
    assert f"sess_test seq {first_seq + 1} [tool_calls] call call_1 answered twice: at seq {first_seq} and at seq {first_seq + 1}" in twice.stdout
    [report] = audit_all(log)
    assert [v.check for v in report.violations] == ["tool_calls"]


def test_audit_fails_an_output_answering_a_call_of_another_session(log: EventLog):
    """Session a made call_a; session b's output names call_a: b fails, saying no call of its
    own made it; a, which made and answered it, passes."""
    a = with_weather_tool("sess_a")
    call_turn(a, "call_a")
    answer(a, "call_a")
    _write(log, a)
    b = with_weather_tool("sess_b")
    call_turn(b, "call_b")
    stray = answer(b, "call_a")
    _write(log, b)
    assert audit_session(log, "sess_a").ok
    report = audit_session(log, "sess_b")
    assert [(v.check, v.seq) for v in report.violations] == [("tool_calls", len(b.log))]
    assert f"output item {stray.item_id} answers call call_a, which no call of this session made before it (a call of another session" in report.violations[0].message


def test_replay_shows_the_call_its_arguments_and_its_output(log: EventLog, sqlite_url: str):
    """The timeline shows each argument chunk, the completed call with its whole arguments,
    the client's output for it (a long output clipped), and a call the client restored."""
    h = with_weather_tool()
    restored_call(h, "call_old")
    call_turn(h, "call_1")
    answer(h, "call_1")
    answer(h, "call_1", "x" * 500)  # refused by a correct server; shown all the same, clipped
    _write(log, h)
    rows = {r.seq: r for r in replay(log, "sess_test").timeline}
    chunks = [r for r in rows.values() if "function_call get_weather" in r.summary]
    assert [r.verdict for r in chunks] == ["accepted", "accepted"]
    assert "function_call get_weather call_1 args+='{\"city\":'" in chunks[0].summary and "done:" not in chunks[0].summary
    assert "done: get_weather({\"city\": \"Lisbon\"})" in chunks[1].summary
    outputs = [r.summary for r in rows.values() if r.type == "conversation.item.created"]
    assert "function_call call_old: get_weather({\"city\": \"Porto\"})" in outputs[0]
    assert "function_call_output call_1: '{\"temp_c\": 21, \"sky\": \"sunny\"}'" in outputs[1]
    assert len(outputs[2]) < 200 and "xxx..." in outputs[2]
    shown = _cli("replay", "sess_test", "--db", sqlite_url)
    assert shown.returncode == 0, shown.stderr
    for text in ("function_call get_weather call_1", "done: get_weather({\"city\": \"Lisbon\"})", "function_call_output call_1: '{\"temp_c\": 21"):
        assert text in shown.stdout, shown.stdout
