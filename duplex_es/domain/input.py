"""User input: audio and text appends, commits, clears, and server VAD verdicts.

Audio is checked against the declared format (PCM16 needs whole samples) and placed on the
session's input clock in samples (docs/architecture.md, I12). The buffer holds segments of logged appends, so
an item can end where speech stopped inside an append, the rest staying for the next item.

With server VAD on, each append runs the detector (:mod:`duplex_es.domain.vad`) from the logged
VAD state: speech start may barge in on the active response (``interrupt_response``); speech
stop commits exactly that utterance and starts a response (``create_response``) — or defers it
until the active response ends when the two may not overlap. Every verdict is an event carrying
audio-clock ms. A commit, clear, cancel or turning VAD off ends any speech in progress with a
``speech_stopped`` at that moment, so starts and stops always pair.
"""

from __future__ import annotations

from typing import Optional, Sequence

from duplex_es.audio import decode_to_pcm16
from duplex_es.domain.audio import ms_of, samples_of
from duplex_es.domain.commands import AppendAudio, AppendText, CancelInput, ClearInput, Commit, CreateResponse, VadIds
from duplex_es.domain.duplex import add_pending, end_drop, overlap_on_start, overlap_on_stop, overlap_ongoing
from duplex_es.domain.errors import Code
from duplex_es.domain.limits import MAX_BUFFER_MS, MAX_INPUT_TEXT_CHARS, MIN_COMMIT_MS
from duplex_es.domain.replace import copier, replace
from duplex_es.domain.responses import cancel_events, retire_frozen, start_response
from duplex_es.domain.rules import Fold, put_item, reject
from duplex_es.domain.state import DuplexState, InputBuffer, Item, Response, SessionState
from duplex_es.domain.transcription import transcription_request
from duplex_es.domain.vad import FRAME_MS, DetectorUnavailable, detect, stop_silence_ms
from duplex_es.events.audio import audio_of
from duplex_es.events import (
    AudioAppended,
    CommandRejected,
    AudioSegment,
    Event,
    InputCleared,
    InputCommitted,
    ResponseDeferred,
    SpeechStarted,
    SpeechStopped,
    TextAppended,
    TimeoutTriggered,
    VadState,
)

__all__ = ["commit_events", "end_speech", "split_segments", "turn_end_events"]

_NO_VAD = VadState()  # immutable: one instance serves every append without VAD
_EMPTY_BUFFER = InputBuffer()  # immutable too: every clear empties the buffer to it


def split_segments(segments: tuple[AudioSegment, ...], samples: int) -> tuple[tuple[AudioSegment, ...], tuple[AudioSegment, ...]]:
    """Cut a run of segments after its first ``samples`` samples: ``(head, tail)``."""
    head: list[AudioSegment] = []
    tail: list[AudioSegment] = []
    left = samples
    for seg in segments:
        if left >= seg.samples:
            head.append(seg)
            left -= seg.samples
        elif left > 0:
            head.append(replace(seg, samples=left))
            tail.append(replace(seg, offset=seg.offset + left, samples=seg.samples - left))
            left = 0
        else:
            tail.append(seg)
    return tuple(head), tuple(tail)


def end_speech(state: SessionState) -> list[Event]:
    """A ``speech_stopped`` now, if server VAD is in the middle of an utterance."""
    if not state.vad.speaking or state.config is None:
        return []
    return [SpeechStopped(audio_end_ms=ms_of(state.input_clock, state.config.input_format.rate), item_id=state.vad.item_id or "")]


