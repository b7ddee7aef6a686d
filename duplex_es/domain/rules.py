"""What every concern module of the domain shares: refusals, the wire names of commands, and
copy-on-write helpers.

Concern modules (``lifecycle``, ``input``, ``items``, ``responses``, ``playback``,
``transcription``, ``world``) export named deciders and evolvers; each kind's table module
(:mod:`duplex_es.domain.kinds`) lists them. ``decide`` and ``evolve`` are the public entry points.
"""

from __future__ import annotations

import json
from typing import Any, Callable, Optional

from duplex_es.domain import commands as c
from duplex_es.domain.errors import ERROR_TYPES
from duplex_es.domain.replace import replace
from duplex_es.domain.kind import IllegalTransition
from duplex_es.domain.state import ACTIVE, Item, Response, SessionState
from duplex_es.events import AudioSegment, CommandRejected, Event

__all__ = ["COMMAND_TYPES", "Fold", "keep", "reject", "rejection", "shown", "put_item", "put_response", "open_output_item", "b64_len", "grow_item"]

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


#: ``fold(state, events) -> state``: ``state`` with ``events`` applied as its next seqs — what a
#: decider that emits several events decides the later ones on. A kind's table module passes
#: its own fold to the deciders that need one (so no concern module imports the reducer).
Fold = Callable[[SessionState, list[Event]], SessionState]


def keep(event: Event, state: Any, seq: int) -> Any:
    """The evolver of an event that changes no derived state: a refusal (docs/architecture.md,
    I3), a deduplicated retry, a heartbeat, a turn signal, a retrieve."""
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
    :data:`MAX_MESSAGE_CHARS` / :data:`MAX_PARAM_CHARS`, and the client's ``event_id``, the
    ``command_type`` and the ``excerpt`` to :data:`MAX_FIELD_CHARS` (:func:`clip`): they may
    quote what the client sent (an id, a key, a value), and what a refusal stores, echoes and
    logs stays bounded whatever the frame held."""
    return CommandRejected(
        client_event_id=None if event_id is None else clip(event_id, MAX_FIELD_CHARS),
        command_type=None if command_type is None else clip(command_type, MAX_FIELD_CHARS),
        code=code,
        message=_bounded(message, MAX_MESSAGE_CHARS),
        param=None if param is None else _bounded(param, MAX_PARAM_CHARS),
        error_type=ERROR_TYPES.get(code, "invalid_request_error"),
        excerpt=None if excerpt is None else clip(excerpt, MAX_FIELD_CHARS),
    )


#: The longest refusal message and ``param`` logged and sent (characters).
MAX_MESSAGE_CHARS, MAX_PARAM_CHARS = 600, 160

#: The longest excerpt of any other client string a refusal keeps (characters; ``event_id``
#: is at most 256 when valid, so a valid one is kept whole).
MAX_FIELD_CHARS = 256


def clip(text: str, limit: int) -> str:
    """``text`` if it has at most ``limit`` characters, else its first ``limit`` followed by a
    marker saying how long it was (``…[+N of M chars]``): a bounded excerpt of a client string
    that a refusal stores, echoes or logs."""
    if len(text) <= limit:
        return text
    return f"{text[:limit]}…[+{len(text) - limit} of {len(text)} chars]"


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
    """Store ``resp``.

    Raises:
        IllegalTransition: ``resp`` changes the status of a response that already ended (a
            response has exactly one ``response.done``; docs/protocol.md).
    """
    old = state.responses.get(resp.id)
    if old is not None and old.status != resp.status and old.status != ACTIVE:
        raise IllegalTransition(f"response {resp.id}", state.seq + 1, "response.done", str(old.status), str(resp.status))
    return replace(state, responses={**state.responses, resp.id: resp})


def open_output_item(state: SessionState, resp: Response, item_id: str, content_type: str) -> tuple[SessionState, Response, Item]:
    """Close ``resp``'s current output item and open the next one, ``item_id`` (empty, in
    progress, of ``content_type``), right after it in the conversation (or, out of band, kept
    beside it). Returns the state, the response naming its new item, and the item."""
    current = state.items[resp.item_id]
    state = put_item(state, replace(current, complete=True, status="completed"))
    item = Item(
        id=item_id,
        role="assistant",
        status="in_progress",
        content_type=content_type,
        in_conversation=current.in_conversation,
        response_id=resp.id,
        output_index=len(resp.item_ids),
        offset_ms=resp.generated_ms,
        audio_format=resp.output_format,
    )
    state = put_item(state, item, after=resp.item_id if item.in_conversation else "end")
    return state, replace(resp, item_ids=resp.item_ids + (item.id,)), item


def b64_len(b64: str) -> int:
    """Decoded length of a base64 string without decoding it."""
    if not b64:
        return 0
    return len(b64) * 3 // 4 - b64[-2:].count("=")


def grow_item(item: Item, seq: int, audio_b64: str, text_delta: str, marks: tuple, done: bool) -> tuple[Item, int]:
    """An assistant item after an engine output logged at ``seq``: its audio (base64, the
    item's format), text and marks appended; ``done`` completes it. Returns the item and the
    output's audio length in samples."""
    width = 2 if item.audio_format.type == "audio/pcm" else 1
    new_samples = b64_len(audio_b64) // width
    grown = replace(
        item,
        full_text=item.full_text + text_delta,
        audio_samples=item.audio_samples + new_samples,
        audio=item.audio + ((AudioSegment(seq=seq, offset=0, samples=new_samples),) if new_samples else ()),
        marks=item.marks + tuple(marks),
        complete=item.complete or done,
    )
    return grown, new_samples
