"""Issue 10 in the domain and the protocol layer: turn detection as clients expect it (server
VAD by default, semantic VAD, the idle timeout), model names, settings honoured or recorded as
not applied, per-response metadata and input, input transcription as its own tick kind, usage,
vLLM-Omni's aliases, and a coded error naming the field for bad input in every new field."""

from __future__ import annotations

import base64
import itertools
import json

import pytest
from openai.types.realtime import RealtimeServerEvent
from pydantic import TypeAdapter

from duplex_es.domain import (
    AppendAudio,
    AppendText,
    CloseSession,
    Code,
    Commit,
    CreateItem,
    CreateResponse,
    Invalid,
    SessionPatch,
    UpdateSession,
    VadIds,
)
from duplex_es.events import (
    CommandRejected,
    ContentPart,
    EpochAdvanced,
    InputCommitted,
    ResponseCreated,
    ResponseDeferred,
    ResponseInput,
    SpeechStopped,
    TickIssued,
    TimeoutTriggered,
    TokenUsage,
    TranscriptionCompleted,
    TranscriptionFailed,
    TranscriptionRequested,
    TurnDetection,
)
from duplex_es.protocol import parse_frame
from duplex_es.protocol import project

from harness import Harness, append_cmd, nid, pcm

SERVER_EVENT = TypeAdapter(RealtimeServerEvent)
_n = itertools.count()


def new_id(prefix: str) -> str:
    return f"{prefix}_{next(_n)}"


def parse(obj) -> object:
    return parse_frame(json.dumps(obj), new_id)


def wire(h: Harness, from_seq: int) -> list[dict]:
    """The server events projected from the log after ``from_seq``, re-folded from scratch."""
    out, state = [], None
    from duplex_es.domain import SessionState, evolve

    state = SessionState()
    for seq, ev in h.log:
        after = evolve(state, seq, ev)
        if seq > from_seq:
            out += project(state, seq, ev, after)
        state = after
    return out


