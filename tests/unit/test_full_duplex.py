"""Full-duplex sessions in the pure domain and on the wire (docs/duplex.md): appends become
units of input the model hears continuously, each append applied by exactly one committed unit;
the model's listen / speak / end-of-turn answers open and end its turns; speech over its turn
goes through the overlap policy; a cancelled unit gives its appends back."""

from __future__ import annotations

import base64

import attrs

import pytest

from duplex_es.domain import AppendAudio, Code, OpenSession, SessionPatch, UpdateSession
from duplex_es.domain.commands import VadIds
from duplex_es.events import OverlapDecided, ResponseDone, UnitIssued, UnitOutput
from duplex_es.protocol import project

from harness import Harness, nid, pcm


class Duplex(Harness):
    wire: list

    @classmethod
    def start(cls, **patch) -> "Duplex":  # noqa: ANN003
        h = cls()
        h.wire = []
        h.run(OpenSession(session_id="sess_fd", model="duplex-es-duplex", engine="duplex-es-duplex", full_duplex=True))
        h.run(UpdateSession(patch=SessionPatch(**{"extension_events": True, **patch})))
        return h

    def apply(self, events):  # noqa: ANN001, ANN201
        for ev in events:
            seq, before = self.state.seq + 1, self.state
            super().apply([ev])
            self.wire += project(before, seq, ev, self.state)
        return events

    def append(self, ms: int, value: int = 0) -> list:
        raw = pcm(ms, value)
        ids = VadIds(item_id=nid("item"), response_id=nid("resp"), response_item_id=nid("item"), request_id=nid("req"))
        events = self.run(AppendAudio(audio=base64.b64encode(raw).decode(), nbytes=len(raw), vad_ids=ids))
        self.pump()  # as the host does after every command: a unit may be due
        return events

    clock = 1_000_000  # the host's clock (Unix ms); tests move it

    def pump(self) -> list:
        from duplex_es.domain import Pump
        from duplex_es.domain.judge import pump_idle

        if pump_idle(self.state):  # as the host does: no pump where nothing can follow
            return []
        return self.run(Pump(request_ids=tuple(nid("req") for _ in range(4)), now_ms=self.clock))

    def unit(self) -> UnitIssued:
        rid = self.state.duplex.unit
        return next(ev for _, ev in reversed(self.log) if isinstance(ev, UnitIssued) and ev.request_id == rid)

    def answer(self, **fields) -> list:  # noqa: ANN003
        u = self.unit()
        out = UnitOutput(session_id=self.state.session_id, request_id=u.request_id, epoch=u.epoch, chunk_index=u.chunk_index, applied_event_ids=u.applied_event_ids, **fields)
        events = self.apply([out])
        self.pump()
        return events

    def types(self) -> list[str]:
        return [w["type"] for w in self.wire]


def speech(ms: int) -> bytes:
    return base64.b64encode(pcm(ms, 8000)).decode()


def test_appends_become_units_of_one_chunk_period_each_applied_once_in_order():
    h = Duplex.start()
    assert h.state.config.turn_mode == "full_duplex"
    h.append(100)
    assert h.state.duplex.unit is None  # under one period (200 ms) waits
    h.append(100)
    first = h.unit()
    assert first.applied_event_ids == tuple(s for s, e in h.log if e.TYPE == "input_audio_buffer.appended") and first.chunk_index == 0
    h.append(100)
    h.append(100)  # arrives while the unit is in flight: waits for the next
    assert h.unit() is first
    h.answer(listen_reason="silence", engine_state={"n": 1})
    second = h.unit()
    assert second.chunk_index == 1 and second.engine_state == {"n": 1}
    assert set(first.applied_event_ids).isdisjoint(second.applied_event_ids)
    processed = [w for w in h.wire if w["type"] == "input_audio_buffer.processed"]
    assert [(p["input_index"], p["audio_end_ms"], p["decision"]) for p in processed] == [(0, 100, "listen"), (1, 200, "listen")]
    assert h.state.buffer.empty  # nothing waits for a commit


