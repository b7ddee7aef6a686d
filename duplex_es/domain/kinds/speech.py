"""The speech kind's tables: which rule decides each command and which evolver applies each
event (Realtime speech sessions, docs/protocol.md). The rules themselves live in the concern
modules; this module only lists them.
"""

from __future__ import annotations

from functools import partial

from duplex_es.domain import commands as c
from duplex_es.domain import speech_audit
from duplex_es.domain import duplex, input, items, judge as turn_judge, lease, lifecycle, playback, responses, transcription
from duplex_es.domain.kind import Decider, Evolver, SessionKind
from duplex_es.domain.replace import replace
from duplex_es.domain.rules import COMMAND_TYPES, keep
from duplex_es.domain.state import SESSION_TRANSITIONS, SessionState
from duplex_es.domain import ticks
from duplex_es.events import (
    AudioAppended,
    CommandDeduplicated,
    CommandRejected,
    EpochAdvanced,
    Event,
    HeartbeatReceived,
    InputCleared,
    InputCommitted,
    ItemCreated,
    ItemDeleted,
    ItemRetrieved,
    ItemTruncated,
    OutputAudioCleared,
    PlaybackAcked,
    ResponseCreated,
    ResponseDeferred,
    ResponseDone,
    SessionClosed,
    SessionDetached,
    SessionErased,
    SessionExpired,
    SessionOpened,
    SessionResumed,
    SessionUpdated,
    SpeechStarted,
    SpeechStopped,
    TextAppended,
    TickAnswer,
    TickFailed,
    TickIssued,
    TickOutput,
    TimeoutTriggered,
    TranscriptionCompleted,
    TranscriptionFailed,
    TranscriptionRequested,
    TurnSignaled,
    OverlapDecided,
    TurnRequested,
    UnitFailed,
    UnitIssued,
    UnitOutput,
)

__all__ = ["SPEECH", "DECIDERS", "EVOLVERS", "fold_after", "judge"]

EVOLVERS: dict[type, Evolver] = {
    # lifecycle
    SessionOpened: lifecycle.evolve_session_opened,
    SessionUpdated: lifecycle.evolve_session_updated,
    SessionClosed: lifecycle.evolve_session_closed,
    SessionExpired: lifecycle.evolve_session_expired,
    HeartbeatReceived: keep,
    SessionErased: keep,  # after the session ended: nothing it keeps changes (docs/privacy.md)
    TurnSignaled: keep,
    CommandRejected: keep,
    CommandDeduplicated: keep,
    SessionDetached: lease.evolve_session_detached,
    SessionResumed: lease.evolve_session_resumed,
    # input
    AudioAppended: input.evolve_audio_appended,
    TextAppended: input.evolve_text_appended,
    SpeechStarted: input.evolve_speech_started,
    SpeechStopped: input.evolve_speech_stopped,
    TimeoutTriggered: input.evolve_timeout_triggered,
    ResponseDeferred: input.evolve_response_deferred,
    InputCommitted: input.evolve_input_committed,
    InputCleared: input.evolve_input_cleared,
    # items
    ItemCreated: items.evolve_item_created,
    ItemDeleted: items.evolve_item_deleted,
    ItemRetrieved: keep,
    ItemTruncated: items.evolve_item_truncated,
    # responses and ticks
    ResponseCreated: responses.evolve_response_created,
    TickIssued: responses.evolve_tick_issued,
    TickOutput: responses.evolve_tick_output,
    TickFailed: responses.evolve_tick_failed,
    EpochAdvanced: responses.evolve_epoch_advanced,
    OutputAudioCleared: responses.evolve_output_audio_cleared,
    ResponseDone: responses.evolve_response_done,
    # playback
    PlaybackAcked: playback.evolve_playback_acked,
    # input transcription
    TranscriptionRequested: transcription.evolve_transcription_requested,
    TranscriptionCompleted: transcription.evolve_transcription_completed,
    TranscriptionFailed: transcription.evolve_transcription_failed,
    # full duplex (and semantic_vad's judge units, which route the others to duplex)
    UnitIssued: turn_judge.evolve_unit_issued,
    UnitOutput: turn_judge.evolve_unit_output,
    UnitFailed: turn_judge.evolve_unit_failed,
    OverlapDecided: duplex.evolve_overlap_decided,
    TurnRequested: duplex.evolve_turn_requested,
}


def fold_after(state: SessionState, events: list[Event]) -> SessionState:
    """``state`` with ``events`` applied as its next seqs (the :data:`~duplex_es.domain.rules.Fold`
    the input deciders get)."""
    for event in events:
        seq = state.seq + 1
        new = EVOLVERS[type(event)](event, state, seq)
        state = new if new.seq == seq else replace(new, seq=seq)
    return state


DECIDERS: dict[type, Decider] = {
    # lifecycle
    c.UpdateSession: lifecycle.decide_update_session,
    c.Heartbeat: lifecycle.decide_heartbeat,
    c.TurnSignal: lifecycle.decide_turn_signal,
    c.CloseSession: lifecycle.decide_close_session,
    c.Detach: lifecycle.decide_detach,
    c.Resume: lifecycle.decide_resume,
    c.Expire: lifecycle.decide_expire,
    # input
    c.AppendAudio: partial(input.decide_append_audio, fold=fold_after),
    c.AppendText: input.decide_append_text,
    c.Commit: partial(input.decide_commit, fold=fold_after),
    c.ClearInput: input.decide_clear_input,
    c.CancelInput: input.decide_cancel_input,
    # items
    c.CreateItem: items.decide_create_item,
    c.RetrieveItem: items.decide_retrieve_item,
    c.DeleteItem: items.decide_delete_item,
    c.TruncateItem: items.decide_truncate_item,
    # responses
    c.CreateResponse: responses.decide_create_response,
    c.CancelResponse: responses.decide_cancel_response,
    c.BargeIn: responses.decide_barge_in,
    c.ClearOutputAudio: responses.decide_clear_output_audio,
    c.Pump: partial(turn_judge.decide_pump, fold=fold_after),
    # playback
    c.AckPlayback: playback.decide_ack_playback,
}


def judge(state: SessionState, answer: TickAnswer) -> ticks.Verdict:
    """The verdict on a worker's answer: a response tick's output or failure
    (:func:`~duplex_es.domain.responses.classify_output`), a unit's
    (:func:`~duplex_es.domain.judge.answer_verdict`), or a transcript."""
    if isinstance(answer, (TranscriptionCompleted, TranscriptionFailed)):
        why = transcription.transcription_verdict(state, answer)
        return ticks.ACCEPTED if why == "accepted" else ticks.Verdict("discarded", why)
    if isinstance(answer, (UnitOutput, UnitFailed)):
        return turn_judge.answer_verdict(state, answer)
    return responses.classify_output(state, answer)  # type: ignore[arg-type]


SPEECH = SessionKind(
    name="speech",
    state_type=SessionState,
    start_command=c.OpenSession,
    start_event=SessionOpened,
    start=lifecycle.open_session,
    deciders=DECIDERS,
    evolvers=EVOLVERS,
    command_types=COMMAND_TYPES,
    transitions=SESSION_TRANSITIONS,
    ended_by=(SessionClosed, SessionExpired),
    audit=speech_audit.audit_speech,
    judge=judge,
    wakeup_ms=duplex.next_unit_due_ms,
    pump_idle=turn_judge.pump_idle,
    run_evolvers={AudioAppended: input.evolve_audio_run, TextAppended: input.evolve_text_run},
)
