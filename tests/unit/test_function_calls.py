"""Function calling in the pure domain and on the wire (docs/protocol.md, "Function calling"):
an engine's streamed call becomes a ``function_call`` item, the client's
``function_call_output`` answers it once, the next response's engine sees both, and every way a
client or an engine can get it wrong is refused with its own code and changes nothing."""

from __future__ import annotations

import json

import pytest
from openai.types.realtime import RealtimeServerEvent
from pydantic import TypeAdapter

from duplex_es.domain import BargeIn, Code, CreateItem, CreateResponse, DeleteItem, ResponseOptions, SessionPatch, TruncateItem, UpdateSession
from duplex_es.events import CommandRejected, ContentPart, FunctionCallChunk, ItemCreated, ResponseCreated, ResponseDone, ResponseInput, TickIssued
from duplex_es.protocol import EXTENSION_EVENT_TYPES, parse_frame, project

from harness import Harness, nid

SERVER_EVENT = TypeAdapter(RealtimeServerEvent)

WEATHER = {
    "type": "function",
    "name": "get_weather",
    "description": "The weather in a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
}
TIME = {"type": "function", "name": "get_time", "description": "The time.", "parameters": {"type": "object", "properties": {}}}


class Wired(Harness):
    """A harness that also projects every event to the wire and checks it against the SDK's types."""

    wire: list[dict]

    def apply(self, events):  # noqa: ANN001, ANN201
        if not hasattr(self, "wire"):
            self.wire = []
        for ev in events:
            seq = self.state.seq + 1
            before = self.state
            super().apply([ev])
            for w in project(before, seq, ev, self.state):
                if w["type"] not in EXTENSION_EVENT_TYPES:
                    SERVER_EVENT.validate_python(w)
                self.wire.append(w)
        return events

    def types_since(self, mark: int) -> list[str]:
        return [w["type"] for w in self.wire[mark:]]


def session(**patch) -> Wired:  # noqa: ANN003
    h = Wired.open()
    h.run(UpdateSession(patch=SessionPatch(tools=(WEATHER, TIME), **patch)))
    h.run(CreateItem(item_id=nid("item"), role="user", content=_text("What is the weather in Lisbon?")))
    return h


def _text(text: str):  # noqa: ANN202
    from duplex_es.events import ContentPart

    return (ContentPart(type="input_text", text=text),)


def call(h: Wired, call_id: str, delta: str, *, done: bool = False, final: bool = False, name: str = "get_weather", new_item: bool = False):  # noqa: ANN201
    out = h.output(
        ms=0, text="", marks=(), audio="", final=final, function_call=FunctionCallChunk(call_id=call_id, name=name, arguments_delta=delta, done=done),
        new_item_id=nid("item") if new_item else None,
    )
    if not final:
        h.pump()  # the host issues the next tick
    return out


def respond(h: Wired, **options) -> str:  # noqa: ANN003
    rid = nid("resp")
    evs = h.run(CreateResponse(response_id=rid, item_id=nid("item"), request_id=nid("req"), options=ResponseOptions(**options)))
    assert evs[0].TYPE == "response.created", evs
    return rid


def answer(h: Wired, call_id: str, output: str = '{"forecast": "sunny"}') -> list:
    return h.run(CreateItem(item_id=nid("item"), role="tool", type="function_call_output", call_id=call_id, output=output))


def refused(events: list) -> str:
    assert len(events) == 1 and isinstance(events[0], CommandRejected), events
    return events[0].code


def test_a_streamed_call_is_the_responses_function_call_item_on_the_wire_and_in_response_done():
    h = session()
    rid = respond(h)
    mark = len(h.wire)
    call(h, "call_1", '{"city": ')
    # Nothing was announced before the engine decided: the first output shows the item as a call.
    assert h.types_since(mark) == ["response.output_item.added", "conversation.item.added", "response.function_call_arguments.delta"]
    added = h.wire[mark]["item"]
    assert (added["type"], added["status"], added["name"], added["call_id"], added["arguments"]) == ("function_call", "in_progress", "get_weather", "call_1", "")
    mark = len(h.wire)
    call(h, "call_1", '"Lisbon"}', done=True, final=True)
    h.pump()
    assert h.types_since(mark) == [
        "response.function_call_arguments.delta",
        "response.function_call_arguments.done",
        "response.output_item.done",
        "conversation.item.done",
        "response.done",
    ]
    done_args = h.wire[mark + 1]
    assert (done_args["name"], done_args["arguments"], done_args["call_id"]) == ("get_weather", '{"city": "Lisbon"}', "call_1")
    response = h.wire[-1]["response"]
    assert response["status"] == "completed"
    assert [(o["type"], o["status"], o["arguments"]) for o in response["output"]] == [("function_call", "completed", '{"city": "Lisbon"}')]
    assert h.state.calls["call_1"].status == "completed" and h.state.calls["call_1"].response_id == rid


