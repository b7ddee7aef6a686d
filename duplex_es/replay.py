"""Replay: rebuild a session's state at any event from the log, with a timeline of verdicts."""

from __future__ import annotations

from typing import Any, Optional

import attrs

from duplex_es.domain import evolve, kind_of, new_state
from duplex_es.domain.world import world_verdict
from duplex_es.events import (
    JUDGE_UNIT,
    CommandDeduplicated,
    OverlapDecided,
    UnitFailed,
    UnitIssued,
    UnitOutput,
    TimeoutTriggered,
    TranscriptionCompleted,
    TranscriptionFailed,
    TranscriptionRequested,
    AudioAppended,
    InteractionAccepted,
    InteractionRejected,
    WorldChunk,
    WorldClosed,
    WorldFailed,
    WorldReset,
    WorldStarted,
    WorldTickFailed,
    WorldTickIssued,
    HeartbeatReceived,
    ResponseDeferred,
    ItemCreated,
    ItemDeleted,
    ItemRetrieved,
    OutputAudioCleared,
    SessionDetached,
    SessionExpired,
    SessionResumed,
    SpeechStarted,
    SpeechStopped,
    TurnSignaled,
    CommandRejected,
    EpochAdvanced,
    Event,
    InputCleared,
    InputCommitted,
    ItemTruncated,
    PlaybackAcked,
    ResponseCreated,
    ResponseDone,
    SessionClosed,
    SessionOpened,
    SessionUpdated,
    TextAppended,
    TickFailed,
    TickIssued,
    TickOutput,
    TickAnswer,
    TickRequest,
    Refusal,
)
from duplex_es.store import EventLog

__all__ = ["TimelineRow", "Replay", "RenderReport", "replay", "rerender", "verdict_of", "summarize"]


@attrs.frozen
class TimelineRow:
    """One log event as the timeline shows it."""

    seq: int
    position: int
    recorded_at_us: int
    type: str
    verdict: str
    summary: str
    #: its sealed content was not opened (erased, or no master key): the summary shows empty
    #: text and silence where the content was (docs/privacy.md)
    withheld: bool = False


@attrs.frozen
class Replay:
    """A session rebuilt up to ``state.seq``: the state and the timeline that led to it."""

    session_id: str
    state: Any
    timeline: tuple[TimelineRow, ...]
    head: int


def verdict_of(before: Any, ev: Event) -> str:
    """``accepted``, ``rejected: <code>``, ``discarded: <reason>`` or ``decided`` (session reactions)."""
    if isinstance(ev, Refusal):
        return f"rejected: {ev.code}"  # type: ignore[attr-defined]
    if isinstance(ev, TickAnswer):
        v = kind_of(before).judge(before, ev)
        return v.kind if v.accepted else f"{v.kind}: {v.reason}"
    if isinstance(ev, (TickRequest, WorldFailed)):
        return "decided"
    if isinstance(ev, CommandDeduplicated):
        return "deduplicated"
    decided = (
        EpochAdvanced,
        SpeechStarted,
        SpeechStopped,
        SessionDetached,
        SessionExpired,
        ResponseDeferred,
        TimeoutTriggered,
    )
    if isinstance(ev, decided) or (isinstance(ev, (ResponseDone, InputCommitted, ResponseCreated)) and ev.client_event_id is None):
        return "decided"
    return "accepted"


def _ms(samples: int, rate: int = 24000) -> str:
    return f"{samples * 1000 // rate} ms"


def _not_applied(names: tuple[str, ...]) -> str:
    return f" not applied: {', '.join(names)}" if names else ""


def _clip(text: str, limit: int) -> str:
    """``text`` cut to ``limit`` characters, with ``...`` when something was cut."""
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _call_chunk(ev: TickOutput | UnitOutput, arguments: Optional[str]) -> str:
    c = ev.function_call
    assert c is not None
    shown = f" function_call {c.name} {c.call_id} args+={_clip(c.arguments_delta, 40)!r}"
    if c.done:
        shown += f" done: {c.name}({_clip(c.arguments_delta if arguments is None else arguments, 80)})"
    return shown


def _seq_span(seqs: tuple[int, ...]) -> str:
    """A unit's appends, short: ``[12]``, ``[12..21] (10)``."""
    return f"[{seqs[0]}]" if len(seqs) == 1 else f"[{seqs[0]}..{seqs[-1]}] ({len(seqs)})"


def _function_item(ev: ItemCreated) -> str:
    if ev.type == "function_call":
        return f"function_call {ev.call_id}: {ev.name}({_clip(ev.arguments or '', 80)})"
    return f"function_call_output {ev.call_id}: {_clip(ev.output or '', 60)!r}"


