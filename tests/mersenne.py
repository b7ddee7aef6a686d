"""The classic attack on ids drawn from Python's ``random.Random`` (the Mersenne Twister): 624
consecutive 32-bit outputs, untempered, are its whole state, from which every later output
follows. Ids were once ``f"{prefix}_{rng.getrandbits(64):016x}"``; the tests run this attack
against that generator (it must predict) and against the server's ids (it must not).
"""

from __future__ import annotations

import random
from typing import Iterable, Optional, Sequence

__all__ = ["outputs_of_ids", "predict_next_ids", "untemper"]

_M32 = 0xFFFFFFFF


def _undo_right(y: int, shift: int) -> int:
    """Invert ``y ^= y >> shift``."""
    x = y
    for _ in range(32 // shift + 1):
        x = y ^ (x >> shift)
    return x & _M32


def _undo_left(y: int, shift: int, mask: int) -> int:
    """Invert ``y ^= (y << shift) & mask``."""
    x = y
    for _ in range(32 // shift + 1):
        x = y ^ ((x << shift) & mask)
    return x & _M32


def untemper(y: int) -> int:
    """The state word behind one 32-bit Mersenne Twister output (the tempering undone)."""
    y = _undo_right(y, 18)
    y = _undo_left(y, 15, 0xEFC60000)
    y = _undo_left(y, 7, 0x9D2C5680)
    return _undo_right(y, 11)


def outputs_of_ids(ids: Iterable[str]) -> list[int]:
    """The 32-bit outputs behind ids ``prefix_<16 hex>`` drawn with ``getrandbits(64)``, which
    takes the low word first; ``[]`` for an id of any other shape."""
    out: list[int] = []
    for i in ids:
        _, _, tail = i.rpartition("_")
        if len(tail) != 16:
            return []
        value = int(tail, 16)
        out += [value & _M32, value >> 32]
    return out


def predict_next_ids(observed: Sequence[str], count: int) -> Optional[list[str]]:
    """The hex tails of the ``count`` ids that follow ``observed`` (at least 312 consecutive
    ids of one Mersenne Twister), or ``None`` if they do not look like such ids."""
    words = outputs_of_ids(observed)
    if len(words) < 624:
        return None
    state = [untemper(w) for w in words[-624:]]
    clone = random.Random()
    clone.setstate((3, tuple(state + [624]), None))
    return [f"{clone.getrandbits(64):016x}" for _ in range(count)]
