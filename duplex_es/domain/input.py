"""User input: audio and text appends, commits, clears, and server VAD verdicts.

Audio is checked against the declared format (PCM16 needs whole samples) and placed on the
session's input clock in samples (DESIGN I12). With server VAD on, each append runs the detector
(:mod:`duplex_es.domain.vad`) from the logged VAD state: speech start may barge in on the active
response (``interrupt_response``), speech stop commits the buffer and may start a response
(``create_response``). Every verdict is an event carrying audio-clock ms.
"""

from __future__ import annotations

import base64

import attrs

from duplex_es.audio import decode_to_pcm16
from duplex_es.domain.audio import ms_of, samples_of
from duplex_es.domain.commands import AppendAudio, AppendText, CancelInput, ClearInput, Commit, CreateResponse, VadIds
from duplex_es.domain.errors import Code
from duplex_es.domain.limits import MAX_BUFFER_MS, MAX_INPUT_TEXT_CHARS, MIN_COMMIT_MS
from duplex_es.domain.responses import cancel_events, start_response
from duplex_es.domain.rules import decider, evolver, put_item, reject
from duplex_es.domain.state import InputBuffer, Item, SessionState
from duplex_es.domain.vad import detect
from duplex_es.events import (
    AudioAppended,
    Event,
    InputCleared,
    InputCommitted,
    SpeechStarted,
    SpeechStopped,
    TextAppended,
    VadState,
)

__all__ = ["commit_events"]


def commit_events(state: SessionState, item_id: str, event_id=None) -> list[Event]:  # noqa: ANN001
    """The events of a commit of the whole buffer as user item ``item_id``, or its refusal."""
    buf = state.buffer
    rate = state.config.input_format.rate  # type: ignore[union-attr]
    if not buf.text and buf.samples * 1000 < MIN_COMMIT_MS * rate:
        have = buf.samples * 1000 / rate
        return reject(
            Commit(event_id=event_id, item_id=item_id),
            Code.COMMIT_EMPTY,
            f"Error committing input audio buffer: buffer too small. Expected at least {MIN_COMMIT_MS}ms of audio, "
            f"but buffer only has {have:.2f}ms of audio.",
        )
    return [
        InputCommitted(
            client_event_id=event_id,
            item_id=item_id,
            previous_item_id=state.last_item_id,
            append_seqs=buf.append_seqs,
            text_seqs=buf.text_seqs,
            samples=buf.samples,
            text=buf.text,
        )
    ]


@decider.register
def _(cmd: AppendAudio, state: SessionState) -> list[Event]:
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
            cmd, Code.BUFFER_FULL, f"the input buffer holds at most {MAX_BUFFER_MS // 1000} s of audio; commit or clear it first", "audio"
        )
    td = cfg.turn_detection
    if td is None or cmd.vad_ids is None:
        return [AudioAppended(client_event_id=cmd.event_id, audio=cmd.audio, samples=samples, start_sample=state.input_clock)]
    buffer_start = state.buffer.start_sample if not state.buffer.empty else state.input_clock
    pcm = decode_to_pcm16(base64.b64decode(cmd.audio), fmt.type)
    vad, transitions = detect(state.vad, pcm, state.input_clock, fmt.rate, td, buffer_start)
    ids = cmd.vad_ids
    # Each utterance in one append needs its own item id; later ones derive from the first.
    fresh = iter([ids.item_id] + [f"{ids.item_id}_{n}" for n in range(1, len(transitions) + 1)])
    appended = AudioAppended(client_event_id=cmd.event_id, audio=cmd.audio, samples=samples, start_sample=state.input_clock, vad=vad)
    events: list[Event] = [appended]
    trial = _fold(state, events)
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
            batch = [SpeechStopped(audio_end_ms=ms_of(t.sample, fmt.rate), item_id=item_id)]
            committed = commit_events(trial, item_id)
            if isinstance(committed[0], InputCommitted):
                batch += committed
                after_commit = _fold(trial, batch)
                if td.create_response and after_commit.active_response is None:
                    started = start_response(after_commit, _auto_response(ids, item_id))
                    batch += [e for e in started if e.TYPE != "command.rejected"]
        trial = _fold(trial, batch)
        events += batch
    # The logged VAD state names the utterance still in progress at the end of the append.
    events[0] = attrs.evolve(appended, vad=attrs.evolve(vad, item_id=current if vad.speaking else None))
    return events