def summarize(ev: Event, *, call_arguments: Optional[str] = None) -> str:
    """The key fields of an event, in one line (long texts clipped).

    ``call_arguments``: for a ``tick.output`` whose function-call chunk is ``done``, the call's
    whole arguments (its accepted chunks' deltas so far and this one's, as :func:`replay` folds
    them), shown as the completed call; ``None`` shows this chunk's delta only.
    """
    cid = f" [{ev.client_event_id}]" if getattr(ev, "client_event_id", None) else ""
    if isinstance(ev, SessionOpened):
        td = ev.config.turn_detection
        return f"model={ev.config.model} engine={ev.config.engine or ev.config.model} turn_detection={td.type if td else None}"
    if isinstance(ev, SessionUpdated):
        c = ev.config
        td = c.turn_detection
        return (
            f"voice={c.voice} modalities={','.join(c.output_modalities)} turn_detection={td.type if td else None} "
            f"model_relevant={ev.model_relevant}" + _not_applied(ev.not_applied) + cid
        )
    if isinstance(ev, CommandDeduplicated):
        return f"{ev.command_type or '?'} repeats seq {ev.first_seq}-{ev.last_seq}: not applied again{cid}"
    if isinstance(ev, TimeoutTriggered):
        return f"item={ev.item_id} no speech {ev.audio_start_ms}-{ev.audio_end_ms} ms"
    if isinstance(ev, TranscriptionRequested):
        model = ev.settings.get("model") if isinstance(ev.settings, dict) else None
        return f"request={ev.request_id} item={ev.item_id} audio={_ms(sum(s.samples for s in ev.audio), ev.input_format.rate)} model={model}"
    if isinstance(ev, TranscriptionCompleted):
        return f"request={ev.request_id} item={ev.item_id} {ev.transcript[:40]!r} ({ev.seconds} s, {ev.engine})"
    if isinstance(ev, TranscriptionFailed):
        return f"request={ev.request_id} item={ev.item_id} {ev.code}: {ev.message[:60]}"
    if isinstance(ev, CommandRejected):
        return f"{ev.command_type or '?'}: {ev.message}" + (f" (param {ev.param})" if ev.param else "") + cid
    if isinstance(ev, AudioAppended):
        return f"{_ms(ev.samples)} at {_ms(ev.start_sample)}{cid}"
    if isinstance(ev, TextAppended):
        return f"{ev.text[:40]!r}{cid}"
    if isinstance(ev, InputCommitted):
        return f"item={ev.item_id} appends={list(ev.append_seqs)} audio={_ms(ev.samples)}{cid}"
    if isinstance(ev, InputCleared):
        return f"discarded={list(ev.discarded_seqs)}{cid}"
    if isinstance(ev, ResponseCreated):
        meta = f" metadata={ev.metadata}" if ev.metadata else ""
        given = f" input={len(ev.input)} items" if ev.input is not None else ""
        return f"response={ev.response_id} item={ev.item_id} modalities={','.join(ev.output_modalities)}{given}{meta}" + _not_applied(ev.not_applied) + cid
    if isinstance(ev, TickIssued):
        return f"request={ev.request_id} epoch={ev.epoch} chunk={ev.chunk_index} applied={list(ev.applied_event_ids)}"
    if isinstance(ev, TickOutput):
        nbytes = len(ev.audio) * 3 // 4
        what = _call_chunk(ev, call_arguments) if ev.function_call is not None else f" audio={nbytes} bytes text={ev.text_delta[:30]!r}"
        return (
            f"request={ev.request_id} chunk={ev.chunk_index}{what}"
            + (f" new_item={ev.new_item_id}" if ev.new_item_id else "")
            + (" final" if ev.final else "")
            + (f" incomplete={ev.incomplete_reason}" if ev.incomplete_reason else "")
            + (f" engine {ev.engine} did not apply: {', '.join(ev.not_applied)}" if ev.not_applied else "")
        )
    if isinstance(ev, TickFailed):
        return f"request={ev.request_id} chunk={ev.chunk_index} {ev.code}: {ev.message[:60]}"
    if isinstance(ev, UnitIssued):
        heard = f"appends={_seq_span(ev.applied_event_ids)}" if ev.applied_event_ids else f"silence={ev.silence_ms} ms" if ev.silence_ms else "no audio"
        if ev.purpose == JUDGE_UNIT:  # semantic_vad asks whether the user's turn is over
            heard = f"judge utterance={sum(s.samples for s in ev.audio) * 1000 // ev.inputs.input_format.rate} ms pause={ev.pause_ms} ms"
        read = f" items={[e.item_id for e in ev.items]}" if ev.items else ""
        return (
            f"unit={ev.chunk_index} request={ev.request_id} epoch={ev.epoch} {heard}{read}"
            + (" turn_requested" if ev.turn_requested else "")
            + (f" turn={ev.response_id}" if ev.response_id else "")
        )
    if isinstance(ev, UnitOutput):
        if ev.function_call is not None:
            what = _call_chunk(ev, call_arguments).strip() + (" end_of_turn" if ev.end_of_turn else "")
        elif ev.audio or ev.text_delta:
            what = f"speak audio={len(ev.audio) * 3 // 4} bytes text={ev.text_delta[:30]!r}" + (" end_of_turn" if ev.end_of_turn else "")
            what = f"backchannel {what}" if ev.backchannel else what
        else:
            what = f"listen ({ev.listen_reason})"
        heard = f" heard+={ev.user_transcript_delta[:40]!r}" if ev.user_transcript_delta else ""
        return f"unit={ev.chunk_index} {what}{heard}"
    if isinstance(ev, UnitFailed):
        return f"unit={ev.chunk_index} {ev.code}: {ev.message[:60]}"
    if isinstance(ev, OverlapDecided):
        return f"{ev.decision} ({ev.reason}) over {ev.response_id} at {ev.audio_start_ms} ms"
    if isinstance(ev, EpochAdvanced):
        return f"epoch={ev.epoch} reason={ev.reason} cancelled={list(ev.cancelled_request_ids)} discarded={list(ev.discarded_event_ids)}"
    if isinstance(ev, ResponseDone):
        extra = f" heard_ms={ev.heard_ms}" if ev.heard_ms is not None else ""
        # A response the session's end cut short keeps GA's reason; its real cause is the code.
        err = "" if not ev.error_code else f" {ev.error_code}" if ev.status == "failed" else f" cause={ev.error_code}"
        return f"response={ev.response_id} status={ev.status}" + (f" reason={ev.reason}" if ev.reason else "") + err + extra + cid
    if isinstance(ev, PlaybackAcked):
        return f"response={ev.response_id} played={ev.played_ms} committed={ev.committed_ms}{cid}"
    if isinstance(ev, ItemTruncated):
        return f"item={ev.item_id} audio_end_ms={ev.audio_end_ms}{cid}"
    if isinstance(ev, SessionClosed):
        return f"reason={ev.reason}{cid}"
    if isinstance(ev, SpeechStarted):
        return f"item={ev.item_id} audio_start_ms={ev.audio_start_ms}"
    if isinstance(ev, SpeechStopped):
        return f"item={ev.item_id} audio_end_ms={ev.audio_end_ms}"
    if isinstance(ev, ItemCreated):
        if ev.type != "message":
            return f"item={ev.item_id} {_function_item(ev)} after={ev.previous_item_id}{cid}"
        return f"item={ev.item_id} role={ev.role} after={ev.previous_item_id} parts={[p.type for p in ev.content]}{cid}"
    if isinstance(ev, (ItemDeleted, ItemRetrieved)):
        return f"item={ev.item_id}{cid}"
    if isinstance(ev, ResponseDeferred):
        return f"response={ev.response_id} waits for the active response"
    if isinstance(ev, OutputAudioCleared):
        return f"response={ev.response_id}{cid}"
    if isinstance(ev, SessionDetached):
        return f"at_ms={ev.at_ms} reason={ev.reason}"
    if isinstance(ev, SessionResumed):
        return f"lease_generation={ev.lease_generation} at_ms={ev.at_ms}{cid}"
    if isinstance(ev, SessionExpired):
        return f"reason={ev.reason} decided_at_ms={ev.decided_at_ms} since_ms={ev.since_ms}"
    if isinstance(ev, TurnSignaled):
        return f"signal={ev.signal}{cid}"
    if isinstance(ev, HeartbeatReceived):
        return cid.strip()
    return _summarize_world(ev)


