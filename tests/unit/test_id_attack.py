"""Ids cannot be predicted from ids already seen (issue 12, item 2).

The attack of tests/mersenne.py predicts every id of the seeded ``random.Random`` generator ids
once came from; here it is shown to work on that generator, and to fail on ``new_id``. The
system test (tests/system/test_unpredictable_ids.py) runs it on a real server's ids.
"""

from __future__ import annotations

import os
import random

from duplex_es.server.host import new_id

from mersenne import predict_next_ids, untemper


def old_new_id(rng: random.Random):  # type: ignore[no-untyped-def]
    """The id generator before the keyed hash (git show 5826da5:duplex_es/server/host.py)."""
    return lambda prefix: f"{prefix}_{rng.getrandbits(64):016x}"


def test_untemper_inverts_the_twister_tempering():
    rng = random.Random(os.urandom(16))
    # A seeded twister twists at its first output; the next 624 outputs temper that array.
    outputs = [rng.getrandbits(32) for _ in range(624)]
    assert [untemper(w) for w in outputs] == list(rng.getstate()[1][:624])


def test_the_attack_predicts_every_id_of_the_old_seeded_generator():
    """So the attack can succeed: 312 ids of the old generator (624 outputs) give all later ones."""
    make = old_new_id(random.Random(int.from_bytes(os.urandom(16), "big")))
    seen = [make(p) for p in ("event", "item", "resp", "sess") * 78]
    predicted = predict_next_ids(seen, 50)
    actual = [make("sess").removeprefix("sess_") for _ in range(50)]
    assert predicted == actual


def test_the_attack_predicts_nothing_of_new_id():
    seen = [new_id(p) for p in ("event", "item", "resp", "sess") * 100]
    predicted = predict_next_ids(seen, 200)
    assert predicted is not None  # the ids have the shape the attack reads
    actual = [new_id("sess").removeprefix("sess_") for _ in range(200)]
    assert not set(predicted) & set(actual)


def test_consecutive_ids_share_no_telling_prefix():
    """A counter shows through as long shared prefixes of consecutive ids (``…0041``, ``…0042``):
    over 10,000 ids, none shares 8 hex digits with the next (chance for random ids: about 2e-5)."""
    tails = [new_id("x").removeprefix("x_") for _ in range(10_000)]
    longest = max(len(os.path.commonprefix([a, b])) for a, b in zip(tails, tails[1:]))
    assert longest < 8
    assert len(set(tails)) == len(tails)
