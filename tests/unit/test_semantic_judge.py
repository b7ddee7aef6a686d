"""``semantic_vad`` taking the engine's end-of-turn judgement (docs/protocol.md, "Turn detection";
issue 14): in a turn-based session on a full-duplex engine the session sends the utterance to the
engine in judge units while the user speaks, and commits the turn when the engine judges it over;
server VAD's pause waits the eagerness's max wait instead, so a silent engine never holds the
turn; a judgement that comes after the utterance ended is discarded; audit accepts judge units."""

from __future__ import annotations

import base64

import attrs

from duplex_es.domain import AppendAudio, ClearInput, Commit, OpenSession, SessionPatch, UpdateSession, VadIds
from duplex_es.domain.evolve import evolve
from duplex_es.domain.judge import answer_verdict
from duplex_es.domain.speech_audit import audit_speech
from duplex_es.events import (
    InputCommitted,
    ResponseCreated,
    SEMANTIC_VAD_SILENCE_MS,
    SpeechStarted,
    SpeechStopped,
    UnitFailed,
    UnitIssued,
    UnitOutput,
    USER_TURN_ENDED,
)
from duplex_es.protocol import project
from duplex_es.worker.speech.duplex import END_SILENCE_MS, end_of_turn_silence_ms

from harness import Harness, nid, pcm

RATE = 24000