def _summarize_world(ev: Event) -> str:
    if isinstance(ev, WorldStarted):
        c = ev.config
        return f"{c.width}x{c.height} {c.fps} fps, {c.frames_per_chunk} frames/chunk, seed {c.seed}, pacing {c.pacing}, prompt {c.prompt[:30]!r}"
    if isinstance(ev, InteractionAccepted):
        tracks = ",".join(f"{c.track}={c.data}" for c in ev.controls)
        return f"id={ev.event_id}" + (f" prompt={ev.prompt[:30]!r}" if ev.prompt is not None else "") + (f" {tracks}" if tracks else "") + f" pending={ev.pending}"
    if isinstance(ev, InteractionRejected):
        return f"id={ev.event_id} {ev.message}"
    if isinstance(ev, WorldTickIssued):
        return f"request={ev.request_id} epoch={ev.epoch} chunk={ev.chunk_index} applied={list(ev.applied_event_ids)}"
    if isinstance(ev, WorldChunk):
        return f"request={ev.request_id} epoch={ev.epoch} chunk={ev.chunk_index} applied={list(ev.applied_event_ids)} frames={len(ev.frames)}"
    if isinstance(ev, WorldTickFailed):
        return f"request={ev.request_id} chunk={ev.chunk_index} {ev.code}: {ev.message[:60]}"
    if isinstance(ev, WorldFailed):
        return f"{ev.code}: {ev.message[:60]}"
    if isinstance(ev, WorldReset):
        return f"epoch={ev.epoch} floor={ev.floor} cancelled={list(ev.cancelled_request_ids)} discarded={list(ev.discarded_event_ids)}"
    if isinstance(ev, WorldClosed):
        return f"reason={ev.reason} discarded={list(ev.discarded_event_ids)}"
    return _fields(ev)


