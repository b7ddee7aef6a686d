"""Full-duplex units → wire events (docs/duplex.md, "On the wire"; vLLM-Omni's event names for
what GA has no name for: ``response.listen``, ``response.speak``, ``overlap.decision``,
``input_audio_buffer.processed``).

A unit's output is projected in this order: what the engine heard of the user
(``conversation.item.input_audio_transcription.delta``); if the model starts to speak, the user
item it answers and its response (``response.created``, ``response.speak`` once, the output
item's opening); its audio and transcript deltas or function call arguments (an item it opens
shown first, the one before closed), or ``response.listen`` with the reason; and
last, one ``input_audio_buffer.processed`` per append the unit applied, in input order — after
the output those appends caused. The vLLM-Omni events (``response.speak``, ``response.listen``,
``overlap.decision``, ``input_audio_buffer.processed``) go out only to a session that asked for
them (``duplex.extension_events``). A backchannel is a response as any other on the wire (GA
clients play it); its ``response.speak`` says ``"backchannel": true``. An output that breaks the
backchannel rules is projected as a failed unit.
"""

from __future__ import annotations

from typing import Any

from duplex_es.domain.audio import ms_of
from duplex_es.domain.duplex import backchannel_breach, unit_call_problem, unit_new_item, unit_verdict
from duplex_es.domain.errors import Code
from duplex_es.domain.state import SessionState
from duplex_es.events import OverlapDecided, UnitFailed, UnitOutput
from duplex_es.protocol.outbound import Ctx, Projection, _response_json, chunk_events, item_json

__all__ = ["PROJECTIONS", "SILENT_EVENT_TYPES"]

#: Units are between the session and its workers.
SILENT_EVENT_TYPES = frozenset({"duplex.unit.issued", "duplex.turn.requested"})


def _extensions(state: SessionState) -> bool:
    """Whether the session asked for vLLM-Omni's full-duplex events (``duplex.extension_events``):
    GA clients (the Agents SDK among them) warn on every event type they do not know."""
    return state.config is not None and state.config.extension_events


def _processed(before: SessionState, seqs: tuple[int, ...], decision: str, reason: str | None) -> list[dict[str, Any]]:
    """One ``input_audio_buffer.processed`` per applied append, in order: its index among the
    session's appends, and where it ends on the input clock (ms)."""
    d, cfg = before.duplex, before.config
    assert cfg is not None
    out, end = [], d.unit_start
    sizes = {s.seq: s.samples for s in d.unit_segments}
    for i, seq in enumerate(seqs):
        end += sizes.get(seq, 0)
        out.append(
            {
                "type": "input_audio_buffer.processed",
                "input_index": d.processed + i,
                "audio_end_ms": ms_of(end, cfg.input_format.rate),
                "decision": decision,
                "reason": reason,
            }
        )
    return out


def project_unit_output(ev: UnitOutput, ctx: Ctx) -> list[dict[str, Any]]:
    before, after = ctx.before, ctx.after
    verdict = unit_verdict(before, ev)
    if verdict.reason == "invalid_function_call" and before.duplex.response_id is None:
        # The model broke the calling rules taking its turn: no turn opens, the client is told
        # (in an open turn, the turn's failed response.done tells it).
        error = {"type": "server_error", "code": Code.INVALID_FUNCTION_CALL, "message": unit_call_problem(before, ev) or "", "param": None, "event_id": None}
        return [{"type": "error", "error": error}]
    if not verdict.accepted:
        return []  # a cancelled unit's answer is logged, never sent (docs/architecture.md, I7)
    breach = backchannel_breach(before, ev)
    if breach is not None:  # the unit failed: nothing it said is sent (the turn's end is the pump's)
        return _failed(ctx, Code.INVALID_BACKCHANNEL)
    out: list[dict[str, Any]] = []
    if ev.user_transcript_delta and before.duplex.turn_item_id:
        out.append(
            {"type": "conversation.item.input_audio_transcription.delta", "item_id": before.duplex.turn_item_id, "content_index": 0, "delta": ev.user_transcript_delta}
        )
    speaks = bool(ev.audio or ev.text_delta) or ev.function_call is not None
    opened = speaks and before.duplex.response_id is None
    resp = after.responses.get(after.active_response_id or "") if speaks else None
    if opened and resp is not None:
        item_id = before.duplex.turn_item_id or ""
        user = after.items.get(item_id)
        if user is not None and item_id not in before.items:  # this unit made the user's turn an item
            uj = item_json(user)
            previous = after.previous_of(user.id)
            out += [
                {"type": "conversation.item.added", "item": uj, "previous_item_id": previous},
                {"type": "conversation.item.done", "item": uj, "previous_item_id": previous},
                {
                    "type": "conversation.item.input_audio_transcription.completed",
                    "item_id": user.id,
                    "content_index": 0,
                    "transcript": user.transcript,
                    "usage": {"type": "duration", "seconds": round(user.input_samples / user.audio_format.rate, 3)},
                },
            ]
        out.append({"type": "response.created", "response": _response_json(after, resp)})
        if _extensions(after):
            speak = {"type": "response.speak", "response_id": resp.id}
            out.append({**speak, "backchannel": True} if resp.backchannel else speak)
    if speaks and resp is not None:
        out += chunk_events(after, resp, opened, unit_new_item(before, ev), ev.function_call, ev.audio, ev.text_delta)
    if not _extensions(after):
        return out
    if not speaks:
        out.append({"type": "response.listen", "reason": ev.listen_reason or "listening", "response_id": before.duplex.response_id})
    return out + _processed(before, before.duplex.unit_seqs, "speak" if speaks else "listen", None if speaks else ev.listen_reason)


def project_unit_failed(ev: UnitFailed, ctx: Ctx) -> list[dict[str, Any]]:
    return _failed(ctx, ev.code) if unit_verdict(ctx.before, ev).accepted else []


def _failed(ctx: Ctx, code: str) -> list[dict[str, Any]]:
    """The unit in flight failed with ``code``: its appends are answered ``failed`` (vLLM-Omni's
    events only; a GA client learns of it from the open turn's ``response.done``, if any)."""
    return _processed(ctx.before, ctx.before.duplex.unit_seqs, "failed", code) if _extensions(ctx.after) else []


def project_overlap_decided(ev: OverlapDecided, ctx: Ctx) -> list[dict[str, Any]]:
    if not _extensions(ctx.after):
        return []
    return [
        {"type": "overlap.decision", "decision": ev.decision, "reason": ev.reason, "response_id": ev.response_id, "audio_start_ms": ev.audio_start_ms}
    ]


#: The full-duplex projections: event class → projection.
PROJECTIONS: dict[type, Projection] = {
    UnitOutput: project_unit_output,
    UnitFailed: project_unit_failed,
    OverlapDecided: project_overlap_decided,
}
