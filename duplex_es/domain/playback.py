"""The playback ledger and the heard history (docs/protocol.md).

A response's audio is one timeline (its items one after another). Clients report how much of it
they played and committed with ``playback.ack``; acks are monotonic (max), a truncating ack or a
``conversation.item.truncate`` may lower the commit and caps every later one. The history of an
assistant item is its full transcript until the client acks; after that, the heard prefix at the
committed position (docs/sources.md, "vLLM-Omni's ack-driven history"). A
response answered before a newer user item and never acknowledged is frozen: an ack for it is
``playback_ack_too_late``. Once done and fully played, a response's ledger is released.
"""

from __future__ import annotations

from typing import Optional

from duplex_es.domain.commands import AckPlayback
from duplex_es.domain.errors import Code
from duplex_es.domain.heard import heard_prefix
from duplex_es.domain.replace import replace
from duplex_es.domain.rules import put_item, put_response, reject
from duplex_es.domain.state import Item, Response, SessionState
from duplex_es.events import Event, ItemTruncated, PlaybackAcked

__all__ = ["history_transcript", "refresh_transcripts", "maybe_release", "frozen", "may_still_play"]


def frozen(state: SessionState, resp: Response) -> bool:
    """True when ``resp`` answered an older user turn and was never acknowledged: its history
    is final and acks for it are ``playback_ack_too_late``."""
    return not resp.slot_reserved and resp.conversation == "auto" and resp.answers_commit_seq < state.last_commit_seq


def may_still_play(state: SessionState, resp: Response) -> bool:
    """True while the client may still be playing ``resp``: it is generating, or it has audio
    past the committed position that was neither cleared nor made final."""
    if resp.active:
        return True
    end = resp.generated_ms if resp.cap_ms is None else min(resp.generated_ms, resp.cap_ms)
    return not resp.playback_cleared and not frozen(state, resp) and resp.committed_ms < end


def history_transcript(item: Item, resp: Optional[Response]) -> str:
    """What the conversation history keeps of an assistant item's transcript.

    The whole generated text while nothing limits it; once the client acks playback, the prefix
    heard by ``committed_ms``; never beyond a truncation cap; nothing after a truncate under
    OpenAI's rule (``transcript_on_truncate: "remove"``).
    """
    if item.role != "assistant":
        return item.transcript
    if item.transcript_removed:
        return ""
    cutoff = None
    if resp is not None and resp.acked:
        cutoff = resp.committed_ms - item.offset_ms
    if item.truncated_ms is not None:
        cutoff = item.truncated_ms if cutoff is None else min(cutoff, item.truncated_ms)
    if cutoff is None:
        return item.full_text
    return heard_prefix(item.full_text, item.marks, max(0, cutoff), item.generated_ms, item.complete)


def refresh_transcripts(state: SessionState, response_id: str) -> SessionState:
    """Recompute the history transcript of every item of a response."""
    resp = state.responses.get(response_id)
    if resp is None:
        return state
    for item_id in resp.item_ids:
        item = state.items.get(item_id)
        if item is None:
            continue
        text = history_transcript(item, resp)
        if text != item.transcript:
            state = put_item(state, replace(item, transcript=text))
    return state


def maybe_release(state: SessionState, response_id: str) -> SessionState:
    """Drop a response's ledger once it is done and every ms of its audio was committed: its
    items keep their final transcripts. A hard-truncated response keeps its ledger, so later
    acks stay capped (as in vLLM-Omni: docs/sources.md, "vLLM-Omni's ack-driven history", its
    capping example)."""
    resp = state.responses.get(response_id)
    if resp is None or resp.active or not resp.acked:
        return state
    if resp.committed_ms < resp.generated_ms or (resp.cap_ms is not None and resp.cap_ms < resp.generated_ms):
        return state
    return replace(state, responses={k: v for k, v in state.responses.items() if k != response_id})


