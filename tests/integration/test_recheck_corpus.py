"""``duplex-es replay --recheck`` (issue 15): the recorded corpus (``tests/corpus``, real
sessions made by ``scripts/make_corpus.py``) is decided the same by today's code, and a rule
changed on purpose makes the recheck fail with a report naming the session, the seq, what the
log holds and what the code decides now, in context."""

from __future__ import annotations

import json
from functools import partial
from pathlib import Path

import attrs
import pytest

from duplex_es.cli.main import main
from duplex_es.domain import commands as c
from duplex_es.domain import decide, evolve, new_state
from duplex_es.domain import input as input_rules
from duplex_es.domain.kinds.speech import DECIDERS
from duplex_es.events import CommandRejected, ContentPart
from duplex_es.export import import_jsonl
from duplex_es.recheck import recheck_log
from duplex_es.store import EventLog, WrongExpectedSeq

CORPUS = Path(__file__).resolve().parents[1] / "corpus"
FILES = sorted(CORPUS.glob("*.jsonl"))


def load(log: EventLog, name: str) -> str:
    """Import one corpus file into ``log``; its session id."""
    with (CORPUS / f"{name}.jsonl").open(encoding="utf-8") as f:
        (session_id,) = import_jsonl(log, f)
    return session_id


def test_the_corpus_holds_small_speech_and_world_sessions():
    names = {p.stem for p in FILES}
    assert {"spoken_turn", "barge_in", "function_call", "full_duplex", "judged_turn", "refusals", "resumed", "world"} <= names
    assert sum(p.stat().st_size for p in FILES) < 2_000_000


@pytest.mark.parametrize("path", FILES, ids=[p.stem for p in FILES])
def test_todays_code_decides_every_recorded_command_as_logged(sqlite_log: EventLog, path: Path):
    session_id = load(sqlite_log, path.stem)
    (result,) = recheck_log(sqlite_log, [session_id])
    assert result.ok, [(d.seq, d.command, d.differences) for d in result.divergences]
    # Every batch a command wrote was re-decided: nothing left unchecked.
    assert result.skipped == ()
    assert result.rechecked > 3


