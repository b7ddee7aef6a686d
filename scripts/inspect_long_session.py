"""A long synthetic speech session for measuring the inspector (docs/inspector.md): ``MINUTES``
of 20 ms appends (a 440 Hz tone, 3 s on, 2 s off, so the waveform has a shape), committed every
10 s, each command decided by the real decider and appended through :meth:`EventLog.append`,
one command per transaction as the server does.

    .venv/bin/python scripts/inspect_long_session.py sqlite:////tmp/long.db 60

Prints the session id and how long the writing took. SQLite's ``synchronous`` is OFF while
writing (the measurement is of reading it back, not of durable writes).
"""

from __future__ import annotations

import base64
import sys
import time

import numpy as np

from duplex_es.domain import AppendAudio, Commit, OpenSession, SessionPatch, UpdateSession, decide, evolve, new_state
from duplex_es.store import Database, EventLog, upgrade

RATE = 24_000
APPEND_MS = 20


def _chunks() -> tuple[str, str]:
    """20 ms of tone and 20 ms of near silence, PCM16 at 24 kHz, base64."""
    t = np.arange(RATE * APPEND_MS // 1000) / RATE
    tone = (np.sin(2 * np.pi * 440 * t) * 8000).astype("<i2").tobytes()
    quiet = (np.random.default_rng(1).normal(0, 60, t.size)).astype("<i2").tobytes()
    return base64.b64encode(tone).decode(), base64.b64encode(quiet).decode()


def main(url: str, minutes: float) -> None:
    db = Database(url, synchronous="OFF")
    upgrade(db)
    log = EventLog(db)
    sid = f"sess_long{int(time.time())}"
    state = new_state()

    def apply(command: object) -> None:
        nonlocal state
        events = decide(state, command)
        log.append(sid, events, expected_seq=state.seq)
        for ev in events:
            state = evolve(state, state.seq + 1, ev)

    start = time.perf_counter()
    apply(OpenSession(session_id=sid, model="synthetic"))
    apply(UpdateSession(patch=SessionPatch(turn_detection=None)))
    tone, quiet = _chunks()
    appends = int(minutes * 60_000 // APPEND_MS)
    per_commit = 10_000 // APPEND_MS
    for i in range(appends):
        on = (i * APPEND_MS) % 5000 < 3000
        apply(AppendAudio(audio=tone if on else quiet, nbytes=RATE * APPEND_MS // 1000 * 2))
        if (i + 1) % per_commit == 0:
            apply(Commit(item_id=f"item_long{i}"))
    print(sid, f"{state.seq} events written in {time.perf_counter() - start:.1f} s")


if __name__ == "__main__":
    main(sys.argv[1], float(sys.argv[2]))