def _target(state: SessionState, cmd: AckPlayback) -> tuple[Optional[Response], Optional[list[Event]]]:
    """The response an ack is for: named by id (or by one of its items), or the only one whose
    audio may still be playing (docs/protocol.md, no guessing)."""
    if cmd.response_id is not None:
        resp = state.responses.get(cmd.response_id)
        if resp is None and cmd.response_id in state.retired_response_ids:
            return None, reject(cmd, Code.PLAYBACK_TOO_LATE, f"response {cmd.response_id[:64]} answered an earlier user turn and was never acknowledged; its history is final")
        if resp is None:
            return None, reject(cmd, Code.PLAYBACK_TARGET_NOT_FOUND, f"no playing or unreleased response {cmd.response_id[:64]}", "response_id")
        if cmd.item_id is not None and cmd.item_id not in resp.item_ids:
            return None, reject(cmd, Code.PLAYBACK_ITEM_MISMATCH, f"item {cmd.item_id[:64]} does not belong to response {resp.id}", "item_id")
        return resp, None
    if cmd.item_id is not None:
        item = state.items.get(cmd.item_id)
        resp = state.responses.get(item.response_id) if item is not None and item.response_id else None
        if resp is None and item is not None and item.response_id in state.retired_response_ids:
            return None, reject(cmd, Code.PLAYBACK_TOO_LATE, f"item {cmd.item_id[:64]} answered an earlier user turn and was never acknowledged; its history is final")
        if resp is None:
            return None, reject(cmd, Code.PLAYBACK_TARGET_NOT_FOUND, f"no playing assistant item {cmd.item_id[:64]}", "item_id")
        return resp, None
    candidates = [r for r in state.responses.values() if may_still_play(state, r)]
    if not candidates:
        return None, reject(cmd, Code.PLAYBACK_TARGET_NOT_FOUND, "no response is playing; name response_id")
    if len(candidates) > 1:
        ids = ", ".join(r.id for r in candidates)
        return None, reject(cmd, Code.PLAYBACK_AMBIGUOUS, f"several responses may be playing ({ids}); name response_id")
    return candidates[0], None


def _item_at(state: SessionState, resp: Response, ms: int) -> str:
    """The response's item playing at ``ms`` of its audio (its last item past the end)."""
    for item_id in resp.item_ids:
        item = state.items.get(item_id)
        if item is not None and ms < item.offset_ms + item.generated_ms:
            return item_id
    return resp.item_id


def decide_ack_playback(cmd: AckPlayback, state: SessionState) -> list[Event]:
    resp, err = _target(state, cmd)
    if err is not None:
        return err
    assert resp is not None
    committed = cmd.played_ms if cmd.committed_ms is None else cmd.committed_ms
    for name, value in (("played_ms", cmd.played_ms), ("committed_ms", committed)):
        if value < 0:
            return reject(cmd, Code.PLAYBACK_OUT_OF_RANGE, f"{name} must be >= 0; got {value} for response {resp.id}", name)
        if value > resp.generated_ms:
            return reject(
                cmd,
                Code.PLAYBACK_OUT_OF_RANGE,
                f"{name} {value} is past the {resp.generated_ms} ms of audio sent for response {resp.id}",
                name,
            )
    if committed > cmd.played_ms:
        return reject(
            cmd, Code.PLAYBACK_OUT_OF_RANGE, f"committed_ms {committed} cannot exceed played_ms {cmd.played_ms} (response {resp.id})", "committed_ms"
        )
    if frozen(state, resp):
        return reject(
            cmd,
            Code.PLAYBACK_TOO_LATE,
            f"response {resp.id} answered an earlier user turn and was never acknowledged; its history is final",
        )
    if cmd.truncate:
        if resp.cap_ms is not None and committed > resp.cap_ms:
            return reject(
                cmd,
                Code.PLAYBACK_OUT_OF_RANGE,
                f"committed_ms {committed} is past response {resp.id}'s truncation at {resp.cap_ms} ms",
                "committed_ms",
            )
        new_committed = committed
    else:
        new_committed = max(resp.committed_ms, committed)
        if resp.cap_ms is not None:
            new_committed = min(new_committed, resp.cap_ms)
    events: list[Event] = [
        PlaybackAcked(
            client_event_id=cmd.event_id,
            response_id=resp.id,
            item_id=cmd.item_id or _item_at(state, resp, new_committed),
            played_ms=max(resp.played_ms, cmd.played_ms),
            committed_ms=new_committed,
            truncate=cmd.truncate,
        )
    ]
    if cmd.truncate:
        remove = state.config is not None and state.config.transcript_on_truncate == "remove"
        for item_id in resp.item_ids:
            item = state.items.get(item_id)
            if item is None or not item.offset_ms <= committed < item.offset_ms + max(item.audio_ms, 1):
                continue
            events.append(
                ItemTruncated(
                    item_id=item_id, audio_end_ms=committed - item.offset_ms, remove_transcript=remove, in_conversation=item.in_conversation
                )
            )
    return events


def evolve_playback_acked(ev: PlaybackAcked, state: SessionState, seq: int) -> SessionState:
    resp = state.responses[ev.response_id]
    cap = resp.cap_ms
    if ev.truncate:
        cap = ev.committed_ms if cap is None else min(cap, ev.committed_ms)
    resp = replace(
        resp, played_ms=ev.played_ms, committed_ms=ev.committed_ms, cap_ms=cap, acked=True, slot_reserved=True
    )
    state = refresh_transcripts(put_response(state, resp), resp.id)
    return maybe_release(state, resp.id)
