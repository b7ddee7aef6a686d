"""Server VAD on the input audio clock: the energy detector (the default), or Silero's neural one.

**Energy** (``detector: "energy"``): each append is cut into 10 ms frames of the declared format; a frame is voiced when its RMS level
reaches ``-60 + 40 × threshold`` dBFS (OpenAI's default threshold 0.5 → -40 dBFS: quiet room noise
stays below it, speech is well above). Speech starts after :data:`MIN_SPEECH_MS` of consecutive
voiced audio; its ``audio_start_ms`` is moved back by ``prefix_padding_ms`` (never before the
buffer's start). It stops once ``silence_duration_ms`` of unvoiced audio followed it (for
``semantic_vad``, the pause its ``eagerness`` allows, or where the engine judges the end of the
turn its max wait: :func:`stop_silence_ms`); its ``audio_end_ms`` includes that silence
(docs/sources.md, "OpenAI turn detection").

**Silero** (``detector: "silero"``): the same turn rules on 32 ms frames scored by the Silero
VAD network (:mod:`duplex_es.audio.silero`, onnxruntime on one CPU thread): a frame is voiced
at a speech probability of ``threshold`` or more; speech starts after :data:`SILERO_MIN_SPEECH_MS`
of voiced frames and, once started, only frames under :func:`end_threshold` (hysteresis, as
Silero's own streaming iterator does) begin the silence that ends it — frames between the two
thresholds go on counting a silence already begun, and reset none.

Each detector is a pure function of its state and the samples: the network is a fixed
function of its inputs, run inside ``decide`` (the decider is given everything it needs: the
append's audio and the state logged with the previous append — the network's recurrent state
included). Its state after every append is logged with the append, so replay never runs it
again (docs/protocol.md, "Turn detection"; why inference runs here and not in the host:
docs/architecture.md, "Leases, time and VAD"). The domain imports no onnxruntime: the model is
loaded on first use, by a session that selected it.
"""

from __future__ import annotations

import attrs
import numpy as np

from typing import Optional

from duplex_es.audio import silero
from duplex_es.domain.replace import replace
from duplex_es.events import SEMANTIC_VAD_MAX_WAIT_MS, SessionConfig, TurnDetection, VadState

__all__ = [
    "DETECTORS",
    "DetectorUnavailable",
    "MIN_SPEECH_MS",
    "SILERO_MIN_SPEECH_MS",
    "Transition",
    "detect",
    "detector_unavailable",
    "end_threshold",
    "engine_judges",
    "stop_silence_ms",
    "threshold_dbfs",
]

#: The detectors a session may select (``turn_detection.detector``); the first is the default.
DETECTORS = ("energy", "silero")

#: Raised by :func:`detect` when the session's detector cannot run in this process.
DetectorUnavailable = silero.SileroUnavailable

#: Silero: voiced audio needed before speech counts as started (one frame, as vLLM-Omni uses).
SILERO_MIN_SPEECH_MS = silero.FRAME_MS

#: Voiced audio needed before speech counts as started (debounces clicks).
MIN_SPEECH_MS = 60

#: Analysis frame length.
FRAME_MS = 10


@attrs.frozen
class Transition:
    """``started`` at ``sample`` (prefix padding applied) or ``stopped`` at ``sample``; a stop
    also names where its speech started (``start``, prefix padding applied)."""

    kind: str
    sample: int
    start: int = 0


def threshold_dbfs(threshold: float) -> float:
    """The frame level (dBFS) at which audio counts as voiced for a VAD ``threshold`` in [0, 1]."""
    return -60.0 + 40.0 * threshold


def end_threshold(threshold: float) -> float:
    """Silero: the speech probability under which a frame ends speech, for a ``threshold``."""
    return max(threshold - 0.15, 0.01)


def detector_unavailable(td: Optional[TurnDetection]) -> Optional[str]:
    """Why the detector ``td`` selects cannot run in this process, or ``None`` if it can (the
    energy detector always can; Silero needs onnxruntime and the silero-vad wheel's model)."""
    if td is None or td.detector != "silero":
        return None
    return silero.unavailable()


def engine_judges(cfg: Optional[SessionConfig]) -> bool:
    """Whether the end of the user's turn is the engine's judgement (docs/protocol.md, "Turn
    detection"): ``semantic_vad`` in a ``turn_based`` session whose engine is full-duplex (its
    ``duplex.modes`` offer ``full_duplex``) and answers realtime turns."""
    if cfg is None or cfg.turn_detection is None or cfg.turn_detection.type != "semantic_vad":
        return False
    return cfg.turn_mode == "turn_based" and "full_duplex" in cfg.turn_modes and cfg.session_type == "realtime"


def stop_silence_ms(cfg: SessionConfig) -> int:
    """The silence (ms of input audio) after which server VAD ends speech in a session with turn
    detection: the type's pause (``silence_duration_ms``, or ``semantic_vad``'s eagerness
    pause), or, where the engine judges the turn (:func:`engine_judges`), ``semantic_vad``'s max
    wait for the eagerness — the bound on a judgement that never comes."""
    td = cfg.turn_detection
    assert td is not None
    if engine_judges(cfg):
        return SEMANTIC_VAD_MAX_WAIT_MS[td.eagerness or "auto"]
    return td.end_of_turn_silence_ms


