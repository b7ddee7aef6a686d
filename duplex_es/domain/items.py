"""Conversation items: create (with ``previous_item_id`` or ``root``), retrieve, delete and
truncate (docs/sources.md, "Realtime GA events" and "Truncating an item";
docs/protocol.md, "Deviations from OpenAI, on purpose (and how to restore OpenAI's behaviour)").

Truncating assistant audio keeps the heard prefix of the transcript (duplex_es's rule), or
removes the transcript under the session option ``transcript_on_truncate: "remove"`` (OpenAI's
rule). Truncation is idempotent, works on incomplete items, on an item still being generated
(clients truncate what was heard before they cancel; the cap holds for what is generated
after it) and after later turns.
"""

from __future__ import annotations

from duplex_es.domain.calls import decide_function_item, evolve_function_item
from duplex_es.domain.commands import ROOT, CreateItem, DeleteItem, RetrieveItem, TruncateItem
from duplex_es.domain.content import content_problem, size_problem
from duplex_es.domain.duplex import queue_item
from duplex_es.domain.errors import Code
from duplex_es.domain.playback import history_transcript, maybe_release, refresh_transcripts
from duplex_es.domain.replace import replace
from duplex_es.domain.rules import put_item, put_response, reject
from duplex_es.domain.state import Item, SessionState
from duplex_es.domain.responses import retire_frozen
from duplex_es.domain.transcription import transcription_request
from duplex_es.events import AudioSegment, Event, ItemCreated, ItemDeleted, ItemRetrieved, ItemTruncated


def decide_create_item(cmd: CreateItem, state: SessionState) -> list[Event]:
    if cmd.type == "message":
        problem = content_problem(cmd.role, cmd.content)
        if problem is not None:
            return reject(cmd, *problem)
    if cmd.item_id in state.items:
        return reject(cmd, Code.ITEM_CREATE_DUPLICATE, f"an item with id {cmd.item_id!r} already exists", "item.id")
    if cmd.item_id == ROOT:
        return reject(cmd, Code.INVALID_ITEM, f"{ROOT!r} names the start of the conversation and cannot be an item id", "item.id")
    previous = cmd.previous_item_id
    if previous not in (None, ROOT) and previous not in state.item_order:
        return reject(
            cmd, Code.PREVIOUS_ITEM_NOT_FOUND, f"previous_item_id {str(previous)[:64]!r} is not in the conversation", "previous_item_id"
        )
    resolved = None if previous == ROOT else (previous if previous is not None else state.last_item_id)
    if cmd.type != "message":
        created = ItemCreated(
            client_event_id=cmd.event_id,
            item_id=cmd.item_id,
            previous_item_id=resolved,
            role=cmd.role,
            type=cmd.type,
            call_id=cmd.call_id,
            name=cmd.name,
            arguments=cmd.arguments,
            output=cmd.output,
        )
        return decide_function_item(cmd, state, created)
    fmt = state.config.input_format  # type: ignore[union-attr]
    too_big = size_problem(fmt, cmd.content, cmd.audio_nbytes, f"item {cmd.item_id[:64]}", "item.content")
    if too_big is not None:
        return reject(cmd, *too_big)
    samples = cmd.audio_nbytes // (2 if fmt.type == "audio/pcm" else 1)
    created = ItemCreated(
        client_event_id=cmd.event_id,
        item_id=cmd.item_id,
        previous_item_id=resolved,
        role=cmd.role,
        content=cmd.content,
        samples=samples,
    )
    # The item's audio is logged by this very event, the batch's first (seq state.seq + 1).
    audio = (AudioSegment(seq=state.seq + 1, offset=0, samples=samples),) if samples and cmd.role == "user" else ()
    return [created, *transcription_request(state, cmd.item_id, audio)]


def decide_retrieve_item(cmd: RetrieveItem, state: SessionState) -> list[Event]:
    if cmd.item_id not in state.items:
        return reject(cmd, Code.RETRIEVE_INVALID_ITEM, f"Error retrieving item: the item with id '{cmd.item_id[:64]}' does not exist.", "item_id")
    return [ItemRetrieved(client_event_id=cmd.event_id, item_id=cmd.item_id)]


def decide_delete_item(cmd: DeleteItem, state: SessionState) -> list[Event]:
    item = state.items.get(cmd.item_id)
    if item is None:
        return reject(
            cmd, Code.DELETE_INVALID_ITEM, f"Error deleting item: the item with id '{cmd.item_id[:64]}' does not exist.", "item_id"
        )
    if not item.in_conversation:
        return reject(cmd, Code.DELETE_INVALID_ITEM, f"item {cmd.item_id[:64]} belongs to an out-of-band response, not to the conversation", "item_id")
    if item.response_id is not None and item.response_id in state.responses and state.responses[item.response_id].active:
        return reject(
            cmd, Code.ITEM_IN_PROGRESS, f"item {cmd.item_id[:64]} belongs to response {item.response_id}, still in progress; cancel it first", "item_id"
        )
    return [ItemDeleted(client_event_id=cmd.event_id, item_id=cmd.item_id)]