def speak(h: Harness, ms: int, *, loud: bool = True) -> list:
    """``ms`` of speech (or silence) as 20 ms appends with VAD ids, as a client streams it."""
    out = []
    for _ in range(ms // 20):
        n = next(_n)
        raw = pcm(20, 3000 if loud else 0)
        ids = VadIds(item_id=f"item_v{n}", response_id=f"resp_v{n}", response_item_id=f"item_r{n}", request_id=f"req_v{n}")
        out += h.run(AppendAudio(audio=base64.b64encode(raw).decode(), nbytes=len(raw), vad_ids=ids))
    return out


def of(events, cls):
    return [e for e in events if isinstance(e, cls)]


def update(h: Harness, **fields) -> list:
    return h.run(UpdateSession(patch=SessionPatch(**fields)))


# ------------------------------------------------------------------------------ turn detection


def test_a_new_session_starts_with_openais_default_server_vad():
    h = Harness.open()
    assert h.state.config.turn_detection == TurnDetection()
    created = wire(h, 0)[0]
    assert created["session"]["audio"]["input"]["turn_detection"] == {
        "type": "server_vad", "threshold": 0.5, "prefix_padding_ms": 300, "silence_duration_ms": 500,
        "create_response": True, "interrupt_response": True, "idle_timeout_ms": None, "detector": "energy",
    }
    SERVER_EVENT.validate_python(created)
    # Speech ends a turn by itself: committed and answered, as clients expect.
    events = speak(h, 400) + speak(h, 600, loud=False)
    assert of(events, InputCommitted) and of(events, ResponseCreated)
    # null still turns it off.
    update(h, turn_detection=None)
    assert h.state.config.turn_detection is None
    assert not of(speak(h, 400) + speak(h, 1000, loud=False), SpeechStopped)


@pytest.mark.parametrize("eagerness,pause_ms", [("high", 500), ("medium", 800), ("auto", 800), ("low", 1200)])
def test_semantic_vad_ends_a_turn_after_the_pause_its_eagerness_allows(eagerness, pause_ms):
    h = Harness.open()
    ev = update(h, turn_detection={"type": "semantic_vad", "eagerness": eagerness})[-1]
    echoed = wire(h, h.state.seq - 1)[0]["session"]["audio"]["input"]["turn_detection"]
    assert echoed == {"type": "semantic_vad", "eagerness": eagerness, "create_response": True, "interrupt_response": True, "detector": "energy"}
    assert ev.config.turn_detection.end_of_turn_silence_ms == pause_ms
    speak(h, 400)
    assert not of(speak(h, pause_ms - 40, loud=False), SpeechStopped)  # a pause shorter than allowed: still the turn
    stopped = speak(h, 60, loud=False)
    assert of(stopped, SpeechStopped) and of(stopped, InputCommitted) and of(stopped, ResponseCreated)


def test_semantic_vad_settings_are_checked_and_a_type_change_starts_from_its_defaults():
    h = Harness.open()
    update(h, turn_detection={"type": "server_vad", "silence_duration_ms": 900})
    for patch, param in [
        ({"type": "semantic_vad", "silence_duration_ms": 700}, "session.audio.input.turn_detection.silence_duration_ms"),
        ({"type": "semantic_vad", "eagerness": "eager"}, "session.audio.input.turn_detection.eagerness"),
        ({"type": "semantic_vad", "idle_timeout_ms": 5000}, "session.audio.input.turn_detection.idle_timeout_ms"),
        ({"type": "server_vad", "idle_timeout_ms": 50}, "session.audio.input.turn_detection.idle_timeout_ms"),
        ({"type": "whisper_vad"}, "session.audio.input.turn_detection.type"),
    ]:
        rej = update(h, turn_detection=patch)[0]
        assert isinstance(rej, CommandRejected) and (rej.code, rej.param) == (Code.UNSUPPORTED_TURN_DETECTION, param), patch
        assert param.rsplit(".", 1)[1] in rej.message, rej.message
    td = update(h, turn_detection={"type": "semantic_vad", "create_response": False})[-1].config.turn_detection
    assert (td.type, td.eagerness, td.create_response, td.silence_duration_ms) == ("semantic_vad", "auto", False, 500)


def test_the_idle_timeout_answers_once_no_speech_followed_the_last_responses_audio_on_the_input_clock():
    h = Harness.open()
    update(h, turn_detection={"type": "server_vad", "idle_timeout_ms": 2000})
    speak(h, 400)
    created = of(speak(h, 600, loud=False), ResponseCreated)[0]
    started = h.state.responses[created.response_id].started_at_sample
    h.output(ms=1500, final=True)
    h.pump()
    assert h.state.active_response is None
    anchor = h.state.idle_since_sample
    # The response's 1.5 s of audio play out on the input clock (from its start), then 2 s of quiet.
    assert anchor == max(h.state.input_clock, started + 1500 * 24) == started + 1500 * 24
    quiet = speak(h, 3400, loud=False)
    timeouts = of(quiet, TimeoutTriggered)
    assert len(timeouts) == 1
    t = timeouts[0]
    assert (t.audio_start_ms, t.audio_end_ms) == (anchor // 24, anchor // 24 + 2000)
    committed = of(quiet, InputCommitted)
    assert committed[0].item_id == t.item_id and of(quiet, ResponseCreated)
    sent = [w for w in wire(h, 0) if w["type"] == "input_audio_buffer.timeout_triggered"]
    assert sent == [{**sent[0], "audio_start_ms": t.audio_start_ms, "audio_end_ms": t.audio_end_ms, "item_id": t.item_id}]
    SERVER_EVENT.validate_python(sent[0])
    # Speech after a response stops the clock: no timeout while the user talks.
    h.output(ms=100, final=True)
    h.pump()
    assert not of(speak(h, 3000) + speak(h, 100, loud=False), TimeoutTriggered)


def test_an_idle_timeout_set_late_fires_at_once_and_always_commits_the_item_it_names():
    h = Harness.open()
    speak(h, 400)
    speak(h, 600, loud=False)
    h.output(ms=500, final=True)
    h.pump()
    speak(h, 3000, loud=False)  # long quiet, no timeout configured yet
    update(h, turn_detection={"type": "server_vad", "idle_timeout_ms": 1000})
    fired = speak(h, 20, loud=False)
    (t,) = of(fired, TimeoutTriggered)
    assert t.audio_end_ms == (h.state.input_clock - 20 * 24) // 24  # at the first append after it passed
    h.output(ms=200, final=True)
    h.pump()
    # The buffer cleared just before the deadline: the timeout's item still exists.
    speak(h, 1160, loud=False)
    from duplex_es.domain import ClearInput

    h.run(ClearInput())
    fired = speak(h, 80, loud=False)
    (t,) = of(fired, TimeoutTriggered)
    (committed,) = of(fired, InputCommitted)
    assert committed.item_id == t.item_id and committed.samples > 0 and t.item_id in h.state.items


# -------------------------------------------------------------------------------------- models


def test_a_model_name_of_the_same_engine_is_accepted_and_another_engine_is_refused_naming_both():
    h = Harness.open()
    ok = update(h, model="gpt-realtime", engine="m")[-1]
    assert ok.config.model == "gpt-realtime" and ok.config.engine == "m"
    rej = update(h, model="other", engine="gpu-omni", instructions="lost")[0]
    assert rej.code == Code.MODEL_UPDATE_UNSUPPORTED and rej.param == "session.model"
    assert "gpt-realtime" in rej.message and "gpu-omni" in rej.message
    assert h.state.config.instructions == ""  # all or nothing
    # Unresolved (Python API without a model map): only the session's own name.
    assert update(h, model="gpt-realtime")[-1].config.model == "gpt-realtime"
    assert update(h, model="x")[0].code == Code.MODEL_UPDATE_UNSUPPORTED


# ------------------------------------------------------------------------- settings, honoured or not


def test_every_setting_is_echoed_as_set_and_what_nothing_applies_is_recorded():
    h = Harness.open()
    cmd = parse(
        {
            "type": "session.update",
            "session": {
                "type": "realtime",
                "tools": [{"type": "function", "name": "lookup_order", "description": "d", "parameters": {"type": "object", "properties": {}}}],
                "tool_choice": "required",
                "max_output_tokens": 300,
                "tracing": "auto",
                "truncation": "disabled",
                "include": ["item.input_audio_transcription.logprobs"],
                "prompt": {"id": "pmpt_1", "variables": {"a": "b"}},
                "audio": {
                    "input": {"noise_reduction": {"type": "far_field"}, "transcription": {"model": "gpt-4o-mini-transcribe", "language": "en"}},
                    "output": {"speed": 1.25, "voice": "ash"},
                },
            },
        }
    )
    ev = h.run(cmd)[-1]
    assert ev.not_applied == (
        "session.audio.input.noise_reduction", "session.tracing", "session.truncation", "session.include", "session.prompt",
    )
    s = wire(h, h.state.seq - 1)[0]["session"]
    SERVER_EVENT.validate_python({"type": "session.updated", "event_id": "e", "session": s})
    assert s["tools"][0]["name"] == "lookup_order" and s["tool_choice"] == "required" and s["max_output_tokens"] == 300
    assert s["tracing"] == "auto" and s["truncation"] == "disabled" and s["prompt"] == {"id": "pmpt_1", "variables": {"a": "b"}}
    assert s["audio"]["input"]["noise_reduction"] == {"type": "far_field"}
    assert s["audio"]["input"]["transcription"] == {"model": "gpt-4o-mini-transcribe", "language": "en"}
    assert s["audio"]["output"]["speed"] == 1.25 and s["include"] == ["item.input_audio_transcription.logprobs"]
    # What the engine reads reaches it in the tick.
    h.run(append_cmd(300))
    h.run(Commit(item_id=nid("item")))
    h.run(CreateResponse(response_id="r1", item_id=nid("item"), request_id=nid("req")))
    inputs = h.live_tick().inputs
    assert (inputs.speed, inputs.max_output_tokens, inputs.tool_choice, inputs.tools[0]["name"], inputs.voice) == (1.25, 300, "required", "lookup_order", "ash")


def test_response_metadata_is_echoed_on_created_and_done_and_usage_is_never_null():
    h = Harness.open()
    h.run(append_cmd(300))
    h.run(Commit(item_id=nid("item")))
    mark = h.state.seq
    cmd = parse({"type": "response.create", "response": {"metadata": {"client_event_id": "gen-7"}, "prompt": {"id": "p"}, "max_output_tokens": 5}})
    created = h.run(cmd)[0]
    assert created.metadata == {"client_event_id": "gen-7"} and created.not_applied == ("response.prompt",)
    h.output(ms=500, usage=TokenUsage(input_audio_tokens=3, output_text_tokens=2, output_audio_tokens=10))
    h.pump()
    h.output(ms=240, final=True, usage=TokenUsage(output_audio_tokens=5))
    h.pump()
    sent = wire(h, mark)
    started = next(w for w in sent if w["type"] == "response.created")["response"]
    done = next(w for w in sent if w["type"] == "response.done")["response"]
    for w in sent:
        SERVER_EVENT.validate_python(w)
    assert started["metadata"] == done["metadata"] == {"client_event_id": "gen-7"}
    assert done["max_output_tokens"] == 5
    u = done["usage"]
    assert (u["input_tokens"], u["output_tokens"], u["total_tokens"]) == (3, 17, 20)
    assert u["output_token_details"] == {"text_tokens": 2, "audio_tokens": 15}
    assert u["duplex"]["output_audio_ms"] == 740 and u["duplex"]["input_audio_ms"] == 300 and u["duplex"]["tokens_reported"]
    # A response cancelled before any output still reports its (empty) usage.
    h.run(CreateResponse(response_id="r2", item_id=nid("item"), request_id=nid("req")))
    mark = h.state.seq
    h.run(parse({"type": "response.cancel"}))
    done = next(w for w in wire(h, mark) if w["type"] == "response.done")["response"]
    assert done["usage"]["total_tokens"] == 0 and done["usage"]["duplex"]["tokens_reported"] is False


def test_response_input_replaces_the_conversation_with_references_and_inline_items():
    h = Harness.open()
    update(h, turn_detection=None)
    h.run(AppendText(text="first question"))
    first = nid("item")
    h.run(Commit(item_id=first))
    h.run(append_cmd(300))
    h.run(Commit(item_id=nid("item")))
    inline_audio = base64.b64encode(pcm(200)).decode()
    cmd = parse(
        {
            "type": "response.create",
            "response": {
                "conversation": "none",
                "input": [
                    {"type": "item_reference", "id": first},
                    {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "and this"}, {"type": "input_audio", "audio": inline_audio}]},
                ],
            },
        }
    )
    events = h.run(cmd)
    created, tick = events
    assert isinstance(created, ResponseCreated) and created.input[0] == ResponseInput(item_id=first)
    inputs = tick.inputs
    assert [(e.item_id, e.role, e.text) for e in inputs.history] == [(first, "user", "first question"), ("", "user", "and this")]
    assert inputs.user_text == "and this" and inputs.reply_to_item_id is None
    (seg,) = inputs.user_audio
    assert (seg.seq, seg.offset, seg.samples) == (h.state.seq - 1, 0, 200 * 24)  # logged by response.created itself
    from duplex_es.events import audio_bytes

    assert audio_bytes(created) == pcm(200)
    # An unknown reference or a bad inline item: a coded error naming the entry.
    for entry, code, param in [
        ({"type": "item_reference", "id": "nope"}, Code.INPUT_ITEM_NOT_FOUND, "response.input[0].id"),
        ({"type": "message", "role": "assistant", "content": [{"type": "input_audio", "audio": inline_audio}]}, Code.INVALID_ITEM, "response.input[0].content[0].type"),
    ]:
        rej = h.run(parse({"type": "response.create", "response": {"input": [entry]}}))[0]
        assert isinstance(rej, CommandRejected) and (rej.code, rej.param) == (code, param)


