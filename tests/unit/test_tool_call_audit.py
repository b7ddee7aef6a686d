"""The audit's tool-call rules (issue 13, item 2) on event lists: every call is made once,
streams only within its own response until its ``done`` chunk, and every
``function_call_output`` answers exactly one earlier call of the session.

Forged events are written as a writer that bypasses the decider would write them; the outputs
the audit counts as making calls are those the reducer's verdict accepts (``classify_output``).
"""

from __future__ import annotations

import pytest

from duplex_es.domain import CancelResponse, evolve
from duplex_es.domain.responses import classify_output
from duplex_es.domain.speech_audit import audit_speech
from duplex_es.events import ResponseDone, ItemCreated, ItemTruncated
from harness import Harness
from tool_call_logs import answer, call_turn, chunk, restored_call, with_weather_tool


def violations(h: Harness, check: str = "tool_calls") -> list[tuple[int, str]]:
    found = audit_speech(h.state.session_id, h.log, evolve).violations
    return [(v.seq, v.message) for v in found if v.check == check]


def everything(h: Harness) -> list[str]:
    return [f"{v.seq} [{v.check}] {v.message}" for v in audit_speech(h.state.session_id, h.log, evolve).violations]


def _made_at(h: Harness, call_id: str) -> int:
    """The seq of the first output streaming ``call_id``."""
    return next(seq for seq, ev in h.log if getattr(getattr(ev, "function_call", None), "call_id", None) == call_id)


def _accepted_next(h: Harness, **fields) -> bool:
    """Whether the reducer's verdict accepts the output ``chunk`` would log next (the audit
    counts only accepted outputs: a refused one made or extended nothing)."""
    probe = Harness(state=h.state, log=list(h.log))
    [out] = chunk(probe, **fields)
    return classify_output(h.state, out).accepted


def test_a_streamed_call_and_its_output_audit_clean():
    """A response streams get_weather's arguments in two chunks, the client answers the call:
    no rule of any check is broken — and two calls of two turns, each answered, neither."""
    h = with_weather_tool()
    call_turn(h, "call_1")
    answer(h, "call_1")
    call_turn(h, "call_2", ('{"city": "Porto"}',))
    answer(h, "call_2")
    assert everything(h) == []


def test_a_restored_call_answered_by_the_client_audits_clean():
    """A client-created function_call item makes a call its output may answer."""
    h = with_weather_tool()
    restored_call(h, "call_old")
    answer(h, "call_old")
    assert everything(h) == []


def test_a_second_output_for_one_call_is_a_violation_naming_both():
    h = with_weather_tool()
    call_turn(h, "call_1")
    first = len(h.log) + 1
    answer(h, "call_1")
    answer(h, "call_1")
    assert violations(h) == [(first + 1, f"call call_1 answered twice: at seq {first} and at seq {first + 1}")]


def test_an_output_for_a_call_no_call_of_the_session_made_is_a_violation():
    """An output naming a call_id the session never made (another session's call, say)."""
    h = with_weather_tool()
    call_turn(h, "call_1")
    answer(h, "call_1")
    item = answer(h, "call_elsewhere")
    [(seq, message)] = violations(h)
    assert seq == len(h.log) and item.item_id in message
    assert "call_elsewhere, which no call of this session made before it (a call of another session" in message


def test_an_output_before_its_call_is_made_answers_nothing():
    """The output must follow the call in the log: an output whose call_id is made only later
    is reported where the output is."""
    h = with_weather_tool()
    answer(h, "call_1")
    early = len(h.log)
    call_turn(h, "call_1")
    assert [seq for seq, _ in violations(h)] == [early]


def test_an_output_for_a_call_cut_off_mid_stream_is_a_violation():
    """A call whose response was cancelled before its arguments were done was never complete:
    no output may answer it."""
    h = with_weather_tool()
    h.spoken_turn()
    chunk(h, "call_1", '{"ci')
    h.run(CancelResponse())
    answer(h, "call_1")
    [(seq, message)] = violations(h)
    assert seq == len(h.log) and "call_1, whose arguments never completed (its response" in message and "ended cancelled" in message


