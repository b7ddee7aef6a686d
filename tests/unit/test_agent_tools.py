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
    fallback_arguments,
    fallback_value,
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
TIME = {
    "type": "function",
    "name": "get_time",
    "description": "Local time in a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
}


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
    # Nothing fills order_id: the user's words do (a string its schema accepts).
    assert decide("", "hello", [ORDER, WEATHER], "required", None).calls == (ToolCall("lookup_order", '{"order_id":"hello"}'),)
    assert decide("", "the weather in Oslo", [ORDER, WEATHER], "required", None).calls == (ToolCall("get_weather", '{"city":"Oslo"}'),)
    # Required: one call even with parallel calls on and two tools named.
    assert len(decide("", "weather, book a table at Nando's for 2", [WEATHER, BOOK], "required", True).calls) == 1
    named = {"type": "function", "name": "bookTable"}
    # Called with what it has, the required "party_size" it lacks set to 0.
    assert decide("", "the weather in Oslo", [WEATHER, BOOK], named, None).calls == (ToolCall("bookTable", '{"restaurant":"Oslo","party_size":0}'),)
    # A named function that is not declared is "auto".
    assert decide("", "the weather in Oslo", [WEATHER], {"type": "function", "name": "gone"}, None).calls == (ToolCall("get_weather", '{"city":"Oslo"}'),)


def test_a_required_property_not_filled_is_asked_for_under_auto_only():
    assert decide("what's the weather will be like in early tomorrow afternoon", "", [WEATHER], "auto", None) == ToolPlan(
        questions=("I can get weather if you tell me the city.",)
    )
    assert decide("", "book a table", [BOOK], "auto", None).questions == ("I can book table if you tell me the restaurant and the party size.",)
    assert decide("", "what's the weather", [WEATHER], "required", None).calls == (ToolCall("get_weather", '{"city":"what\'s the weather"}'),)
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
    # after the first preposition that gives any, in schema order (city first: "for" gives
    # nothing, 3.5 being taken).
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
    assert [([t.text for t in part.words], part.named_at) for part in tool_words([WEATHER, BOOK], said)] == [
        (["weather", "in", "Faro"], 0),  # up to the end of the typed text
        (["book", "a", "table", "at", "Nando's", "for", "four", "and", "what's", "the"], 0),
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


def city(plan: ToolPlan) -> list:
    return [(c.name, json.loads(c.arguments)) for c in plan.calls]


def test_a_string_is_taken_after_the_first_preposition_following_where_its_tool_is_named():
    said = "What is the weather in Paris and the time in Tokyo?"
    for parallel in (None, True, False):
        # Only the weather declared: "in Tokyo" is the (undeclared) time's, not the weather's.
        assert city(decide("", said, [WEATHER], "auto", parallel)) == [("get_weather", {"city": "Paris"})]
        # Both declared: the time is named, so it splits the words even when it is not called.
        assert city(decide("", said, [TIME, WEATHER], "required", parallel)) == [("get_time", {"city": "Tokyo"})]
    assert city(decide("", said, [WEATHER, TIME], "auto", True)) == [("get_weather", {"city": "Paris"}), ("get_time", {"city": "Tokyo"})]
    assert city(decide("", said, [WEATHER, TIME], "auto", False)) == [("get_weather", {"city": "Paris"})]
    assert city(decide("", said, [TIME, WEATHER], "auto", False)) == [("get_time", {"city": "Tokyo"})]
    # A sentence ends a tool's part: Rome is where the user is, not the city asked about.
    for tools in ([WEATHER], [WEATHER, TIME]):
        for parallel in (None, False):
            assert city(decide("", "What's the weather in Paris? I am in Rome.", tools, "auto", parallel)) == [("get_weather", {"city": "Paris"})]
    # The heard transcript is a sentence of its own after the typed text.
    assert city(decide("i am in rome", "Weather in Paris", [WEATHER], "auto", None)) == [("get_weather", {"city": "Paris"})]
    # The property's own name said comes first; then a preposition before the tool's word.
    assert city(decide("", "In Paris? No: the weather for city Lisbon", [WEATHER], "auto", None)) == [("get_weather", {"city": "Lisbon"})]
    assert city(decide("", "In Paris, what's the weather for tomorrow?", [WEATHER], "auto", None)) == [("get_weather", {"city": "Paris"})]
    # A part stays in its sentence: "in Tokyo" belongs to a sentence before the weather's.
    assert decide("", "What's the time in Tokyo? And the weather?", [WEATHER], "auto", None).questions == ("I can get weather if you tell me the city.",)


def test_tool_parts_end_at_the_next_named_tool_or_the_sentence_end():
    said = words("In Faro, what's the weather? Then the time in Tokyo and the weather there. Thanks")
    parts = tool_words([WEATHER], said, named=[WEATHER, TIME])
    assert [([t.text for t in p.words], p.named_at) for p in parts] == [(["In", "Faro", "", "what's", "the", "weather"], 5)]
    parts = tool_words([TIME], said, named=[WEATHER, TIME])
    assert [([t.text for t in p.words], p.named_at) for p in parts] == [(["Then", "the", "time", "in", "Tokyo", "and", "the", "weather", "there"], 2)]
    # A chosen tool the words do not name takes them all.
    assert tool_words([BOOK], said, named=[WEATHER, TIME]) == [tool_words([BOOK], said)[0]]
    assert len(tool_words([BOOK], said)[0].words) == len(said)


def test_required_properties_the_words_cannot_fill_take_schema_valid_values_when_a_call_is_forced():
    schema = {
        "type": "object",
        "properties": {
            "note": {"type": "string"},
            "size": {"enum": ["small", "large"]},
            "count": {"type": "integer"},
            "price": {"type": ["number", "null"]},
            "vip": {"type": "boolean"},
            "tags": {"type": "array", "items": {"type": "string"}},
            "where": {"type": "object", "properties": {"town": {"type": "string"}, "zip": {"type": "integer"}}, "required": ["town"]},
            "optional": {"type": "string"},
        },
        "required": ["where", "tags", "vip", "price", "count", "size", "note", "extra"],
    }
    tool = {"type": "function", "name": "plan_trip", "parameters": schema}
    plan = decide("and   then", "Plan a trip\n please", [tool], "required", None)
    # In schema order, a required property the schema does not describe (a string) last.
    assert plan.calls[0].arguments == (
        '{"note":"Plan a trip please and then","size":"small","count":0,"price":0,"vip":false,"tags":[],'
        '"where":{"town":"Plan a trip please and then"},"extra":"Plan a trip please and then"}'
    )
    assert decide("", "", [tool], {"type": "function", "name": "plan_trip"}, None).calls[0].arguments.startswith('{"note":"","size":"small"')
    # Under auto the agent asks instead.
    assert decide("", "plan a trip", [tool], "auto", None) == ToolPlan(
        questions=("I can plan trip if you tell me the where, the tags, the vip, the price, the count, the size, the note and the extra.",)
    )
    # The words are cut at 64 characters and trimmed; what was filled stays.
    long = "weather " + "x" * 55 + " in Lisbon"
    assert fallback_arguments(WEATHER["parameters"], {"unit": "celsius"}, ["city"], "", long) == {"city": long[:64].strip(), "unit": "celsius"}
    assert len(long[:64].strip()) == 63
    assert fallback_value({"type": "null"}, "x") is None and fallback_value({}, "said") == "said"
    assert fallback_value({"type": "integer", "enum": [3, 5]}, "") == 3