def test_speaking_opens_a_turn_with_the_heard_user_item_and_end_of_turn_ends_it():
    h = Duplex.start()
    h.append(200)
    h.answer(listen_reason="user_speaking", user_transcript_delta="what is ")
    h.append(200)
    h.answer(listen_reason="waiting_for_end_of_turn", user_transcript_delta="the weather")
    h.append(200)
    mark = len(h.wire)
    h.answer(audio=base64.b64encode(pcm(200)).decode(), text_delta="You said ")
    types = h.types()[mark:]
    assert types[:7] == [
        "conversation.item.added", "conversation.item.done", "conversation.item.input_audio_transcription.completed",
        "response.created", "response.speak", "response.output_item.added", "conversation.item.added",
    ]
    user = h.wire[mark]["item"]
    assert user["role"] == "user" and h.wire[mark + 2]["transcript"] == "what is the weather"
    resp_id = h.state.duplex.response_id
    assert h.state.active_response_id == resp_id and h.state.responses[resp_id].by_units
    h.append(200)
    h.answer(audio=base64.b64encode(pcm(200)).decode(), text_delta="what is the weather.", end_of_turn=True)
    done = [e for _, e in h.log if isinstance(e, ResponseDone)]
    assert [(d.response_id, d.status) for d in done] == [(resp_id, "completed")]
    assert h.state.duplex.response_id is None and h.state.active_response_id is None
    # The conversation holds the user's words and the model's, in order.
    assert [h.state.items[i].role for i in h.state.item_order] == ["user", "assistant"]
    assert h.refold() == h.state


@pytest.mark.parametrize("policy", ["barge_in", "listen"])
def test_speech_over_the_models_turn_follows_the_overlap_policy(policy: str):
    h = Duplex.start(overlap=policy)
    h.append(200)
    h.answer(audio=base64.b64encode(pcm(200)).decode(), text_delta="Hello ")
    resp_id = h.state.duplex.response_id
    h.append(200)  # a unit in flight while the user talks over the model
    in_flight = h.unit()
    raw = pcm(600, 8000)
    h.run(AppendAudio(audio=base64.b64encode(raw).decode(), nbytes=len(raw), vad_ids=VadIds(item_id="item_o", response_id="resp_o", response_item_id="item_ro", request_id="req_o")))
    h.pump()
    decided = [e for _, e in h.log if isinstance(e, OverlapDecided)]
    assert [(d.decision, d.response_id) for d in decided] == [(policy, resp_id)]
    assert "overlap.decision" in h.types()
    if policy == "barge_in":
        done = [e for _, e in h.log if isinstance(e, ResponseDone)]
        assert [(d.status, d.reason) for d in done] == [("cancelled", "turn_detected")]
        # The unit in flight was cancelled; its appends and the speech reach the model next.
        assert h.state.duplex.unit not in (None, in_flight.request_id)
        assert h.unit().applied_event_ids[: len(in_flight.applied_event_ids)] == in_flight.applied_event_ids
        late = UnitOutput(session_id="sess_fd", request_id=in_flight.request_id, epoch=in_flight.epoch, chunk_index=in_flight.chunk_index, applied_event_ids=in_flight.applied_event_ids, audio="AAAA")
        mark = len(h.wire)
        h.apply([late])
        assert h.wire[mark:] == []  # the cancelled unit's answer is logged, never sent
    else:
        assert h.state.duplex.response_id == resp_id and h.state.duplex.unit == in_flight.request_id
    assert h.refold() == h.state


def test_full_duplex_settings_are_checked():
    h = Duplex.start()
    for patch, code, param in (
        ({"chunk_period_ms": 5}, Code.INVALID_EVENT, "session.duplex.chunk_period_ms"),
        ({"overlap": "shout"}, Code.INVALID_EVENT, "session.duplex.overlap"),
        ({"turn_mode": "half"}, Code.INVALID_EVENT, "session.duplex.mode"),
        ({"backchannels": "yes"}, Code.INVALID_EVENT, "session.duplex.backchannels"),
    ):
        (refused,) = h.run(UpdateSession(patch=SessionPatch(**patch)))
        assert (refused.code, refused.param) == (code, param)
    h.append(100)
    (busy,) = h.run(UpdateSession(patch=SessionPatch(turn_mode="turn_based")))
    assert busy.code == Code.TURN_MODE_BUSY
    turn_based = Harness.open()
    (no,) = turn_based.run(UpdateSession(patch=SessionPatch(turn_mode="full_duplex")))
    assert no.code == Code.FULL_DUPLEX_UNSUPPORTED


