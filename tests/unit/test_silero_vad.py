"""Server VAD with the Silero network (``turn_detection.detector: "silero"``), on the real
fixtures: one utterance found in noise, speech and silence at every input format; verdicts that
do not depend on append sizes; a log that lets a fold, or another server, go on bit for bit;
selection, echo and refusals; the energy detector still the default."""

from __future__ import annotations

import base64
import itertools
import json
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from duplex_es.audio import silero
from duplex_es.domain import AppendAudio, SessionPatch, SessionState, UpdateSession, VadIds, evolve
from duplex_es.domain.errors import Code
from duplex_es.domain.vad import end_threshold
from duplex_es.events import AudioAppended, AudioFormat, CommandRejected, InputCommitted, SessionUpdated, SpeechStarted, SpeechStopped
from duplex_es.events.codec import decode, encode
from duplex_es.protocol.outbound import session_json
from duplex_es_tools.conversation import read_wav_pcm16

from conftest import FIXTURES
from harness import Harness

_n = itertools.count()
ROOT = Path(__file__).resolve().parents[2]
TD = "session.audio.input.turn_detection"


def session(fmt: AudioFormat = AudioFormat(), **td) -> Harness:
    h = Harness.open()
    evs = h.run(UpdateSession(patch=SessionPatch(input_format=fmt, turn_detection={"type": "server_vad", "detector": "silero", **td})))
    assert isinstance(evs[-1], SessionUpdated), evs
    return h


def append(h: Harness, raw: bytes, chunk_bytes: int) -> list:
    out = []
    for i in range(0, len(raw), chunk_bytes):
        part = raw[i : i + chunk_bytes]
        n = next(_n)
        ids = VadIds(item_id=f"item_s{n}", response_id=f"resp_s{n}", response_item_id=f"item_t{n}", request_id=f"req_s{n}")
        out += h.run(AppendAudio(audio=base64.b64encode(part).decode(), nbytes=len(part), vad_ids=ids))
    return out


def turns(events) -> list[tuple[int, int]]:
    events = list(events)
    starts = [e for e in events if isinstance(e, SpeechStarted)]
    stops = [e for e in events if isinstance(e, SpeechStopped)]
    assert [s.item_id for s in starts] == [e.item_id for e in stops]
    return [(s.audio_start_ms, e.audio_end_ms) for s, e in zip(starts, stops)]


NOISY = read_wav_pcm16(FIXTURES / "audio" / "noise_speech_silence_24k.wav")  # 2 s noise, the question, 0.7 s quiet


@pytest.mark.parametrize("chunk_ms", [3, 20, 100, 10_000])
def test_one_utterance_in_noise_speech_and_silence_whatever_the_append_sizes(chunk_ms: int):
    h = session()
    events = append(h, NOISY, 48 * chunk_ms)
    # Speech starts once the question does, not in the two seconds of noise before it (the
    # start is moved back by the 300 ms prefix padding, as OpenAI's is); it stops 500 ms after
    # the question ends, inside the quiet tail — the pause inside the question ends no turn.
    assert turns(events) == [(1748, 7424)]
    committed = [e for e in events if isinstance(e, InputCommitted)]
    assert len(committed) == 1 and (committed[0].skipped_samples, committed[0].samples) == (1748 * 24, (7424 - 1748) * 24)
    # The state logged with the last append is the same bits whatever the append sizes.
    assert h.state.vad.model_state == _reference_state()


def _reference_state() -> str:
    h = session()
    append(h, NOISY, 48 * 20)
    return h.state.vad.model_state