def _fold(state: SessionState, events: list[Event]) -> SessionState:
    from duplex_es.domain.evolve import fold  # local: evolve imports every concern module

    return fold(((state.seq + i + 1, e) for i, e in enumerate(events)), state)


def _auto_response(ids: VadIds, item_id: str) -> CreateResponse:
    suffix = "" if item_id == ids.item_id else item_id[len(ids.item_id) :]
    return CreateResponse(
        response_id=ids.response_id + suffix, item_id=ids.response_item_id + suffix, request_id=ids.request_id + suffix
    )


@decider.register
def _(cmd: AppendText, state: SessionState) -> list[Event]:
    if not cmd.text:
        return reject(cmd, Code.INPUT_TEXT_EMPTY, "text is empty", "text")
    if len(state.buffer.text) + len(cmd.text) > MAX_INPUT_TEXT_CHARS:
        return reject(cmd, Code.INPUT_TEXT_TOO_LONG, f"a user item holds at most {MAX_INPUT_TEXT_CHARS} characters of text", "text")
    return [TextAppended(client_event_id=cmd.event_id, text=cmd.text)]


@decider.register
def _(cmd: Commit, state: SessionState) -> list[Event]:
    if cmd.item_id in state.items:
        return reject(cmd, Code.ITEM_EXISTS, f"an item with id {cmd.item_id!r} already exists")
    return commit_events(state, cmd.item_id, cmd.event_id)


@decider.register
def _(cmd: ClearInput, state: SessionState) -> list[Event]:
    buf = state.buffer
    return [InputCleared(client_event_id=cmd.event_id, discarded_seqs=tuple(sorted(buf.append_seqs + buf.text_seqs)))]


@decider.register
def _(cmd: CancelInput, state: SessionState) -> list[Event]:
    buf = state.buffer
    return [
        InputCleared(
            client_event_id=cmd.event_id, discarded_seqs=tuple(sorted(buf.append_seqs + buf.text_seqs)), reason="input_cancelled"
        )
    ]


# ---------------------------------------------------------------------------------- evolvers


@evolver.register
def _(ev: AudioAppended, state: SessionState, seq: int) -> SessionState:
    buf = state.buffer
    start = buf.start_sample if not buf.empty else ev.start_sample
    buf = attrs.evolve(buf, append_seqs=buf.append_seqs + (seq,), samples=buf.samples + ev.samples, start_sample=start)
    return attrs.evolve(state, buffer=buf, input_clock=state.input_clock + ev.samples, vad=ev.vad or VadState())


@evolver.register
def _(ev: TextAppended, state: SessionState, seq: int) -> SessionState:
    buf = state.buffer
    start = buf.start_sample if not buf.empty else state.input_clock
    buf = attrs.evolve(buf, text_seqs=buf.text_seqs + (seq,), text=buf.text + ev.text, start_sample=start)
    return attrs.evolve(state, buffer=buf)


@evolver.register
def _(ev: SpeechStarted, state: SessionState, seq: int) -> SessionState:
    return state  # the VAD state came with the append


@evolver.register
def _(ev: SpeechStopped, state: SessionState, seq: int) -> SessionState:
    return state


@evolver.register
def _(ev: InputCommitted, state: SessionState, seq: int) -> SessionState:
    cfg = state.config
    assert cfg is not None
    item = Item(
        id=ev.item_id,
        role="user",
        content_type="input_audio" if ev.append_seqs else "input_text",
        audio_seqs=ev.append_seqs,
        input_samples=ev.samples,
        input_text=ev.text,
        audio_format=cfg.input_format,
    )
    # The VAD state stays: speech that goes on after a manual commit becomes the next item.
    state = attrs.evolve(state, buffer=InputBuffer(), unapplied=state.unapplied + (seq,), last_commit_seq=seq)
    return put_item(state, item)


@evolver.register
def _(ev: InputCleared, state: SessionState, seq: int) -> SessionState:
    return attrs.evolve(state, buffer=InputBuffer(), vad=VadState())
