"""The tick contracts a worker knows, one line per kind in :data:`CONTRACTS`: for each tick kind,
the context its engine gets and the events its output is logged as
(:class:`~duplex_es.worker.engine.TickContract`).
"""

from __future__ import annotations

import base64

from duplex_es.events import TickIssued, TickOutput, TranscriptionCompleted, TranscriptionRequested, UnitIssued, UnitOutput
from duplex_es.worker.engine import AudioCutter, EngineOutput, TickContext, TickContract, TranscriptionContext, TranscriptionOutput, UnitContext, UnitOutputs
from duplex_es.worker.world.contract import WORLD_TICKS

__all__ = ["CONTRACTS", "SPEECH_TICKS", "TRANSCRIPTION_TICKS", "DUPLEX_UNITS", "output_events", "transcription_output_events", "unit_output_events"]


def _width(format_type: str) -> int:
    """Bytes per sample of an input format: 2 for PCM16, 1 for G.711."""
    return 2 if format_type == "audio/pcm" else 1


def speech_context(session_id: str, tick: TickIssued, cut: AudioCutter) -> TickContext:
    """A response tick's context: the tick, and its user audio read from the log on demand."""
    width = _width(tick.inputs.input_format.type)
    return TickContext(session_id=session_id, tick=tick, read_audio=lambda segments: cut(session_id, segments, width))


def output_events(session_id: str, engine_name: str, out: EngineOutput) -> list[TickOutput]:
    """The ``tick.output`` of a speech engine's step (the echo comes from the engine)."""
    e = out.echo
    return [
        TickOutput(
            session_id=e.session_id,
            request_id=e.request_id,
            response_id=e.response_id or "",
            epoch=e.epoch,
            chunk_index=e.chunk_index,
            applied_event_ids=e.applied_event_ids,
            # Derived from the tick, so a worker that takes the tick over names the item the same.
            new_item_id="item_" + e.request_id.removeprefix("req_") if out.new_item else None,
            audio=base64.b64encode(out.audio).decode("ascii"),
            text_delta=out.text_delta,
            marks=out.marks,
            final=out.final,
            incomplete_reason=out.incomplete_reason,
            input_transcripts=out.input_transcripts,
            engine=engine_name,
            usage=out.usage,
            not_applied=out.not_applied,
            function_call=out.function_call,
        )
    ]


def transcription_context(session_id: str, tick: TranscriptionRequested, cut: AudioCutter) -> TranscriptionContext:
    """A transcription tick's context: the request, and its item's audio read on demand."""
    width = _width(tick.input_format.type)
    return TranscriptionContext(session_id=session_id, tick=tick, read_audio=lambda: cut(session_id, tick.audio, width))


def transcription_output_events(session_id: str, engine_name: str, out: TranscriptionOutput) -> list[TranscriptionCompleted]:
    """The ``transcription.completed`` of a transcript (request and item echoed by the engine)."""
    return [
        TranscriptionCompleted(
            session_id=session_id,
            request_id=out.request_id,
            item_id=out.item_id,
            transcript=out.transcript,
            seconds=round(out.seconds, 3),
            engine=engine_name,
        )
    ]


def unit_context(session_id: str, tick: UnitIssued, cut: AudioCutter) -> UnitContext:
    """A full-duplex unit's context: the unit, and its input audio read from the log on demand."""
    width = _width(tick.inputs.input_format.type)
    return UnitContext(session_id=session_id, tick=tick, read_audio=lambda segments: cut(session_id, segments, width))


def unit_output_events(session_id: str, engine_name: str, out: UnitOutputs) -> list[UnitOutput]:
    """The ``duplex.unit.output`` of an engine's answer to a unit (the echo comes from the engine)."""
    e = out.echo
    return [
        UnitOutput(
            session_id=e.session_id,
            request_id=e.request_id,
            epoch=e.epoch,
            chunk_index=e.chunk_index,
            applied_event_ids=e.applied_event_ids,
            listen_reason=out.listen_reason,
            audio=base64.b64encode(out.audio).decode("ascii"),
            text_delta=out.text_delta,
            marks=out.marks,
            end_of_turn=out.end_of_turn,
            user_transcript_delta=out.user_transcript_delta,
            engine_state=out.engine_state,
            engine=engine_name,
            usage=out.usage,
            continue_turn=out.continue_turn,
            function_call=out.function_call,
            backchannel=out.backchannel,
        )
    ]


SPEECH_TICKS = TickContract(kind="speech", context=speech_context, answer=output_events)
TRANSCRIPTION_TICKS = TickContract(kind="transcription", context=transcription_context, answer=transcription_output_events)

DUPLEX_UNITS = TickContract(kind="duplex", context=unit_context, answer=unit_output_events)

#: Every tick kind a worker can run: kind → contract.
CONTRACTS: dict[str, TickContract] = {c.kind: c for c in (SPEECH_TICKS, TRANSCRIPTION_TICKS, WORLD_TICKS, DUPLEX_UNITS)}
