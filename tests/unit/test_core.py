"""The sans-I/O session core (duplex_es/server/core.py): the host's rules without a log, a
socket or a clock — what to append for a command, when a refusal is a retry, what a pump
carries, when a session expires, what a resuming client is re-sent, where a resume token is
revealed. Ids and the clock are injected, so every result here is exact."""

from __future__ import annotations

import itertools

import pytest

from duplex_es.domain import AppendText, CloseSession, Commit, Detach, Duplicate, Invalid, OpenSession, Pump, RetrieveItem, UpdateSession
from duplex_es.domain.commands import SessionPatch
from duplex_es.events import CommandDeduplicated, CommandRejected, HeartbeatReceived
from duplex_es.server import core as core_module
from duplex_es.server.core import SessionCore, idempotency_key


def make_core(**kw) -> SessionCore:  # type: ignore[no-untyped-def]
    counter = itertools.count(1)
    clock = iter(range(1_000, 10**9, 10))
    return SessionCore("sess_t", new_id=lambda prefix: f"{prefix}_{next(counter)}", clock=lambda: next(clock), **kw)


def opened(**kw) -> SessionCore:  # type: ignore[no-untyped-def]
    """A core whose session was opened (seq 1), as the host would after appending the plan."""
    c = make_core(**kw)
    plan = c.plan(OpenSession(session_id="sess_t", model="m", resume_token_hash="h1"), None)
    assert plan is not None
    for i, ev in enumerate(plan.events, start=1):
        c.apply(i, ev)
    return c


def commit_plan(c: SessionCore, plan) -> list:  # type: ignore[no-untyped-def]
    """Apply a plan's events as if the log committed them at the next seqs."""
    return [c.apply(plan.expected_seq + i, ev) for i, ev in enumerate(plan.events, start=1)]


def test_a_command_is_planned_at_the_seq_it_was_decided_on_with_its_key():
    c = opened()
    plan = c.plan(AppendText(event_id="e1", text="hi"), "e1#x")
    assert plan is not None and plan.expected_seq == 1 and plan.key == "e1#x" and not plan.check_key and not plan.rejected
    assert plan.counted


def test_a_refused_keyed_command_is_appended_unkeyed_after_the_shell_checks_the_key():
    c = opened()
    plan = c.plan(Commit(event_id="e2", item_id="item_1"), "e2#x")  # nothing buffered: refused
    assert plan is not None and plan.rejected and isinstance(plan.events[0], CommandRejected)
    assert plan.check_key and plan.key is None


def test_a_retry_of_an_applied_command_is_recorded_as_a_duplicate_naming_the_first_batch():
    c = opened()
    dup = c.duplicate(AppendText(event_id="e1", text="hi"), (2, 3))
    assert dup == Duplicate(event_id="e1", command_type="input.text.append", first_seq=2, last_seq=3)
    plan = c.plan(dup, None)
    assert plan is not None and plan.events == (CommandDeduplicated(client_event_id="e1", command_type="input.text.append", first_seq=2, last_seq=3),)


def test_records_must_arrive_in_seq_order_and_a_close_ends_the_session():
    c = opened()
    with pytest.raises(RuntimeError, match="got seq 3 after 1"):
        c.apply(3, HeartbeatReceived())
    plan = c.plan(CloseSession(event_id="bye"), None)
    assert plan is not None
    applied = commit_plan(c, plan)
    assert applied[-1].ended and c.state.ended and not c.state.is_open
    assert c.plan(Pump(request_ids=("r",), now_ms=0), None) is None  # nothing to do once closed


def test_a_pump_carries_injected_ids_and_time():
    c = opened()
    pump = c.pump()
    assert pump.request_ids[0] == "req_1" and len(set(pump.request_ids)) == len(pump.request_ids)
    assert pump.now_ms == 1_000 and c.pump().now_ms == 1_010