# ------------------------------------------------------------------------------- transcription


def transcribing() -> Harness:
    h = Harness.open()
    update(h, turn_detection=None, transcription={"model": "whisper-1"})
    return h


def test_a_committed_audio_item_is_transcribed_whether_or_not_a_response_follows():
    h = transcribing()
    h.run(append_cmd(300))
    item = nid("item")
    committed, requested = h.run(Commit(item_id=item))
    assert isinstance(requested, TranscriptionRequested) and requested.item_id == item
    assert requested.audio == committed.segments and requested.settings == {"model": "whisper-1"}
    # A response that is cancelled before it says anything does not take the transcript away.
    h.run(CreateResponse(response_id="r", item_id=nid("item"), request_id=nid("req")))
    h.run(parse({"type": "response.cancel"}))
    mark = h.state.seq
    out = TranscriptionCompleted(session_id=h.state.session_id, request_id=requested.request_id, item_id=item, transcript="hello there", seconds=0.3)
    h.apply([out])
    assert h.state.items[item].transcript == "hello there" and h.state.items[item].transcription == "completed"
    sent = wire(h, mark)
    assert [w["type"] for w in sent] == [
        "conversation.item.input_audio_transcription.delta",
        "conversation.item.input_audio_transcription.completed",
    ]
    assert all(w["item_id"] == item and w["content_index"] == 0 for w in sent)
    for w in sent:
        SERVER_EVENT.validate_python(w)
    # A second answer, or one naming another item, is discarded: nothing changes, nothing is sent.
    mark = h.state.seq
    h.apply([out, TranscriptionCompleted(session_id=h.state.session_id, request_id=requested.request_id, item_id="other", transcript="x")])
    assert wire(h, mark) == [] and h.state.items[item].transcript == "hello there"


