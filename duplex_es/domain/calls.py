"""Function calling (docs/protocol.md, "Function calling"; GA's ``function_call`` and
``function_call_output`` items).

An engine makes a call by streaming :class:`~duplex_es.events.FunctionCallChunk` pieces in its
tick outputs: the first chunk of a ``call_id`` opens a ``function_call`` item, later ones add
to its JSON arguments, the ``done`` one completes them. The client runs the tool and answers
with a ``function_call_output`` item naming the ``call_id``; the next response's engine sees
the call and its output in the history. Each call is made once and answered at most once per
session; a call its response's end cut short (a barge-in during its arguments, a
``response.cancel``, a failure) is never answered (its tool must not run), while a call whose
arguments were done stays answerable whatever happens to its response later.

The rules an engine's chunk must keep (:func:`chunk_problem`) make a broken engine fail its
response with ``invalid_engine_function_call`` instead of sending a client a call it cannot
use.
"""

from __future__ import annotations

import json
from typing import Any, Optional

from duplex_es.domain.commands import CreateItem
from duplex_es.domain.errors import Code
from duplex_es.domain.replace import replace
from duplex_es.domain.rules import open_output_item, put_item, reject
from duplex_es.domain.state import Call, Item, Response, SessionState
from duplex_es.events import Event, FunctionCallChunk, HistoryEntry, ItemCreated, TickOutput

__all__ = [
    "MAX_ARGUMENTS_CHARS",
    "decide_function_item",
    "evolve_function_item",
    "chunk_problem",
    "apply_chunk",
    "end_calls",
    "history_entry",
    "call_problem",
    "function_names",
]

#: The longest arguments text an engine's call may stream (characters), as long as a client's
#: ``function_call_output`` may be (protocol's ``MAX_FUNCTION_TEXT_CHARS``).
MAX_ARGUMENTS_CHARS = 100_000

_NAME_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-")


def function_names(tools: tuple[Any, ...]) -> list[str]:
    """The names of the function tools among ``tools`` (GA tool objects as the client sent them)."""
    return [t["name"] for t in tools if isinstance(t, dict) and t.get("type", "function") == "function" and "name" in t]


# ------------------------------------------------------------------------------- client items


def decide_function_item(cmd: CreateItem, state: SessionState, created: ItemCreated) -> list[Event]:
    """The events of a ``conversation.item.create`` of a function item, placed as ``created``
    says (the checks every item shares are done), or its refusal.

    A ``function_call_output`` must answer a call of this session that is in the conversation,
    whose arguments are done, that no other output answered and whose response was not
    cancelled; a ``function_call`` must not reuse a call_id of the session.
    """
    call_id = cmd.call_id or ""
    shown_id = call_id[:64]
    call = state.calls.get(call_id)
    if cmd.type == "function_call":
        if call is not None:
            return reject(
                cmd, Code.FUNCTION_CALL_DUPLICATE, f"call_id {shown_id!r} is already used by item {call.item_id} of this session", "item.call_id"
            )
        return [created]
    if call is None:
        return reject(
            cmd,
            Code.FUNCTION_CALL_NOT_FOUND,
            f"function_call_output answers call_id {shown_id!r}, but no function call of this session has that call_id",
            "item.call_id",
        )
    if call.item_id not in state.items:
        return reject(
            cmd,
            Code.FUNCTION_CALL_NOT_FOUND,
            f"function_call_output answers call_id {shown_id!r}, whose function_call item {call.item_id} was deleted from the conversation",
            "item.call_id",
        )
    if call.output_item_id is not None:
        return reject(
            cmd,
            Code.FUNCTION_CALL_ANSWERED,
            f"call {shown_id!r} was already answered by item {call.output_item_id}; a call takes exactly one function_call_output",
            "item.call_id",
        )
    if call.status == "cancelled":
        return reject(
            cmd,
            Code.FUNCTION_CALL_CANCELLED,
            f"call {shown_id!r} was cut short: its response {call.response_id} ended before the call's arguments were done; its tool must not run",
            "item.call_id",
        )
    if call.status != "completed":
        return reject(
            cmd,
            Code.FUNCTION_CALL_IN_PROGRESS,
            f"call {shown_id!r} is still streaming its arguments (response {call.response_id}); answer it after its response.function_call_arguments.done",
            "item.call_id",
        )
    return [created]


