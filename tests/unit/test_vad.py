"""Server VAD in the domain, on the real fixtures: clock-aligned frames, one item per utterance,
interruptions, deferred responses, and starts and stops that always pair."""

from __future__ import annotations

import base64
import itertools

import pytest

from duplex_es.domain import AppendAudio, CancelInput, Commit, SessionPatch, UpdateSession, VadIds
from duplex_es_tools.conversation import read_wav_pcm16
from duplex_es.events import (
    InputCommitted,
    ResponseCreated,
    ResponseDeferred,
    ResponseDone,
    SpeechStarted,
    SpeechStopped,
)

from conftest import FIXTURES
from harness import Harness, nid

_n = itertools.count()


def vad_session(**td) -> Harness:
    h = Harness.open()
    h.run(UpdateSession(patch=SessionPatch(turn_detection={"type": "server_vad", **td})))
    return h


def append(h: Harness, pcm: bytes, chunk_bytes: int) -> list:
    out = []
    for i in range(0, len(pcm), chunk_bytes):
        raw = pcm[i : i + chunk_bytes]
        n = next(_n)
        ids = VadIds(item_id=f"item_v{n}", response_id=f"resp_v{n}", response_item_id=f"item_r{n}", request_id=f"req_v{n}")
        out += h.run(AppendAudio(audio=base64.b64encode(raw).decode(), nbytes=len(raw), vad_ids=ids))
    return out


def fixture(name: str) -> bytes:
    return read_wav_pcm16(FIXTURES / "audio" / name)


def of(events, cls):
    return [e for e in events if isinstance(e, cls)]


@pytest.mark.parametrize("chunk_ms", [3, 15, 20, 100, 10_000])
def test_verdicts_do_not_depend_on_how_appends_are_sized(chunk_ms: int):
    h = vad_session()
    events = append(h, fixture("noise_speech_silence_24k.wav"), 48 * chunk_ms)
    starts, stops = of(events, SpeechStarted), of(events, SpeechStopped)
    assert [(s.audio_start_ms, e.audio_end_ms) for s, e in zip(starts, stops)] == [(1730, 7350)]
    committed = of(events, InputCommitted)
    assert len(committed) == 1 and committed[0].item_id == starts[0].item_id == stops[0].item_id
    # Exactly from the speech's start (its padding included) to the stop, wherever either fell in
    # an append; the noise before it left the buffer with the turn.
    assert (committed[0].skipped_samples, committed[0].samples) == (1730 * 24, (7350 - 1730) * 24)
    assert h.state.buffer.start_sample == 7350 * 24
    assert len(of(events, ResponseCreated)) == 1


def test_two_utterances_in_one_append_become_two_answered_items():
    h = vad_session()
    audio = fixture("noise_speech_silence_24k.wav") + fixture("correction_24k.wav") + b"\0\0" * 24000
    events = append(h, audio, len(audio))
    starts, stops, commits = of(events, SpeechStarted), of(events, SpeechStopped), of(events, InputCommitted)
    assert len(starts) == len(stops) == len(commits) == 2
    assert [c.item_id for c in commits] == [s.item_id for s in starts] == [s.item_id for s in stops]
    # Each from its start (padding included) to its stop; what lay before left with it.
    for start, stop, commit in zip(starts, stops, commits):
        assert commit.samples == (stop.audio_end_ms - start.audio_start_ms) * 24
    assert commits[1].skipped_samples == (starts[1].audio_start_ms - stops[0].audio_end_ms) * 24
    # The second utterance interrupts the first answer, then gets its own.
    created, done = of(events, ResponseCreated), of(events, ResponseDone)
    assert len(created) == 2 and done[0].response_id == created[0].response_id and done[0].reason == "turn_detected"
    assert h.state.items[commits[1].item_id].input_samples == commits[1].samples