def test_a_created_user_audio_item_is_transcribed_and_a_failure_is_sent_as_failed():
    h = transcribing()
    audio = base64.b64encode(pcm(200)).decode()
    created, requested = h.run(CreateItem(item_id="client-1", role="user", content=(ContentPart(type="input_audio", audio=audio),), audio_nbytes=200 * 48))
    assert requested.audio[0].seq == h.state.seq - 1  # the item.created that logged the audio
    mark = h.state.seq
    h.apply([TranscriptionFailed(session_id=h.state.session_id, request_id=requested.request_id, item_id="client-1", code="engine_failed", message="boom")])
    (failed,) = wire(h, mark)
    SERVER_EVENT.validate_python(failed)
    assert failed["type"] == "conversation.item.input_audio_transcription.failed" and failed["error"]["code"] == "engine_failed"
    assert "client-1" in failed["error"]["message"]
    # Text items are not transcribed; nor is anything when transcription is off.
    assert not of(h.run(CreateItem(item_id="t", role="user", content=(ContentPart(type="input_text", text="hi"),))), TranscriptionRequested)
    update(h, transcription=None)
    h.run(append_cmd(300))
    assert not of(h.run(Commit(item_id=nid("item"))), TranscriptionRequested)


def test_the_sessions_end_cancels_transcriptions_in_flight_and_a_response_does_not_report_over_them():
    h = transcribing()
    h.run(append_cmd(300))
    item = nid("item")
    _, requested = h.run(Commit(item_id=item))
    h.run(CreateResponse(response_id="r", item_id=nid("item"), request_id=nid("req")))
    mark = h.state.seq
    from duplex_es.events import InputTranscript

    h.output(ms=100, input_transcripts=(InputTranscript(item_id=item, transcript="engine heard"),))
    assert h.state.items[item].transcript == ""  # the session's transcription answers for it
    assert not [w for w in wire(h, mark) if "input_audio_transcription" in w["type"]]
    ending = h.run(CloseSession())
    epoch = of(ending, EpochAdvanced)[0]
    assert requested.request_id in epoch.cancelled_request_ids and not h.state.transcriptions