def test_a_restored_call_reusing_a_streamed_call_id_is_made_twice():
    h = with_weather_tool()
    rid = call_turn(h, "call_1")
    made = _made_at(h, "call_1")
    restored_call(h, "call_1")
    [(seq, message)] = violations(h)
    assert seq == len(h.log) and message.startswith(f"call call_1 made twice: by response {rid} at seq {made} and by item")


def test_a_second_response_streaming_an_existing_call_id_is_made_twice():
    h = with_weather_tool()
    first = call_turn(h, "call_1")
    second = h.spoken_turn()
    accepted = _accepted_next(h, call_id="call_1", delta='{"city": "Oslo"}', done=True, final=True)
    chunk(h, "call_1", '{"city": "Oslo"}', done=True, final=True)
    want = [(len(h.log), f"call call_1 made twice: by response {first} at seq {_made_at(h, 'call_1')} and by response {second}")]
    assert violations(h) == (want if accepted else [])


def test_nothing_extends_a_call_after_its_done_chunk():
    h = with_weather_tool()
    h.spoken_turn()
    chunk(h, "call_1", '{"city": "Lisbon"}', done=True)
    done_at = len(h.log)
    h.pump()
    accepted = _accepted_next(h, call_id="call_1", delta=', "x": 1', final=True)
    chunk(h, "call_1", ', "x": 1', final=True)
    want = [(len(h.log), f"call call_1 extended after its done chunk at seq {done_at}")]
    assert violations(h) == (want if accepted else [])


def test_a_chunk_naming_another_function_is_a_violation():
    h = with_weather_tool()
    h.spoken_turn()
    chunk(h, "call_1", '{"city":')
    h.pump()
    accepted = _accepted_next(h, call_id="call_1", delta=' "Lisbon"}', done=True, final=True, name="delete_account")
    chunk(h, "call_1", ' "Lisbon"}', done=True, final=True, name="delete_account")
    want = [(len(h.log), f"chunk of call call_1 names 'delete_account', the call (seq {_made_at(h, 'call_1')}) is 'get_weather'")]
    assert violations(h) == (want if accepted else [])


@pytest.mark.parametrize("deltas", [('{"city": ', '"Lisbon"'), ("[1, 2]",)], ids=["unparsable", "not-an-object"])
def test_a_call_done_with_arguments_that_are_not_a_json_object_fails_its_response_and_the_log_audits_clean(deltas):
    """The session refuses the done chunk (``invalid_engine_function_call``), so the client never
    gets a call it cannot parse, and no call counts as made: nothing for an output to answer."""
    h = with_weather_tool()
    call_turn(h, "call_1", deltas)
    done = [e for _, e in h.log if isinstance(e, ResponseDone)][-1]
    assert (done.status, done.error_code) == ("failed", "invalid_engine_function_call")
    assert everything(h) == []


def test_a_forged_event_the_reducer_cannot_fold_is_reported_not_a_crash():
    """The audit folds the state only for verdicts; an event no correct writer logs (here: a
    truncation of an item that does not exist) is a ``fold`` violation, and the audit goes on
    to find the tool-call violation after it."""
    h = with_weather_tool()
    call_turn(h, "call_1")
    h.log.append((len(h.log) + 1, ItemTruncated(item_id="item_nowhere", audio_end_ms=10)))
    seq = len(h.log)
    answer_seq = seq + 1
    h.log.append((answer_seq, ItemCreated(item_id="item_x", role="tool", type="function_call_output", call_id="call_nowhere", output="x")))
    assert [s for s, _ in violations(h, "fold")] == [seq]
    assert [s for s, _ in violations(h)] == [answer_seq]