def test_expiry_is_the_grace_of_a_detached_session_or_the_idle_ttl():
    c = opened()
    assert c.expiry(5_000, 4_000, disconnect_grace_ms=100, idle_ttl_ms=2_000) is None
    idle = c.expiry(6_000, 4_000, disconnect_grace_ms=100, idle_ttl_ms=2_000)
    assert idle is not None and (idle.reason, idle.since_ms) == ("idle_ttl_expired", 4_000)
    plan = c.plan(Detach(at_ms=5_000), None)
    assert plan is not None
    commit_plan(c, plan)
    assert c.expiry(5_050, 5_000, disconnect_grace_ms=100, idle_ttl_ms=10**6) is None
    grace = c.expiry(5_100, 5_000, disconnect_grace_ms=100, idle_ttl_ms=10**6)
    assert grace is not None and (grace.reason, grace.since_ms) == ("disconnect_grace_expired", 5_000)
    assert make_core().expiry(10**9, 0, disconnect_grace_ms=1, idle_ttl_ms=1) is None  # not open yet


def test_a_model_name_the_map_does_not_serve_is_refused_and_a_served_one_names_its_engine():
    c = opened(resolve_model={"big": "engine-b"}.get)
    unknown = c.resolved(UpdateSession(event_id="u1", patch=SessionPatch(model="nope")))
    assert isinstance(unknown, Invalid) and unknown.code == "model_not_found" and unknown.param == "session.model"
    known = c.resolved(UpdateSession(event_id="u2", patch=SessionPatch(model="big")))
    assert isinstance(known, UpdateSession) and known.patch.engine == "engine-b"


def test_the_resume_token_rides_once_on_the_wire_event_of_the_event_carrying_its_digest():
    c = make_core()
    c.reveal_token("h1", "secret")
    plan = c.plan(OpenSession(session_id="sess_t", model="m", resume_token_hash="h1"), None)
    assert plan is not None
    applied = commit_plan(c, plan)[0]
    wires = c.revealed(applied.event, c.wires(applied))
    assert wires[0]["type"] == "session.created" and wires[0]["resume_token"] == "secret"
    assert "resume_token" not in c.revealed(applied.event, c.wires(applied))[0]  # once


def _session_with_texts(n: int) -> tuple[SessionCore, list]:
    c = opened()
    applied = []
    for i in range(n):
        plan = c.plan(AppendText(event_id=f"t{i}", text=f"text {i}"), None)
        applied += commit_plan(c, plan)
    return c, applied


def test_a_catchup_resends_what_the_client_missed_then_its_resume():
    c, applied = _session_with_texts(3)  # seqs 2..4; each text append projects to nothing
    plan = c.plan(AppendText(event_id="late", text="x"), None)
    applied += commit_plan(c, plan)
    assert all(not c.wires(a) for a in applied)  # typed text is silent on the wire
    close = c.plan(CloseSession(event_id="close"), None)
    closing = commit_plan(c, close)
    catchup = c.catchup(resumed_seq=closing[-1].seq, last_server_event_seq=1000)
    assert catchup.first_seq == 1
    for a in applied + closing:
        catchup.feed(a)
    out = catchup.wires()
    assert [w["type"] for w in out] == ["session.closed"] and out[0]["server_event_seq"] == closing[-1].seq * 1000


def test_a_client_claiming_events_the_log_lacks_must_resync():
    c, applied = _session_with_texts(1)
    catchup = c.catchup(resumed_seq=3, last_server_event_seq=5000)
    assert catchup.resync == "ahead_of_log"
    notice = catchup.wires()[0]
    assert notice["type"] == "session.resync_required" and notice["reason"] == "ahead_of_log" and notice["last_server_event_seq"] == 5000


def test_a_client_too_far_behind_must_resync(monkeypatch):
    monkeypatch.setattr(core_module, "MAX_REPLAY_EVENTS", 0)
    c = make_core()
    plan = c.plan(OpenSession(session_id="sess_t", model="m"), None)
    first = commit_plan(c, plan)
    catchup = c.catchup(resumed_seq=5, last_server_event_seq=0)
    catchup.feed(first[0])  # session.created is one more than the (patched) limit
    assert catchup.resync == "too_far_behind" and catchup.wires()[0]["reason"] == "too_far_behind"


def test_idempotency_keys_tell_retries_from_reused_ids():
    assert idempotency_key(AppendText(event_id="e", text="a")) == idempotency_key(AppendText(event_id="e", text="a"))
    assert idempotency_key(AppendText(event_id="e", text="a")) != idempotency_key(AppendText(event_id="e", text="b"))
    assert idempotency_key(RetrieveItem(event_id="e", item_id="i")) is None  # read-only: never a retry
    assert idempotency_key(AppendText(event_id=None, text="a")) is None