def detect(
    state: VadState,
    samples: np.ndarray,
    start_sample: int,
    rate: int,
    td: TurnDetection,
    buffer_start: int,
    silence_ms: Optional[int] = None,
) -> tuple[VadState, list[Transition]]:
    """Run the session's detector (``td.detector``) over one append.

    Frames are 10 ms of the input clock, counted from the session's start: a frame begun by one
    append is finished by the next (its partial energy is carried in the state), so the verdicts
    do not depend on how the client sized its appends.

    Args:
        state: the VAD state before the append.
        samples: the append's audio as int16 PCM at ``rate`` Hz.
        start_sample: the append's position on the input clock.
        rate: the input sample rate (Hz).
        td: the session's turn detection settings.
        buffer_start: where the uncommitted input buffer begins (prefix padding stops there).
        silence_ms: the silence (ms) that ends speech; ``None``: ``td``'s (:func:`stop_silence_ms`
            gives a session's).

    Returns:
        The state after the append, and the start/stop transitions in it, in order.

    Raises:
        DetectorUnavailable: Silero is selected and its model cannot be loaded here.
    """
    silence_needed = rate * (td.end_of_turn_silence_ms if silence_ms is None else silence_ms) // 1000
    if td.detector == "silero":
        return _detect_silero(state, samples, start_sample, rate, td, buffer_start, silence_needed)
    n = len(samples)
    if n == 0:
        return state, []
    frame = max(1, rate * FRAME_MS // 1000)
    sq = (samples.astype(np.float64) / 32768.0) ** 2
    first = frame - state.frame_fill
    starts = [0] + list(range(first, n, frame)) if first < n else [0]
    sums = np.add.reduceat(sq, starts)
    min_speech = rate * MIN_SPEECH_MS // 1000
    padding = rate * td.prefix_padding_ms // 1000
    level = 10 ** (threshold_dbfs(td.threshold) / 10)  # mean square of a frame at the threshold
    out: list[Transition] = []
    # The state's fields as locals while the frames are walked; one VadState at the end.
    speaking, start_sample_, voiced_run, silence_run = state.speaking, state.start_sample, state.voiced_run, state.silence_run
    energy, fill = state.frame_energy, state.frame_fill
    last = len(starts) - 1
    for i, (b, frame_sum) in enumerate(zip(starts, sums.tolist())):
        end = starts[i + 1] if i < last else n
        energy += frame_sum
        fill += end - b
        if fill < frame:
            break  # an unfinished frame: carried to the next append
        voiced = energy / frame >= level
        pos = start_sample + end  # where this frame ends on the clock
        energy, fill = 0.0, 0
        if not speaking:
            run = voiced_run + frame if voiced else 0
            if run >= min_speech:
                start = max(buffer_start, pos - run - padding)
                speaking, start_sample_, voiced_run, silence_run = True, start, 0, 0
                out.append(Transition("started", start))
            else:
                voiced_run = run
        else:
            silence = 0 if voiced else silence_run + frame
            if silence >= silence_needed:
                speaking, voiced_run, silence_run = False, 0, 0
                out.append(Transition("stopped", pos, start_sample_))
                buffer_start = pos  # the turn takes the buffer up to here: a next one pads from here
            else:
                silence_run = silence
    after = replace(
        state,
        speaking=speaking,
        start_sample=start_sample_,
        voiced_run=voiced_run,
        silence_run=silence_run,
        frame_energy=energy,
        frame_fill=fill,
        model_state=None,  # what Silero carried, if the session switched detectors
    )
    return after, out


def _detect_silero(
    state: VadState, samples: np.ndarray, start_sample: int, rate: int, td: TurnDetection, buffer_start: int, silence_needed: int
) -> tuple[VadState, list[Transition]]:
    """:func:`detect` with Silero's frame probabilities (same arguments and result;
    ``silence_needed`` in samples)."""
    if len(samples) == 0:
        return state, []
    scored, carried = silero.advance(state.model_state, samples, rate, start_sample)
    frame = silero.frame_samples(rate)
    min_speech = rate * SILERO_MIN_SPEECH_MS // 1000
    padding = rate * td.prefix_padding_ms // 1000
    high, low = td.threshold, end_threshold(td.threshold)
    out: list[Transition] = []
    speaking, start_sample_, voiced_run, silence_run = state.speaking, state.start_sample, state.voiced_run, state.silence_run
    for end, prob in scored:
        pos = start_sample + end  # where this frame ends on the clock
        if not speaking:
            run = voiced_run + frame if prob >= high else 0
            if run >= min_speech:
                start = max(buffer_start, pos - run - padding)
                speaking, start_sample_, voiced_run, silence_run = True, start, 0, 0
                out.append(Transition("started", start))
            else:
                voiced_run = run
        else:
            # Hysteresis: a silence begins only under the low threshold; frames between the two
            # thresholds neither begin one nor break one that began.
            silence = 0 if prob >= high else silence_run + frame if (prob < low or silence_run) else 0
            if silence >= silence_needed:
                speaking, voiced_run, silence_run = False, 0, 0
                out.append(Transition("stopped", pos, start_sample_))
                buffer_start = pos
            else:
                silence_run = silence
    after = replace(
        state,
        speaking=speaking,
        start_sample=start_sample_,
        voiced_run=voiced_run,
        silence_run=silence_run,
        # The unfinished frame's samples travel in ``carried``; ``frame_fill`` only shows its size.
        frame_energy=0.0,
        frame_fill=(start_sample + len(samples)) % frame,
        model_state=carried,
    )
    return after, out