def test_silence_units_keep_a_model_mid_turn_going_on_the_clock_and_are_bounded():
    from duplex_es.domain import Pump
    from duplex_es.domain.duplex import MAX_SILENCE_UNITS, next_unit_due_ms

    h = Duplex.start()
    h.append(200)
    # A model that listens with nothing to wait for is not stepped without input.
    h.answer(listen_reason="silence")
    assert next_unit_due_ms(h.state) is None
    h.clock += 5000
    assert h.pump() == []
    h.append(200)
    h.answer(audio=base64.b64encode(pcm(100)).decode(), text_delta="Hi")  # its turn is open now
    last = h.state.duplex.last_unit_ms
    due = next_unit_due_ms(h.state)
    assert due is not None and h.run(Pump(request_ids=(nid("req"),), now_ms=due - 1)) == []  # not yet
    (silent,) = h.run(Pump(request_ids=(nid("req"),), now_ms=due))
    assert isinstance(silent, UnitIssued) and silent.applied_event_ids == () and silent.silence_ms == 200
    # Real input waiting (under a period: the client stopped mid-period) goes in the next unit
    # instead of silence, with the quiet after it: the unit spans a whole period, so an engine
    # sizing its output by the unit's length does not fall behind real time.
    h.answer(audio=base64.b64encode(pcm(100)).decode(), text_delta=" there")
    h.run(AppendAudio(audio=base64.b64encode(pcm(60)).decode(), nbytes=len(pcm(60))))
    (flush,) = h.run(Pump(request_ids=(nid("req"),), now_ms=next_unit_due_ms(h.state)))
    assert flush.applied_event_ids and flush.silence_ms == 200 - 60
    assert h.state.duplex.silent_units == 0  # input was heard: the silence bound starts again
    for _ in range(MAX_SILENCE_UNITS + 1):
        h.answer(audio=base64.b64encode(pcm(10)).decode(), text_delta=".")
        due = next_unit_due_ms(h.state)
        if due is None:
            break
        h.run(Pump(request_ids=(nid("req"),), now_ms=due))
    assert h.state.duplex.silent_units == MAX_SILENCE_UNITS and next_unit_due_ms(h.state) is None
    assert last < h.state.duplex.last_unit_ms
    # An engine judging the end of the user's turn asks for the quiet that follows.
    h2 = Duplex.start()
    h2.append(200)
    h2.answer(listen_reason="waiting_for_end_of_turn", continue_turn=True)
    assert next_unit_due_ms(h2.state) == h2.clock + 200


def _speak_turn(h: Duplex) -> str:
    h.append(200)
    h.answer(audio=base64.b64encode(pcm(200)).decode(), text_delta="Hello ")
    return h.state.duplex.response_id