def commit_events(
    state: SessionState,
    item_id: str,
    event_id: Optional[str] = None,
    *,
    up_to: Optional[int] = None,
    start: Optional[int] = None,
    min_ms: int = MIN_COMMIT_MS,
) -> list[Event]:
    """The events of a commit of the buffer (from clock sample ``start`` — a server VAD turn
    starts where its speech did, padding included; the audio before it leaves the buffer — up
    to ``up_to``, else all of it) as user item ``item_id``, or its refusal when it holds under
    ``min_ms`` of audio and no text."""
    buf = state.buffer
    rate = state.config.input_format.rate  # type: ignore[union-attr]
    skip = 0 if start is None else max(0, min(buf.samples, start - buf.start_sample))
    end = buf.samples if up_to is None else max(0, min(buf.samples, up_to - buf.start_sample))
    take = max(0, end - skip)
    if not buf.text and take * 1000 < min_ms * rate:
        return reject(
            Commit(event_id=event_id, item_id=item_id),
            Code.COMMIT_EMPTY,
            f"Error committing input audio buffer: buffer too small. Expected at least {MIN_COMMIT_MS}ms of audio, "
            f"but buffer only has {take * 1000 / rate:.2f}ms of audio.",
        )
    _, kept = split_segments(buf.segments, skip)
    head, _ = split_segments(kept, take)
    return [
        InputCommitted(
            client_event_id=event_id,
            item_id=item_id,
            previous_item_id=state.last_item_id,
            segments=head,
            append_seqs=tuple(dict.fromkeys(s.seq for s in head)),
            text_seqs=buf.text_seqs,
            samples=take,
            text=buf.text,
            skipped_samples=skip,
        ),
        *transcription_request(state, item_id, head),
    ]


def decide_append_audio(cmd: AppendAudio, state: SessionState, fold: Fold) -> list[Event]:
    """An append, and the turns server VAD finds in it (``fold`` applies the batch so far to
    decide the next transition on)."""
    cfg = state.config
    assert cfg is not None
    fmt = cfg.input_format
    if cmd.nbytes == 0:
        return reject(cmd, Code.INVALID_AUDIO_LENGTH, "audio is empty", "audio")
    if fmt.type == "audio/pcm" and cmd.nbytes % 2:
        return reject(cmd, Code.INVALID_AUDIO_LENGTH, f"PCM16 audio needs an even number of bytes; got {cmd.nbytes}", "audio")
    samples = samples_of(cmd.nbytes, fmt)
    if (state.buffer.samples + samples) * 1000 > MAX_BUFFER_MS * fmt.rate:
        return reject(
            cmd,
            Code.BUFFER_FULL,
            f"the input buffer holds {state.buffer.samples * 1000 // fmt.rate} ms of audio; {samples * 1000 // fmt.rate} ms more "
            f"would pass its {MAX_BUFFER_MS // 1000} s: commit or clear it first",
            "audio",
        )
    if state.full_duplex and (state.duplex.samples + samples) * 1000 > MAX_BUFFER_MS * fmt.rate:
        return reject(
            cmd,
            Code.BUFFER_FULL,
            f"{state.duplex.samples * 1000 // fmt.rate} ms of audio wait for the model already; {samples * 1000 // fmt.rate} ms more "
            f"would pass {MAX_BUFFER_MS // 1000} s: no worker is answering",
            "audio",
        )
    td = cfg.turn_detection
    appended = AudioAppended(client_event_id=cmd.event_id, audio=cmd.audio, samples=samples, start_sample=state.input_clock)
    if state.full_duplex:
        return _duplex_append(cmd, state, fold, appended)
    if td is None or cmd.vad_ids is None:
        return [appended]
    buffer_start = state.buffer.start_sample if not state.buffer.empty else state.input_clock
    found = _run_vad(cmd, state, buffer_start)
    if isinstance(found, list):
        return found
    vad, transitions = found
    ids = cmd.vad_ids
    # Each utterance in one append needs its own item id; later ones derive from the first.
    fresh = iter([ids.item_id] + [f"{ids.item_id}_{n}" for n in range(1, len(transitions) + 2)])
    events: list[Event] = [appended]
    timeout = _idle_deadline(state, samples) if not transitions else None
    trial = fold(state, events) if transitions or timeout is not None else state  # what the transitions are decided on
    current = state.vad.item_id
    for t in transitions:
        if t.kind == "started":
            current = next(fresh)
            batch: list[Event] = [SpeechStarted(audio_start_ms=ms_of(t.sample, fmt.rate), item_id=current)]
            resp = trial.active_response
            if td.interrupt_response and resp is not None:
                batch += cancel_events(trial, [resp], cause="turn_detected", reason="turn_detected")
        else:
            item_id = current or next(fresh)
            current = None
            batch = turn_end_events(trial, item_id, t.sample, t.start, ids, fold)
        trial = fold(trial, batch)
        events += [e for e in batch if e.TYPE != "command.rejected"]
    if timeout is not None:
        # No speech for idle_timeout_ms after the last response's audio: commit what the buffer
        # holds up to the deadline (silence, as OpenAI does) and answer it.
        item_id = next(fresh)
        batch = [TimeoutTriggered(audio_start_ms=ms_of(state.idle_since_sample or 0, fmt.rate), audio_end_ms=ms_of(timeout, fmt.rate), item_id=item_id)]
        # The item the timeout names always exists: if the buffer holds too little up to the
        # deadline (a client cleared it), it takes this append too, however short.
        short = (timeout - trial.buffer.start_sample) * 1000 < MIN_COMMIT_MS * fmt.rate
        batch += commit_events(trial, item_id, up_to=None if short else timeout, min_ms=0)
        if cfg.session_type == "realtime":
            batch += _respond(fold(trial, batch), ids, item_id)
        events += [e for e in batch if e.TYPE != "command.rejected"]
    # The logged VAD state names the utterance still in progress at the end of the append.
    events[0] = replace(appended, vad=replace(vad, item_id=current if vad.speaking else None))
    return events


