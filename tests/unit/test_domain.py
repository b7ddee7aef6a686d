"""The pure state machine: decisions, refusals, ticks, epochs, playback and truncation."""

from __future__ import annotations

import pytest

import ast
import pathlib

import attrs
from hypothesis import given, settings
from hypothesis import strategies as st

from duplex_es.domain import DeleteItem as DeleteItemCmd
from duplex_es.domain import (
    AckPlayback,
    AppendText,
    CancelResponse,
    ClearInput,
    CloseSession,
    Code,
    Commit,
    CreateResponse,
    TruncateItem,
    UpdateSession,
    SessionPatch,
    Pump,
    decide,
    history_transcript,
)
from duplex_es.domain.judge import pump_idle
from duplex_es.events import AudioFormat, AudioSegment, CommandRejected, EpochAdvanced, Mark, ResponseDone, TickIssued

from harness import Harness, append_cmd, nid


def only_rejection(events, code):
    assert len(events) == 1 and isinstance(events[0], CommandRejected), events
    assert events[0].code == code, events[0]
    return events[0]


def unchanged(before, after):
    """A refusal changes nothing but the seq it was logged at (docs/architecture.md, I3)."""
    return attrs.evolve(before, seq=after.seq) == after


# ------------------------------------------------------------------------------------ input


def test_commit_under_100ms_without_text_is_refused_and_keeps_the_buffer():
    h = Harness.open()
    h.run(append_cmd(60, event_id="a1"))
    before = h.state
    rej = only_rejection(h.run(Commit(event_id="c1", item_id="item_x")), Code.COMMIT_EMPTY)
    assert rej.client_event_id == "c1" and "60.00ms" in rej.message
    assert unchanged(before, h.state) and h.state.buffer.samples == 60 * 24
    h.run(append_cmd(40))
    ev = h.run(Commit(item_id="item_y"))[0]
    assert ev.TYPE == "input_audio_buffer.committed" and ev.samples == 100 * 24 and len(ev.append_seqs) == 2
    assert h.state.buffer.empty and h.state.items["item_y"].input_samples == 2400


def test_text_alone_can_be_committed():
    h = Harness.open()
    only_rejection(h.run(Commit(item_id="i0")), Code.COMMIT_EMPTY)
    h.run(AppendText(text="hello"))
    ev = h.run(Commit(item_id="i1"))[0]
    assert ev.text == "hello" and ev.samples == 0


def test_pcm16_with_an_odd_byte_count_or_no_bytes_is_refused():
    h = Harness.open()
    from duplex_es.domain import AppendAudio

    before = h.state
    rej = only_rejection(h.run(AppendAudio(event_id="x", audio="AAAA", nbytes=3)), Code.INVALID_AUDIO_LENGTH)
    assert rej.param == "audio" and rej.client_event_id == "x"
    only_rejection(h.run(AppendAudio(audio="", nbytes=0)), Code.INVALID_AUDIO_LENGTH)
    assert unchanged(before, h.state)


@pytest.mark.invariant("I12")
def test_the_audio_clock_counts_samples_of_the_declared_format():
    h = Harness.open()
    for ms in (20, 20, 35):
        h.run(append_cmd(ms))
    appends = [ev for _, ev in h.log if ev.TYPE == "input_audio_buffer.appended"]
    assert [a.start_sample for a in appends] == [0, 480, 960]
    assert h.state.input_clock == 75 * 24
    h.run(ClearInput())
    h.run(append_cmd(10))
    assert [ev for _, ev in h.log][-1].start_sample == 75 * 24  # the clock never rewinds


def test_clear_names_every_discarded_append():
    h = Harness.open()
    h.run(append_cmd(50))
    h.run(AppendText(text="x"))
    h.run(append_cmd(50))
    ev = h.run(ClearInput(event_id="clr"))[0]
    assert ev.discarded_seqs == (2, 3, 4) and h.state.buffer.empty


# -------------------------------------------------------------------------------- responses


def test_a_second_response_while_one_is_active_is_refused_and_the_first_continues():
    h = Harness.open()
    rid = h.spoken_turn()
    before = h.state
    rej = only_rejection(
        h.run(CreateResponse(event_id="r2", response_id="resp_b", item_id="item_b", request_id="req_b")),
        Code.ACTIVE_RESPONSE,
    )
    assert rid in rej.message and rej.client_event_id == "r2"
    assert unchanged(before, h.state) and h.state.active_response_id == rid


def test_cancel_with_nothing_active_is_refused():
    h = Harness.open()
    rej = only_rejection(h.run(CancelResponse(event_id="c1")), Code.CANCEL_NOT_ACTIVE)
    assert rej.client_event_id == "c1"
    rid = h.spoken_turn()
    only_rejection(h.run(CancelResponse(response_id="resp_other")), Code.CANCEL_NOT_ACTIVE)
    assert h.state.active_response_id == rid


