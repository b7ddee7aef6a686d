"""Server VAD: a deterministic energy detector on the input audio clock.

Each append is cut into 10 ms frames of the declared format; a frame is voiced when its RMS level
reaches ``-60 + 40 × threshold`` dBFS (OpenAI's default threshold 0.5 → -40 dBFS: quiet room noise
stays below it, speech is well above). Speech starts after :data:`MIN_SPEECH_MS` of consecutive
voiced audio; its ``audio_start_ms`` is moved back by ``prefix_padding_ms`` (never before the
buffer's start). It stops once ``silence_duration_ms`` of unvoiced audio followed it (for
``semantic_vad``, the pause its ``eagerness`` allows); its
``audio_end_ms`` includes that silence (docs/sources.md, "OpenAI turn detection").

The detector is a pure function of its state and the samples, and its state after every append
is logged with the append, so replay never runs it again (docs/protocol.md, "Turn detection").
"""

from __future__ import annotations

import attrs
import numpy as np

from duplex_es.domain.replace import replace
from duplex_es.events import TurnDetection, VadState

__all__ = ["MIN_SPEECH_MS", "Transition", "threshold_dbfs", "detect"]

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


def detect(
    state: VadState, samples: np.ndarray, start_sample: int, rate: int, td: TurnDetection, buffer_start: int
) -> tuple[VadState, list[Transition]]:
    """Run the detector over one append.

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

    Returns:
        The state after the append, and the start/stop transitions in it, in order.
    """
    n = len(samples)
    if n == 0:
        return state, []
    frame = max(1, rate * FRAME_MS // 1000)
    sq = (samples.astype(np.float64) / 32768.0) ** 2
    first = frame - state.frame_fill
    starts = [0] + list(range(first, n, frame)) if first < n else [0]
    sums = np.add.reduceat(sq, starts)
    min_speech = rate * MIN_SPEECH_MS // 1000
    silence_needed = rate * td.end_of_turn_silence_ms // 1000
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
    )
    return after, out
