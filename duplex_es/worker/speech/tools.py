"""The reference agent's tool rule: which declared function tools the user's words name, the
arguments those words fill, and what the agent says once the tools have answered.

Pure functions of the tick's inputs (no model, no randomness), so a response's calls are the
same on every worker and in every replay. docs/protocol.md ("The reference agent's tool rule")
quotes this rule; the numbered points below are its source.

1. **The user's words** are the typed text of the user item being answered
   (``inputs.user_text``) followed by the ASR transcript of its audio. They are split into
   *words* (runs of letters and digits, with inner ``'`` or ``-``: ``what's``, ``Saint-Denis``,
   ``3.5``); ``. , ; : ! ?`` and the seam between typed and heard text are *breaks*, and
   ``. ! ?`` and the seam also end a *sentence*. Two words *match* when they are equal
   ignoring case and ``'``, after a final ``s`` is dropped from words of four letters or more
   (``orders`` matches ``order``, ``What's`` matches ``whats``).
2. **Tools.** Only function tools take part: entries of ``inputs.tools`` whose ``type`` is
   ``"function"`` or absent (``mcp`` and other tools are ignored). A tool's *name words* are its
   name split on ``_``, ``-``, ``.`` and camelCase (``getWeather``, ``get_weather`` → get,
   weather); its *description words* are the words of its description. Words of fewer than 3
   letters and the words of :data:`STOPWORDS` (articles, prepositions, pronouns and generic
   verbs such as get, set, fetch, find, look, check, make, do) never count.
3. **Named.** A tool is *named* when the user's words match at least one of its name words, or
   at least two distinct description words of 4 letters or more. Its score is
   ``(name words matched, description words matched)``, compared name words first; the *best*
   named tool has the highest score, ties going to the tool declared first.
4. **tool_choice.** ``"none"``: no call (the agent echoes, as with no tools). ``"auto"`` (the
   default; also any value not listed here, and a named function that is not declared): the
   named tools — every named tool in declaration order when ``parallel_tool_calls`` is not
   ``false`` (GA's default is true), else only the best. ``"required"``: the best named tool,
   or the first declared function tool when none is named. ``{"type": "function", "name": X}``:
   X, named or not. Nothing chosen: the agent echoes (``You said: ...``), as without tools.
5. **Arguments** come from ``parameters.properties`` (JSON Schema), filled in two passes over
   the properties in schema order, each word filling at most one property:

   - first, ``enum`` properties take the first enum value (in the enum's order) all of whose
     words are among the user's words (a numeric enum value: a number said, see next);
     ``number`` / ``integer`` properties take the first number not already taken — digits
     (``12``, ``3.5``) or number words 0..99 (``four``, ``twenty one``, ``twenty-one``); an
     ``integer`` only a whole number;
   - then ``string`` properties (also a property with no ``type``): the words after the
     property's own name words where the user says them (``city Lisbon``, ``order id 123``);
     else after the first of :data:`PREPOSITIONS` (in, for, at, from, to, near, about, called,
     named) that follows the word naming the tool (``weather in Paris and the time in Tokyo``:
     Paris for the weather); else after the nearest one before that word (``In Paris, what's
     the weather?``) — the first of these places, in that order, after which a word can be
     taken. A tool chosen without being named (``"required"`` with nothing named, a named
     function the words do not name) looks after every preposition, first to last.
     Up to 3 words are taken, skipping leading articles (a, an, the, my, our, your) and
     stopping at a break, a stopword (prepositions included), a time word
     (:data:`TIME_WORDS`: today, tomorrow, morning, early, please, ...) or a word that filled
     another property. The words keep the case they had (typed text keeps its case; the ASR
     transcript is lower case).

   ``boolean``, ``object`` and ``array`` properties are not filled. The arguments are
   ``json.dumps`` of the filled properties, compact, in schema order.

   Each tool fills its arguments from its own *part* of the user's words only. A tool is
   *first named* at its first word that matches one of its counting name or description
   words. Its part lies in the sentence where it is first named: from that word up to where
   another *named* tool (rule 3, whether or not it is called: ``parallel_tool_calls`` does not
   change the arguments of the tool it calls) is first named, or to the sentence's end; the
   first tool named in a sentence also takes the sentence's words before it, and tools first
   named by the same word share a part (``weather in Lisbon and book a table at Nando's``:
   Lisbon for the weather, Nando's for the table; ``What's the weather in Paris? I am in
   Rome.``: Paris). A tool the words do not name at all takes all the words.
6. **A required property not filled.** Under ``"auto"`` the tool is not called; the agent
   asks instead, one spoken item per such tool after any calls it does make:
   ``I can <tool name words> if you tell me the <property name words>.`` (several properties:
   ``the city and the date``). Under ``"required"`` or a named function the call is made, and
   each such property takes a value its schema accepts (:func:`fallback_value`), so a client
   that validates the arguments against the tool's schema can run it: an ``enum`` its first
   value; a ``number`` / ``integer`` ``0``; a ``boolean`` ``false``; an ``object`` its own
   required properties filled the same way; an ``array`` ``[]``; a ``null`` ``null``; a
   ``string`` (or no ``type``) the user's words — the typed text and the transcript joined
   by a space, whitespace runs made one space, at most :data:`MAX_FALLBACK_CHARS` (64)
   characters, trimmed; ``""`` when the user said nothing.
7. **After the outputs.** When the response's history ends with ``function_call_output``
   entries (the entries after its last message, the calls and their outputs, end with an
   output), the agent makes no call — even under ``"required"``, which would otherwise keep
   a client that runs every call and asks again in a loop — and does not transcribe the user
   item again: it speaks one item per output, in history order,
   ``<tool name words> says: <output>.`` (first letter capitalised), the tool being the one whose call has the output's
   ``call_id``. An output that is a JSON object is said as ``key value, key value`` (keys as
   words; nested objects and arrays the same way), a JSON string as its text, anything else
   as sent. The reply is bounded like the echo (``MAX_REPLY_ITEMS`` items,
   ``MAX_REPLY_CHARS`` characters).
"""

