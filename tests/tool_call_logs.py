"""Logs with function calls for the tests of ``audit`` and ``replay`` (issue 13).

The decider drives the session (turns, responses, ticks) through :class:`Harness`; the engine's
function-call chunks are played as ``tick.output`` events echoing the live tick, and the
client's ``function_call`` / ``function_call_output`` items are written as the events an
accepted ``conversation.item.create`` logs — so a test can also write the ones a correct server
would have refused (a forged log).
"""

from __future__ import annotations

from typing import Optional, Sequence

from duplex_es.domain import OpenSession, SessionPatch, UpdateSession
from duplex_es.events import Event, FunctionCallChunk, ItemCreated
from harness import Harness, nid

WEATHER_TOOL = {
    "type": "function",
    "name": "get_weather",
    "description": "the weather in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
}


def with_weather_tool(session_id: str = "sess_test") -> Harness:
    """A session that declares ``get_weather``."""
    h = Harness()
    h.run(OpenSession(session_id=session_id, model="m"))
    h.run(UpdateSession(patch=SessionPatch(tools=(WEATHER_TOOL,))))
    return h


def chunk(h: Harness, call_id: str, delta: str, *, done: bool = False, final: bool = False, name: str = "get_weather", response_id: Optional[str] = None) -> list[Event]:
    """The engine's output for the live tick: one function-call chunk (no audio, no text)."""
    call = FunctionCallChunk(call_id=call_id, name=name, arguments_delta=delta, done=done)
    return h.output(ms=0, text="", audio="", marks=(), final=final, function_call=call, response_id=response_id)



def call_turn(h: Harness, call_id: str = "call_1", deltas: Sequence[str] = ('{"city":', ' "Lisbon"}'), *, end: bool = True) -> str:
    """A spoken turn whose response streams one call in ``deltas`` (the last chunk ``done`` and
    final); with ``end`` the decider then ends the response. Returns the response id."""
    rid = h.spoken_turn()
    for i, delta in enumerate(deltas):
        last = i == len(deltas) - 1
        chunk(h, call_id, delta, done=last, final=last)
        if not last or end:
            h.pump()
    return rid


def answer(h: Harness, call_id: str, output: str = '{"temp_c": 21, "sky": "sunny"}') -> ItemCreated:
    """Log the client's ``function_call_output`` item answering ``call_id``; returns it."""
    item = ItemCreated(
        item_id=nid("item"), previous_item_id=h.state.item_order[-1] if h.state.item_order else None,
        role="tool", type="function_call_output", call_id=call_id, output=output,
    )
    h.apply([item])
    return item


def restored_call(h: Harness, call_id: str, arguments: str = '{"city": "Porto"}') -> ItemCreated:
    """Log a client-created ``function_call`` item (a call restored into the history)."""
    item = ItemCreated(
        item_id=nid("item"), previous_item_id=h.state.item_order[-1] if h.state.item_order else None,
        role="assistant", type="function_call", call_id=call_id, name="get_weather", arguments=arguments,
    )
    h.apply([item])
    return item