def test_the_output_answers_the_call_and_the_next_tick_sees_both_in_its_history():
    h = session()
    respond(h)
    call(h, "call_1", '{"city": "Lisbon"}', done=True, final=True)
    h.pump()
    mark = len(h.wire)
    (created,) = answer(h, "call_1")
    assert isinstance(created, ItemCreated) and created.type == "function_call_output"
    assert h.types_since(mark) == ["conversation.item.added", "conversation.item.done"]
    shown = h.wire[mark]["item"]
    assert (shown["type"], shown["call_id"], shown["output"]) == ("function_call_output", "call_1", '{"forecast": "sunny"}')
    output_seq = h.state.seq
    respond(h)
    tick = h.live_tick()
    assert output_seq in tick.applied_event_ids  # the output feeds the model exactly once (I5)
    kinds = [(e.type, e.call_id) for e in tick.inputs.history]
    assert kinds[-2:] == [("function_call", "call_1"), ("function_call_output", "call_1")]
    assert tick.inputs.history[-2].arguments == '{"city": "Lisbon"}' and tick.inputs.history[-1].output == '{"forecast": "sunny"}'
    assert tick.inputs.tools == (WEATHER, TIME) and tick.inputs.tool_choice == "auto"
    assert h.refold() == h.state


@pytest.mark.parametrize("case", ["unknown", "twice", "streaming", "cancelled", "deleted"])
def test_an_output_that_cannot_answer_its_call_is_refused_with_its_own_code_and_changes_nothing(case: str):
    h = session()
    respond(h)
    call(h, "call_1", '{"city": ', done=False)
    expected = {
        "unknown": Code.FUNCTION_CALL_NOT_FOUND,
        "twice": Code.FUNCTION_CALL_ANSWERED,
        "streaming": Code.FUNCTION_CALL_IN_PROGRESS,
        "cancelled": Code.FUNCTION_CALL_CANCELLED,
        "deleted": Code.FUNCTION_CALL_NOT_FOUND,
    }[case]
    target = "call_1"
    if case == "unknown":
        target = "call_of_another_session"
    elif case in ("twice", "deleted"):
        call(h, "call_1", '"Lisbon"}', done=True, final=True)
        h.pump()
        if case == "twice":
            answer(h, "call_1")
        else:
            h.run(DeleteItem(item_id=h.state.calls["call_1"].item_id))
    elif case == "cancelled":
        # The user talks over the assistant while the call's arguments stream: fenced like audio.
        h.run(BargeIn())
        done = [e for _, e in h.log if isinstance(e, ResponseDone)][-1]
        assert (done.status, done.reason) == ("cancelled", "turn_detected")
        item = h.state.items[h.state.calls["call_1"].item_id]
        assert (item.status, item.arguments) == ("incomplete", '{"city": ')
        assert "response.function_call_arguments.done" not in [w["type"] for w in h.wire]
    before = h.state
    events = answer(h, target)
    assert refused(events) == expected
    assert events[0].param == "item.call_id" and target[:20] in events[0].message
    assert h.state.items == before.items and h.state.calls == before.calls and h.state.unapplied == before.unapplied


def test_a_call_done_before_its_response_was_cancelled_is_answerable_and_only_the_cut_one_is_not():
    # Clients run a tool as soon as its call is done; a later cancel of the response must not
    # make them re-run it (the Agents SDK asks for a new response after a refused output).
    h = session()
    respond(h)
    call(h, "call_1", '{"city": "Lisbon"}', done=True)  # done, but the response goes on
    call(h, "call_2", "{", done=False, name="get_time", new_item=True)
    mark = len(h.wire)
    h.run(BargeIn())
    # The cut call gets no .done events (clients would run it), only its place in response.done.
    assert h.types_since(mark)[-1] == "response.done" and "response.output_item.done" not in h.types_since(mark)
    output = h.wire[-1]["response"]["output"]
    assert [(o["call_id"], o["status"]) for o in output] == [("call_1", "completed"), ("call_2", "incomplete")]
    assert isinstance(answer(h, "call_1")[0], ItemCreated)
    assert refused(answer(h, "call_2")) == Code.FUNCTION_CALL_CANCELLED