def test_a_transcription_session_transcribes_turns_and_creates_no_responses():
    h = Harness.open()
    ev = h.run(parse({"type": "session.update", "session": {"type": "transcription", "audio": {"input": {"transcription": {"model": "gpt-4o-transcribe"}}}}}))[-1]
    assert ev.config.session_type == "transcription"
    s = wire(h, h.state.seq - 1)[0]["session"]
    assert (s["type"], s["object"]) == ("transcription", "realtime.transcription_session") and "output_modalities" not in s
    SERVER_EVENT.validate_python({"type": "session.updated", "event_id": "e", "session": s})
    events = speak(h, 400) + speak(h, 600, loud=False)
    assert of(events, InputCommitted) and of(events, TranscriptionRequested) and not of(events, ResponseCreated)
    rej = h.run(CreateResponse(response_id="r", item_id=nid("item"), request_id=nid("req")))[0]
    assert rej.code == Code.TRANSCRIPTION_SESSION


# ---------------------------------------------------------------------------- vLLM-Omni's names


@pytest.mark.parametrize(
    "alias,canonical",
    [
        ({"type": "input_text.append", "text": "hi"}, {"type": "input.text.append", "text": "hi"}),
        ({"type": "push_text", "text": "hi"}, {"type": "input.text.append", "text": "hi"}),
        ({"type": "audio.playback_ack", "played_ms": 10}, {"type": "playback.ack", "played_ms": 10}),
        ({"type": "playback.ack", "audio_ms": 10}, {"type": "playback.ack", "played_ms": 10}),
        ({"type": "close", "reason": "bye"}, {"type": "session.close", "reason": "bye"}),
        ({"type": "close_session"}, {"type": "session.close"}),
        ({"type": "signal_turn", "event": "user_started"}, {"type": "turn.signal", "event": "user_started"}),
        ({"type": "signal_turn", "event": "barge_in"}, {"type": "turn.signal", "event": "barge_in"}),
    ],
)
def test_vllm_omni_aliases_mean_what_the_canonical_events_mean(alias, canonical):
    assert parse(alias) == parse(canonical)