def _talk(h: Duplex, ms: int) -> None:
    """``ms`` of speech over the model, in 20 ms appends, then 600 ms of quiet."""
    for _ in range(ms // 20):
        h.append(20, 8000)
    for _ in range(30):
        h.append(20, 0)


def test_with_barge_in_ms_a_short_acknowledgement_is_talked_through_and_long_speech_barges_in():
    h = Duplex.start(barge_in_ms=700)
    resp_id = _speak_turn(h)
    _talk(h, 300)  # "mm-hm"
    decided = [e for _, e in h.log if isinstance(e, OverlapDecided)]
    assert [(d.decision, d.reason) for d in decided] == [("listen", "short_acknowledgement")]
    assert h.state.responses[resp_id].active
    _talk(h, 1000)  # the user really talks
    decided = [e for _, e in h.log if isinstance(e, OverlapDecided)]
    assert [(d.decision, d.reason) for d in decided][-1] == ("barge_in", "long_overlap_speech")
    assert not h.state.responses[resp_id].active
    done = [e for _, e in h.log if isinstance(e, ResponseDone)]
    assert [(d.status, d.reason) for d in done] == [("cancelled", "turn_detected")]
    assert h.refold() == h.state


def test_with_overlap_drop_the_speech_over_the_model_is_applied_but_not_heard():
    h = Duplex.start(overlap="drop")
    _speak_turn(h)
    before = {s for _, e in h.log if isinstance(e, UnitIssued) for s in e.applied_event_ids}
    _talk(h, 400)
    (decided,) = [e for _, e in h.log if isinstance(e, OverlapDecided)]
    assert decided.decision == "drop"
    units = [e for _, e in h.log if isinstance(e, UnitIssued)]
    heard = {s.seq for u in units for s in u.audio}
    applied = {s for u in units for s in u.applied_event_ids}
    speech = [s for s, e in h.log if e.TYPE == "input_audio_buffer.appended"]
    muted = applied - heard - before
    assert muted and set(muted) <= set(speech)
    # Once the speech stopped, appends are heard again.
    assert h.state.duplex.drop_item is None


def test_without_extension_events_a_ga_client_sees_only_ga_events():
    from duplex_es.protocol import EXTENSION_EVENT_TYPES

    h = Duplex.start(extension_events=False)
    h.append(200)
    h.answer(listen_reason="user_speaking", user_transcript_delta="hello")
    h.append(200)
    h.answer(audio=base64.b64encode(pcm(200)).decode(), text_delta="You said hello.", end_of_turn=True)
    types = set(h.types())
    assert not types & EXTENSION_EVENT_TYPES
    assert {"response.created", "response.output_audio.delta", "response.done", "conversation.item.input_audio_transcription.delta"} <= types


def test_a_unit_that_hears_the_user_and_answers_at_once_announces_the_user_item_and_audits_clean():
    from duplex_es.domain.speech_audit import audit_speech
    from duplex_es.domain import evolve

    h = Duplex.start()
    h.append(200)
    mark = len(h.wire)
    h.answer(text_delta="Hi.", end_of_turn=True, user_transcript_delta="hello")  # opens and ends in one unit
    types = h.types()[mark:]
    assert "conversation.item.done" in types and types.index("conversation.item.done") < types.index("response.created")
    assert audit_speech(h.state.session_id, h.log, evolve).violations == ()


def test_a_cancelled_turn_is_gone_for_the_next_unit_and_units_are_bounded_in_appends():
    from duplex_es.domain import CancelResponse
    from duplex_es.domain.duplex import MAX_UNIT_APPENDS

    h = Duplex.start()
    resp_id = _speak_turn(h)
    h.append(200)
    assert h.unit().response_id == resp_id
    h.run(CancelResponse())
    h.pump()
    h.append(200)
    assert h.state.duplex.response_id is None and h.unit().response_id is None
    while h.state.duplex.unit is not None:
        h.answer(listen_reason="silence")
    # A client sending appends of a few samples: each unit applies at most MAX_UNIT_APPENDS.
    for _ in range(MAX_UNIT_APPENDS + 50):
        h.run(AppendAudio(audio=base64.b64encode(pcm(1)[:4]).decode(), nbytes=4))
    h.pump()
    assert len(h.unit().applied_event_ids) == MAX_UNIT_APPENDS


def test_commit_clear_and_input_cancel_are_refused_in_a_full_duplex_session():
    from duplex_es.domain import CancelInput, ClearInput, Commit

    h = Duplex.start()
    h.append(100)
    for cmd in (Commit(item_id="item_c"), ClearInput(), CancelInput()):
        (refused,) = h.run(cmd)
        assert refused.code == Code.FULL_DUPLEX_NO_BUFFER
    assert h.state.duplex.samples == 2400  # the waiting input is untouched


# ------------------------------------------------------------------ function calls and client items

WEATHER = {
    "type": "function",
    "name": "get_weather",
    "description": "The weather in a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
}


def _call(call_id: str, delta: str, done: bool = False, name: str = "get_weather"):  # noqa: ANN202
    from duplex_es.events import FunctionCallChunk

    return FunctionCallChunk(call_id=call_id, name=name, arguments_delta=delta, done=done)


def test_a_full_duplex_model_calls_a_tool_and_reads_the_clients_output_in_its_next_unit():
    from duplex_es.domain import CreateItem, evolve
    from duplex_es.domain.speech_audit import audit_speech

    h = Duplex.start(tools=(WEATHER,))
    h.append(200)
    h.answer(listen_reason="user_speaking", user_transcript_delta="weather in Paris")
    h.append(200)
    mark = len(h.wire)
    h.answer(function_call=_call("call_1", '{"city":'), user_transcript_delta="")
    types = h.types()[mark:]
    # The user's words became an item, the model's turn a response whose first item is the call.
    assert types[:4] == ["conversation.item.added", "conversation.item.done", "conversation.item.input_audio_transcription.completed", "response.created"]
    added = next(w for w in h.wire[mark:] if w["type"] == "response.output_item.added")
    assert added["item"]["type"] == "function_call" and added["item"]["call_id"] == "call_1"
    assert "response.function_call_arguments.delta" in types
    h.clock += 200
    h.pump()  # the turn is open: a silence unit keeps it going
    mark = len(h.wire)
    h.answer(function_call=_call("call_1", '"Paris"}', done=True), end_of_turn=True, continue_turn=True)
    types = h.types()[mark:]
    done = next(w for w in h.wire[mark:] if w["type"] == "response.function_call_arguments.done")
    assert done["arguments"] == '{"city":"Paris"}' and done["name"] == "get_weather"
    assert types.index("response.output_item.done") < types.index("response.done")
    finished = next(w for w in h.wire[mark:] if w["type"] == "response.done")["response"]
    assert finished["status"] == "completed" and [o["type"] for o in finished["output"]] == ["function_call"]
    assert h.state.calls["call_1"].status == "completed"

    # The client runs the tool and sends its output: the next unit carries it at once.
    while h.state.duplex.unit is not None:
        h.answer(listen_reason="waiting_for_tool", continue_turn=True)
    out_id = nid("item")
    h.run(CreateItem(item_id=out_id, role="tool", type="function_call_output", call_id="call_1", output='{"sky": "clear"}'))
    h.pump()
    unit = h.unit()
    assert [(e.type, e.call_id, e.output) for e in unit.items] == [("function_call_output", "call_1", '{"sky": "clear"}')]
    assert unit.silence_ms == 0 and not unit.applied_event_ids
    mark = len(h.wire)
    h.answer(audio=speech(200), text_delta="Get weather says: sky clear.", end_of_turn=True)
    types = h.types()[mark:]
    assert "conversation.item.added" not in types[: types.index("response.created")]  # no user speech to make an item of
    assert h.state.duplex.items == () and h.state.duplex.unit_items == ()
    assert audit_speech(h.state.session_id, h.log, evolve).violations == ()
    assert h.refold() == h.state


def test_speech_after_a_call_in_one_turn_opens_a_new_item_and_a_bad_call_fails_the_turn():
    h = Duplex.start(tools=(WEATHER,))
    h.append(200)
    h.answer(function_call=_call("call_a", '{"city":"Oslo"}', done=True))
    h.clock += 200
    h.pump()
    mark = len(h.wire)
    h.answer(audio=speech(200), text_delta="Let me check.", end_of_turn=True)
    types = h.types()[mark:]
    assert types.index("response.output_item.added") < types.index("response.output_audio.delta")
    done = next(w for w in h.wire[mark:] if w["type"] == "response.done")["response"]
    assert [o["type"] for o in done["output"]] == ["function_call", "message"]

    # A call of a function the session does not offer breaks the rules. Taking the turn with
    # it: no turn opens, the client gets the error.
    h.append(200)
    mark = len(h.wire)
    h.answer(function_call=_call("call_b", "{}", done=True, name="launch_rocket"))
    (error,) = h.wire[mark:]
    assert error["type"] == "error" and error["error"]["code"] == Code.INVALID_FUNCTION_CALL and "launch_rocket" in error["error"]["message"]
    assert "call_b" not in h.state.calls and h.state.duplex.response_id is None
    # In an open turn: the turn fails.
    h.append(200)
    h.answer(audio=speech(200), text_delta="Sure.")
    h.clock += 200
    h.pump()
    h.answer(function_call=_call("call_c", "{}", done=True, name="launch_rocket"))
    failed = [e for _, e in h.log if isinstance(e, ResponseDone)][-1]
    assert failed.status == "failed" and failed.error_code == Code.INVALID_FUNCTION_CALL and "launch_rocket" in failed.error_message
    h.append(200)
    assert h.state.duplex.unit is not None  # the session goes on
    assert h.refold() == h.state


def test_response_create_in_a_full_duplex_session_requests_the_models_turn():
    from duplex_es.domain import BargeIn, CreateItem, CreateResponse, ResponseOptions
    from duplex_es.events import CommandRejected, ContentPart, TurnRequested

    def create(**options) -> list:  # noqa: ANN003
        return h.run(CreateResponse(response_id=nid("resp"), item_id=nid("item"), request_id=nid("req"), options=ResponseOptions(**options)))

    h = Duplex.start()
    (refusal,) = create(voice="echo")
    assert isinstance(refusal, CommandRejected) and refusal.code == Code.FULL_DUPLEX_RESPONSE_OPTIONS and refusal.param == "response.voice"
    assert '"echo"' in refusal.message and '"alloy"' in refusal.message
    # The session's own settings may be repeated (pipecat sends its output modalities).
    # ... and its metadata and instructions are taken (LiveKit's generate_reply sends both).
    (asked,) = create(output_modalities=h.state.config.output_modalities, metadata={"client_event_id": "lk_1"}, instructions="Greet the user.")
    assert isinstance(asked, TurnRequested)
    h.run(CreateItem(item_id="item_typed", role="user", content=(ContentPart(type="input_text", text="Tell me a joke."),)))
    h.pump()
    unit = h.unit()
    assert unit.turn_requested and [e.item_id for e in unit.items] == ["item_typed"] and unit.silence_ms == 0
    assert unit.inputs.instructions == "Greet the user."
    # The turn the model opens answers the request: its metadata comes back.
    mark = len(h.wire)
    h.answer(audio=speech(200), text_delta="Why ")
    created = next(w for w in h.wire[mark:] if w["type"] == "response.created")["response"]
    assert created["metadata"] == {"client_event_id": "lk_1"}
    typed_seq = next(s for s, e in h.log if e.TYPE == "conversation.item.created")
    assert typed_seq not in h.state.unapplied  # applied by the unit: no tick takes it again
    h.pump()
    (busy,) = create()
    assert isinstance(busy, CommandRejected) and busy.code == Code.ACTIVE_RESPONSE  # the model's turn is open
    h.run(CreateItem(item_id="item_more", role="user", content=(ContentPart(type="input_text", text="A short one."),)))
    h.pump()
    assert [e.item_id for e in h.unit().items] == ["item_more"]
    h.run(BargeIn())
    h.pump()
    again = h.unit()
    assert [e.item_id for e in again.items] == ["item_more"] and again.response_id is None
    assert h.refold() == h.state


def test_audit_finds_a_client_item_that_reached_the_model_twice():
    from duplex_es.domain import CreateItem, evolve
    from duplex_es.domain.speech_audit import audit_speech
    from duplex_es.events import ContentPart

    h = Duplex.start()
    h.run(CreateItem(item_id="item_typed", role="user", content=(ContentPart(type="input_text", text="Hello there."),)))
    h.pump()
    carried = h.unit()
    h.answer(listen_reason="reading")
    assert audit_speech(h.state.session_id, h.log, evolve).violations == ()
    # A forged unit that hands the model the same item again.
    forged = attrs.evolve(carried, request_id=nid("req"), chunk_index=h.state.duplex.next_unit, engine_state=None)
    h.apply([forged])
    h.answer(listen_reason="reading")
    (bad,) = audit_speech(h.state.session_id, h.log, evolve).violations
    assert bad.check == "units" and "item_typed reached the model twice" in bad.message


# ------------------------------------------------------------------ backchannels, listening


def _user_items(h: Duplex) -> list:
    return [h.state.items[i] for i in h.state.item_order if h.state.items[i].role == "user"]


def _mm_hm(**fields) -> dict:  # noqa: ANN003
    return {"audio": base64.b64encode(pcm(300)).decode(), "text_delta": "Mm-hm.", "end_of_turn": True, "backchannel": True, **fields}


def test_a_backchannel_is_a_whole_response_that_leaves_the_users_utterance_going_on():
    from duplex_es.domain import evolve
    from duplex_es.domain.speech_audit import audit_speech

    # barge_in_ms: speech going on over an open turn would barge in once it lasted 300 ms.
    h = Duplex.start(backchannels=True, barge_in_ms=300)
    h.append(200, 8000)
    assert h.unit().inputs.backchannels  # the setting reaches the engine with every unit
    h.answer(listen_reason="user_speaking", user_transcript_delta="I was thinking")
    item_id = h.state.duplex.turn_item_id
    h.append(200, 8000)
    mark = len(h.wire)
    h.answer(**_mm_hm(user_transcript_delta=" about"))
    wire = h.wire[mark:]
    types = [w["type"] for w in wire]
    # A response like any other on the wire (a GA client plays it), marked for extension clients.
    assert types[0] == "conversation.item.input_audio_transcription.delta" and types[1] == "response.created"
    (speak,) = [w for w in wire if w["type"] == "response.speak"]
    assert (speak["response_id"], speak["backchannel"]) == (wire[1]["response"]["id"], True)
    done = [w for w in wire if w["type"] == "response.done"]
    assert [d["response"]["status"] for d in done] == ["completed"]
    assert h.state.responses[wire[1]["response"]["id"]].backchannel
    # ... that commits nothing of the user: the utterance goes on, under the same item id.
    assert "conversation.item.input_audio_transcription.completed" not in types and _user_items(h) == []
    assert h.state.duplex.turn_item_id == item_id and h.state.duplex.turn_transcript == "I was thinking about"
    for _ in range(3):  # the user keeps talking: no overlap decision on their own utterance
        h.append(200, 8000)
        h.answer(listen_reason="user_speaking")
    assert not [e for _, e in h.log if isinstance(e, OverlapDecided)]
    h.append(200)
    h.answer(listen_reason="waiting_for_end_of_turn", user_transcript_delta=" the weather")
    h.append(200)
    h.answer(audio=base64.b64encode(pcm(200)).decode(), text_delta="You said it.", end_of_turn=True)
    (user,) = _user_items(h)
    heard = [s for _, e in h.log if isinstance(e, UnitIssued) for s in e.audio]
    assert (user.id, user.transcript) == (item_id, "I was thinking about the weather")
    assert user.audio == tuple(heard) and user.input_samples == 7 * 200 * 24  # the whole utterance
    assert [h.state.items[i].role for i in h.state.item_order] == ["assistant", "user", "assistant"]
    assert audit_speech(h.state.session_id, h.log, evolve).violations == ()
    assert h.refold() == h.state


@pytest.mark.parametrize("breach", ["no_end_of_turn", "silent", "over_its_own_turn"])
def test_a_backchannel_that_breaks_its_rules_fails_its_unit_with_a_code(breach: str):
    h = Duplex.start(backchannels=True)
    h.append(200)
    h.answer(listen_reason="user_speaking", user_transcript_delta="hello", engine_state={"n": 1})
    resp_id = _speak_turn(h) if breach == "over_its_own_turn" else None
    h.append(200)
    mark, processed_before = len(h.wire), h.state.duplex.processed
    answer = {"no_end_of_turn": _mm_hm(end_of_turn=False), "silent": _mm_hm(audio="", text_delta=""), "over_its_own_turn": _mm_hm()}[breach]
    h.answer(**answer, engine_state={"n": 2})
    wire = h.wire[mark:]
    processed = [w for w in wire if w["type"] == "input_audio_buffer.processed"]
    assert processed and all((p["decision"], p["reason"]) == ("failed", Code.INVALID_BACKCHANNEL) for p in processed)
    assert h.state.duplex.processed == processed_before + len(processed)  # the unit is answered
    assert not [w for w in wire if w["type"] in ("response.created", "response.output_audio.delta", "response.output_audio_transcript.delta")]
    if resp_id is None:  # nothing opened, nothing of the user committed
        assert not h.state.responses and _user_items(h) == []
    else:  # the model's open turn fails with the code
        (done,) = [w for w in wire if w["type"] == "response.done"]
        assert done["response"]["id"] == resp_id and done["response"]["status"] == "failed"
        assert done["response"]["status_details"]["error"]["code"] == Code.INVALID_BACKCHANNEL
    h.append(200)
    assert h.unit().engine_state != {"n": 2}  # the failed answer's state is not taken
    assert h.refold() == h.state


def test_speech_heard_while_the_model_speaks_goes_into_the_next_user_item():
    h = Duplex.start(overlap="listen")
    _speak_turn(h)
    for _ in range(10):  # the user talks over the model, which listens
        h.append(20, 8000)
    talked = tuple(s for s, e in h.log if e.TYPE == "input_audio_buffer.appended")[-10:]
    (decided,) = [e for _, e in h.log if isinstance(e, OverlapDecided)]
    assert decided.decision == "listen" and h.unit().applied_event_ids == talked
    mark = len(h.wire)
    h.answer(audio=base64.b64encode(pcm(200)).decode(), text_delta="there.", end_of_turn=True, user_transcript_delta="porto")
    (delta,) = [w for w in h.wire[mark:] if w["type"] == "conversation.item.input_audio_transcription.delta"]
    h.append(200)
    h.answer(listen_reason="waiting_for_end_of_turn", user_transcript_delta=" not lisbon")
    h.append(200)
    h.answer(audio=base64.b64encode(pcm(200)).decode(), text_delta="You said porto.", end_of_turn=True)
    (second,) = _user_items(h)  # (the first turn answered silence: no user item of it)
    assert (second.id, second.transcript) == (delta["item_id"], "porto not lisbon")
    assert set(talked) <= {s.seq for s in second.audio}  # what it heard during its turn, in the item
    assert second.input_samples == 600 * 24
    assert h.refold() == h.state


def test_a_client_item_a_unit_applied_is_neither_discarded_at_close_nor_applied_again_after_a_mode_change():
    from duplex_es.domain import CloseSession, CreateItem, evolve
    from duplex_es.domain.speech_audit import audit_speech
    from duplex_es.events import ContentPart, EpochAdvanced, TickIssued

    def typed(item_id: str, text: str) -> None:
        h.run(CreateItem(item_id=item_id, role="user", content=(ContentPart(type="input_text", text=text),)))
        h.pump()

    h = Duplex.start()
    typed("item_a", "First.")
    h.answer(listen_reason="reading")
    seq_a = next(s for s, e in h.log if e.TYPE == "conversation.item.created")
    # Idle: the session may go turn-based; its next response reads the conversation, but no
    # tick applies the item the model already read.
    h.run(UpdateSession(patch=SessionPatch(turn_mode="turn_based")))
    from duplex_es.domain import CreateResponse

    h.run(CreateResponse(response_id=nid("resp"), item_id=nid("item"), request_id=nid("req")))
    (tick,) = [e for _, e in h.log if isinstance(e, TickIssued)]
    assert seq_a not in tick.applied_event_ids
    assert audit_speech(h.state.session_id, h.log, evolve).violations == ()

    h2 = Duplex.start()
    h = h2
    typed("item_b", "Second.")
    h.answer(listen_reason="reading")
    seq_b = next(s for s, e in h.log if e.TYPE == "conversation.item.created")
    h.run(CloseSession())
    discarded = {d for _, e in h.log if isinstance(e, EpochAdvanced) for d in e.discarded_event_ids}
    assert seq_b not in discarded  # the model read it: it was applied, not thrown away
    assert audit_speech(h.state.session_id, h.log, evolve).violations == ()


def test_sending_back_the_read_only_duplex_modes_is_refused_with_a_message_that_says_so():
    import json

    from duplex_es.domain import Invalid
    from duplex_es.protocol import parse_frame

    frame = {"type": "session.update", "session": {"type": "realtime", "duplex": {"mode": "full_duplex", "modes": ["turn_based", "full_duplex"]}}}
    refused = parse_frame(json.dumps(frame), nid)
    assert isinstance(refused, Invalid) and refused.param == "session.duplex.modes" and "read only" in refused.message


def test_a_short_acknowledgement_is_decided_even_when_the_turn_it_began_over_has_ended():
    """A reply is generated faster than it plays: the model's turn may end in the log while
    the user's "okay" over it is still going on. It is still an acknowledgement."""
    h = Duplex.start(barge_in_ms=1500)
    resp_id = _speak_turn(h)
    for _ in range(10):  # "okay" starts over the turn ...
        h.append(20, 8000)
    h.answer(audio=base64.b64encode(pcm(200)).decode(), text_delta="there.", end_of_turn=True)
    assert h.state.duplex.response_id is None  # the turn is over
    for _ in range(30):  # ... and stops after the turn ended
        h.append(20, 0)
    decided = [e for _, e in h.log if isinstance(e, OverlapDecided)]
    assert [(d.decision, d.reason, d.response_id) for d in decided] == [("listen", "short_acknowledgement", resp_id)]
    while h.state.duplex.unit is not None and not h.unit().acknowledged:
        h.answer(listen_reason="user_speaking")
        h.append(200)
    assert h.unit().acknowledged  # the next unit tells the model


def test_the_inspector_shows_a_full_duplex_turn_that_only_called_a_tool():
    from duplex_es.inspect.timeline import Timeline
    from duplex_es.store import Recorded

    h = Duplex.start(tools=(WEATHER,))
    h.append(200)
    h.answer(function_call=_call("call_t", '{"city":"Oslo"}', done=True), end_of_turn=True, user_transcript_delta="weather in oslo")
    h.append(200)
    h.answer(audio=speech(200), text_delta="Sunny.", end_of_turn=True)
    t = Timeline(h.state.session_id)
    t.feed([Recorded(seq, h.state.session_id, seq, ev, 1_000_000 + seq, "") for seq, ev in h.log])
    ids = [r["id"] for r in t.overview()["responses"]]
    turns = [e.response_id for _, e in h.log if isinstance(e, ResponseDone)]
    assert len(turns) == 2 and ids == turns  # the call-only turn is there too


@pytest.mark.parametrize("end", ["close", "expire"])
def test_a_unit_in_flight_when_the_session_ends_is_fenced_and_its_late_answer_opens_nothing(end: str):
    # The worker may answer a listening unit after the client closed the session: that answer
    # must not open a turn (a response nobody ends: the audit's "never got response.done").
    from duplex_es.domain import CloseSession, Expire, evolve
    from duplex_es.domain.speech_audit import audit_speech
    from duplex_es.events import EpochAdvanced

    h = Duplex.start()
    h.append(200, value=8000)
    unit = h.unit()
    if end == "close":
        h.run(CloseSession())
    else:
        h.run(Expire(reason="idle_ttl_expired", now_ms=h.clock + 10**9, since_ms=h.clock))
    (fence,) = [e for _, e in h.log if isinstance(e, EpochAdvanced)]
    assert unit.request_id in fence.cancelled_request_ids
    out = UnitOutput(
        session_id=h.state.session_id, request_id=unit.request_id, epoch=unit.epoch, chunk_index=unit.chunk_index,
        applied_event_ids=unit.applied_event_ids, audio=pcm(100, 3000), text_delta="You said: ",
    )
    h.apply([out])
    assert h.state.duplex.response_id is None and not h.state.responses
    assert "response.created" not in h.types()
    assert audit_speech(h.state.session_id, h.log, evolve).violations == ()