def test_parallel_calls_are_two_items_of_one_response_and_a_reply_after_a_call_a_third():
    h = session()
    respond(h)
    call(h, "call_1", '{"city": "Lisbon"}', done=True)
    call(h, "call_2", "{}", done=True, name="get_time", new_item=True)
    mark = len(h.wire)
    h.output(ms=200, text="Checking.", final=True, new_item_id=nid("item"))
    h.pump()
    types = h.types_since(mark)
    # A call is closed when it is done, so the spoken item only opens.
    assert types[:3] == ["response.output_item.added", "conversation.item.added", "response.content_part.added"]
    output = h.wire[-1]["response"]["output"]
    assert [(o["type"], o.get("call_id")) for o in output] == [("function_call", "call_1"), ("function_call", "call_2"), ("message", None)]
    assert [o["output_index"] for o in h.wire if o["type"] == "response.output_item.added"][-3:] == [0, 1, 2]
    answer(h, "call_1")
    answer(h, "call_2")
    assert {c.output_item_id is not None for c in h.state.calls.values()} == {True}


@pytest.mark.parametrize(
    "setup,chunks,why",
    [
        ({}, [dict(call_id="c", name="delete_everything", delta="{}", done=True)], "not among the response's tools"),
        ({}, [dict(call_id="c", name="get_weather", delta="{city: Lisbon}", done=True)], "not JSON"),
        ({}, [dict(call_id="c", name="get_weather", delta="[1, 2]", done=True)], "must be a JSON object"),
        ({"tool_choice": "none"}, [dict(call_id="c", name="get_weather", delta="{}", done=True)], "tool_choice is 'none'"),
        ({"tool_choice": {"type": "function", "name": "get_time"}}, [dict(call_id="c", name="get_weather", delta="{}", done=True)], "tool_choice names"),
        ({"parallel_tool_calls": False}, [dict(call_id="a", name="get_weather", delta="{}", done=True), dict(call_id="b", name="get_time", delta="{}", done=True, new_item=True)], "parallel_tool_calls is false"),
        ({}, [dict(call_id="a", name="get_weather", delta="{", done=False), dict(call_id="b", name="get_time", delta="{}", done=True, new_item=True)], "must be done before"),
        ({}, [dict(call_id="a", name="get_weather", delta="{}", done=True), dict(call_id="a", name="get_weather", delta="", done=True)], "already done"),
        ({}, [dict(call_id="a", name="get_weather", delta="{}", done=True), dict(call_id="a", name="get_time", delta="{}", done=True, new_item=True)], "already used"),
        ({}, [dict(call_id="a", name="get_weather", delta="{", done=False), dict(call_id="b", name="get_time", delta="{}", done=True)], "needs a new item"),
    ],
)
def test_an_engine_that_breaks_the_calling_rules_fails_its_response_with_a_coded_error(setup, chunks, why):
    h = session(**setup)
    respond(h)
    for c in chunks[:-1]:
        call(h, c["call_id"], c["delta"], done=c["done"], name=c["name"], new_item=c.get("new_item", False))
    last = chunks[-1]
    call(h, last["call_id"], last["delta"], done=last["done"], name=last["name"], new_item=last.get("new_item", False), final=True)
    h.pump()
    done = [e for _, e in h.log if isinstance(e, ResponseDone)][-1]
    assert (done.status, done.error_code) == ("failed", Code.INVALID_FUNCTION_CALL)
    assert why in done.error_message
    error = [w for w in h.wire if w["type"] == "error"][-1]["error"]
    assert (error["type"], error["code"]) == ("server_error", Code.INVALID_FUNCTION_CALL)


def test_audio_after_a_call_needs_a_new_item():
    h = session()
    respond(h)
    call(h, "call_1", "{}", done=True)
    h.output(ms=100, text="hi", final=True)  # no new item: it would land in the call
    h.pump()
    done = [e for _, e in h.log if isinstance(e, ResponseDone)][-1]
    assert (done.status, done.error_code) == ("failed", Code.INVALID_FUNCTION_CALL)


def test_a_client_may_restore_a_call_into_the_history_and_answer_it_but_not_reuse_its_call_id():
    h = session()
    h.run(CreateItem(item_id="item_c", role="assistant", type="function_call", call_id="call_old", name="get_weather", arguments='{"city": "Porto"}'))
    assert h.state.calls["call_old"].status == "completed" and h.state.calls["call_old"].response_id is None
    answer(h, "call_old")
    assert refused(h.run(CreateItem(item_id="item_d", role="assistant", type="function_call", call_id="call_old", name="get_time", arguments="{}"))) == Code.FUNCTION_CALL_DUPLICATE
    assert [w["item"]["type"] for w in h.wire if w["type"] == "conversation.item.done"][-2:] == ["function_call", "function_call_output"]