from __future__ import annotations

import json
import re
from typing import Any, Iterable, Mapping, Optional, Sequence

import attrs

__all__ = [
    "STOPWORDS",
    "TIME_WORDS",
    "PREPOSITIONS",
    "ARTICLES",
    "NUMBER_WORDS",
    "Token",
    "ToolCall",
    "ToolPlan",
    "ToolPart",
    "MAX_FALLBACK_CHARS",
    "tokens",
    "user_tokens",
    "name_words",
    "function_tools",
    "tool_score",
    "named_tools",
    "chosen_tools",
    "fill_arguments",
    "fallback_value",
    "fallback_arguments",
    "tool_words",
    "question",
    "decide",
    "answered_outputs",
    "render_output",
    "output_sentence",
    "argument_tokens",
]

#: Words that never name a tool and end a string argument: articles, prepositions, pronouns,
#: auxiliaries and the generic verbs tool names start with.
STOPWORDS = frozenset(
    """
    a an the this that these those some any all each every no not and or but so if then than
    of for to in on at by with from near about into onto over under after before between
    called named as up out off via per
    i me my mine we us our you your yours he him his she her it its they them their there here
    is are was were be been being am do does did done doing have has had having will would
    shall should can could may might must
    what whats which who whom whose when where why how
    get gets set sets fetch find look lookup search query check show tell give make makes do
    run call use handle perform execute retrieve return returns request want need like know
    let lets please thanks thank hey hello hi okay well just also only very really
    current given using used user information info details data value values
    """.split()
)

#: Words that end a string argument: when, not what or where.
TIME_WORDS = frozenset(
    """
    today tomorrow tonight yesterday now soon later early late next last
    morning afternoon evening night noon midnight week weekend month year
    monday tuesday wednesday thursday friday saturday sunday
    please thanks
    """.split()
)

#: Words after which a string argument is looked for (rule 5: the first one after the word
#: naming the tool that gives a word wins).
PREPOSITIONS = ("in", "for", "at", "from", "to", "near", "about", "called", "named")

#: The most characters of the user's words a required string property not filled takes under
#: ``"required"`` or a named function (rule 6).
MAX_FALLBACK_CHARS = 64

#: Words skipped at the start of a string argument.
ARTICLES = frozenset({"a", "an", "the", "my", "our", "your"})

_UNITS = (
    "zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen "
    "fifteen sixteen seventeen eighteen nineteen"
).split()
_TENS = {w: 10 * (i + 2) for i, w in enumerate("twenty thirty forty fifty sixty seventy eighty ninety".split())}

