"""The reference full-duplex engine (real pocketsphinx and espeak-ng, real fixture speech) on the
pure domain: the harness plays the host (appends in 20 ms frames, the pump on a host clock) and
the worker (it steps the engine on each unit and logs its answer), so what the engine decides is
checked unit by unit, with no wall clock (docs/duplex.md, "The reference engine")."""

from __future__ import annotations

import base64

import pytest

from duplex_es.domain import AppendAudio, OpenSession, Pump, SessionPatch, UpdateSession
from duplex_es.domain.commands import VadIds
from duplex_es.events import AudioAppended, AudioSegment, UnitIssued, UnitOutput
from duplex_es.worker.contracts import unit_output_events
from duplex_es.worker.engine import UnitContext
from duplex_es.worker.speech.duplex import FullDuplexEngine

from clients_support import FRAME_BYTES, silence, speech
from harness import Harness, nid


@pytest.fixture(scope="module")
def engine() -> FullDuplexEngine:
    return FullDuplexEngine()


class Live:
    """A full-duplex session whose units the reference engine answers as soon as they are issued."""

    def __init__(self, engine: FullDuplexEngine, **patch: object) -> None:
        self.h = Harness()
        self.h.run(OpenSession(session_id="sess_live", model="duplex-es-duplex", engine="duplex-es-duplex", full_duplex=True))
        if patch:
            self.h.run(UpdateSession(patch=SessionPatch(**patch)))
        self.engine = engine
        self.audio: dict[int, bytes] = {}  # the log's audio, by append seq
        self.clock = 1_000_000  # the host's clock (Unix ms)

    def _read(self, segments: tuple[AudioSegment, ...]) -> bytes:
        return b"".join(self.audio[s.seq][s.offset * 2 : (s.offset + s.samples) * 2] for s in segments)

    def _pump_and_step(self) -> None:
        self.h.run(Pump(request_ids=tuple(nid("req") for _ in range(4)), now_ms=self.clock))
        rid = self.h.state.duplex.unit
        if rid is None:
            return
        unit = next(ev for _, ev in reversed(self.h.log) if isinstance(ev, UnitIssued) and ev.request_id == rid)
        out = self.engine.step(UnitContext(session_id="sess_live", tick=unit, read_audio=self._read))
        self.h.apply(unit_output_events("sess_live", self.engine.name, out))
        self.h.run(Pump(request_ids=tuple(nid("req") for _ in range(4)), now_ms=self.clock))

    def say(self, pcm: bytes) -> None:
        """``pcm`` (PCM16 24 kHz) as a microphone sends it: 20 ms appends, on the clock."""
        for at in range(0, len(pcm), FRAME_BYTES):
            frame = pcm[at : at + FRAME_BYTES].ljust(FRAME_BYTES, b"\0")
            ids = VadIds(item_id=nid("item"), response_id=nid("resp"), response_item_id=nid("item"), request_id=nid("req"))
            self.h.run(AppendAudio(audio=base64.b64encode(frame).decode(), nbytes=len(frame), vad_ids=ids))
            seq = next(s for s, ev in reversed(self.h.log) if isinstance(ev, AudioAppended))
            self.audio[seq] = frame
            self.clock += 20
            self._pump_and_step()

    def wait_until(self, done, most_ms: int = 20_000) -> None:  # noqa: ANN001
        """The client sends nothing: the clock runs (silence units) until ``done()``."""
        for _ in range(most_ms // 20):
            if done():
                return
            self.clock += 20
            self._pump_and_step()
        raise AssertionError("the engine never got there")

    def outputs(self) -> list[UnitOutput]:
        return [ev for _, ev in self.h.log if isinstance(ev, UnitOutput)]

    def users(self) -> list:
        s = self.h.state
        return [s.items[i] for i in s.item_order if s.items[i].role == "user"]


def test_an_utterance_that_ends_while_the_model_speaks_is_answered_as_soon_as_its_turn_is_over(engine: FullDuplexEngine):
    live = Live(engine, overlap="listen")
    live.say(speech("weather_question_24k.wav") + silence(0.3))
    live.wait_until(lambda: live.h.state.duplex.response_id is not None)  # the model answers
    # "Actually, wait." and a pause, all while the reply streams: the model hears it, talks on.
    before = max(live.audio)
    live.say(speech("correction_24k.wav")[: 24000 * 2 * 105 // 100] + silence(1.0))
    assert live.h.state.duplex.response_id is not None  # the user finished; the model did not yet
    live.wait_until(lambda: len(live.users()) == 2)
    outs = live.outputs()
    ends = [i for i, o in enumerate(outs) if o.end_of_turn]
    # The unit after the first turn's last chunk already speaks: the utterance was judged over.
    assert len(ends) == 1 and ends[0] + 1 == len(outs) - 1 and outs[-1].audio
    live.wait_until(lambda: live.h.state.duplex.response_id is None)
    said = "".join(o.text_delta for o in live.outputs()[ends[0] + 1 :])
    _, second = live.users()
    assert second.transcript and said == f"You said: {second.transcript}."
    assert {s for s in live.audio if s > before} <= {seg.seq for seg in second.audio}  # heard during the reply

@pytest.mark.parametrize("backchannels", [False, True])
def test_backchannels_acknowledge_a_long_turn_and_change_nothing_of_what_the_model_hears(engine: FullDuplexEngine, backchannels: bool):
    question = speech("weather_question_24k.wav")
    live = Live(engine, backchannels=backchannels)
    live.say(question + silence(0.1) + question[: 24000 * 2 * 44 // 10] + silence(1.0))
    live.wait_until(lambda: len(live.users()) == 1 and live.h.state.duplex.response_id is None)
    outs = live.outputs()
    acks = [i for i, o in enumerate(outs) if o.backchannel]
    (user,) = live.users()
    assert user.transcript.count("will be like") == 2
    if backchannels:
        # One "Mm-hm." at the pause between the two questions (4 s of speech by then).
        (at,) = acks
        assert outs[at].text_delta == "Mm-hm." and outs[at].end_of_turn and outs[at].audio
        split = len(question) // FRAME_BYTES
        appends = sorted(live.audio)
        assert appends[split - 10] <= max(outs[at].applied_event_ids) <= appends[split + 15]
    else:
        assert acks == []
    answer = [o for o in outs if o.text_delta and not o.backchannel]
    assert "".join(o.text_delta for o in answer) == f"You said: {user.transcript}."


def test_a_response_create_with_nothing_to_answer_still_gets_a_turn_with_its_metadata(engine: FullDuplexEngine):
    from duplex_es.domain import CreateResponse, ResponseOptions

    live = Live(engine)
    live.say(silence(0.4))
    options = ResponseOptions(metadata={"client_event_id": "lk_7"}, instructions="Greet the user.")
    live.h.run(CreateResponse(response_id=nid("resp"), item_id=nid("item"), request_id=nid("req"), options=options))
    live.wait_until(lambda: live.h.state.duplex.response_id is not None)  # the model takes the turn
    turn = live.h.state.responses[live.h.state.duplex.response_id]
    assert turn.metadata == {"client_event_id": "lk_7"}  # LiveKit finds its reply by it
    live.wait_until(lambda: live.h.state.duplex.response_id is None)
    said = "".join(o.text_delta for o in live.outputs())
    assert said == "I did not catch that. Could you say it again?"  # the echo agent's answer to no input
    assert live.users() == []  # silence is no utterance


def test_a_short_acknowledgement_over_the_reply_is_talked_through_and_never_answered(engine: FullDuplexEngine):
    from duplex_es.events import OverlapDecided
    from duplex_es.worker.speech.tts import Synthesizer

    okay = Synthesizer().synthesize("okay", 24000, "alloy").pcm
    live = Live(engine, barge_in_ms=1500)
    live.say(speech("weather_question_24k.wav") + silence(0.3))
    live.wait_until(lambda: live.h.state.duplex.response_id is not None)
    live.say(silence(0.2) + okay + silence(0.8))  # "okay" over the reply
    decided = [e for _, e in live.h.log if isinstance(e, OverlapDecided)]
    assert [(d.decision, d.reason) for d in decided] == [("listen", "short_acknowledgement")]
    live.wait_until(lambda: live.h.state.duplex.response_id is None)
    live.say(silence(2.0))  # long enough for any answer to start
    turns = [o for o in live.outputs() if o.end_of_turn]
    assert len(turns) == 1 and len(live.users()) == 1  # one reply, to the question only


def test_a_tools_output_that_comes_while_the_user_speaks_is_said_after_their_turn_with_the_answer(engine: FullDuplexEngine):
    from duplex_es.domain import CreateItem

    weather = {
        "type": "function", "name": "get_weather", "description": "The weather in a city.",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    }
    from duplex_es.worker.speech.tts import Synthesizer

    live = Live(engine, tools=(weather,))
    live.say(Synthesizer().synthesize("What's the weather like in London today?", 24000, "alloy").pcm + silence(0.3))
    live.wait_until(lambda: live.h.state.calls and all(c.status == "completed" for c in live.h.state.calls.values()))
    live.wait_until(lambda: live.h.state.duplex.response_id is None)
    (call_id,) = live.h.state.calls
    correction = speech("correction_24k.wav")
    live.say(correction[: len(correction) // 2])  # the user starts talking again ...
    live.h.run(CreateItem(item_id="item_out", role="tool", type="function_call_output", call_id=call_id, output="sunny"))
    live.say(correction[len(correction) // 2 :] + silence(0.4))  # ... and the output came meanwhile
    assert live.h.state.duplex.response_id is None  # not said over the user
    live.wait_until(lambda: live.h.state.duplex.response_id is not None)
    live.wait_until(lambda: live.h.state.duplex.response_id is None)
    last_user = live.users()[-1]
    said = "".join(o.text_delta for o in live.outputs() if not o.function_call)
    assert said == f"Get weather says: sunny. You said: {last_user.transcript}."
