"""CPU per 20 ms audio append through the protocol and the domain — ``parse_frame``, ``decide``,
``evolve``, ``project``; no I/O — with server VAD off, on with the energy detector and on with
Silero's network (``turn_detection.detector``), with and without a client ``event_id``. The per-command path every append takes in the server, minus the transport and
the log.

    .venv/bin/python scripts/hotpath_append.py
    PYTHONPATH=/path/to/another/checkout .venv/bin/python scripts/hotpath_append.py   # to compare

Prints the best of three runs of 20,000 appends each, in µs per append.
"""

from __future__ import annotations

import base64
import itertools
import json
import time

from duplex_es.domain import ClearInput, OpenSession, SessionPatch, SessionState, UpdateSession, decide, evolve
from duplex_es.protocol import parse_frame, project

_n = itertools.count()


def new_id(prefix: str) -> str:
    return f"{prefix}_{next(_n)}"


def apply(state: SessionState, command: object) -> SessionState:
    for event in decide(state, command):
        before, state = state, evolve(state, state.seq + 1, event)
        project(before, state.seq, event, state)
    return state


def run(vad: str, event_ids: bool, n: int = 20_000) -> float:
    """µs per append with server VAD ``vad`` (``off``, ``energy`` or ``silero``)."""
    state = apply(SessionState(), OpenSession(session_id="sess_hot", model="m"))
    td = None if vad == "off" else {"type": "server_vad", "detector": vad}
    state = apply(state, UpdateSession(patch=SessionPatch(turn_detection=td)))
    audio = base64.b64encode(b"\x10\x00" * 480).decode()  # 20 ms of quiet PCM16 at 24 kHz
    frames = [json.dumps({"type": "input_audio_buffer.append", **({"event_id": f"e{i}"} if event_ids else {}), "audio": audio}) for i in range(n)]
    start = time.perf_counter()
    for frame in frames:
        state = apply(state, parse_frame(frame, new_id))
        if state.buffer.samples > 24_000 * 60:  # a minute buffered: clear, as a client would commit
            state = apply(state, ClearInput())
    return (time.perf_counter() - start) / n * 1e6


if __name__ == "__main__":
    for vad in ("off", "energy", "silero"):
        for ids in (False, True):
            best = min(run(vad, ids) for _ in range(3))
            print(f"server VAD {vad:6}, event_id {'yes' if ids else 'no '}: {best:6.1f} µs per append")