@pytest.mark.invariant("I5")
def test_the_first_tick_applies_every_accepted_model_feeding_event_once():
    h = Harness.open()
    h.run(UpdateSession(patch=SessionPatch(instructions="be brief")))  # model-relevant: seq 2
    h.run(UpdateSession(patch=SessionPatch(instructions="be brief")))  # no change: not model-relevant
    h.run(append_cmd(200))
    h.run(Commit(item_id="u1"))  # seq 5
    h.run(CreateResponse(response_id="r1", item_id="a1", request_id="q1"))
    tick = [ev for _, ev in h.log if isinstance(ev, TickIssued)][0]
    assert tick.applied_event_ids == (2, 5) and tick.chunk_index == 0
    assert tick.inputs.user_audio == (AudioSegment(seq=4, offset=0, samples=200 * 24),) and tick.inputs.instructions == "be brief"
    assert h.state.unapplied == ()
    h.output()
    nxt = h.pump()
    assert isinstance(nxt[0], TickIssued) and nxt[0].chunk_index == 1 and nxt[0].applied_event_ids == ()


def test_a_response_streams_tick_by_tick_and_ends_once():
    h = Harness.open()
    rid = h.spoken_turn()
    h.output(text="You ")
    assert h.pump()[0].TYPE == "tick.issued"
    assert h.pump() == []  # a tick is in flight: nothing to do
    h.output(text="said. ", final=True)
    done = h.pump()
    assert [e.TYPE for e in done] == ["response.done"] and done[0].status == "completed"
    assert h.pump() == []
    resp, item = h.state.responses[rid], h.state.items[h.state.responses[rid].item_id]
    assert resp.status == "completed" and item.status == "completed"
    assert item.full_text == item.transcript == "You said. " and resp.generated_ms == 1000
    assert h.state.active_response_id is None


@pytest.mark.invariant("I5", "I7")
def test_cancel_raises_the_epoch_fences_the_tick_and_discards_its_inputs():
    h = Harness.open()
    rid = h.spoken_turn()
    t0 = h.live_tick()
    events = h.run(CancelResponse(event_id="cx"))
    adv, done = events
    assert isinstance(adv, EpochAdvanced) and adv.epoch == 1 and adv.cancelled_request_ids == (t0.request_id,)
    assert adv.discarded_event_ids == t0.applied_event_ids
    assert isinstance(done, ResponseDone) and done.status == "cancelled" and done.reason == "client_cancelled"
    assert h.state.items[h.state.responses[rid].item_id].status == "incomplete"
    # The cancelled tick's output arrives late: logged, discarded, changes nothing (docs/architecture.md, I7).
    before = h.state
    from duplex_es.events import TickOutput
    import base64

    late = TickOutput(
        session_id=h.state.session_id, request_id=t0.request_id, response_id=rid, epoch=0, chunk_index=0,
        applied_event_ids=t0.applied_event_ids, audio=base64.b64encode(b"\0\0" * 2400).decode(), text_delta="late",
    )
    h.apply([late])
    assert unchanged(before, h.state)
    assert h.pump() == []


def test_an_output_that_does_not_echo_its_tick_fails_the_response():
    h = Harness.open()
    rid = h.spoken_turn()
    h.output(chunk_index=7)  # wrong echo
    events = h.pump()
    assert [e.TYPE for e in events] == ["epoch.advanced", "response.done"]
    assert events[1].status == "failed" and events[1].error_code == Code.TICK_IDENTITY_MISMATCH
    assert h.state.responses[rid].status == "failed" and h.state.active_response_id is None


def test_close_discards_everything_still_waiting_for_the_model():
    h = Harness.open()
    h.run(append_cmd(200))
    h.run(Commit(item_id="u1"))  # never answered
    events = h.run(CloseSession(event_id="bye"))
    assert events[0].discarded_event_ids == (3,) and events[-1].TYPE == "session.closed"
    only_rejection(h.run(append_cmd(20)), Code.SESSION_CLOSED)


# ---------------------------------------------------------------------- playback and history


def _finished_turn(h: Harness, words=("The ", "weather ", "is ", "sunny.")) -> str:
    rid = h.spoken_turn()
    for i, w in enumerate(words):
        h.output(ms=500, text=w, final=i == len(words) - 1)
        h.pump()
    return rid


def _hello_world(h: Harness) -> str:
    """One response: "hello world", 2000 ms of audio, marks 6 chars @ 1000 ms, 11 @ 2000 ms."""
    rid = h.spoken_turn()
    h.output(ms=2000, text="hello world", final=True, marks=(Mark(text_chars=6, audio_ms=1000), Mark(text_chars=11, audio_ms=2000)))
    h.pump()
    return rid