def test_input_commit_answers_the_turn_in_the_same_batch_or_after_the_active_response():
    h = Harness.open()
    update(h, turn_detection=None)
    h.run(append_cmd(300))
    cmd = parse({"type": "input.commit", "final": True, "is_speech": True})
    assert cmd.create_response and cmd.final is True
    events = h.run(cmd)
    assert [e.TYPE for e in events] == ["input_audio_buffer.committed", "response.created", "tick.issued"]
    h.run(append_cmd(300))
    deferred = h.run(parse({"type": "input.commit"}))
    assert [e.TYPE for e in deferred] == ["input_audio_buffer.committed", "response.deferred"]
    # input_audio_buffer.commit only commits, unless told to respond.
    h.run(append_cmd(300))
    assert [e.TYPE for e in h.run(parse({"type": "input_audio_buffer.commit"}))] == ["input_audio_buffer.committed"]
    h.run(append_cmd(300))
    h.run(append_cmd(300))
    assert not parse({"type": "input.commit", "create_response": False}).create_response
    # is_speech on an append is vLLM-Omni's client verdict: recorded on the command.
    assert parse({"type": "input_audio_buffer.append", "audio": base64.b64encode(pcm(20)).decode(), "is_speech": False}).is_speech is False


# ------------------------------------------------------------------------------ bad input