#: Number words 0..19 and the tens 20..90; "twenty one" / "twenty-one" is 21.
NUMBER_WORDS: Mapping[str, int] = {**{w: i for i, w in enumerate(_UNITS)}, **_TENS}

_TOKEN = re.compile(r"\d+(?:\.\d+)?|[^\W_]+(?:['’-][^\W_]+)*|[.,;:!?]")
_NAME_PART = re.compile(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|\d+")
_NUMBER = re.compile(r"\d+(?:\.\d+)?")


@attrs.frozen
class Token:
    """One word of the user's words (``text`` as it was written or heard), or a break
    (``text`` empty): punctuation, or the seam between typed and heard text. ``ends_sentence``:
    the break is ``.``, ``!``, ``?`` or the seam (rule 1)."""

    text: str
    ends_sentence: bool = False

    @property
    def is_break(self) -> bool:
        return not self.text

    @property
    def key(self) -> str:
        """What the word matches on: lower case, without ``'``, a final ``s`` dropped from a
        word of four letters or more."""
        return _key(self.text)


def _key(word: str) -> str:
    w = word.lower().replace("'", "").replace("’", "")
    return w[:-1] if len(w) >= 4 and w.endswith("s") else w


def _counts(word: str) -> bool:
    """Whether a name or description word can name a tool."""
    low = word.lower().replace("'", "").replace("’", "")
    return len(low) >= 3 and low not in STOPWORDS


def tokens(text: str) -> list[Token]:
    """``text`` as words and breaks (rule 1)."""
    return [Token("", m.group() in ".!?") if m.group() in ".,;:!?" else Token(m.group()) for m in _TOKEN.finditer(text)]


def user_tokens(transcript: str, typed: str) -> list[Token]:
    """The user's words: the typed text, a sentence break, then the transcript."""
    return tokens(typed) + [Token("", True)] + tokens(transcript)


def name_words(name: str) -> list[str]:
    """A tool's or property's name as lower-case words: split on ``_``, ``-``, ``.``, spaces
    and camelCase (``getWeatherNow`` → ``["get", "weather", "now"]``)."""
    return [w.lower() for part in re.split(r"[_\-.\s]+", name) for w in _NAME_PART.findall(part)]


def function_tools(tools: Iterable[Any]) -> list[Mapping[str, Any]]:
    """The declared function tools (rule 2), in declaration order."""
    return [t for t in tools if isinstance(t, Mapping) and t.get("type", "function") == "function" and isinstance(t.get("name"), str)]


def tool_score(tool: Mapping[str, Any], words: Sequence[Token]) -> tuple[int, int]:
    """``(name words matched, description words matched)`` of ``tool`` in ``words`` (rule 3):
    distinct words, each counted once."""
    said = {t.key for t in words if not t.is_break}
    names = {_key(w) for w in name_words(tool["name"]) if _counts(w)}
    desc = tool.get("description")
    described = {_key(t.text) for t in tokens(desc if isinstance(desc, str) else "") if not t.is_break and len(t.text) >= 4 and _counts(t.text)}
    return len(names & said), len(described & said)


def _is_named(score: tuple[int, int]) -> bool:
    return score[0] >= 1 or score[1] >= 2


def named_tools(tools: Sequence[Mapping[str, Any]], words: Sequence[Token]) -> list[Mapping[str, Any]]:
    """The function tools ``words`` name, best first (rule 3; ties in declaration order)."""
    scored = [(tool_score(t, words), i, t) for i, t in enumerate(tools)]
    named = [x for x in scored if _is_named(x[0])]
    named.sort(key=lambda x: (-x[0][0], -x[0][1], x[1]))
    return [t for _, _, t in named]


def chosen_tools(tools: Iterable[Any], tool_choice: Any, parallel_tool_calls: Optional[bool], words: Sequence[Token]) -> tuple[list[Mapping[str, Any]], str]:
    """The tools to call, in the order they are called, and the mode that chose them
    (``"auto"``, ``"required"``, ``"named"``; rule 4). Empty: the agent calls nothing."""
    declared = function_tools(tools)
    if not declared or tool_choice == "none":
        return [], "none"
    if isinstance(tool_choice, Mapping) and tool_choice.get("type") == "function":
        match = [t for t in declared if t["name"] == tool_choice.get("name")]
        if match:
            return match[:1], "named"
    named = named_tools(declared, words)
    if tool_choice == "required":
        return (named[:1] or declared[:1]), "required"
    if parallel_tool_calls is False:
        return named[:1], "auto"
    order = {id(t): i for i, t in enumerate(declared)}
    return sorted(named, key=lambda t: order[id(t)]), "auto"


def _schema_type(prop: Mapping[str, Any]) -> Optional[str]:
    t = prop.get("type", "string")
    if isinstance(t, list):
        t = next((x for x in t if x != "null"), None)
    return t if isinstance(t, str) else None


def _numbers(words: Sequence[Token]) -> list[tuple[float | int, tuple[int, ...]]]:
    """Every number said, in order: its value and the indexes of the words saying it."""
    out: list[tuple[float | int, tuple[int, ...]]] = []
    i = 0
    while i < len(words):
        text = words[i].text.lower()
        if _NUMBER.fullmatch(text):
            out.append((float(text) if "." in text else int(text), (i,)))
        elif "-" in text and text.split("-")[0] in _TENS and text.split("-")[-1] in NUMBER_WORDS and NUMBER_WORDS[text.split("-")[-1]] < 10:
            a, b = text.split("-", 1)
            out.append((_TENS[a] + NUMBER_WORDS[b], (i,)))
        elif text in _TENS and i + 1 < len(words) and words[i + 1].text.lower() in NUMBER_WORDS and 0 < NUMBER_WORDS[words[i + 1].text.lower()] < 10:
            out.append((_TENS[text] + NUMBER_WORDS[words[i + 1].text.lower()], (i, i + 1)))
            i += 1
        elif text in NUMBER_WORDS:
            out.append((NUMBER_WORDS[text], (i,)))
        i += 1
    return out


def _capture(words: Sequence[Token], start: int, used: set[int]) -> list[int]:
    """Up to 3 words from ``start``: leading articles skipped, stopping at a break, a stopword,
    a time word or a used word."""
    i = start
    while i < len(words) and not words[i].is_break and words[i].text.lower() in ARTICLES:
        i += 1
    taken: list[int] = []
    while i < len(words) and len(taken) < 3:
        w = words[i]
        low = w.text.lower().replace("’", "'")
        if w.is_break or i in used or low in STOPWORDS or low.replace("'", "") in STOPWORDS or low in TIME_WORDS:
            break
        taken.append(i)
        i += 1
    return taken


def _after_name(words: Sequence[Token], prop_name: str) -> list[int]:
    """The indexes right after each place the property's name words are said, in order."""
    keys = [_key(w) for w in name_words(prop_name)]
    if not keys:
        return []
    said = [t.key if not t.is_break else None for t in words]
    n = len(keys)
    return [i + n for i in range(len(said) - n + 1) if said[i : i + n] == keys]


def _required(schema: Any) -> list[str]:
    required = schema.get("required") if isinstance(schema, Mapping) else None
    return [r for r in required if isinstance(r, str)] if isinstance(required, list) else []


def _properties(schema: Any) -> Mapping[str, Any]:
    props = schema.get("properties") if isinstance(schema, Mapping) else None
    return props if isinstance(props, Mapping) else {}


def fill_arguments(parameters: Any, words: Sequence[Token], named_at: int = 0) -> tuple[dict[str, Any], list[str]]:
    """The arguments ``words`` (a tool's part) fill in the JSON Schema ``parameters`` (rule 5),
    in schema order, and the required properties left unfilled (in ``required``'s order).
    ``named_at``: the index in ``words`` of the word naming the tool; string properties look
    after the prepositions from there on first, then after those before it, nearest first."""
    props = _properties(parameters)
    required = _required(parameters)
    filled: dict[str, Any] = {}
    used: set[int] = set()
    said_keys = [t.key if not t.is_break else None for t in words]
    numbers = _numbers(words)
    for name, prop in props.items():
        if not isinstance(prop, Mapping):
            continue
        kind = _schema_type(prop)
        enum = prop.get("enum")
        if isinstance(enum, list):
            for value in enum:
                if isinstance(value, bool) or value is None:
                    continue
                if isinstance(value, (int, float)):
                    hit = next((at for v, at in numbers if v == value and not used.intersection(at)), None)
                    if hit is not None:
                        filled[name] = value
                        used.update(hit)
                        break
                    continue
                if not isinstance(value, str):
                    continue
                keys = [_key(w.text) for w in tokens(value) if not w.is_break]
                at = [next((i for i, k in enumerate(said_keys) if k == key and i not in used), None) for key in keys]
                if keys and None not in at:
                    filled[name] = value
                    used.update(at)
                    break
        elif kind in ("number", "integer"):
            for value, at in numbers:
                if used.intersection(at) or (kind == "integer" and not isinstance(value, int)):
                    continue
                filled[name] = value
                used.update(at)
                break
    for name, prop in props.items():
        if not isinstance(prop, Mapping) or isinstance(prop.get("enum"), list) or _schema_type(prop) != "string":
            continue
        preps = [i for i, w in enumerate(words) if w.text.lower() in PREPOSITIONS]
        starts = _after_name(words, name)
        starts += [i + 1 for i in preps if i >= named_at] + [i + 1 for i in reversed(preps) if i < named_at]
        for start in starts:
            taken = _capture(words, start, used)
            if taken:
                filled[name] = " ".join(words[i].text for i in taken)
                used.update(taken)
                break
    ordered = {name: filled[name] for name in props if name in filled}
    return ordered, [r for r in required if r not in ordered]


def fallback_value(prop: Any, said: str) -> Any:
    """The value a required property the words cannot fill takes under ``"required"`` or a
    named function (rule 6), from its JSON Schema ``prop``: an enum's first value, ``0``,
    ``False``, ``[]``, ``None``, an object of its own required properties' fallbacks, or
    ``said`` (the user's words, see :func:`fallback_arguments`) for a string."""
    prop = prop if isinstance(prop, Mapping) else {}
    enum = prop.get("enum")
    if isinstance(enum, list) and enum:
        return enum[0]
    kind = _schema_type(prop)
    if kind in ("number", "integer"):
        return 0
    if kind == "boolean":
        return False
    if kind == "array":
        return []
    if kind == "null":
        return None
    if kind == "object":
        props = _properties(prop)
        return {r: fallback_value(props.get(r), said) for r in _required(prop)}
    return said


def fallback_arguments(parameters: Any, args: Mapping[str, Any], missing: Sequence[str], transcript: str, typed: str) -> dict[str, Any]:
    """``args`` with each of the ``missing`` required properties given its
    :func:`fallback_value` (rule 6), in schema order (a required property the schema does not
    describe last, in ``required``'s order). A string takes the user's words: ``typed`` and
    ``transcript`` joined by a space, whitespace runs made one space, cut to
    :data:`MAX_FALLBACK_CHARS` characters and trimmed (``""`` when there are none)."""
    said = " ".join(f"{typed} {transcript}".split())[:MAX_FALLBACK_CHARS].strip()
    props = _properties(parameters)
    values = {**args, **{m: fallback_value(props.get(m), said) for m in missing}}
    return {**{n: values[n] for n in props if n in values}, **{n: v for n, v in values.items() if n not in props}}


def _listing(parts: Sequence[str]) -> str:
    return parts[0] if len(parts) == 1 else ", ".join(parts[:-1]) + " and " + parts[-1]


def question(tool_name: str, missing: Sequence[str]) -> str:
    """What the agent asks when it cannot fill ``missing`` (rule 6)."""
    wanted = _listing([f"the {' '.join(name_words(m)) or m}" for m in missing])
    return f"I can {' '.join(name_words(tool_name)) or tool_name} if you tell me {wanted}."


@attrs.frozen
class ToolCall:
    """A call the agent makes: the function's ``name`` and its ``arguments`` (JSON object text)."""

    name: str
    arguments: str


@attrs.frozen
class ToolPlan:
    """What the agent does with tools: ``calls`` in order, then ``questions`` spoken after them."""

    calls: tuple[ToolCall, ...] = ()
    questions: tuple[str, ...] = ()


def _first_mention(tool: Mapping[str, Any], words: Sequence[Token]) -> int:
    """The index of the first word that names ``tool`` (one of its counting name or
    description words), or ``len(words)``."""
    desc = tool.get("description")
    keys = {_key(w) for w in name_words(tool["name"]) if _counts(w)}
    keys |= {_key(t.text) for t in tokens(desc if isinstance(desc, str) else "") if not t.is_break and len(t.text) >= 4 and _counts(t.text)}
    return next((i for i, t in enumerate(words) if not t.is_break and t.key in keys), len(words))


@attrs.frozen
class ToolPart:
    """The words one chosen tool fills its arguments from (rule 5), and ``named_at``: the index
    in ``words`` of the word first naming the tool (0 for a tool the words do not name)."""

    words: tuple[Token, ...]
    named_at: int = 0


def tool_words(chosen: Sequence[Mapping[str, Any]], words: Sequence[Token], named: Sequence[Mapping[str, Any]] = ()) -> list[ToolPart]:
    """The part of ``words`` each of the ``chosen`` tools fills its arguments from (rule 5).
    ``named``: the tools the words name (rule 3); they, and the chosen tools, split the words
    whether or not they are chosen. A part lies in the sentence where its tool is first named,
    from that word to where another of those tools is first named or the sentence ends; the
    first of them named in a sentence also takes the sentence's words before it."""
    marks = sorted({m for m in (_first_mention(t, words) for t in (*named, *chosen)) if m < len(words)})
    parts = []
    for tool in chosen:
        at = _first_mention(tool, words)
        if at >= len(words):
            parts.append(ToolPart(tuple(words), 0))
            continue
        sentence = next((i + 1 for i in reversed(range(at)) if words[i].ends_sentence), 0)
        before = [m for m in marks if sentence <= m < at]
        start = at if before else sentence
        end = next((m for m in marks if m > at), len(words))
        end = next((i for i in range(at, end) if words[i].ends_sentence), end)
        parts.append(ToolPart(tuple(words[start:end]), at - start))
    return parts


def decide(transcript: str, typed: str, tools: Iterable[Any], tool_choice: Any, parallel_tool_calls: Optional[bool]) -> Optional[ToolPlan]:
    """The agent's calls and questions for a user who said ``transcript`` and typed ``typed``
    (rules 1–6); ``None`` when it uses no tool (it echoes)."""
    tools = list(tools)
    words = user_tokens(transcript, typed)
    chosen, mode = chosen_tools(tools, tool_choice, parallel_tool_calls, words)
    if not chosen:
        return None
    named = named_tools(function_tools(tools), words)
    calls, questions = [], []
    for tool, part in zip(chosen, tool_words(chosen, words, named)):
        parameters = tool.get("parameters")
        args, missing = fill_arguments(parameters, part.words, part.named_at)
        if missing and mode == "auto":
            questions.append(question(tool["name"], missing))
            continue
        if missing:
            args = fallback_arguments(parameters, args, missing, transcript, typed)
        calls.append(ToolCall(tool["name"], json.dumps(args, separators=(",", ":"), ensure_ascii=False)))
    return ToolPlan(tuple(calls), tuple(questions))


def answered_outputs(history: Sequence[Any]) -> list[tuple[str, str]]:
    """``(tool name, output)`` of each ``function_call_output`` the response answers (rule 7), in
    history order; empty when the history does not end with an output. A tool whose call is not
    in the history is named ``the tool``."""
    tail = []
    for entry in reversed(history):
        if getattr(entry, "type", "message") not in ("function_call", "function_call_output"):
            break
        tail.append(entry)
    tail.reverse()
    if not tail or tail[-1].type != "function_call_output":
        return []
    names = {e.call_id: e.name for e in history if getattr(e, "type", "") == "function_call" and e.name}
    return [(e.name or names.get(e.call_id) or "the tool", e.output or "") for e in tail if e.type == "function_call_output"]


def _say(value: Any) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, Mapping):
        return ", ".join(f"{' '.join(name_words(str(k))) or k} {_say(v)}" for k, v in value.items())
    if isinstance(value, list):
        return ", ".join(_say(v) for v in value)
    return json.dumps(value)


def render_output(output: str) -> str:
    """A tool's output as the agent says it (rule 7): a JSON object as ``key value, key
    value``, a JSON string as its text, anything else as sent; whitespace runs become one
    space."""
    try:
        value = json.loads(output)
    except ValueError:
        value = None
    said = _say(value) if isinstance(value, (Mapping, str)) else output
    return " ".join(said.split())


def output_sentence(tool_name: str, output: str) -> str:
    """The spoken item for one output: ``Get weather says: sunny, 18 degrees.``"""
    who = " ".join(name_words(tool_name)) or tool_name
    said = render_output(output).rstrip(".!? ")
    return f"{who[:1].upper()}{who[1:]} says: {said}."


def argument_tokens(arguments: str) -> int:
    """The agent's token count of a call's arguments: the words of its keys and values."""
    return len(re.sub(r"[{}\[\]\":,]", " ", arguments).split())