def evolve_function_item(ev: ItemCreated, state: SessionState, seq: int) -> SessionState:
    """A client's ``function_call`` or ``function_call_output`` item joins the conversation; an
    output marks its call answered. Both feed the model (docs/architecture.md, I5)."""
    if ev.type == "function_call":
        item = Item(
            id=ev.item_id,
            role="assistant",
            type="function_call",
            content_type="function_call",
            call_id=ev.call_id,
            name=ev.name,
            arguments=ev.arguments or "",
            complete=True,
        )
        calls = {**state.calls, ev.call_id: Call(item_id=ev.item_id, status="completed")}  # type: ignore[dict-item]
    else:
        item = Item(id=ev.item_id, role="tool", type="function_call_output", content_type="function_call_output", call_id=ev.call_id, output=ev.output or "", complete=True)
        call = state.calls.get(ev.call_id)  # type: ignore[arg-type]
        # The decider let it in only for a known call; a forged log still folds (audit names it).
        calls = state.calls if call is None else {**state.calls, ev.call_id: replace(call, output_item_id=ev.item_id)}  # type: ignore[dict-item]
    state = put_item(replace(state, calls=calls), item, after=ev.previous_item_id)
    return replace(state, unapplied=state.unapplied + (seq,))


# ---------------------------------------------------------------------------- engine chunks


def _untouched(resp: Response) -> bool:
    """Nothing was output yet: the response's first item is still empty and may become a call."""
    return resp.next_chunk == 0 and len(resp.item_ids) == 1


def chunk_problem(state: SessionState, ev: TickOutput) -> Optional[str]:
    """Why an accepted-looking tick output breaks the function-calling rules, or ``None``
    (:func:`call_problem` on its response)."""
    resp = state.responses[ev.response_id]
    return call_problem(state, resp, ev.function_call, bool(ev.audio or ev.text_delta or ev.marks), ev.new_item_id)


def call_problem(state: SessionState, resp: Response, fc: Optional[FunctionCallChunk], content: bool, new_item_id: Optional[str]) -> Optional[str]:
    """Why an output of ``resp`` — a call chunk ``fc``, or ``content`` (audio, text or marks),
    opening item ``new_item_id`` or not — breaks the function-calling rules, or ``None``: a chunk
    carries a call or audio and text, not both; a new call opens an item (the response's
    untouched first one, or ``new_item_id``) after the previous call is done, with a call_id new
    to the session and a function among the response's tools that its ``tool_choice`` and
    ``parallel_tool_calls`` allow; a call's chunks keep its name, nothing follows its ``done``,
    and its arguments are a JSON object's text (at most :data:`MAX_ARGUMENTS_CHARS`) when done;
    audio or text after a call needs a new item."""
    item = state.items.get(resp.item_id)
    if fc is None:
        if item is not None and item.type == "function_call" and new_item_id is None and content:
            return f"audio or text after function call {item.call_id} needs a new item (new_item)"
        if item is not None and item.type == "function_call" and not item.complete and new_item_id is not None:
            return f"function call {item.call_id} must be done before another item starts"
        return None
    if content:
        return f"an output carries a function call or audio and text, not both (call {fc.call_id[:64]})"
    if not 0 < len(fc.call_id) <= 128:
        return f"a call_id must be 1-128 characters; got {len(fc.call_id)}"
    opening = new_item_id is not None or (_untouched(resp) and item is not None and item.type == "message")
    if opening:
        if item is not None and item.type == "function_call" and not item.complete:
            return f"function call {item.call_id} must be done before call {fc.call_id[:64]} starts"
        if fc.call_id in state.calls:
            return f"call_id {fc.call_id[:64]!r} is already used in this session"
        inputs = resp.inputs
        names = function_names(inputs.tools)
        if fc.name not in names:
            return f"function {fc.name[:64]!r} is not among the response's tools ({', '.join(names[:8]) or 'none'})"
        choice = inputs.tool_choice
        if choice == "none":
            return f"tool_choice is 'none', yet the engine called {fc.name[:64]!r}"
        if isinstance(choice, dict) and choice.get("name") not in (None, fc.name):
            return f"tool_choice names {str(choice.get('name'))[:64]!r}, yet the engine called {fc.name[:64]!r}"
        if inputs.parallel_tool_calls is False and any(state.items[i].type == "function_call" for i in resp.item_ids if i in state.items):
            return f"parallel_tool_calls is false, yet the engine made a second call ({fc.call_id[:64]})"
        arguments = fc.arguments_delta
    else:
        if item is None or item.type != "function_call":
            return f"call {fc.call_id[:64]} needs a new item (new_item): the response already output into item {resp.item_id}"
        if item.call_id != fc.call_id or item.name != fc.name:
            return f"call {fc.call_id[:64]} ({fc.name[:64]}) needs a new item: the current item holds call {item.call_id} ({item.name})"
        if item.complete:
            return f"call {fc.call_id[:64]} is already done; nothing may be added to it"
        arguments = item.arguments + fc.arguments_delta
    if len(arguments) > MAX_ARGUMENTS_CHARS:
        return f"call {fc.call_id[:64]} streams {len(arguments)} characters of arguments; at most {MAX_ARGUMENTS_CHARS}"
    if fc.done:
        try:
            parsed = json.loads(arguments)
        except ValueError as exc:
            return f"the arguments of call {fc.call_id[:64]} are not JSON: {exc}"
        if not isinstance(parsed, dict):
            return f"the arguments of call {fc.call_id[:64]} must be a JSON object, not {type(parsed).__name__}"
    return None


