"""The events the benchmarks write, the same for every contender and every run (fixed seed).

* :func:`payload` — the seeded text of command ``i`` (16–64 characters of words); duplex_es
  writes it as ``TextAppended``, ``eventsourcing`` as an aggregate event attribute, the raw loops
  as the same JSON.
* :func:`history_event` — event ``seq`` of a long session whose state stays bounded: cycles of
  eight text appends, a heartbeat, and a clear of those eight appends (rows 5 and 6).
* :func:`tick` — a speech ``TickIssued`` (rows 7 and 8).
"""

from __future__ import annotations

import random
from functools import lru_cache

from duplex_es.events import Event, HeartbeatReceived, InputCleared, SessionConfig, SessionOpened, TextAppended, TickIssued

__all__ = ["SEED", "payload", "opened", "text_event", "history_event", "tick", "CYCLE"]

#: The seed of every random choice in the suite.
SEED = 20260006

#: Events per cycle of :func:`history_event` (after seq 1).
CYCLE = 10

_WORDS = (
    "turn left at the next corner please and tell me what the weather will be like tomorrow in "
    "lisbon paris tokyo nairobi with rain sun wind snow fog clouds in the morning evening night"
).split()


@lru_cache(maxsize=1)
def _payloads(seed: int = SEED, count: int = 1024) -> tuple[str, ...]:
    rng = random.Random(seed)
    out = []
    for _ in range(count):
        words: list[str] = []
        target = rng.randint(16, 64)
        while sum(len(w) + 1 for w in words) < target:
            words.append(rng.choice(_WORDS))
        out.append(" ".join(words)[:target])
    return tuple(out)


def payload(i: int) -> str:
    """The text of command ``i`` (deterministic; 1,024 distinct strings, 16–64 characters)."""
    p = _payloads()
    return p[i % len(p)]


def opened(session_id: str) -> SessionOpened:
    """The first event of a bench session."""
    return SessionOpened(session_id=session_id, config=SessionConfig(model="bench"))


def text_event(i: int) -> TextAppended:
    """Command ``i``'s one event: ``TextAppended`` of :func:`payload` ``(i)``."""
    return TextAppended(text=payload(i))


def history_event(session_id: str, seq: int) -> Event:
    """Event ``seq`` (from 1) of a long session: ``SessionOpened``, then cycles of
    :data:`CYCLE` events (eight ``TextAppended``, a ``HeartbeatReceived``, and an
    ``InputCleared`` discarding those eight), so the folded state never grows with history."""
    if seq == 1:
        return opened(session_id)
    k = (seq - 2) % CYCLE
    if k < 8:
        return TextAppended(text=payload(seq))
    if k == 8:
        return HeartbeatReceived()
    return InputCleared(discarded_seqs=tuple(range(seq - 9, seq - 1)))


def tick(i: int) -> TickIssued:
    """The ``i``-th speech tick of a bench response (``request_id`` ``bench-tick-{i}``)."""
    return TickIssued(request_id=f"bench-tick-{i}", response_id="bench-resp", epoch=0, chunk_index=i)