@pytest.mark.parametrize(
    "fmt, audio",
    [
        (AudioFormat(), read_wav_pcm16(FIXTURES / "audio" / "weather_question_24k.wav") + b"\0\0" * 24_000),
        (AudioFormat(rate=16000), read_wav_pcm16(FIXTURES / "audio" / "weather_question_16k.wav", rate=16000) + b"\0\0" * 16_000),
        (AudioFormat(type="audio/pcmu", rate=8000), (FIXTURES / "audio" / "weather_question_8k.ulaw").read_bytes() + b"\xff" * 8000),
    ],
    ids=["pcm24k", "pcm16k", "pcmu8k"],
)
def test_the_question_is_one_turn_at_every_input_format(fmt: AudioFormat, audio: bytes):
    h = session(fmt)
    per_20ms = 20 * fmt.rate // 1000 * (1 if fmt.type == "audio/pcmu" else 2)
    [(start, end)] = turns(append(h, audio, per_20ms))
    # The question is about 4.9 s of speech from about 0.1 s; the turn ends 500 ms after it.
    assert start == 0 and 5300 <= end <= 5600, (start, end)


def test_a_fold_of_the_log_and_another_server_go_on_bit_for_bit():
    """The log is all a server needs: refolding it reproduces the state, and a server that
    takes the session over halfway (from the log's stored text alone) finds the same turn and
    leaves the same state as one that ran it all."""
    whole = session()
    append(whole, NOISY, 960)
    half = len(NOISY) // 2 // 960 * 960
    first = session()
    append(first, NOISY[:half], 960)

    stored = [(seq, encode(ev)) for seq, ev in first.log]  # what the log holds: JSON text
    state = SessionState()
    for seq, (type_, version, data) in stored:
        state = evolve(state, seq, decode(type_, version, data))
    assert state == first.state
    taken_over = Harness(state=state, log=list(first.log))
    append(taken_over, NOISY[half:], 960)

    assert turns(e for _, e in taken_over.log) == turns(e for _, e in whole.log) == [(1748, 7424)]
    assert taken_over.state.vad == whole.state.vad
    # Each append's logged state is what the next append went on from.
    vads = [e.vad for _, e in whole.log if isinstance(e, AudioAppended)]
    assert all(v is not None and v.model_state for v in vads)


def test_the_carried_state_is_the_network_state_context_and_unfinished_frame():
    # 24 kHz: frames of 768 samples; 1000 samples leave 232 for the next append.
    pcm = np.frombuffer(NOISY, dtype="<i2")
    scored, carried = silero.advance(None, pcm[:1000], 24000, 0)
    assert [end for end, _ in scored] == [768]
    raw = base64.b64decode(carried)
    assert len(raw) == 2 * 128 * 4 + 2 * 64 + 2 * 232
    assert np.array_equal(np.frombuffer(raw[-2 * 232 :], dtype="<i2"), pcm[768:1000])
    # Going on from it equals one pass over the whole.
    later, _ = silero.advance(carried, pcm[1000:4000], 24000, 1000)
    once, _ = silero.advance(None, pcm[:4000], 24000, 0)
    assert [(1000 + e, p) for e, p in later] == once[1:]