def test_a_response_cancelled_before_any_output_still_shows_its_empty_item():
    h = session()
    respond(h)
    mark = len(h.wire)
    h.run(BargeIn())
    types = h.types_since(mark)
    assert types[:3] == ["response.output_item.added", "conversation.item.added", "response.content_part.added"]
    assert types[-1] == "response.done"


def test_parallel_tool_calls_and_tools_reach_the_tick_per_response():
    h = session()
    respond(h, parallel_tool_calls=False, tools=(TIME,), tool_choice="required")
    tick = h.live_tick()
    assert (tick.inputs.parallel_tool_calls, tick.inputs.tools, tick.inputs.tool_choice) == (False, (TIME,), "required")
    assert not [e for _, e in h.log if isinstance(e, TickIssued) and e.inputs.parallel_tool_calls is None and e.response_id != tick.response_id]


def _frame(obj: dict) -> object:
    return parse_frame(json.dumps(obj), lambda p: nid(p))


def test_function_items_parse_from_the_wire_as_clients_send_them():
    # The Agents SDK sends no id; pipecat sends a 32-hex id and leaves a None output out.
    cmd = _frame({"type": "conversation.item.create", "item": {"type": "function_call_output", "call_id": "call_1", "output": "sunny"}})
    assert (cmd.type, cmd.call_id, cmd.output, cmd.role) == ("function_call_output", "call_1", "sunny", "tool")
    cmd = _frame({"type": "conversation.item.create", "item": {"id": "a" * 32, "type": "function_call_output", "call_id": "call_1"}})
    assert (cmd.item_id, cmd.output) == ("a" * 32, "")
    cmd = _frame({"type": "conversation.item.create", "item": {"type": "function_call", "call_id": "c", "name": "get_weather", "arguments": "{}"}})
    assert (cmd.type, cmd.name, cmd.arguments) == ("function_call", "get_weather", "{}")


@pytest.mark.parametrize(
    "item,code,param",
    [
        ({"type": "function_call_output", "output": "x"}, Code.INVALID_EVENT, "item.call_id"),
        ({"type": "function_call_output", "call_id": "", "output": "x"}, Code.INVALID_EVENT, "item.call_id"),
        ({"type": "function_call_output", "call_id": "c", "output": 5}, Code.INVALID_EVENT, "item.output"),
        ({"type": "function_call_output", "call_id": "c", "output": "x" * 100_001}, Code.FUNCTION_TEXT_TOO_LONG, "item.output"),
        ({"type": "function_call_output", "call_id": "c", "output": "x", "role": "user"}, Code.INVALID_EVENT, "item.role"),
        ({"type": "function_call", "call_id": "c", "arguments": "{}"}, Code.INVALID_EVENT, "item.name"),
        ({"type": "function_call", "call_id": "c", "name": "has space", "arguments": "{}"}, Code.INVALID_EVENT, "item.name"),
        ({"type": "reasoning", "role": "user", "content": []}, Code.INVALID_ITEM, "item.type"),
    ],
)
def test_malformed_function_items_are_refused_naming_the_field(item, code, param):
    cmd = _frame({"type": "conversation.item.create", "event_id": "e1", "item": item})
    assert (cmd.code, cmd.param, cmd.event_id) == (code, param, "e1")


def test_a_tool_whose_parameters_are_not_a_valid_json_schema_is_refused_naming_the_tool_and_the_place():
    bad = {**WEATHER, "parameters": {"type": "object", "properties": {"city": {"type": "strin"}}}}
    cmd = _frame({"type": "session.update", "session": {"tools": [TIME, bad]}})
    assert cmd.code == Code.INVALID_TOOL
    assert cmd.param == "session.tools[1].parameters.properties.city.type"
    assert "get_weather" in cmd.message and "strin" in cmd.message
    ok = _frame({"type": "session.update", "session": {"tools": [WEATHER, TIME], "tool_choice": "required", "parallel_tool_calls": False}})
    assert ok.patch.tools == (WEATHER, TIME) and ok.patch.parallel_tool_calls is False


# ------------------------------------------------------------------ inline function items in response.input