def test_history_follows_acks_by_interpolating_the_marks():
    """Case 19 of issue 3 (vLLM-Omni's worked example)."""
    h = Harness.open()
    rid = _hello_world(h)
    item_id = h.state.responses[rid].item_id
    assert h.state.items[item_id].transcript == "hello world"  # no acks: everything
    h.run(AckPlayback(response_id=rid, played_ms=1200))
    assert h.state.items[item_id].transcript == "hello w"  # 6 + 5 x 0.2 = 7 characters
    h.run(AckPlayback(response_id=rid, played_ms=1500))
    h.run(AckPlayback(response_id=rid, played_ms=1000))
    assert (h.state.responses[rid].played_ms, h.state.responses[rid].committed_ms) == (1500, 1500)  # max, never back
    assert h.state.items[item_id].transcript == "hello wo"
    # A hard truncation to 1200 cuts the history back; later acks cannot grow it past 1200.
    evs = h.run(AckPlayback(response_id=rid, played_ms=1500, committed_ms=1200, truncate=True))
    assert [e.TYPE for e in evs] == ["playback.acked", "conversation.item.truncated"]
    assert h.state.items[item_id].transcript == "hello w"
    h.run(AckPlayback(response_id=rid, played_ms=2000))
    assert h.state.responses[rid].committed_ms == 1200 and h.state.items[item_id].transcript == "hello w"


def test_an_ack_too_late_is_refused_unless_its_slot_was_reserved():
    """Case 20: a response answered before a newer user commit and never acknowledged."""
    h = Harness.open()
    old = _hello_world(h)
    h.run(append_cmd(200))
    h.run(Commit(item_id="u2"))
    before = h.state
    rej = only_rejection(h.run(AckPlayback(event_id="late", response_id=old, played_ms=500)), Code.PLAYBACK_TOO_LATE)
    assert rej.client_event_id == "late" and unchanged(before, h.state)
    # Acknowledged before the newer commit: later acks update it in place.
    h2 = Harness.open()
    rid = _hello_world(h2)
    h2.run(AckPlayback(response_id=rid, played_ms=500))
    h2.run(append_cmd(200))
    h2.run(Commit(item_id="u3"))
    h2.run(AckPlayback(response_id=rid, played_ms=1200))
    assert h2.state.items[h2.state.responses[rid].item_id].transcript == "hello w"


def test_a_fully_played_response_releases_its_ledger():
    h = Harness.open()
    rid = _hello_world(h)
    item_id = h.state.responses[rid].item_id
    h.run(AckPlayback(response_id=rid, played_ms=1999))
    assert rid in h.state.responses
    h.run(AckPlayback(response_id=rid, played_ms=2000))
    assert rid not in h.state.responses  # released: nothing left to play
    assert h.state.items[item_id].transcript == "hello world"
    only_rejection(h.run(AckPlayback(response_id=rid, played_ms=2000)), Code.PLAYBACK_TARGET_NOT_FOUND)
    h.run(TruncateItem(item_id=item_id, audio_end_ms=1200))  # items outlive the ledger
    assert h.state.items[item_id].transcript == "hello w"


def test_an_ack_past_the_audio_sent_or_without_a_clear_target_is_refused():
    h = Harness.open()
    rid = _finished_turn(h)
    rej = only_rejection(h.run(AckPlayback(response_id=rid, played_ms=2001)), Code.PLAYBACK_OUT_OF_RANGE)
    assert rej.param == "played_ms"
    only_rejection(h.run(AckPlayback(response_id="resp_nope", played_ms=1)), Code.PLAYBACK_TARGET_NOT_FOUND)
    h.run(AckPlayback(response_id=rid, played_ms=100))  # reserves its history slot
    rid2 = _finished_turn(h)
    # Two responses with unplayed audio: the ack must say which.
    only_rejection(h.run(AckPlayback(played_ms=10)), Code.PLAYBACK_AMBIGUOUS)
    h.run(AckPlayback(response_id=rid, played_ms=2000))
    assert h.run(AckPlayback(played_ms=10))[0].response_id == rid2


def test_truncate_past_the_end_is_refused_with_the_param_and_changes_nothing():
    h = Harness.open()
    rid = _finished_turn(h)
    item_id = h.state.responses[rid].item_id
    before = h.state
    rej = only_rejection(h.run(TruncateItem(event_id="t1", item_id=item_id, audio_end_ms=2001)), Code.TRUNCATE_OUT_OF_RANGE)
    assert rej.param == "audio_end_ms" and rej.client_event_id == "t1"
    assert unchanged(before, h.state)
    only_rejection(h.run(TruncateItem(item_id="item_nope", audio_end_ms=1)), Code.TRUNCATE_INVALID_ITEM)
    user_item = h.state.last_user_item().id
    only_rejection(h.run(TruncateItem(item_id=user_item, audio_end_ms=1)), Code.TRUNCATE_UNSUPPORTED_CONTENT)


def test_truncate_keeps_the_heard_prefix_caps_later_acks_and_is_idempotent():
    h = Harness.open()
    rid = _finished_turn(h)
    item_id = h.state.responses[rid].item_id
    h.run(TruncateItem(item_id=item_id, audio_end_ms=1000))
    item = h.state.items[item_id]
    assert item.transcript == "The weather" and item.audio_ms == 1000 and item.status == "completed"
    once = h.state
    h.run(TruncateItem(item_id=item_id, audio_end_ms=1000))
    assert attrs.evolve(once, seq=h.state.seq, unapplied=h.state.unapplied) == h.state
    # A later ack of everything sent is accepted but capped at the truncation.
    h.run(AckPlayback(response_id=rid, played_ms=2000))
    assert h.state.responses[rid].committed_ms == 1000 and h.state.items[item_id].transcript == "The weather"
    # Truncation also works after later turns.
    _finished_turn(h)
    h.run(TruncateItem(item_id=item_id, audio_end_ms=500))
    assert h.state.items[item_id].transcript == "The"