@pytest.mark.parametrize(
    "session,code,param",
    [
        ({"tools": {"name": "x"}}, Code.INVALID_EVENT, "session.tools"),
        ({"tools": [{"type": "function", "name": "has space"}]}, Code.INVALID_TOOL, "session.tools[0].name"),
        ({"tools": [{"type": "function", "name": "f", "parameters": {"type": "string"}}]}, Code.INVALID_TOOL, "session.tools[0].parameters.type"),
        ({"tools": [{"type": "function", "name": "f", "parameters": "{}"}]}, Code.INVALID_TOOL, "session.tools[0].parameters"),
        ({"tools": [{"type": "web_search"}]}, Code.INVALID_TOOL, "session.tools[0].type"),
        ({"tool_choice": "sometimes"}, Code.INVALID_EVENT, "session.tool_choice"),
        ({"max_output_tokens": 0}, Code.INVALID_EVENT, "session.max_output_tokens"),
        ({"max_output_tokens": "lots"}, Code.INVALID_EVENT, "session.max_output_tokens"),
        ({"temperature": 3}, Code.INVALID_EVENT, "session.temperature"),
        ({"tracing": 5}, Code.INVALID_EVENT, "session.tracing"),
        ({"truncation": "sometimes"}, Code.INVALID_EVENT, "session.truncation"),
        ({"include": "logprobs"}, Code.INVALID_EVENT, "session.include"),
        ({"prompt": {"variables": {}}}, Code.INVALID_EVENT, "session.prompt"),
        ({"audio": {"input": {"noise_reduction": {"type": "loud"}}}}, Code.INVALID_EVENT, "session.audio.input.noise_reduction"),
        ({"audio": {"input": {"transcription": {"model": 5}}}}, Code.INVALID_EVENT, "session.audio.input.transcription.model"),
        ({"audio": {"input": {"transcription": {"model": "x", "diarize": True}}}}, Code.INVALID_EVENT, "session.audio.input.transcription.diarize"),
        ({"audio": {"input": {"transcription": "whisper-1"}}}, Code.INVALID_EVENT, "session.audio.input.transcription"),
        ({"audio": {"output": {"speed": 3}}}, Code.INVALID_EVENT, "session.audio.output.speed"),
        ({"type": "translation"}, Code.INVALID_EVENT, "session.type"),
        ({"tools": [{"type": "function", "name": "f"}, {"type": "function", "name": "f"}]}, Code.INVALID_TOOL, "session.tools[1].name"),
        ({"tools": [{"type": "function", "name": f"f{i}"} for i in range(129)]}, Code.INVALID_EVENT, "session.tools"),
        ({"tools": [{"type": "function", "name": "f", "description": "d" * 70_000}]}, Code.INVALID_EVENT, "session.tools"),
        ({"tool_choice": {"type": "function", "name": "missing"}}, Code.INVALID_EVENT, "session.tool_choice"),
        ({"include": ["everything"]}, Code.INVALID_EVENT, "session.include"),
        ({"tracing": {"workflow_name": "w" * 20_000}}, Code.INVALID_EVENT, "session.tracing"),
        ({"model": "m" * 129}, Code.INVALID_EVENT, "session.model"),
        ({"audio": {"input": {"transcription": {"keywords": ["k"] * 101}}}}, Code.INVALID_EVENT, "session.audio.input.transcription.keywords"),
        ({"audio": {"input": {"turn_detection": {"type": "server_vad", "k" * 100_000: 1}}}}, Code.UNSUPPORTED_TURN_DETECTION, None),
    ],
)
def test_bad_session_settings_get_a_coded_error_naming_the_field_and_change_nothing(session, code, param):
    h = Harness.open()
    before = h.state
    cmd = parse({"type": "session.update", "event_id": "bad", "session": {"type": "realtime", "instructions": "kept?", **session}})
    rej = h.run(cmd)[0]
    assert isinstance(rej, CommandRejected) and (rej.code, rej.client_event_id) == (code, "bad"), rej
    # It names the field (a refused 100 kB key is named by its start: what a refusal stores and
    # echoes is bounded).
    assert rej.param == param or (param is None and rej.param.startswith("session.audio.input.turn_detection.kkk"))
    assert len(rej.message) <= 600 and len(rej.param) <= 160
    assert h.state.config == before.config and h.state.config.instructions == ""


@pytest.mark.parametrize(
    "response,code,param",
    [
        ({"metadata": {"k": 5}}, Code.INVALID_EVENT, "response.metadata"),
        ({"metadata": {f"k{i}": "v" for i in range(17)}}, Code.INVALID_EVENT, "response.metadata"),
        ({"input": [{"type": "item_reference"}]}, Code.INVALID_EVENT, "response.input[0].id"),
        ({"input": [{"type": "function_call_output", "output": "sunny"}]}, Code.INVALID_EVENT, "response.input[0].call_id"),
        ({"input": [5]}, Code.INVALID_EVENT, "response.input[0]"),
        ({"tool_choice": {"type": "function"}}, Code.INVALID_EVENT, "response.tool_choice"),
        ({"audio": {"output": {"speed": 0.1}}}, Code.INVALID_EVENT, "response.audio.output.speed"),
        ({"metadata": {"": "empty key"}}, Code.INVALID_EVENT, "response.metadata"),
        ({"input": [{"type": "message", "role": "user", "content": [{"type": "input_audio", "audio": base64.b64encode(b"abc").decode()}]}]},
         Code.INVALID_AUDIO_LENGTH, "response.input[0].content"),
        ({"input": [{"type": "message", "role": "user", "content": [{"type": "input_text", "text": "x" * 20_000}]}]},
         Code.INPUT_TEXT_TOO_LONG, "response.input[0].content"),
        ({"tool_choice": {"type": "function", "name": "nope"}}, Code.INVALID_EVENT, "response.tool_choice"),
    ],
)
def test_bad_response_options_get_a_coded_error_naming_the_field(response, code, param):
    h = Harness.open()
    rej = h.run(parse({"type": "response.create", "event_id": "r", "response": response}))[0]
    assert isinstance(rej, CommandRejected) and (rej.code, rej.param, rej.client_event_id) == (code, param, "r"), rej
    assert not h.state.responses