def test_the_command_line_rechecks_every_session_of_the_log(db_url: str, capsys: pytest.CaptureFixture[str]):
    assert main(["import", "--db", db_url, *map(str, FILES)]) == 0
    capsys.readouterr()
    assert main(["replay", "--recheck", "--db", db_url]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len([line for line in lines if ": OK — " in line]) == len(FILES)
    assert main(["replay", "--recheck", "--json", "--db", db_url]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["ok"] and len(report["sessions"]) == len(FILES)
    assert {s["kind"] for s in report["sessions"]} == {"speech", "world"}


def _refuse_differently(cmd: c.CancelResponse, state):  # noqa: ANN001, ANN202 - a decider
    """``response.cancel`` as a changed rule decides it: the same refusal, another code."""
    events = _CANCEL(cmd, state)
    return [attrs.evolve(e, code="no_response_to_cancel") if isinstance(e, CommandRejected) else e for e in events]


_CANCEL = DECIDERS[c.CancelResponse]


def test_a_changed_error_code_fails_the_recheck_with_the_refusal_in_context(sqlite_url: str, capsys, monkeypatch):
    assert main(["import", "--db", sqlite_url, str(CORPUS / "refusals.jsonl")]) == 0
    session_id = capsys.readouterr().out.split(": ")[-1].strip()
    monkeypatch.setitem(DECIDERS, c.CancelResponse, _refuse_differently)

    assert main(["replay", "--recheck", "--json", "--db", sqlite_url]) == 1
    (session,) = json.loads(capsys.readouterr().out)["sessions"]
    assert session["session_id"] == session_id and not session["ok"]
    (d,) = session["divergences"]  # the one response.cancel of the session
    assert d["command"] == "response.cancel [nothing]"
    assert d["logged"][0]["verdict"] == "rejected: response_cancel_not_active"
    assert d["decided"][0]["verdict"] == "rejected: no_response_to_cancel"
    assert d["differences"] == [f"seq {d['seq']} command.rejected: code: log 'response_cancel_not_active', current 'no_response_to_cancel'"]
    shown = [row["seq"] for row in d["context"]]
    assert shown == list(range(d["seq"] - 3, d["seq"] + 4))  # three events either side

    assert main(["replay", "--recheck", session_id[:12], "--db", sqlite_url]) == 1
    out = capsys.readouterr().out
    assert f"{session_id} (speech" in out and "1 divergence(s)" in out
    assert f"first divergence at seq {d['seq']}: response.cancel [nothing]" in out
    assert "response_cancel_not_active" in out and "no_response_to_cancel" in out


def test_a_raised_limit_shows_the_turn_server_vad_no_longer_commits(sqlite_log: EventLog, monkeypatch):
    session_id = load(sqlite_log, "spoken_turn")
    # The rule changed on purpose: a turn needs 10 s of speech (the logged one has about 5 s).
    monkeypatch.setattr(input_rules, "commit_events", partial(input_rules.commit_events, min_ms=10_000))

    (result,) = recheck_log(sqlite_log, [session_id])
    assert not result.ok
    first = result.divergences[0]
    assert first.command.startswith("input_audio_buffer.append")
    logged = [row.type for row in first.logged]
    assert logged[:3] == ["input_audio_buffer.appended", "input_audio_buffer.speech_stopped", "input_audio_buffer.committed"]
    assert "response.created" in logged
    assert [row.type for row in first.decided] == ["input_audio_buffer.appended", "input_audio_buffer.speech_stopped"]
    assert f"seq {first.seqs[2]}: the log has input_audio_buffer.committed (decided); the current code decides no such event" in first.differences
    assert [row.seq for row in first.context][3:3 + len(first.seqs)] == list(first.seqs)


def test_a_refusal_that_depends_on_fields_the_log_drops_is_reported_not_rechecked(sqlite_log: EventLog):
    """A refused ``conversation.item.create`` logs its code, not the item: it is counted as not
    rechecked, with the reason, and the session is otherwise OK."""
    state, seq = new_state(), 0
    commands = [
        c.OpenSession(session_id="sess_norecheck", model="m"),
        c.CreateItem(event_id="bad", item_id="item_1", role="user", content=(ContentPart(type="output_text", text="x"),)),
        c.Heartbeat(event_id="hb"),
    ]
    for command in commands:
        events = decide(state, command)
        sqlite_log.append("sess_norecheck", events, expected_seq=seq)
        for ev in events:
            seq += 1
            state = evolve(state, seq, ev)
    assert isinstance(sqlite_log.read_session("sess_norecheck")[1].event, CommandRejected)

    (result,) = recheck_log(sqlite_log)
    assert result.ok and result.rechecked == 2
    (skipped,) = result.skipped
    assert (skipped.seq, skipped.type) == (2, "command.rejected")
    assert skipped.reason.startswith("refused conversation.item.create (invalid_item)")


def test_an_import_refuses_a_session_the_log_already_holds(sqlite_log: EventLog):
    load(sqlite_log, "world")
    with pytest.raises(WrongExpectedSeq):
        load(sqlite_log, "world")


def test_a_lowered_world_queue_limit_refuses_an_interaction_the_log_accepted(sqlite_log: EventLog, monkeypatch):
    from duplex_es.domain.kinds.world import DECIDERS as WORLD_DECIDERS
    from duplex_es.domain.world import Interact, decide_interact

    session_id = load(sqlite_log, "world")

    def one_at_a_time(cmd: Interact, state):  # noqa: ANN001, ANN202 - the changed rule
        return decide_interact(cmd, attrs.evolve(state, config=attrs.evolve(state.config, max_pending=1)))

    monkeypatch.setitem(WORLD_DECIDERS, Interact, one_at_a_time)
    (result,) = recheck_log(sqlite_log, [session_id])
    first = result.divergences[0]
    assert first.command == "session.interaction [2]"
    assert [(r.type, r.verdict) for r in first.logged] == [("world.interaction.accepted", "accepted")]
    assert [(r.type, r.verdict) for r in first.decided] == [("world.interaction.rejected", "rejected: queue_full")]


def test_a_changed_pump_rule_shows_at_the_reaction_the_server_decided(sqlite_log: EventLog, monkeypatch):
    """The server's own decisions are re-decided too: a pump that now ends a completed response
    ``incomplete`` diverges at the ``response.done`` the log holds."""
    from duplex_es.events import ResponseDone

    session_id = load(sqlite_log, "function_call")
    pump = DECIDERS[c.Pump]

    def cut_short(cmd, state):  # noqa: ANN001, ANN202 - the changed rule
        return [
            attrs.evolve(e, status="incomplete", reason="max_output_tokens") if isinstance(e, ResponseDone) and e.status == "completed" else e
            for e in pump(cmd, state)
        ]

    monkeypatch.setitem(DECIDERS, c.Pump, cut_short)
    (result,) = recheck_log(sqlite_log, [session_id])
    assert len(result.divergences) == 2  # both responses of the session
    first = result.divergences[0]
    assert first.command == "session.pump"
    assert [r.type for r in first.logged] == ["response.done"]
    assert first.differences == (f"seq {first.seq} response.done: reason: log None, current 'max_output_tokens'; status: log 'completed', current 'incomplete'",)


def test_an_import_names_the_line_that_is_not_an_exported_event(sqlite_url: str, tmp_path: Path, capsys):
    lines = (CORPUS / "refusals.jsonl").read_text(encoding="utf-8").splitlines()
    broken = tmp_path / "broken.jsonl"
    broken.write_text("\n".join([lines[0], lines[2]]) + "\n", encoding="utf-8")  # seq 2 is missing
    assert main(["import", "--db", sqlite_url, str(broken)]) != 0
    err = capsys.readouterr().err
    assert "line 2: session sess_" in err and "goes from seq 1 to 3" in err


@pytest.mark.parametrize(
    ("line", "said"),
    [("[1, 2]", "a JSON list, not an object"), ('{"seq": 1}', "no 'session_id'"), ("{not json", "not JSON")],
)
def test_an_import_says_what_is_wrong_with_a_line_in_words(sqlite_url: str, tmp_path: Path, capsys, line: str, said: str):
    broken = tmp_path / "broken.jsonl"
    broken.write_text(line + "\n", encoding="utf-8")
    assert main(["import", "--db", sqlite_url, str(broken)]) != 0
    err = capsys.readouterr().err
    assert "line 1" in err and said in err, err
