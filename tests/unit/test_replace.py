"""``duplex_es.domain.replace.replace`` is ``attrs.evolve``, only faster: for every value class the
reducer copies, the copy equals what ``attrs.evolve`` builds; classes whose ``__init__`` does more
than store fields go through ``attrs.evolve`` itself."""

from __future__ import annotations

import functools
import random

import attrs
import pytest

from duplex_es.domain import InputBuffer, Item, Lease, Response, SessionState, Tick
from duplex_es.domain.replace import _COPIERS, replace
from duplex_es.domain.world import WorldState
from duplex_es.events import AudioSegment, SessionConfig, TurnDetection, VadState, registry

from harness import random_session

STATE_CLASSES = [SessionState, InputBuffer, Item, Response, Tick, Lease, WorldState, VadState, AudioSegment, TurnDetection]


def test_replace_equals_attrs_evolve_on_every_state_the_reducer_builds():
    """Every state of seeded random sessions (speech and world), copied with each of its
    fields changed in turn, equals ``attrs.evolve``'s copy and leaves the original alone."""
    seen = 0
    for seed in range(25):
        log = random_session(random.Random(seed), 80)
        from duplex_es.domain import evolve

        state = SessionState()
        for seq, ev in log:
            state = evolve(state, seq, ev)
            before = attrs.asdict(state, recurse=False)
            for f in attrs.fields(type(state)):
                value = getattr(state, f.name)
                got, want = replace(state, **{f.name: value}), attrs.evolve(state, **{f.name: value})
                assert got == want and type(got) is type(want) and got is not state
            assert replace(state, seq=-1).seq == -1
            assert attrs.asdict(state, recurse=False) == before
            seen += 1
    assert seen > 1000


@pytest.mark.parametrize("cls", STATE_CLASSES + [c for c in registry().values()], ids=lambda c: c.__name__)
def test_each_class_copies_like_attrs_evolve(cls):
    required = {f.name: _sample(f) for f in attrs.fields(cls) if f.default is attrs.NOTHING}
    inst = cls(**required)
    for f in attrs.fields(cls):
        value = _sample(f)
        assert replace(inst, **{f.name: value}) == attrs.evolve(inst, **{f.name: value})
    with pytest.raises(TypeError):
        replace(inst, no_such_field=1)


def test_a_class_whose_init_does_more_is_copied_by_attrs_evolve():
    @attrs.frozen
    class Checked:
        n: int = attrs.field(validator=attrs.validators.instance_of(int))

    @attrs.frozen
    class Hashed:
        n: int = 0

    assert replace(Checked(1), n=2) == Checked(2) and _COPIERS[Checked] is attrs.evolve
    with pytest.raises(TypeError):
        replace(Checked(1), n="x")  # the validator ran
    assert replace(Hashed(1), n=3) == Hashed(3) and _COPIERS[Hashed] is not attrs.evolve
    assert replace(SessionConfig(model="m"), voice="ash") == SessionConfig(model="m", voice="ash")


def test_a_class_without_slots_is_copied_field_for_field():
    """The dict copy (classes without slots, as ``SessionState``) gives a new instance with the
    changes, leaves the original alone, refuses unknown names; a ``cached_property`` (which
    would carry its stale value into the copy) sends the class to ``attrs.evolve``."""

    @attrs.frozen(slots=False)
    class Wide:
        a: int = 0
        b: tuple[int, ...] = ()

    @attrs.frozen(slots=False)
    class Cached:
        a: int = 0

        @functools.cached_property
        def double(self) -> int:
            return 2 * self.a

    w = Wide(1, (2,))
    got = replace(w, b=(3,))
    assert got == Wide(1, (3,)) and w == Wide(1, (2,)) and got.__dict__ is not w.__dict__
    with pytest.raises(TypeError):
        replace(w, c=1)
    c = Cached(2)
    assert c.double == 4 and replace(c, a=5).double == 10 and _COPIERS[Cached] is attrs.evolve


def _sample(f: attrs.Attribute) -> object:
    """A value of the right kind for field ``f`` (its default, or something plausible)."""
    if f.default is not attrs.NOTHING:
        d = f.default
        return d.factory() if isinstance(d, attrs.Factory) else d  # type: ignore[union-attr]
    kind = str(f.type)
    if "int" in kind:
        return 7
    if "bool" in kind:
        return True
    if "str" in kind:
        return "x"
    if "SessionConfig" in kind:
        return SessionConfig(model="m")
    return None