def test_nan_and_infinity_are_not_json_and_refused_before_anything_is_stored():
    for text in ('{"type": "session.update", "session": {"tracing": {"metadata": {"x": NaN}}}}',
                 '{"type": "session.update", "session": {"temperature": Infinity}}',
                 '{"type": "response.create", "response": {"tools": [{"type": "function", "name": "f", "parameters": {"x": -Infinity}}]}}'):
        cmd = parse_frame(text, new_id)
        assert isinstance(cmd, Invalid) and cmd.code == Code.INVALID_JSON and "not a JSON number" in cmd.message
    from duplex_es.protocol import command_from_realtime, CommandError

    with pytest.raises(CommandError) as err:  # a Python caller's float('nan') too
        command_from_realtime({"type": "session.update", "session": {"tracing": {"x": float("nan")}}}, new_id)
    assert err.value.code == Code.INVALID_EVENT and "finite" in err.value.message


def test_turns_committed_while_a_response_waits_join_it():
    h = Harness.open()
    update(h, turn_detection={"type": "server_vad", "interrupt_response": False})
    speak(h, 400)
    assert of(speak(h, 600, loud=False), ResponseCreated)
    deferred = []
    for _ in range(3):
        deferred += of(speak(h, 400) + speak(h, 600, loud=False), ResponseDeferred)
    assert len(deferred) == 1  # one waits; the later turns join it
    h.run(append_cmd(300))
    assert [e.TYPE for e in h.run(parse({"type": "input.commit", "create_response": None}))] == ["input_audio_buffer.committed"]
    h.output(ms=100, final=True)
    started = h.pump() + h.pump()  # the active response ends, then the waiting one starts
    answer = of(started, ResponseCreated)[0]
    assert answer.response_id == deferred[0].response_id
    tick = next(e for e in started if isinstance(e, TickIssued))
    assert tick.inputs.reply_to_item_id == h.state.last_user_item().id  # the newest turn


def test_a_beta_client_sees_its_transcription_session_in_beta_shape():
    from duplex_es.protocol.beta import wire_to_beta
    from duplex_es.protocol.outbound import session_json
    from duplex_es.events import SessionConfig

    cfg = SessionConfig(model="m", session_type="transcription", transcription={"model": "whisper-1"}, temperature=0.7)
    beta = wire_to_beta({"type": "session.updated", "session": session_json("sess_1", cfg)})["session"]
    assert beta["object"] == "realtime.transcription_session" and beta["input_audio_transcription"] == {"model": "whisper-1"}
    assert "temperature" not in beta and "voice" not in beta


def test_bad_vllm_omni_fields_get_a_coded_error_naming_the_field():
    for frame, param in [
        ({"type": "input.commit", "final": "yes"}, "final"),
        ({"type": "input_audio_buffer.commit", "create_response": 1}, "create_response"),
        ({"type": "input_audio_buffer.append", "audio": "AAAA", "is_speech": "no"}, "is_speech"),
        ({"type": "playback.ack", "played_ms": 5, "audio_ms": 5}, "audio_ms"),
    ]:
        cmd = parse(frame)
        assert isinstance(cmd, Invalid) and (cmd.code, cmd.param) == (Code.INVALID_EVENT, param), frame