def test_a_cancelled_item_keeps_generated_audio_and_the_heard_transcript():
    h = Harness.open()
    rid = h.spoken_turn()
    h.output(ms=500, text="The ")
    h.pump()
    h.output(ms=500, text="weather ")
    h.pump()
    h.run(AckPlayback(response_id=rid, played_ms=500))
    h.run(CancelResponse())
    item = h.state.items[h.state.responses[rid].item_id]
    # All generated audio stays; the transcript is what was heard by 500 ms.
    assert item.status == "incomplete" and item.audio_ms == 1000 and item.full_text == "The weather "
    assert item.transcript == "The"
    h.run(TruncateItem(item_id=item.id, audio_end_ms=0))  # truncate works on incomplete items
    assert h.state.items[item.id].transcript == ""


def test_history_without_marks_is_proportional_to_the_audio_heard():
    from duplex_es.domain import Item, Response

    item = Item(id="i", role="assistant", content_type="output_audio", full_text="abcdefghij" * 2, audio_samples=24 * 2000)
    resp = Response(id="r", item_ids=("i",), acked=True, committed_ms=500, generated_ms=2000)
    assert history_transcript(item, resp) == "abcde"


# ---------------------------------------------------------------------------- session.update


@pytest.mark.invariant("I3")
def test_session_update_is_validated_whole_and_applied_atomically():
    h = Harness.open()
    before = h.state
    rej = only_rejection(
        h.run(UpdateSession(patch=SessionPatch(instructions="x", input_format=AudioFormat(type="audio/pcm", rate=8000)))),
        Code.UNSUPPORTED_AUDIO_FORMAT,
    )
    assert rej.param == "session.audio.input.format"
    assert unchanged(before, h.state) and h.state.config.instructions == ""
    rej = only_rejection(
        h.run(UpdateSession(patch=SessionPatch(instructions="y", turn_detection={"type": "semantic_vad", "threshold": 0.3}))),
        Code.UNSUPPORTED_TURN_DETECTION,
    )
    assert rej.param == "session.audio.input.turn_detection.threshold" and "semantic_vad" in rej.message
    only_rejection(h.run(UpdateSession(patch=SessionPatch(model="other"))), Code.MODEL_UPDATE_UNSUPPORTED)
    assert unchanged(before, h.state) and h.state.config.instructions == ""
    ev = h.run(UpdateSession(patch=SessionPatch(instructions="hi", voice="echo", output_modalities=("text",))))[0]
    assert ev.config.voice == "echo" and ev.config.output_modalities == ("text",) and ev.model_relevant


def test_turn_detection_fills_defaults_and_merges_partial_updates():
    """Cases 11 and 12 of issue 3."""
    h = Harness.open()
    td = h.run(UpdateSession(patch=SessionPatch(turn_detection={"type": "server_vad"})))[0].config.turn_detection
    assert (td.threshold, td.prefix_padding_ms, td.silence_duration_ms, td.create_response, td.interrupt_response) == (
        0.5, 300, 500, True, True
    )
    td = h.run(UpdateSession(patch=SessionPatch(turn_detection={"silence_duration_ms": 800})))[0].config.turn_detection
    assert (td.threshold, td.silence_duration_ms) == (0.5, 800)
    before = h.state
    rej = only_rejection(h.run(UpdateSession(patch=SessionPatch(turn_detection={"threshold": 1.5}))), Code.UNSUPPORTED_TURN_DETECTION)
    assert rej.param == "session.audio.input.turn_detection.threshold"
    assert unchanged(before, h.state) and h.state.config.turn_detection.silence_duration_ms == 800
    assert h.run(UpdateSession(patch=SessionPatch(turn_detection=None)))[0].config.turn_detection is None


def test_voice_cannot_change_after_audio_was_produced():
    h = Harness.open()
    _finished_turn(h)
    only_rejection(h.run(UpdateSession(patch=SessionPatch(voice="echo"))), Code.VOICE_UPDATE_AFTER_AUDIO)


# ------------------------------------------------------------------------------- properties

COMMANDS = st.sampled_from(["append", "append_short", "text", "commit", "clear", "create", "cancel", "output", "final", "stale", "ack", "truncate", "pump"])