def test_hysteresis_keeps_frames_between_the_thresholds_from_ending_speech():
    assert end_threshold(0.5) == pytest.approx(0.35) and end_threshold(0.1) == 0.01
    probs = dict((end * 1000 // 24000, p) for end, p in silero.advance(None, np.frombuffer(NOISY, dtype="<i2"), 24000, 0)[0])
    # Inside the question the network is unsure of a few frames: two between the thresholds,
    # one just under the low one.
    assert 0.35 <= probs[3424] < 0.5 and 0.35 <= probs[6912] < 0.5 and probs[4000] < 0.35
    # With a one-frame silence allowance, every frame under 0.35 ends speech, and no frame
    # between the thresholds does (a plain threshold would also stop at 3424 and 6912 ms).
    h = session(silence_duration_ms=32)
    assert [end for _, end in turns(append(h, NOISY, 960))] == [2752, 4000, 6944]


def test_selection_is_per_session_echoed_and_checked():
    energy = Harness.open()
    neural = session()
    assert energy.state.config.turn_detection.detector == "energy"  # the default
    echoed = session_json("s", neural.state.config)["audio"]["input"]["turn_detection"]
    assert echoed["detector"] == "silero" and echoed["type"] == "server_vad"
    # Partial updates keep it; changing the type starts from that type's defaults.
    neural.run(UpdateSession(patch=SessionPatch(turn_detection={"silence_duration_ms": 700})))
    assert neural.state.config.turn_detection.detector == "silero"
    neural.run(UpdateSession(patch=SessionPatch(turn_detection={"type": "semantic_vad", "detector": "silero"})))
    assert session_json("s", neural.state.config)["audio"]["input"]["turn_detection"]["detector"] == "silero"
    # An unknown detector is refused naming the field and the value; nothing changes.
    before = neural.state
    [rej] = neural.run(UpdateSession(event_id="bad", patch=SessionPatch(turn_detection={"detector": "webrtc"})))
    assert isinstance(rej, CommandRejected) and (rej.code, rej.param) == (Code.UNSUPPORTED_TURN_DETECTION, f"{TD}.detector")
    assert "webrtc" in rej.message and neural.state.config == before.config
    # The two sessions judge the same audio each with its own detector.
    assert turns(append(energy, NOISY, 960)) == [(1730, 7350)]
    neural.run(UpdateSession(patch=SessionPatch(turn_detection={"type": "server_vad", "detector": "silero"})))
    assert turns(append(neural, NOISY, 960)) == [(1748, 7424)]


def test_switching_back_to_energy_drops_the_carried_state():
    h = session()
    append(h, NOISY[: 48 * 1000], 960)
    assert h.state.vad.model_state
    h.run(UpdateSession(patch=SessionPatch(turn_detection={"detector": "energy"})))
    append(h, NOISY[48 * 1000 :], 960)
    assert h.state.vad.model_state is None
    assert len(turns(e for _, e in h.log)) == 1


def test_without_onnxruntime_the_domain_imports_and_silero_is_refused_not_replaced():
    """A process without onnxruntime (its import blocked): the domain still imports and the
    energy detector works; selecting Silero is refused with ``server_vad_unavailable``; a
    session that selected it elsewhere gets its appends refused — never silently judged by
    another detector."""
    script = textwrap.dedent(
        """
        import base64, json, sys
        sys.modules["onnxruntime"] = None  # import onnxruntime now raises ImportError
        from duplex_es.domain import AppendAudio, SessionPatch, UpdateSession, VadIds, decide
        from duplex_es.domain.replace import replace
        from duplex_es.events import TurnDetection
        from harness import Harness

        h = Harness.open()
        rej = h.run(UpdateSession(event_id="e", patch=SessionPatch(turn_detection={"type": "server_vad", "detector": "silero"})))[0]
        kept = h.state.config.turn_detection.detector
        cfg = replace(h.state.config, turn_detection=TurnDetection(detector="silero"))
        moved = replace(h.state, config=cfg)  # as folded from a log written where the model ran
        raw = b"\\0\\0" * 480
        cmd = AppendAudio(audio=base64.b64encode(raw).decode(), nbytes=len(raw), vad_ids=VadIds(item_id="i", response_id="r", response_item_id="j", request_id="q"))
        app = decide(moved, cmd)[0]
        energy = h.run(cmd)[0]
        print(json.dumps([rej.TYPE, rej.code, rej.param, rej.message, kept, app.TYPE, app.code, app.param, energy.TYPE]))
        """
    )
    env = {"PYTHONPATH": f"{ROOT}:{ROOT / 'tests'}", "PATH": "/usr/bin:/bin"}
    out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    rej_type, code, param, message, kept, app_type, app_code, app_param, energy = json.loads(out.stdout)
    assert (rej_type, code, param) == ("command.rejected", Code.SERVER_VAD_UNAVAILABLE, f"{TD}.detector")
    assert "onnxruntime" in message and kept == "energy"
    assert (app_type, app_code, app_param) == ("command.rejected", Code.SERVER_VAD_UNAVAILABLE, f"{TD}.detector")
    assert energy == "input_audio_buffer.appended"


def test_the_model_runs_without_torch():
    assert silero.unavailable() is None
    assert "torch" not in sys.modules