def turn_end_events(state: SessionState, item_id: str, end: int, start: int, ids: VadIds, fold: Fold) -> list[Event]:
    """The end of user utterance ``item_id`` at clock sample ``end`` (its speech began at
    ``start``, prefix padding included): ``speech_stopped``, the commit of exactly that audio as
    the user item, and with ``create_response`` its response (``ids``), now or once the active
    one ends. Server VAD's stop and ``semantic_vad``'s engine judgement
    (:mod:`duplex_es.domain.judge`) both end a turn this way. Under 100 ms of audio is no
    turn: only the ``speech_stopped``, the audio staying in the buffer."""
    cfg = state.config
    assert cfg is not None and cfg.turn_detection is not None
    batch: list[Event] = [SpeechStopped(audio_end_ms=ms_of(end, cfg.input_format.rate), item_id=item_id)]
    committed = commit_events(state, item_id, up_to=end, start=start)
    if isinstance(committed[0], InputCommitted):
        batch += committed
        if cfg.turn_detection.create_response and cfg.session_type == "realtime":
            batch += _respond(fold(state, batch), ids, item_id)
    return batch


def _run_vad(cmd: AppendAudio, state: SessionState, buffer_start: int) -> tuple[VadState, list] | list[Event]:
    """Server VAD over the append's audio from the logged VAD state: ``(state after, turn
    transitions)``, or the append's refusal when the session's detector cannot run here."""
    cfg = state.config
    assert cfg is not None and cfg.turn_detection is not None
    td, fmt = cfg.turn_detection, cfg.input_format
    pcm = decode_to_pcm16(audio_of(cmd.audio), fmt.type)
    before = state.vad
    frame = max(1, fmt.rate * FRAME_MS // 1000)
    if before.frame_fill != state.input_clock % frame:  # VAD was off: re-align frames to the clock
        before = replace(before, frame_fill=state.input_clock % frame, frame_energy=0.0)
    try:
        return detect(before, pcm, state.input_clock, fmt.rate, td, buffer_start, stop_silence_ms(cfg))
    except DetectorUnavailable as e:  # only a session moved to a server without the model
        return reject(cmd, Code.SERVER_VAD_UNAVAILABLE, f"the {td.detector} detector cannot run on this server: {e}", "session.audio.input.turn_detection.detector")


def _duplex_append(cmd: AppendAudio, state: SessionState, fold: Fold, appended: AudioAppended) -> list[Event]:
    """An append to a full-duplex session (docs/duplex.md): server VAD still reports speech
    (no commit, no response: the model decides), speech over the model's turn goes through the
    overlap policy; the pump that follows issues a unit once one is due."""
    cfg = state.config
    assert cfg is not None
    td, fmt = cfg.turn_detection, cfg.input_format
    events: list[Event] = [appended]
    ids = cmd.vad_ids
    if td is not None and ids is not None:
        found = _run_vad(cmd, state, state.input_clock)
        if isinstance(found, list):
            return found
        vad, transitions = found
        fresh = iter([ids.item_id] + [f"{ids.item_id}_{n}" for n in range(1, len(transitions) + 2)])
        current, started_ms = state.vad.item_id, ms_of(state.vad.start_sample, fmt.rate)
        events[0] = replace(appended, vad=vad)
        trial = fold(state, events)

        def cancel(st: SessionState, resp: Response) -> list[Event]:
            return cancel_events(st, [resp], cause="barge_in", reason="turn_detected")

        for t in transitions:
            at = ms_of(t.sample, fmt.rate)
            if t.kind == "started":
                current, started_ms = next(fresh), at
                batch: list[Event] = [SpeechStarted(audio_start_ms=at, item_id=current)]
                batch += overlap_on_start(trial, current, at, cancel)
            else:
                stopped = current or next(fresh)
                batch = [SpeechStopped(audio_end_ms=at, item_id=stopped), *overlap_on_stop(trial, stopped, started_ms)]
                current = None
            trial = fold(trial, batch)
            events += batch
        events[0] = replace(appended, vad=replace(vad, item_id=current if vad.speaking else None))
        # Speech still going on over the model's turn may have lasted long enough to barge in.
        events += overlap_ongoing(fold(state, events), cancel)
    return events  # the host's pump issues the unit once one is due (domain/duplex.unit_due)


def _idle_deadline(state: SessionState, samples: int) -> Optional[int]:
    """Where on the input clock server VAD's idle timeout fires within an append of
    ``samples`` that starts no speech, or ``None``: it runs from the end of the last response's
    audio (``state.idle_since_sample``), only while nobody speaks and no response is active."""
    cfg = state.config
    td = cfg.turn_detection if cfg is not None else None
    if td is None or td.idle_timeout_ms is None or state.idle_since_sample is None:
        return None
    if state.vad.speaking or state.active_response is not None or state.deferred_response is not None:
        return None
    deadline = state.idle_since_sample + td.idle_timeout_ms * cfg.input_format.rate // 1000  # type: ignore[union-attr]
    # A deadline already behind the clock (the timeout was set or lowered late) fires now.
    return max(deadline, state.input_clock) if deadline <= state.input_clock + samples else None


def _respond(state: SessionState, ids: VadIds, item_id: str) -> list[Event]:
    """The response server VAD starts for the turn just committed as ``item_id``: now, or, while
    another holds the conversation, as soon as it ends."""
    auto = _auto_response(ids, item_id)
    if state.active_response is None:
        return start_response(state, auto)
    return _defer(state, auto.response_id, auto.item_id, auto.request_id)


def _defer(state: SessionState, response_id: str, item_id: str, request_id: str) -> list[Event]:
    """A response that starts once the active one ends — unless one already waits: that one
    answers every turn committed meanwhile (it reads the conversation when it starts)."""
    if state.deferred_response is not None:
        return []
    return [ResponseDeferred(response_id=response_id, item_id=item_id, request_id=request_id)]


def _auto_response(ids: VadIds, item_id: str) -> CreateResponse:
    suffix = "" if item_id == ids.item_id else item_id[len(ids.item_id) :]
    return CreateResponse(response_id=ids.response_id + suffix, item_id=ids.response_item_id + suffix, request_id=ids.request_id + suffix)


def decide_append_text(cmd: AppendText, state: SessionState) -> list[Event]:
    if not cmd.text:
        return reject(cmd, Code.INPUT_TEXT_EMPTY, "text is empty", "text")
    if len(state.buffer.text) + len(cmd.text) > MAX_INPUT_TEXT_CHARS:
        return reject(
            cmd,
            Code.INPUT_TEXT_TOO_LONG,
            f"{len(state.buffer.text)} + {len(cmd.text)} characters of text: a user item holds at most {MAX_INPUT_TEXT_CHARS}",
            "text",
        )
    return [TextAppended(client_event_id=cmd.event_id, text=cmd.text)]


def _no_buffer(cmd: object, state: SessionState) -> Optional[list[Event]]:
    """A full-duplex session has no input buffer to commit, clear or cancel: the model hears
    input as it arrives and decides the turns (docs/duplex.md)."""
    if not state.full_duplex:
        return None
    return reject(
        cmd,
        Code.FULL_DUPLEX_NO_BUFFER,
        "a full-duplex session has no input buffer: the model hears the input as it arrives and decides when the user's turn ends",
    )


def decide_commit(cmd: Commit, state: SessionState, fold: Fold) -> list[Event]:
    """``input_audio_buffer.commit`` (with vLLM-Omni's ``create_response``, its response too)."""
    refused = _no_buffer(cmd, state)
    if refused is not None:
        return refused
    if cmd.item_id in state.items:
        return reject(cmd, Code.ITEM_EXISTS, f"an item with id {cmd.item_id!r} already exists", "item_id")
    committed = commit_events(state, cmd.item_id, cmd.event_id)
    if not isinstance(committed[0], InputCommitted):
        return committed
    events = end_speech(state) + committed
    if cmd.create_response and cmd.response_ids is not None:
        # vLLM-Omni's input.commit answers the turn in the same batch: at once, or as soon as
        # the response holding the conversation ends (as server VAD does); else refused whole.
        response_id, item_id, request_id = cmd.response_ids
        after = fold(state, events)
        if after.active_response is not None:
            return events + _defer(after, response_id, item_id, request_id)
        create = CreateResponse(event_id=cmd.event_id, response_id=response_id, item_id=item_id, request_id=request_id)
        started = start_response(after, create)
        if isinstance(started[0], CommandRejected):
            return [replace(started[0], command_type="input_audio_buffer.commit")]
        events += started
    return events


def decide_clear_input(cmd: ClearInput, state: SessionState) -> list[Event]:
    refused = _no_buffer(cmd, state)
    if refused is not None:
        return refused
    return end_speech(state) + [InputCleared(client_event_id=cmd.event_id, discarded_seqs=_buffered(state))]


def decide_cancel_input(cmd: CancelInput, state: SessionState) -> list[Event]:
    refused = _no_buffer(cmd, state)
    if refused is not None:
        return refused
    return end_speech(state) + [InputCleared(client_event_id=cmd.event_id, discarded_seqs=_buffered(state), reason="input_cancelled")]


def _buffered(state: SessionState) -> tuple[int, ...]:
    return tuple(sorted(state.buffer.append_seqs + state.buffer.text_seqs))


# ---------------------------------------------------------------------------------- evolvers


# The commonest events' evolvers copy with the class's copier (no lookup per call) and set
# ``seq`` in the one copy they make (else ``evolve`` makes a second one to set it).
_copy_state = copier(SessionState)
_copy_buffer = copier(InputBuffer)
_copy_duplex = copier(DuplexState)


def evolve_audio_appended(ev: AudioAppended, state: SessionState, seq: int) -> SessionState:
    if state.full_duplex:  # it waits for the next unit, not for a commit
        state = add_pending(state, seq, ev.samples, ev.start_sample)
        return _copy_state(state, input_clock=state.input_clock + ev.samples, vad=ev.vad or _NO_VAD, seq=seq)
    buf = state.buffer
    samples = ev.samples
    buf = _copy_buffer(
        buf,
        segments=buf.segments + (AudioSegment(seq=seq, offset=0, samples=samples),),
        append_seqs=buf.append_seqs + (seq,),
        samples=buf.samples + samples,
        start_sample=buf.start_sample if buf.append_seqs or buf.text_seqs else ev.start_sample,  # not buf.empty
    )
    return _copy_state(state, buffer=buf, input_clock=state.input_clock + samples, vad=ev.vad or _NO_VAD, seq=seq)


def evolve_audio_run(state: SessionState, seqs: Sequence[int], events: Sequence[AudioAppended]) -> SessionState:
    """Appends logged one after the other (``events[i]`` at ``seqs[i]``, at least one), applied
    at once: the state :func:`evolve_audio_appended` gives applied to each in turn, with each
    growing tuple built once per run instead of once per append (a speech session is mostly
    runs of hundreds of appends between commits; docs/performance.md, "The fold")."""
    samples = [ev.samples for ev in events]
    total = sum(samples)
    segments = tuple(AudioSegment(seq=seq, offset=0, samples=n) for seq, n in zip(seqs, samples))
    last = events[-1]
    if state.full_duplex:  # as add_pending, per append
        d = state.duplex
        d = _copy_duplex(
            d,
            muted=d.muted + tuple(seqs) if d.drop_item is not None else d.muted,
            pending=d.pending + tuple(seqs),
            segments=d.segments + segments,
            samples=d.samples + total,
            pending_start=d.pending_start if d.pending else events[0].start_sample,
        )
        return _copy_state(state, duplex=d, input_clock=state.input_clock + total, vad=last.vad or _NO_VAD, seq=seqs[-1])
    buf = state.buffer
    buf = _copy_buffer(
        buf,
        segments=buf.segments + segments,
        append_seqs=buf.append_seqs + tuple(seqs),
        samples=buf.samples + total,
        start_sample=buf.start_sample if buf.append_seqs or buf.text_seqs else events[0].start_sample,
    )
    return _copy_state(state, buffer=buf, input_clock=state.input_clock + total, vad=last.vad or _NO_VAD, seq=seqs[-1])


def evolve_text_appended(ev: TextAppended, state: SessionState, seq: int) -> SessionState:
    buf = state.buffer
    start = buf.start_sample if not buf.empty else state.input_clock
    buf = _copy_buffer(buf, text_seqs=buf.text_seqs + (seq,), text=buf.text + ev.text, start_sample=start)
    return _copy_state(state, buffer=buf, seq=seq)


def evolve_text_run(state: SessionState, seqs: Sequence[int], events: Sequence[TextAppended]) -> SessionState:
    """Text appends logged one after the other, applied at once: the state
    :func:`evolve_text_appended` gives applied to each in turn (the text joined once)."""
    buf = state.buffer
    start = buf.start_sample if not buf.empty else state.input_clock
    text = buf.text + "".join(ev.text for ev in events)
    buf = _copy_buffer(buf, text_seqs=buf.text_seqs + tuple(seqs), text=text, start_sample=start)
    return _copy_state(state, buffer=buf, seq=seqs[-1])


def evolve_speech_started(ev: SpeechStarted, state: SessionState, seq: int) -> SessionState:
    # The VAD state came with the append; speech stops the idle timeout. A full-duplex model's
    # next user item is of speech (docs/duplex.md, "The model's answers").
    if state.full_duplex:
        turn = state.responses.get(state.duplex.response_id) if state.duplex.response_id else None
        over = turn.id if turn is not None and turn.active else None
        state = replace(state, duplex=replace(state.duplex, overlap_turn=over))
    if state.full_duplex and not state.duplex.turn_speech:
        # The user item takes server VAD's id for the speech, as in turn-based sessions, unless
        # the model already named it (a transcript delta went out under the unit's id).
        named = state.duplex.turn_transcript != ""
        state = replace(state, duplex=replace(state.duplex, turn_speech=True, turn_item_id=state.duplex.turn_item_id if named else ev.item_id))
    return state if state.idle_since_sample is None else replace(state, idle_since_sample=None)


def evolve_speech_stopped(ev: SpeechStopped, state: SessionState, seq: int) -> SessionState:
    # Ends the speech in progress if it is this one: a commit, clear or cancel cutting it short
    # (server VAD's own stops are already in the state logged with the append, which may name
    # a next utterance that started in the same append: that one goes on).
    state = end_drop(state, ev.item_id)
    if state.vad.item_id is not None and state.vad.item_id != ev.item_id:
        return state
    if state.duplex.overlap_turn is not None:
        state = replace(state, duplex=replace(state.duplex, overlap_turn=None))
    return replace(state, vad=replace(state.vad, speaking=False, voiced_run=0, silence_run=0, item_id=None))


def evolve_timeout_triggered(ev: TimeoutTriggered, state: SessionState, seq: int) -> SessionState:
    return replace(state, idle_since_sample=None)


def evolve_response_deferred(ev: ResponseDeferred, state: SessionState, seq: int) -> SessionState:
    return replace(state, deferred_response=ev)


def evolve_input_committed(ev: InputCommitted, state: SessionState, seq: int) -> SessionState:
    cfg = state.config
    assert cfg is not None
    item = Item(
        id=ev.item_id,
        role="user",
        content_type="input_audio" if ev.segments else "input_text",
        audio=ev.segments,
        input_samples=ev.samples,
        input_text=ev.text,
        audio_format=cfg.input_format,
    )
    used = ev.skipped_samples + ev.samples
    _, rest = split_segments(state.buffer.segments, used)
    buffer = InputBuffer(
        segments=rest,
        append_seqs=tuple(dict.fromkeys(s.seq for s in rest)),
        samples=state.buffer.samples - used,
        start_sample=state.buffer.start_sample + used,
    )
    state = replace(state, buffer=buffer, unapplied=state.unapplied + (seq,), last_commit_seq=seq)
    return retire_frozen(put_item(state, item))


def evolve_input_cleared(ev: InputCleared, state: SessionState, seq: int) -> SessionState:
    vad = state.vad
    return _copy_state(state, buffer=_EMPTY_BUFFER, vad=VadState(frame_fill=vad.frame_fill, frame_energy=vad.frame_energy, model_state=vad.model_state), seq=seq)