@settings(max_examples=150, deadline=None)
@given(st.lists(COMMANDS, min_size=1, max_size=40))
@pytest.mark.invariant("I1", "I2", "I3", "I5")
def test_any_command_sequence_keeps_the_invariants(script):
    """I1 (state is the fold of the log), I3 (refusals change nothing) and the tick rules
    hold whatever a client sends in whatever order."""
    h = Harness.open()
    for step in script:
        before = h.state
        resp = before.active_response
        if step == "append":
            evs = h.run(append_cmd(120))
        elif step == "append_short":
            evs = h.run(append_cmd(20))
        elif step == "text":
            evs = h.run(AppendText(text="hi"))
        elif step == "commit":
            evs = h.run(Commit(item_id=nid("item")))
        elif step == "clear":
            evs = h.run(ClearInput())
        elif step == "create":
            evs = h.run(CreateResponse(response_id=nid("resp"), item_id=nid("item"), request_id=nid("req")))
        elif step == "cancel":
            evs = h.run(CancelResponse())
        elif step in ("output", "final") and resp is not None and resp.tick_in_flight:
            evs = h.output(final=step == "final")
        elif step == "stale" and resp is not None and resp.tick_in_flight:
            evs = h.output(epoch=before.epoch - 1)
        elif step == "ack" and before.responses:
            r = list(before.responses.values())[-1]
            evs = h.run(AckPlayback(response_id=r.id, played_ms=r.generated_ms // 2))
        elif step == "truncate" and before.responses:
            r = list(before.responses.values())[-1]
            evs = h.run(TruncateItem(item_id=r.item_id, audio_end_ms=r.generated_ms // 3))
        else:
            evs = h.pump()
        if evs and isinstance(evs[0], CommandRejected):
            assert unchanged(before, h.state)
        # A state the host skips the pump in (domain/judge.pump_idle) is one the pump decides nothing in.
        if pump_idle(h.state):
            assert decide(h.state, Pump(request_ids=("req_probe1", "req_probe2"), now_ms=10**13)) == []
        # Purity: deciding again on the same state gives the same events.
        assert decide(before, CancelResponse(event_id="probe")) == decide(before, CancelResponse(event_id="probe"))
        assert h.refold() == h.state
        # At most one active response; a live tick belongs to it.
        active = [r for r in h.state.responses.values() if r.active]
        assert len(active) <= 1
        for t in h.state.ticks.values():
            assert h.state.responses[t.response_id].active
    # Every tick's applied ids are increasing and never reused.
    seen: set[int] = set()
    for _, ev in h.log:
        if isinstance(ev, TickIssued):
            ids = list(ev.applied_event_ids)
            assert ids == sorted(set(ids)) and not seen & set(ids)
            seen |= set(ids)


@pytest.mark.invariant("I2")
def test_the_domain_reads_no_clock_draws_no_randomness_and_does_no_io():
    """docs/architecture.md, I2, checked on the source: the domain imports nothing that could."""
    forbidden = {"time", "datetime", "random", "secrets", "uuid", "os", "socket", "sqlalchemy", "asyncio", "duplex_es.store"}
    root = pathlib.Path(__file__).resolve().parents[2] / "duplex_es" / "domain"
    for path in root.glob("*.py"):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                names = [node.module or ""]
            for n in names:
                assert n.split(".")[0] not in forbidden and n not in forbidden, f"{path.name} imports {n}"
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
                assert node.func.id not in ("open", "print", "input"), f"{path.name} calls {node.func.id}"


def test_bounds_keep_one_client_from_taking_a_worker_hostage():
    from duplex_es.domain import MAX_INPUT_TEXT_CHARS, AppendAudio, ResponseOptions
    import base64 as b64

    h = Harness.open()
    rej = only_rejection(h.run(AppendText(text="w" * (MAX_INPUT_TEXT_CHARS + 1))), Code.INPUT_TEXT_TOO_LONG)
    assert rej.param == "text"
    h.run(AppendText(text="w" * MAX_INPUT_TEXT_CHARS))
    only_rejection(h.run(AppendText(text="x")), Code.INPUT_TEXT_TOO_LONG)
    minute = b"\0\0" * 24000 * 60
    chunk = AppendAudio(audio=b64.b64encode(minute).decode(), nbytes=len(minute))
    for _ in range(10):
        assert h.run(chunk)[0].TYPE == "input_audio_buffer.appended"
    only_rejection(h.run(chunk), Code.BUFFER_FULL)
    only_rejection(h.run(UpdateSession(patch=SessionPatch(voice="nosuchvoice"))), Code.UNSUPPORTED_VOICE)
    only_rejection(h.run(UpdateSession(patch=SessionPatch(instructions="i" * 20_000))), Code.INSTRUCTIONS_TOO_LONG)
    empty = CreateResponse(response_id="r", item_id="i", request_id="q", options=ResponseOptions(output_modalities=()))
    only_rejection(h.run(empty), Code.UNSUPPORTED_MODALITIES)


def test_committed_ms_cannot_exceed_played_ms():
    h = Harness.open()
    rid = _finished_turn(h)
    rej = only_rejection(h.run(AckPlayback(response_id=rid, played_ms=1000, committed_ms=1500)), Code.PLAYBACK_OUT_OF_RANGE)
    assert rej.param == "committed_ms"


# ----------------------------------------------------- found by trying to break it (issue 3)


def test_a_truncating_ack_cannot_reach_past_the_cut_and_plain_acks_never_go_back():
    h = Harness.open()
    rid = _hello_world(h)
    h.run(AckPlayback(response_id=rid, played_ms=2000, committed_ms=1500, truncate=True))
    rej = only_rejection(h.run(AckPlayback(response_id=rid, played_ms=2000, committed_ms=1800, truncate=True)), Code.PLAYBACK_OUT_OF_RANGE)
    assert rej.param == "committed_ms"
    h.run(AckPlayback(response_id=rid, played_ms=100))
    assert h.state.responses[rid].committed_ms == 1500


def test_untargeted_acks_and_clears_ignore_responses_that_cannot_be_playing():
    from duplex_es.domain import ClearOutputAudio

    h = Harness.open()
    _hello_world(h)
    second = _hello_world(h)  # the first one is now final: answered before a newer turn, never acked
    assert h.run(AckPlayback(played_ms=100))[0].response_id == second
    h2 = Harness.open()
    _hello_world(h2)
    assert h2.run(ClearOutputAudio(event_id="x"))[0].TYPE == "output_audio_buffer.cleared"
    only_rejection(h2.run(ClearOutputAudio(event_id="again")), Code.CANCEL_NOT_ACTIVE)


def test_a_client_that_never_acks_keeps_a_bounded_state():
    h = Harness.open()
    for _ in range(30):
        _hello_world(h)
    assert len(h.state.responses) == 1 and len(h.state.retired_response_ids) == 29
    old = h.state.retired_response_ids[0]
    only_rejection(h.run(AckPlayback(response_id=old, played_ms=10)), Code.PLAYBACK_TOO_LATE)
    assert all(r.inputs.history == () for r in h.state.responses.values() if not r.active)


def test_items_need_real_content_and_ids():
    from duplex_es.domain import CreateItem
    from duplex_es.events import ContentPart

    h = Harness.open()
    for content, param in (((ContentPart(type="input_text", text=""),), "item.content[0].text"), ((ContentPart(type="input_audio"),), "item.content[0].audio")):
        rej = only_rejection(h.run(CreateItem(item_id="i1", role="user", content=content)), Code.INVALID_ITEM)
        assert rej.param == param
    rej = only_rejection(h.run(CreateItem(item_id="root", role="user", content=(ContentPart(type="input_text", text="x"),))), Code.INVALID_ITEM)
    assert rej.param == "item.id"


def test_out_of_band_truncation_does_not_feed_the_model():
    from duplex_es.domain import ResponseOptions

    h = Harness.open()
    h.run(append_cmd(200))
    h.run(Commit(item_id="u1"))
    h.run(CreateResponse(response_id="oob", item_id="oob_item", request_id="q1", options=ResponseOptions(conversation="none")))
    h.output(ms=1000, text="out of band", final=True, response_id="oob")
    h.pump()
    unapplied = h.state.unapplied
    ev = h.run(TruncateItem(item_id="oob_item", audio_end_ms=500))[0]
    assert ev.TYPE == "conversation.item.truncated" and not ev.in_conversation and h.state.unapplied == unapplied
    only_rejection(h.run(DeleteItemCmd(item_id="oob_item")), Code.DELETE_INVALID_ITEM)


def test_the_voice_cannot_change_per_response_after_audio_either():
    from duplex_es.domain import ResponseOptions

    h = Harness.open()
    _finished_turn(h)
    h.run(append_cmd(200))
    h.run(Commit(item_id=nid("item")))
    rej = only_rejection(
        h.run(CreateResponse(response_id="r", item_id="i", request_id="q", options=ResponseOptions(voice="ash"))), Code.VOICE_UPDATE_AFTER_AUDIO
    )
    assert rej.param == "response.audio.output.voice"


def test_the_input_format_may_change_with_only_text_buffered():
    h = Harness.open()
    h.run(AppendText(text="hello"))
    ev = h.run(UpdateSession(patch=SessionPatch(input_format=AudioFormat(type="audio/pcmu", rate=8000))))[0]
    assert ev.TYPE == "session.updated"
    h.run(append_cmd(20))
    rej = only_rejection(h.run(UpdateSession(patch=SessionPatch(input_format=AudioFormat(type="audio/pcm", rate=24000)))), Code.BUFFER_NOT_EMPTY)
    assert rej.param == "session.audio.input.format"


# ------------------------------------------------------------------------------------ leases


def _digest(token: str) -> str:
    import hashlib

    return hashlib.sha256(token.encode()).hexdigest()


def test_resume_checks_the_token_then_the_generation_and_rotates_the_token():
    from duplex_es.domain import Detach, OpenSession, Resume

    h = Harness()
    h.run(OpenSession(session_id="sess_t", model="m", resume_token_hash=_digest("t0")))
    h.run(Detach(at_ms=1_000))
    before = h.state
    wrong = only_rejection(h.run(Resume(expected_generation=0, at_ms=1_500, token_hash=_digest("guess"))), Code.RESUME_TOKEN_INVALID)
    assert wrong.param == "resume_token" and unchanged(before, h.state)
    [resumed] = h.run(Resume(event_id="r1", expected_generation=0, at_ms=1_500, token_hash=_digest("t0"), new_token_hash=_digest("t1"), last_server_event_seq=7))
    assert (resumed.lease_generation, resumed.resume_token_hash, resumed.last_server_event_seq) == (1, _digest("t1"), 7)
    lease = h.state.lease
    assert (lease.generation, lease.detached_at_ms, lease.token_hash, lease.detached_total_ms) == (1, None, _digest("t1"), 500)
    # The rotated-away token is stale (a conflict), not unknown; a stale generation too.
    only_rejection(h.run(Resume(expected_generation=1, at_ms=2_000, token_hash=_digest("t0"))), Code.RESUME_CONFLICT)
    stale = only_rejection(h.run(Resume(expected_generation=0, at_ms=2_000, token_hash=_digest("t1"))), Code.RESUME_CONFLICT)
    assert stale.param == "expected_generation"
    # An in-process resume (no token) keeps the token unless it names a new one.
    h.run(Resume(expected_generation=1, at_ms=2_000))
    assert (h.state.lease.generation, h.state.lease.token_hash) == (2, _digest("t1"))


def test_a_resume_whose_reply_was_lost_can_be_retried_with_the_old_token_while_detached():
    # The server (or the connection) died after logging session.resumed, before the client got
    # the rotated token: the client still holds only the old one.
    from duplex_es.domain import Detach, OpenSession, Resume

    h = Harness()
    h.run(OpenSession(session_id="sess_l", model="m", resume_token_hash=_digest("t0")))
    h.run(Detach(at_ms=1_000))
    h.run(Resume(expected_generation=0, at_ms=1_100, token_hash=_digest("t0"), new_token_hash=_digest("t1")))
    # Attached: the old token is a conflict (another client holds the session).
    only_rejection(h.run(Resume(expected_generation=1, at_ms=1_200, token_hash=_digest("t0"))), Code.RESUME_CONFLICT)
    h.run(Detach(at_ms=1_300, reason="server_restart"))
    [again] = h.run(Resume(expected_generation=1, at_ms=1_400, token_hash=_digest("t0"), new_token_hash=_digest("t2")))
    assert again.lease_generation == 2 and h.state.lease.token_hash == _digest("t2")
    # That resume moved the leeway on: t0 is refused for good, even while detached.
    h.run(Detach(at_ms=1_500))
    only_rejection(h.run(Resume(expected_generation=2, at_ms=1_600, token_hash=_digest("t0"))), Code.RESUME_CONFLICT)
    assert h.run(Resume(expected_generation=2, at_ms=1_700, token_hash=_digest("t2"), new_token_hash=_digest("t3")))[0].lease_generation == 3
    h.run(Detach(at_ms=1_800))
    for old in ("t0", "t1"):
        only_rejection(h.run(Resume(expected_generation=3, at_ms=1_900, token_hash=_digest(old))), Code.RESUME_CONFLICT)


def test_a_token_that_came_in_a_url_keeps_its_leeway_only_briefly():
    """An access log may hold a URL's token: once the resume that used it rotated it away, it may
    retry a lost reply only within ``url_leeway_ms`` of that resume; later it is refused even
    while detached (a token sent in a message keeps its leeway). The session records its owner."""
    from duplex_es.domain import Detach, OpenSession, Resume

    h = Harness()
    h.run(OpenSession(session_id="sess_u", model="m", resume_token_hash=_digest("t0"), principal="alice"))
    assert h.state.lease.principal == "alice"
    h.run(Detach(at_ms=1_000))
    url = dict(token_in_url=True, url_leeway_ms=5_000)
    [resumed] = h.run(Resume(expected_generation=0, at_ms=1_100, token_hash=_digest("t0"), new_token_hash=_digest("t1"), **url))
    assert resumed.token_in_url and h.state.lease.retired_in_url_at_ms == 1_100
    h.run(Detach(at_ms=1_200))
    # Later than the leeway: refused, as any older token.
    only_rejection(h.run(Resume(expected_generation=1, at_ms=6_101, token_hash=_digest("t0"), **url)), Code.RESUME_CONFLICT)
    # Within it: a lost reply retried.
    [again] = h.run(Resume(expected_generation=1, at_ms=6_100, token_hash=_digest("t0"), new_token_hash=_digest("t2"), **url))
    assert again.lease_generation == 2
    h.run(Resume(expected_generation=2, at_ms=6_200, token_hash=_digest("t2"), new_token_hash=_digest("t3")))
    assert h.state.lease.principal == "alice" and h.state.lease.retired_in_url_at_ms is None
    h.run(Detach(at_ms=6_300))
    # t2 came in a message: its leeway has no time limit.
    assert h.run(Resume(expected_generation=3, at_ms=999_000, token_hash=_digest("t2"), new_token_hash=_digest("t4")))[0].lease_generation == 4


def test_by_default_a_token_that_came_in_a_url_is_never_good_again():
    """The server's default (no leeway): once a URL token was used, even the retry of a lost
    reply, a millisecond later and while detached, is refused (docs/security.md, "Resume tokens")."""
    from duplex_es.domain import Detach, OpenSession, Resume

    h = Harness()
    h.run(OpenSession(session_id="sess_v", model="m", resume_token_hash=_digest("t0")))
    h.run(Detach(at_ms=1_000))
    h.run(Resume(expected_generation=0, at_ms=1_100, token_hash=_digest("t0"), new_token_hash=_digest("t1"), token_in_url=True))
    h.run(Detach(at_ms=1_101))
    only_rejection(h.run(Resume(expected_generation=1, at_ms=1_102, token_hash=_digest("t0"), token_in_url=True)), Code.RESUME_CONFLICT)
    only_rejection(h.run(Resume(expected_generation=1, at_ms=1_102, token_hash=_digest("t0"))), Code.RESUME_CONFLICT)
    # The token it handed over still works.
    assert h.run(Resume(expected_generation=1, at_ms=1_103, token_hash=_digest("t1"), new_token_hash=_digest("t2")))[0].lease_generation == 2


@pytest.mark.invariant("I11")
def test_a_detached_world_issues_no_ticks_and_realtime_pacing_skips_the_pause():
    from duplex_es.domain import Detach, Pump, Resume
    from duplex_es.domain.world import StartWorld, next_tick_due_ms
    from duplex_es.events import WorldChunk, WorldConfig

    h = Harness()
    cfg = WorldConfig(pacing="realtime", fps=10, frames_per_chunk=5)  # a 500 ms chunk period
    h.run(StartWorld(session_id="world_t", config=cfg, at_ms=10_000, resume_token_hash=_digest("w")))
    for i in range(3):
        [tick] = h.run(Pump(request_ids=(f"req_{i}",), now_ms=10_000 + i * 500))
        h.apply([WorldChunk(session_id="world_t", request_id=tick.request_id, epoch=0, chunk_index=i, applied_event_ids=(), frames=(), frame_hashes=(), mime_type="image/png")])
    assert next_tick_due_ms(h.state) == 11_000
    h.run(Detach(at_ms=10_900))
    assert next_tick_due_ms(h.state) is None and h.run(Pump(request_ids=("req_x",), now_ms=20_000)) == []
    h.run(Resume(expected_generation=0, at_ms=15_900, token_hash=_digest("w"), new_token_hash=_digest("w2")))
    assert next_tick_due_ms(h.state) == 16_000  # 5 s away: the schedule moved by 5 s, no burst


def test_an_expiry_decided_from_a_detach_a_resume_already_ended_does_nothing():
    from duplex_es.domain import Detach, Expire, Resume

    h = Harness.open()
    h.run(Detach(at_ms=1_000))
    h.run(Resume(expected_generation=0, at_ms=2_000))
    assert h.run(Expire(reason="disconnect_grace_expired", now_ms=40_000, since_ms=1_000)) == []
    assert h.state.is_open
    h.run(Detach(at_ms=3_000))
    [expired] = h.run(Expire(reason="disconnect_grace_expired", now_ms=40_000, since_ms=3_000))
    assert expired.TYPE == "session.expired" and not h.state.is_open


# ------------------------------------------------------------------ faults and the listener


def test_a_detach_leaves_the_response_generating_and_its_next_tick_is_issued():
    """A dropped connection or a server restart changes only the lease: the response goes on
    (today's main cancelled it, "nobody is listening")."""
    from duplex_es.domain import Detach, Resume

    h = Harness.open()
    rid = h.spoken_turn()
    h.output(ms=250, text="first ")
    for reason in ("connection_closed", "server_restart"):
        before = h.state.epoch
        [detached] = h.run(Detach(at_ms=1_000, reason=reason))
        assert detached.TYPE == "session.detached" and h.state.epoch == before
        assert h.state.responses[rid].active
        h.run(Resume(expected_generation=h.state.lease.generation, at_ms=1_100))
    h.run(Detach(at_ms=2_000))
    [tick] = h.pump()
    assert tick.TYPE == "tick.issued" and tick.response_id == rid and tick.chunk_index == 1
    h.output(ms=250, text="second", final=True)
    [done] = h.pump()
    assert (done.TYPE, done.status, done.reason, done.error_code) == ("response.done", "completed", None, None)
    assert h.state.items[h.state.responses[rid].item_id].full_text == "first second"


@pytest.mark.parametrize("ending", ["expire", "close"])
def test_a_response_the_sessions_end_cuts_short_keeps_gas_reason_and_names_the_real_cause(ending):
    from duplex_es.domain import Detach, Expire

    h = Harness.open()
    rid = h.spoken_turn()
    if ending == "expire":
        h.run(Detach(at_ms=1_000))
        events = h.run(Expire(reason="disconnect_grace_expired", now_ms=31_000, since_ms=1_000))
        code, words = "session_expired", "disconnect grace"
    else:
        events = h.run(CloseSession(event_id="bye"))
        code, words = "session_closed", "session.close"
    epoch, done = events[0], events[1]
    assert isinstance(epoch, EpochAdvanced) and epoch.reason == code
    assert isinstance(done, ResponseDone) and (done.status, done.reason, done.error_code) == ("cancelled", "client_cancelled", code)
    assert words in done.error_message
    resp = h.state.responses[rid]
    assert (resp.status, resp.status_reason, resp.status_error_code) == ("cancelled", "client_cancelled", code)