INLINE = [
    {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Weather in Lisbon?"}]},
    {"type": "function_call", "call_id": "call_inline", "name": "get_weather", "arguments": '{"city":"Lisbon"}', "id": "fc_1", "status": "completed"},
    {"type": "function_call_output", "call_id": "call_inline", "output": '{"sky": "clear"}'},
    {"type": "function_call_output", "call_id": "call_null", "output": None},
]


def test_inline_function_items_in_response_input_parse_as_ga_sends_them():
    cmd = _frame({"type": "response.create", "response": {"conversation": "none", "input": INLINE}})
    assert cmd.options.input == (
        ResponseInput(role="user", content=(ContentPart(type="input_text", text="Weather in Lisbon?"),)),
        ResponseInput(type="function_call", call_id="call_inline", name="get_weather", arguments='{"city":"Lisbon"}'),
        ResponseInput(type="function_call_output", call_id="call_inline", output='{"sky": "clear"}'),
        ResponseInput(type="function_call_output", call_id="call_null", output=""),  # a null output is ""
    )


@pytest.mark.parametrize(
    "entry,code,param",
    [
        ({"type": "function_call_output", "output": "x"}, Code.INVALID_EVENT, "response.input[1].call_id"),
        ({"type": "function_call_output", "call_id": "c", "output": "x", "role": "tool"}, Code.INVALID_EVENT, "response.input[1].role"),
        ({"type": "function_call_output", "call_id": "c", "output": "x" * 100_001}, Code.FUNCTION_TEXT_TOO_LONG, "response.input[1].output"),
        ({"type": "function_call", "call_id": "c", "name": "get_weather"}, Code.INVALID_EVENT, "response.input[1].arguments"),
        ({"type": "function_call", "call_id": "c", "name": "no spaces", "arguments": "{}"}, Code.INVALID_EVENT, "response.input[1].name"),
        ({"type": "reasoning", "summary": []}, Code.INVALID_ITEM, "response.input[1].type"),
    ],
)
def test_malformed_inline_function_items_are_refused_naming_the_entry(entry, code, param):
    cmd = _frame({"type": "response.create", "event_id": "e2", "response": {"input": [INLINE[0], entry]}})
    assert (cmd.code, cmd.param, cmd.event_id) == (code, param, "e2")
    if code == Code.INVALID_ITEM:
        assert cmd.message == "response.input[1].type must be 'item_reference', 'message', 'function_call' or 'function_call_output'; got \"reasoning\""


def test_an_unknown_item_type_is_refused_listing_the_types_the_place_takes():
    cmd = _frame({"type": "conversation.item.create", "item": {"type": "item_reference", "id": "x"}})
    assert (cmd.code, cmd.param) == (Code.INVALID_ITEM, "item.type")
    assert cmd.message == "item.type must be 'message', 'function_call' or 'function_call_output'; got \"item_reference\""


def test_inline_function_items_are_the_ticks_history_in_order_and_touch_no_call_of_the_session():
    h = session()
    respond(h)
    call(h, "call_1", '{"city": "Lisbon"}', done=True, final=True)
    h.pump()
    calls, order = h.state.calls, h.state.item_order
    evs = h.run(_frame({"type": "response.create", "response": {"conversation": "none", "input": [{"type": "item_reference", "id": order[-1]}, *INLINE]}}))
    assert isinstance(evs[0], ResponseCreated) and len(evs[0].input) == 5
    tick = h.live_tick(evs[0].response_id)
    assert [(e.type, e.role, e.call_id, e.name, e.arguments, e.output) for e in tick.inputs.history] == [
        ("function_call", "assistant", "call_1", "get_weather", '{"city": "Lisbon"}', None),  # a reference to the session's call
        ("message", "user", None, None, None, None),
        ("function_call", "assistant", "call_inline", "get_weather", '{"city":"Lisbon"}', None),
        ("function_call_output", "tool", "call_inline", None, None, '{"sky": "clear"}'),
        ("function_call_output", "tool", "call_null", None, None, ""),
    ]
    assert [e.item_id for e in tick.inputs.history[1:]] == ["", "", "", ""] and tick.inputs.user_text == "Weather in Lisbon?"
    # The inline items joined no conversation and made or answered no call: the session's call
    # still waits for its output, and the inline call_id is unknown to the session.
    assert h.state.calls == calls and h.state.item_order == order
    assert refused(answer(h, "call_inline")) == Code.FUNCTION_CALL_NOT_FOUND
    assert h.refold() == h.state


def test_truncating_a_function_item_names_its_type():
    h = session()
    h.run(CreateItem(item_id="item_c", role="assistant", type="function_call", call_id="call_old", name="get_weather", arguments="{}"))
    (rej,) = h.run(TruncateItem(item_id="item_c", audio_end_ms=0))
    assert rej.code == Code.TRUNCATE_UNSUPPORTED_CONTENT and rej.message.endswith("item item_c is a function_call item")
    h.run(CreateItem(item_id="item_a", role="assistant", content=(ContentPart(type="output_text", text="hi"),)))
    (rej,) = h.run(TruncateItem(item_id="item_a", audio_end_ms=0))
    assert rej.message.endswith("item item_a is an assistant output text item")
