"""The reference agent's tool rule (duplex_es/worker/speech/tools.py): which tools the user's words
name, what they fill in, what the agent asks, and how it says the tools' outputs."""

from __future__ import annotations

import json

from duplex_es.events import HistoryEntry
from duplex_es.worker.speech.tools import (
    ToolCall,
    ToolPlan,
    answered_outputs,
    decide,
    fill_arguments,
    name_words,
    named_tools,
    output_sentence,
    render_output,
    tool_score,
    tool_words,
    user_tokens,
)

WEATHER = {
    "type": "function",
    "name": "get_weather",
    "description": "Get the current weather for a city.",
    "parameters": {
        "type": "object",
        "properties": {"city": {"type": "string"}, "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
        "required": ["city"],
    },
}
BOOK = {
    "type": "function",
    "name": "bookTable",
    "description": "Reserve a restaurant table for a party.",
    "parameters": {
        "type": "object",
        "properties": {"restaurant": {"type": "string"}, "party_size": {"type": "integer"}, "outdoor": {"type": "boolean"}},
        "required": ["restaurant", "party_size"],
    },
}
ORDER = {
    "name": "lookup_order",  # no "type": a function tool
    "description": "Shipping status of a customer's parcel.",
    "parameters": {"type": "object", "properties": {"order_id": {"type": "string"}}, "required": ["order_id"]},
}
MCP = {"type": "mcp", "server_label": "weather", "name": "weather"}


def words(typed: str, heard: str = ""):
    return user_tokens(heard, typed)


def test_names_split_on_underscores_dashes_and_camel_case():
    assert name_words("get_weather") == ["get", "weather"]
    assert name_words("bookTable") == ["book", "table"]
    assert name_words("fetch-HTTPStatus_v2") == ["fetch", "http", "status", "v", "2"]


def test_a_tool_is_named_by_a_word_of_its_name_or_two_of_its_description():
    assert tool_score(WEATHER, words("Is it raining? What's the weather like?")) == (1, 1)
    # "get" is a generic verb: it names nothing.
    assert tool_score(WEATHER, words("Can you get me a coffee")) == (0, 0)
    # One description word is not enough; two are (plurals match: "parcels").
    assert named_tools([ORDER], words("what is the status")) == []
    assert named_tools([ORDER], words("what is the status of my parcels")) == [ORDER]
    # Case and apostrophes do not matter.
    assert named_tools([WEATHER], words("WEATHER'S fine")) == [WEATHER]


def test_name_words_score_above_description_words_and_ties_go_to_the_first_declared():
    guide = {"type": "function", "name": "city_guide", "description": "Weather, restaurants and sights of a city"}
    # city_guide: 1 name word (city) + 2 description words; get_weather: 1 name word + 2
    # description words ("weather" and "city" of its description): a tie, declaration order.
    said = words("weather in the city")
    assert named_tools([guide, WEATHER], said) == [guide, WEATHER]
    assert named_tools([WEATHER, guide], said) == [WEATHER, guide]
    # bookTable: two name words beat one.
    assert named_tools([WEATHER, BOOK], words("weather, and book a table"))[0] is BOOK


def test_auto_calls_the_named_tool_with_its_arguments_filled_from_the_words():
    plan = decide("", "What's the weather in Lisbon tomorrow, in Celsius?", [BOOK, WEATHER], "auto", None)
    assert plan == ToolPlan(calls=(ToolCall("get_weather", '{"city":"Lisbon","unit":"celsius"}'),))
    # Nothing named: no tool plan (the agent echoes).
    assert decide("", "hello there", [BOOK, WEATHER], "auto", None) is None
    assert decide("", "the weather in Lisbon", [BOOK, WEATHER], "none", None) is None
    assert decide("", "the weather in Lisbon", [MCP], "required", None) is None


def test_parallel_calls_each_named_tool_in_declaration_order_unless_disabled():
    said = "Weather in Lisbon please. And book a table for two at Nando's"
    both = decide("", said, [WEATHER, BOOK], "auto", None)
    assert [c.name for c in both.calls] == ["get_weather", "bookTable"]
    assert json.loads(both.calls[0].arguments) == {"city": "Lisbon"}
    assert both.calls[1].arguments == '{"restaurant":"Nando\'s","party_size":2}'
    assert decide("", said, [WEATHER, BOOK], "auto", True) == both
    only = decide("", said, [WEATHER, BOOK], "auto", False)
    assert [c.name for c in only.calls] == ["bookTable"]  # two name words: the best


def test_required_calls_the_best_named_or_the_first_declared_and_a_named_choice_calls_it():
    assert decide("", "hello", [ORDER, WEATHER], "required", None).calls == (ToolCall("lookup_order", "{}"),)
    assert decide("", "the weather in Oslo", [ORDER, WEATHER], "required", None).calls == (ToolCall("get_weather", '{"city":"Oslo"}'),)
    # Required: one call even with parallel calls on and two tools named.
    assert len(decide("", "weather, book a table at Nando's for 2", [WEATHER, BOOK], "required", True).calls) == 1
    named = {"type": "function", "name": "bookTable"}
    # Called with what it has, though "party_size" is required.
    assert decide("", "the weather in Oslo", [WEATHER, BOOK], named, None).calls == (ToolCall("bookTable", '{"restaurant":"Oslo"}'),)
    # A named function that is not declared is "auto".
    assert decide("", "the weather in Oslo", [WEATHER], {"type": "function", "name": "gone"}, None).calls == (ToolCall("get_weather", '{"city":"Oslo"}'),)


def test_a_required_property_not_filled_is_asked_for_under_auto_only():
    assert decide("what's the weather will be like in early tomorrow afternoon", "", [WEATHER], "auto", None) == ToolPlan(
        questions=("I can get weather if you tell me the city.",)
    )
    assert decide("", "book a table", [BOOK], "auto", None).questions == ("I can book table if you tell me the restaurant and the party size.",)
    assert decide("", "what's the weather", [WEATHER], "required", None).calls == (ToolCall("get_weather", "{}"),)
    # Parallel: the tool that can be called is, the other is asked about after it.
    plan = decide("", "weather in Porto, and book a table", [WEATHER, BOOK], "auto", None)
    assert plan.calls == (ToolCall("get_weather", '{"city":"Porto"}'),) and len(plan.questions) == 1


def test_numbers_enums_and_strings():
    schema = {
        "type": "object",
        "properties": {
            "guests": {"type": "integer"},
            "budget": {"type": "number"},
            "size": {"type": "string", "enum": ["small", "extra large"]},
            "city": {"type": "string"},
            "name": {"type": ["string", "null"]},
            "vip": {"type": "boolean"},
        },
    }
    args, missing = fill_arguments(schema, words("An Extra Large room for twenty-one, 99.5 a night, name Ana Sousa, in Porto tonight"))
    assert args == {"guests": 21, "budget": 99.5, "size": "extra large", "city": "Porto", "name": "Ana Sousa"}
    assert list(args) == ["guests", "budget", "size", "city", "name"] and missing == []
    # Integers take the first whole number; "twenty one" is one number; strings take the words
    # after the last preposition that gives any, in schema order (city first).
    args, _ = fill_arguments(schema, words("for 3.5 or twenty one people", heard="my name is called bob"))
    assert args == {"guests": 21, "budget": 3.5, "city": "bob"}
    # A word taken by one property ends another's words; leading articles are skipped.
    args, _ = fill_arguments({"properties": {"a": {"type": "integer"}, "b": {"type": "string"}}}, words("near the Old Mill 4 pm"))
    assert args == {"a": 4, "b": "Old Mill"}
    # Up to three words, stopping at a time word; the typed/heard seam is a break.
    assert fill_arguments({"properties": {"c": {"type": "string"}}}, words("in Rio de Janeiro State"))[0] == {"c": "Rio de Janeiro"}
    assert fill_arguments({"properties": {"c": {"type": "string"}}}, words("in", heard="lisbon"))[0] == {}
    assert fill_arguments({"properties": {"c": {"type": "string"}}}, words("weather in", heard="in lisbon"))[0] == {"c": "lisbon"}


def test_several_tools_fill_their_arguments_from_their_own_part_of_the_words():
    said = words("book a table at Nando's for four and what's the weather in Faro")
    assert [[t.text for t in part] for part in tool_words([WEATHER, BOOK], said)] == [
        ["weather", "in", "Faro", ""],  # "" the break at the end of the typed text
        ["book", "a", "table", "at", "Nando's", "for", "four", "and", "what's", "the"],
    ]
    plan = decide("", "book a table at Nando's for four and what's the weather in Faro", [WEATHER, BOOK], "auto", None)
    assert plan.calls == (ToolCall("get_weather", '{"city":"Faro"}'), ToolCall("bookTable", '{"restaurant":"Nando\'s","party_size":4}'))


def test_after_the_outputs_the_agent_says_each_one():
    history = (
        HistoryEntry(item_id="u", role="user", text="weather in Lisbon and Porto"),
        HistoryEntry(item_id="c1", role="assistant", text="", type="function_call", call_id="call_1", name="get_weather", arguments='{"city":"Lisbon"}'),
        HistoryEntry(item_id="c2", role="assistant", text="", type="function_call", call_id="call_2", name="lookupOrder", arguments="{}"),
        HistoryEntry(item_id="o2", role="tool", text="", type="function_call_output", call_id="call_2", output='"Shipped."'),
        HistoryEntry(item_id="o1", role="tool", text="", type="function_call_output", call_id="call_1", output='{"temp_c": 18, "sky": "clear"}'),
    )
    outs = answered_outputs(history)
    assert outs == [("lookupOrder", '"Shipped."'), ("get_weather", '{"temp_c": 18, "sky": "clear"}')]
    assert [output_sentence(n, o) for n, o in outs] == ["Lookup order says: Shipped.", "Get weather says: temp c 18, sky clear."]
    # A history ending with a message (or a call still unanswered) has no outputs to say.
    assert answered_outputs(history + (HistoryEntry(item_id="a", role="assistant", text="ok"),)) == []
    assert answered_outputs(history[:3]) == []
    assert answered_outputs(history[:1]) == []


def test_outputs_are_rendered_by_their_json_kind():
    assert render_output('{"forecast": {"high": 20, "rain": false}, "days": ["mon", "tue"]}') == "forecast high 20, rain false, days mon, tue"
    assert render_output('"line one\\n  line two"') == "line one line two"
    assert render_output("42") == "42" and render_output("[1, 2]") == "[1, 2]" and render_output("not json {") == "not json {"