def test_speech_during_a_response_without_interrupt_is_answered_after_it():
    h = vad_session(interrupt_response=False)
    first = append(h, fixture("noise_speech_silence_24k.wav"), 4800)
    rid = of(first, ResponseCreated)[0].response_id
    second = append(h, fixture("correction_24k.wav") + b"\0\0" * 24000, 4800)
    assert not of(second, ResponseDone)  # not interrupted
    deferred = of(second, ResponseDeferred)
    assert len(deferred) == 1 and h.state.active_response_id == rid
    h.output(final=True)
    events = h.pump()  # the first response ends, the deferred one starts
    assert [e.TYPE for e in events] == ["response.done"]
    events = h.pump()
    assert [e.TYPE for e in events][:2] == ["response.created", "tick.issued"] and events[0].response_id == deferred[0].response_id


def test_a_commit_or_cancel_ends_speech_in_progress_and_silence_is_never_a_turn():
    h = vad_session()
    tone = (b"\x00\x40" * 24) * 1000  # 1 s at about -6 dBFS
    append(h, tone + b"\0\0" * 24 * 200, 4800)
    assert h.state.vad.speaking
    events = h.run(Commit(item_id=nid("item")))
    assert [e.TYPE for e in events] == ["input_audio_buffer.speech_stopped", "input_audio_buffer.committed"]
    later = append(h, b"\0\0" * 24 * 400, 4800)  # trailing silence after the manual commit
    assert not of(later, InputCommitted) and not of(later, ResponseCreated)
    append(h, tone, 4800)
    events = h.run(CancelInput())
    assert [e.TYPE for e in events] == ["input_audio_buffer.speech_stopped", "input_audio_buffer.cleared"]


def test_a_blip_shorter_than_a_turn_stays_in_the_buffer():
    h = vad_session(prefix_padding_ms=0, silence_duration_ms=10)
    events = append(h, (b"\x00\x40" * 24) * 70 + b"\0\0" * 24 * 20, 48 * 90)
    assert len(of(events, SpeechStarted)) == len(of(events, SpeechStopped)) == 1
    assert not of(events, InputCommitted) and h.state.buffer.samples == 90 * 24


def test_turning_vad_on_needs_a_type_and_off_ends_speech():
    h = Harness.open()
    assert h.state.config.turn_detection.type == "server_vad"  # OpenAI's default, which clients expect
    h.run(UpdateSession(patch=SessionPatch(turn_detection=None)))
    rej = h.run(UpdateSession(patch=SessionPatch(turn_detection={"threshold": 0.3})))[0]
    assert rej.code == "unsupported_turn_detection" and rej.param == "session.audio.input.turn_detection.type"
    ok = h.run(UpdateSession(patch=SessionPatch(turn_detection={"type": "server_vad", "idle_timeout_ms": None})))[0]
    assert ok.config.turn_detection.threshold == 0.5
    append(h, (b"\x00\x40" * 24) * 500, 4800)
    events = h.run(UpdateSession(patch=SessionPatch(turn_detection=None)))
    assert [e.TYPE for e in events] == ["input_audio_buffer.speech_stopped", "session.updated"]


@pytest.mark.parametrize("chunk_ms", [100, 500, 1000])
@pytest.mark.parametrize("pause_ms", [150, 200, 400])
def test_a_turn_ending_and_the_next_starting_in_one_append_pair_their_starts_and_stops(chunk_ms: int, pause_ms: int):
    """A stop and the next start inside one append: every start has its stop, in order, and a
    turn's padded start never reaches back into the turn before it."""
    h = vad_session(create_response=False)
    q = fixture("weather_question_24k.wav")
    events = append(h, q + b"\0\0" * 24 * pause_ms + q + b"\0\0" * 24 * 1500, 48 * chunk_ms)
    verdicts = [e for e in events if isinstance(e, (SpeechStarted, SpeechStopped))]
    kinds = ["S" if isinstance(e, SpeechStarted) else "E" for e in verdicts]
    assert kinds == ["S", "E"] * (len(kinds) // 2) and len(kinds) >= 4, kinds
    for start, stop, next_start in zip(verdicts[0::2], verdicts[1::2], verdicts[2::2]):
        assert start.item_id == stop.item_id and next_start.audio_start_ms >= stop.audio_end_ms
    assert not h.state.vad.speaking
    committed = of(events, InputCommitted)
    assert [c.item_id for c in committed] == [e.item_id for e in verdicts[1::2]]