def decide_truncate_item(cmd: TruncateItem, state: SessionState) -> list[Event]:
    item = state.items.get(cmd.item_id)
    if item is None:
        return reject(
            cmd, Code.TRUNCATE_INVALID_ITEM, f"Error truncating item: the item with id '{cmd.item_id[:64]}' does not exist.", "item_id"
        )
    if item.role != "assistant" or item.content_type != "output_audio":
        if item.type != "message":
            what = f"a {item.type} item"
        else:
            kind = f"{item.role} {item.content_type.replace('_', ' ')}"
            what = f"{'an' if kind[:1] in 'aeiou' else 'a'} {kind} item"
        return reject(
            cmd, Code.TRUNCATE_UNSUPPORTED_CONTENT, f"Only model output audio messages can be truncated; item {item.id} is {what}", "item_id"
        )
    if cmd.content_index != 0:
        return reject(
            cmd, Code.INVALID_CONTENT_INDEX, f"item {item.id} has one content part: content_index must be 0, not {cmd.content_index}", "content_index"
        )
    if cmd.audio_end_ms < 0:
        return reject(cmd, Code.TRUNCATE_OUT_OF_RANGE, f"audio_end_ms must be >= 0; got {cmd.audio_end_ms} for item {item.id}", "audio_end_ms")
    if cmd.audio_end_ms > item.audio_ms_ceil:
        return reject(
            cmd,
            Code.TRUNCATE_OUT_OF_RANGE,
            f"Audio content of item {item.id} is {item.audio_ms_ceil} ms, already shorter than audio_end_ms {cmd.audio_end_ms} ms",
            "audio_end_ms",
        )
    remove = state.config is not None and state.config.transcript_on_truncate == "remove"
    return [
        ItemTruncated(
            client_event_id=cmd.event_id,
            item_id=item.id,
            content_index=0,
            audio_end_ms=cmd.audio_end_ms,
            remove_transcript=remove,
            in_conversation=item.in_conversation,
        )
    ]


# ---------------------------------------------------------------------------------- evolvers


def evolve_item_created(ev: ItemCreated, state: SessionState, seq: int) -> SessionState:
    # A full-duplex model reads the client's items in its next unit (docs/duplex.md).
    return queue_item(_item_created(ev, state, seq), ev.item_id, seq)


def _item_created(ev: ItemCreated, state: SessionState, seq: int) -> SessionState:
    if ev.type != "message":
        return evolve_function_item(ev, state, seq)
    text = "".join(p.text for p in ev.content)
    has_audio = any(p.type == "input_audio" for p in ev.content)
    fmt = state.config.input_format  # type: ignore[union-attr]
    if ev.role == "assistant":
        item = Item(id=ev.item_id, role="assistant", content_type="output_text", full_text=text, transcript=text, complete=True)
    else:
        item = Item(
            id=ev.item_id,
            role=ev.role,
            content_type="input_audio" if has_audio else "input_text",
            audio=(AudioSegment(seq=seq, offset=0, samples=ev.samples),) if has_audio else (),
            input_samples=ev.samples,
            input_text=text,
            audio_format=fmt,
        )
    state = put_item(state, item, after=ev.previous_item_id)
    state = replace(state, unapplied=state.unapplied + (seq,))
    if ev.role == "user":
        state = retire_frozen(replace(state, last_commit_seq=seq))
    return state


def evolve_item_deleted(ev: ItemDeleted, state: SessionState, seq: int) -> SessionState:
    return replace(
        state,
        items={k: v for k, v in state.items.items() if k != ev.item_id},
        item_order=tuple(i for i in state.item_order if i != ev.item_id),
        unapplied=state.unapplied + (seq,),
    )


def evolve_item_truncated(ev: ItemTruncated, state: SessionState, seq: int) -> SessionState:
    item = state.items[ev.item_id]
    cap = ev.audio_end_ms if item.truncated_ms is None else min(item.truncated_ms, ev.audio_end_ms)
    item = replace(item, truncated_ms=cap, transcript_removed=item.transcript_removed or ev.remove_transcript)
    state = put_item(state, item)
    resp = state.responses.get(item.response_id) if item.response_id else None
    if resp is not None:
        end = item.offset_ms + cap
        resp = replace(
            resp,
            committed_ms=min(resp.committed_ms, end),
            cap_ms=end if resp.cap_ms is None else min(resp.cap_ms, end),
        )
        state = refresh_transcripts(put_response(state, resp), resp.id)
        state = maybe_release(state, resp.id)
    else:
        state = put_item(state, replace(item, transcript=history_transcript(item, None)))
    return replace(state, unapplied=state.unapplied + (seq,)) if ev.in_conversation else state
