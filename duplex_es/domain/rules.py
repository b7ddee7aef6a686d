"""The machinery every concern module of the domain shares: the two dispatch tables
(``decider`` for commands, ``evolver`` for events), refusals, and copy-on-write helpers.

Each concern module (``lifecycle``, ``input``, ``items``, ``responses``, ``playback``)
registers the deciders of its commands and the evolvers of its events here; ``decide`` and
``evolve`` are the public entry points.
"""

from __future__ import annotations

import json
from functools import singledispatch
from typing import Optional

from duplex_es.domain import commands as c
from duplex_es.domain.errors import ERROR_TYPES
from duplex_es.domain.replace import replace
from duplex_es.domain.state import Item, Response, SessionState
from duplex_es.events import CommandRejected, Event

__all__ = ["COMMAND_TYPES", "decider", "evolver", "apply", "fold_after", "reject", "rejection", "shown", "put_item", "put_response"]

#: Wire name of each command, recorded in ``command.rejected.command_type``.
COMMAND_TYPES: dict[type, str] = {
    c.OpenSession: "session.open",
    c.UpdateSession: "session.update",
    c.AppendAudio: "input_audio_buffer.append",
    c.AppendText: "input.text.append",
    c.Commit: "input_audio_buffer.commit",
    c.ClearInput: "input_audio_buffer.clear",
    c.CancelInput: "input.cancel",
    c.CreateResponse: "response.create",
    c.CancelResponse: "response.cancel",
    c.BargeIn: "barge_in",
    c.ClearOutputAudio: "output_audio_buffer.clear",
    c.CreateItem: "conversation.item.create",
    c.RetrieveItem: "conversation.item.retrieve",
    c.DeleteItem: "conversation.item.delete",
    c.TruncateItem: "conversation.item.truncate",
    c.AckPlayback: "playback.ack",
    c.TurnSignal: "turn.signal",
    c.Heartbeat: "session.heartbeat",
    c.CloseSession: "session.close",
    c.Resume: "session.resume",
    c.Detach: "session.detach",
    c.Expire: "session.expire",
    c.Pump: "session.pump",
    c.Duplicate: "command.duplicate",
}


@singledispatch
def decider(command: object, state: SessionState) -> list[Event]:
    """Decide ``command`` against an open session (registered per command class)."""
    raise TypeError(f"not a command: {command!r}")


@singledispatch
def evolver(event: Event, state: SessionState, seq: int) -> SessionState:
    """Apply ``event`` (registered per event class)."""
    raise TypeError(f"the speech reducer does not handle {type(event).__name__} ({event.TYPE})")


def apply(state: SessionState, seq: int, event: Event) -> SessionState:
    """``event``, logged at ``seq``, applied by its registered evolver (the state's ``seq``
    set). :func:`~duplex_es.domain.evolve.evolve` is this plus the start of a world session."""
    new = evolver(event, state, seq)
    # An evolver on the hot path sets ``seq`` in the copy it makes anyway (one copy, not two).
    return new if new.seq == seq else replace(new, seq=seq)


def fold_after(state: SessionState, events: list[Event]) -> SessionState:
    """``state`` with ``events`` applied as the next seqs: what a decider that emits several
    events decides the later ones on."""
    for event in events:
        state = apply(state, state.seq + 1, event)
    return state


def shown(value: object) -> str:
    """A refused value as a refusal's message quotes it: its JSON (ASCII, so always storable),
    cut to 64 characters."""
    try:
        text = json.dumps(value)
    except (TypeError, ValueError):
        text = repr(value)
    return text if len(text) <= 64 else text[:61] + "..."


def rejection(
    event_id: Optional[str],
    command_type: Optional[str],
    code: str,
    message: str,
    param: Optional[str] = None,
    excerpt: Optional[str] = None,
) -> CommandRejected:
    """The ``command.rejected`` event for a refusal. Its message and ``param`` are cut to
    :data:`MAX_MESSAGE_CHARS` / :data:`MAX_PARAM_CHARS`: they may quote what the client sent
    (an id, a key, a value), and what a refusal stores and echoes stays bounded."""
    return CommandRejected(
        client_event_id=event_id,
        command_type=command_type,
        code=code,
        message=_bounded(message, MAX_MESSAGE_CHARS),
        param=None if param is None else _bounded(param, MAX_PARAM_CHARS),
        error_type=ERROR_TYPES.get(code, "invalid_request_error"),
        excerpt=excerpt,
    )


#: The longest refusal message and ``param`` logged and sent (characters).
MAX_MESSAGE_CHARS, MAX_PARAM_CHARS = 600, 160


def _bounded(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def reject(command: object, code: str, message: str, param: Optional[str] = None) -> list[Event]:
    """Refuse ``command``: exactly one ``command.rejected`` (docs/architecture.md, I3)."""
    return [rejection(getattr(command, "event_id", None), COMMAND_TYPES.get(type(command)), code, message, param)]


def put_item(state: SessionState, item: Item, *, after: Optional[str] = "end") -> SessionState:
    """Store ``item``; a new conversation item goes after ``after`` (``"end"``, an item id, or
    ``None`` for the start)."""
    if item.id in state.items or not item.in_conversation:
        return replace(state, items={**state.items, item.id: item})
    order = state.item_order
    if after == "end":
        order = order + (item.id,)
    elif after is None:
        order = (item.id,) + order
    else:
        i = order.index(after) + 1
        order = order[:i] + (item.id,) + order[i:]
    return replace(state, items={**state.items, item.id: item}, item_order=order)


def put_response(state: SessionState, resp: Response) -> SessionState:
    """Store ``resp``."""
    return replace(state, responses={**state.responses, resp.id: resp})