class Judged(Harness):
    """A session driven as the host drives it: every command is followed by a pump."""

    wire: list

    @classmethod
    def start(cls, *, duplex_engine: bool = True, mode: str = "turn_based", extension_events: bool = False, **td) -> "Judged":  # noqa: ANN003
        h = cls()
        h.wire = []
        if duplex_engine:
            h.run(OpenSession(session_id="sess_j", model="duplex-es-duplex", engine="duplex-es-duplex", full_duplex=True))
        else:
            h.run(OpenSession(session_id="sess_j", model="duplex-es-echo"))
        patch = {"turn_detection": {"type": "semantic_vad", **td}}
        if duplex_engine:
            patch.update(turn_mode=mode, extension_events=extension_events)
        h.run(UpdateSession(patch=SessionPatch(**patch)))
        return h

    def apply(self, events):  # noqa: ANN001, ANN201
        for ev in events:
            seq, before = self.state.seq + 1, self.state
            super().apply([ev])
            self.wire += project(before, seq, ev, self.state)
        return events

    def say(self, ms: int, value: int = 8000, chunk_ms: int = 100) -> list:
        """``ms`` of audio in ``chunk_ms`` appends (speech at ``value``; 0 is silence), each
        followed by the host's pump; the events they logged."""
        out = []
        for _ in range(ms // chunk_ms):
            raw = pcm(chunk_ms, value)
            ids = VadIds(item_id=nid("item"), response_id=nid("resp"), response_item_id=nid("item"), request_id=nid("req"))
            out += self.run(AppendAudio(audio=base64.b64encode(raw).decode(), nbytes=len(raw), vad_ids=ids))
            out += self.pump()
        return out

    def quiet(self, ms: int, chunk_ms: int = 100) -> list:
        return self.say(ms, 0, chunk_ms)

    def judge_units(self) -> list[UnitIssued]:
        return [ev for _, ev in self.log if isinstance(ev, UnitIssued)]

    def in_flight(self) -> UnitIssued:
        rid = self.state.judge.unit
        return next(ev for _, ev in reversed(self.log) if isinstance(ev, UnitIssued) and ev.request_id == rid)

    def answer(self, reason: str, unit: UnitIssued | None = None) -> list:
        """The engine's answer to ``unit`` (default: the one in flight), then the host's pump."""
        u = unit or self.in_flight()
        out = UnitOutput(session_id="sess_j", request_id=u.request_id, epoch=u.epoch, chunk_index=u.chunk_index, listen_reason=reason)
        return self.apply([out]) + self.pump()


def of(events, cls):  # noqa: ANN001, ANN201
    return [e for e in events if isinstance(e, cls)]


def test_judge_units_carry_the_utterance_only_where_the_engine_judges():
    h = Judged.start(extension_events=True)
    h.say(500)
    units = h.judge_units()
    assert units, "a turn-based semantic_vad session on a full-duplex engine asks the engine"
    u = units[0]
    started = of([e for _, e in h.log], SpeechStarted)[0]
    assert (u.purpose, u.applied_event_ids, u.pause_ms) == ("judge", (), SEMANTIC_VAD_SILENCE_MS["medium"])
    assert u.start_sample == started.audio_start_ms * RATE // 1000  # from where the speech started
    # Issued once a chunk period (200 ms) of the utterance was there: all of it, from its start.
    assert sum(s.samples for s in u.audio) == 200 * RATE // 1000 and u.audio[0].seq == min(s for s, e in h.log if e.TYPE == "input_audio_buffer.appended")
    assert len(units) == 1  # one in flight at a time
    h.answer("user_speaking")  # 300 ms came meanwhile: the next unit, the whole utterance again
    later = h.judge_units()[-1]
    assert len(h.judge_units()) == 2 and later.start_sample == u.start_sample and later.chunk_index == u.chunk_index + 1
    assert sum(s.samples for s in later.audio) == h.state.input_clock - u.start_sample
    h.answer("user_speaking")
    h.say(100)
    assert len(h.judge_units()) == 2  # under one chunk period (200 ms) of new audio: not yet
    h.say(100)
    assert len(h.judge_units()) == 3
    # The client sees none of it, even asking for vLLM-Omni's unit events: units are between
    # the session and its workers.
    assert not [w for w in h.wire if w["type"] in ("response.listen", "input_audio_buffer.processed")]
    # Eagerness sets the engine's base pause.
    high = Judged.start(eagerness="high")
    high.say(300)
    assert high.judge_units()[0].pause_ms == SEMANTIC_VAD_SILENCE_MS["high"]
    # Elsewhere: no judge units.
    for other in (Judged.start(duplex_engine=False), Judged.start(mode="full_duplex")):
        other.say(500)
        assert not [u for u in other.judge_units() if u.purpose == "judge"]
    # On an engine that is not full-duplex the plain pause (800 ms at medium) ends the turn.
    echo = Judged.start(duplex_engine=False)
    echo.say(500)
    assert not of(echo.quiet(700), InputCommitted) and len(of(echo.quiet(200), InputCommitted)) == 1
    server_vad = Judged.start()
    server_vad.run(UpdateSession(patch=SessionPatch(turn_detection={"type": "server_vad"})))
    server_vad.say(500)
    assert not server_vad.judge_units()


def test_the_engines_judgement_commits_the_turn_and_starts_its_response():
    h = Judged.start()
    h.say(600)
    events = []
    for _ in range(8):  # 1600 ms of pause, past semantic_vad's 800 ms: the engine still waits
        events += h.answer("waiting_for_end_of_turn")
        events += h.quiet(200)
    assert not of(events, SpeechStopped) and not of(events, InputCommitted)
    judged = h.in_flight()
    h.quiet(300)  # audio after the judged unit stays in the buffer
    events = h.answer(USER_TURN_ENDED)
    stopped, committed, created = of(events, SpeechStopped), of(events, InputCommitted), of(events, ResponseCreated)
    started = of([e for _, e in h.log], SpeechStarted)[0]
    end = judged.start_sample + sum(s.samples for s in judged.audio)
    assert len(stopped) == len(committed) == len(created) == 1
    assert stopped[0].item_id == committed[0].item_id == started.item_id
    assert stopped[0].audio_end_ms == end * 1000 // RATE
    assert committed[0].samples == end - judged.start_sample
    assert h.state.buffer.samples == h.state.input_clock - end and not h.state.vad.speaking
    assert h.state.active_response_id == created[0].response_id
    types = [w["type"] for w in h.wire]
    assert types.index("input_audio_buffer.speech_stopped") < types.index("input_audio_buffer.committed") < types.index("response.created")
    # No judge unit after the turn: the next comes with the next utterance.
    n = len(h.judge_units())
    h.quiet(500)
    assert len(h.judge_units()) == n


def test_a_silent_or_failing_engine_holds_the_turn_only_until_the_max_wait():
    for eagerness, max_wait in (("medium", 4000), ("high", 2000), ("low", 8000)):
        h = Judged.start(eagerness=eagerness)
        h.say(600)  # no answer ever comes
        events = h.quiet(max_wait - 100)
        assert not of(events, InputCommitted), eagerness
        events = h.quiet(200)
        assert len(of(events, InputCommitted)) == len(of(events, ResponseCreated)) == 1, eagerness
    # A failed judge unit: no more units for that utterance; the max wait ends it.
    h = Judged.start(eagerness="high")
    h.say(600)
    u = h.in_flight()
    h.apply([UnitFailed(session_id="sess_j", request_id=u.request_id, epoch=u.epoch, chunk_index=u.chunk_index, code="engine_error", message="x")])
    n = len(h.judge_units())
    events = h.quiet(2100)
    assert len(h.judge_units()) == n and len(of(events, InputCommitted)) == 1


def test_a_judgement_after_the_utterance_ended_is_discarded():
    for end in (Commit(item_id="item_c"), ClearInput()):
        h = Judged.start()
        h.say(600)
        h.quiet(300)
        u = h.in_flight()
        h.run(end)  # the client ends the turn itself while the engine judges
        h.say(400)  # and speaks again: a new utterance
        late = UnitOutput(session_id="sess_j", request_id=u.request_id, epoch=u.epoch, chunk_index=u.chunk_index, listen_reason=USER_TURN_ENDED)
        assert answer_verdict(h.state, late).kind == "discarded"
        before = len(of([e for _, e in h.log], InputCommitted))
        events = h.apply([late]) + h.pump()
        assert not of(events, InputCommitted) and not of(events, SpeechStopped)
        assert len(of([e for _, e in h.log], InputCommitted)) == before and h.state.vad.speaking


def test_a_judgement_for_an_utterance_the_max_wait_ended_is_discarded():
    h = Judged.start(eagerness="high")
    h.say(600)
    u = h.in_flight()
    h.quiet(2100)  # the max wait ended the turn first
    assert len(of([e for _, e in h.log], InputCommitted)) == 1
    late = UnitOutput(session_id="sess_j", request_id=u.request_id, epoch=u.epoch, chunk_index=u.chunk_index, listen_reason=USER_TURN_ENDED)
    assert answer_verdict(h.state, late).reason == "utterance_ended"
    events = h.apply([late]) + h.pump()
    assert not of(events, InputCommitted) and len(of([e for _, e in h.log], ResponseCreated)) == 1


def test_audit_accepts_judge_units_and_catches_one_that_applies_appends():
    h = Judged.start()
    h.say(600)
    h.quiet(900)
    h.answer(USER_TURN_ENDED)
    h.say(400)  # a second utterance, its judge unit still in flight
    assert len(h.judge_units()) >= 2

    def audit(log):  # noqa: ANN001, ANN202
        return audit_speech("sess_j", log, lambda state, seq, ev: evolve(state, seq, ev))

    assert not audit(h.log).violations
    seq, unit = next((s, e) for s, e in h.log if isinstance(e, UnitIssued))
    append = next(s for s, e in h.log if e.TYPE == "input_audio_buffer.appended")
    forged = [(s, attrs.evolve(e, applied_event_ids=(append,)) if s == seq else e) for s, e in h.log]
    bad = audit(forged).violations
    assert {v.check for v in bad} == {"units"} and "judge unit" in bad[0].message


def test_the_engines_rule_waits_twice_as_long_after_an_open_word():
    assert end_of_turn_silence_ms("i want to go to the station".split()) == END_SILENCE_MS
    assert end_of_turn_silence_ms("i want to go to the station and".split(), 800) == 1600
    assert end_of_turn_silence_ms([], 500) == 500