def apply_chunk(state: SessionState, resp: Response, fc: FunctionCallChunk, new_item_id: Optional[str]) -> tuple[SessionState, Response, Item]:
    """Fold an accepted function-call chunk ``fc`` of ``resp`` (one :func:`call_problem`
    passed): open the call's item (``new_item_id``, or the response's untouched first item) or
    extend it, complete it when ``done``. Returns the state, the response (its items) and the
    call's item."""
    if new_item_id is not None:
        state, resp, item = open_output_item(state, resp, new_item_id, "function_call")
    else:
        item = state.items[resp.item_id]
    if item.type != "function_call":
        item = replace(item, type="function_call", content_type="function_call", call_id=fc.call_id, name=fc.name)
        state = replace(state, calls={**state.calls, fc.call_id: Call(item_id=item.id, response_id=resp.id)})
    item = replace(item, arguments=item.arguments + fc.arguments_delta)
    if fc.done:
        item = replace(item, complete=True, status="completed")
        state = replace(state, calls={**state.calls, fc.call_id: replace(state.calls[fc.call_id], status="completed")})
    return put_item(state, item), resp, item


def end_calls(state: SessionState, resp: Response, status: str) -> SessionState:
    """A response ended (with ``status``): its calls whose arguments were not done are
    cancelled — their tools must not run. A call already done stays answerable whatever the
    response's end: clients run a tool as soon as its call is done."""
    ended = {cid: replace(call, status="cancelled") for cid, call in state.calls.items() if call.response_id == resp.id and call.status == "in_progress"}
    return replace(state, calls={**state.calls, **ended}) if ended else state


def history_entry(item: Item) -> HistoryEntry:
    """A conversation item as the engine sees it in the history: a message's words (an
    assistant's what the user heard of it, a user's what was heard or typed), a call with its
    arguments, an output with what the tool returned."""
    if item.type == "message":
        text = item.transcript if item.role == "assistant" else (item.transcript or item.input_text)
        return HistoryEntry(item_id=item.id, role=item.role, text=text, audio_ms=item.audio_ms)
    if item.type == "function_call":
        return HistoryEntry(item_id=item.id, role="assistant", text="", type="function_call", call_id=item.call_id, name=item.name, arguments=item.arguments)
    return HistoryEntry(item_id=item.id, role="tool", text="", type="function_call_output", call_id=item.call_id, output=item.output)