def _fields(ev: Event) -> str:
    """The first fields of an event no summary above knows (another kind's, say), as
    ``name=value``, each cut to 40 characters."""
    shown = []
    for field in attrs.fields(type(ev))[:5]:
        text = repr(getattr(ev, field.name))
        shown.append(f"{field.name}={text if len(text) <= 40 else text[:37] + '...'}")
    return " ".join(shown)


def replay(log: EventLog, session_id: str, *, at: Optional[int] = None) -> Replay:
    """Rebuild ``session_id`` from its events up to seq ``at`` (all events if ``None``).

    Raises:
        KeyError: the session has no events.
        duplex_es.store.StoredEventError: an event cannot be decoded.
    """
    records = log.read_session(session_id)
    if not records:
        raise KeyError(session_id)
    state: Any = new_state()
    rows = []
    arguments: dict[str, str] = {}  # call_id -> the arguments its accepted chunks streamed so far
    for r in records:
        if at is not None and r.seq > at:
            break
        ev = r.event
        verdict = verdict_of(state, ev)
        state = evolve(state, r.seq, ev)
        whole = None
        if isinstance(ev, (TickOutput, UnitOutput)) and ev.function_call is not None:
            whole = arguments.get(ev.function_call.call_id, "") + ev.function_call.arguments_delta
            if verdict == "accepted" and ev.function_call.done:
                arguments.pop(ev.function_call.call_id, None)  # complete: nothing more may extend it
            elif verdict == "accepted":
                arguments[ev.function_call.call_id] = whole
        rows.append(TimelineRow(r.seq, r.position, r.recorded_at_us, ev.TYPE, verdict, summarize(ev, call_arguments=whole), r.withheld))
    return Replay(session_id, state, tuple(rows), records[-1].seq)


@attrs.frozen
class RenderReport:
    """What ``replay --render`` found: frames re-rendered, frames that differ from the recorded
    hashes (``(chunk_index, epoch, frame)``), and chunks skipped because another engine made them."""

    frames: int
    mismatches: tuple[tuple[int, int, int], ...]
    skipped: tuple[tuple[int, int, str], ...]
    written: tuple[str, ...]

    @property
    def ok(self) -> bool:
        """True when every re-rendered frame matches its recorded hash."""
        return not self.mismatches


def rerender(log: EventLog, session_id: str, out_dir: Optional[str] = None) -> RenderReport:
    """Re-render every committed chunk of a world session from its tick snapshot through the
    reference engine and compare each frame with the hash the worker recorded; frames are written
    as PNG files into ``out_dir`` when given.

    Raises:
        KeyError: the session has no events.
        ValueError: the session is not a world session.
    """
    from pathlib import Path

    from duplex_es.worker.world.engine import WorldEngine, encode_png, frame_hash

    records = log.read_session(session_id)
    if not records:
        raise KeyError(session_id)
    if not isinstance(records[0].event, WorldStarted):
        raise ValueError(f"{session_id} is not a world session")
    engine = WorldEngine()
    folder = Path(out_dir) if out_dir else None
    if folder is not None:
        folder.mkdir(parents=True, exist_ok=True)
    ticks = {r.event.request_id: r.event for r in records if isinstance(r.event, WorldTickIssued)}
    state: Any = new_state()
    frames, mismatches, skipped, written = 0, [], [], []
    for r in records:
        ev = r.event
        if isinstance(ev, WorldChunk) and world_verdict(state, ev) == "accepted":  # type: ignore[arg-type]
            tick = ticks[ev.request_id]
            if ev.engine != engine.name:
                skipped.append((tick.epoch, tick.chunk_index, ev.engine))
            else:
                rgb, _ = engine.render_chunk(tick)
                for i, (img, recorded) in enumerate(zip(rgb, ev.frame_hashes)):
                    frames += 1
                    if frame_hash(img) != recorded:
                        mismatches.append((tick.epoch, tick.chunk_index, i))
                    if folder is not None:
                        path = folder / f"epoch{tick.epoch:02d}_chunk{tick.chunk_index:04d}_frame{i:02d}.png"
                        path.write_bytes(encode_png(img))
                        written.append(str(path))
        state = evolve(state, r.seq, ev)
    return RenderReport(frames, tuple(mismatches), tuple(skipped), tuple(written))
