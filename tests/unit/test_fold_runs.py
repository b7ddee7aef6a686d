"""A run of audio (or text) appends folded at once (``SessionKind.run_evolvers``, used by
``fold``) gives exactly the state the appends give one by one (docs/performance.md, "The fold"): turn-based and
full-duplex sessions, with and without a buffer already started, VAD states that change inside
the run, a full-duplex overlap that mutes what it drops, and runs cut by other events."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from duplex_es.domain import AppendText, evolve, fold
from duplex_es.domain.replace import replace
from duplex_es.events import AudioAppended, TextAppended, VadState

from tests.harness import Harness
from tests.unit.test_full_duplex import Duplex

VADS = st.one_of(
    st.none(),
    st.builds(
        VadState,
        speaking=st.booleans(),
        start_sample=st.integers(0, 10**6),
        voiced_run=st.integers(0, 4800),
        item_id=st.one_of(st.none(), st.sampled_from(["item_a", "item_b"])),
        frame_fill=st.integers(0, 239),
    ),
)
#: One logged event after the opening: an append (samples, vad) or, now and then, text (which
#: ends a run of appends and starts the buffer with no audio in it).
STEPS = st.lists(
    st.one_of(st.tuples(st.integers(1, 4800), VADS), st.tuples(st.just(0), st.just(None))),
    min_size=1,
    max_size=60,
)


def _events(start_clock: int, steps: list[tuple[int, VadState | None]]) -> list:
    out, clock = [], start_clock
    for samples, vad in steps:
        if samples == 0:
            out.append(TextAppended(text=f"w{len(out)} "))
            continue
        out.append(AudioAppended(audio="AAAA", samples=samples, start_sample=clock, vad=vad))
        clock += samples
    return out


@settings(max_examples=200, deadline=None)
@given(steps=STEPS, session=st.sampled_from(["turn_based", "turn_based_buffered", "full_duplex", "full_duplex_dropping"]))
def test_a_run_of_appends_folds_to_the_state_of_its_appends_one_by_one(steps, session):
    if session.startswith("full_duplex"):
        base = Duplex.start().state
        if session == "full_duplex_dropping":  # the overlap policy drops this speech: appends are muted
            base = replace(base, duplex=replace(base.duplex, drop_item="item_dropped"))
        steps = [s for s in steps if s[0]] or [(480, None)]  # text input is refused in a full-duplex session
    else:
        h = Harness.open()
        if session == "turn_based_buffered":
            h.run(AppendText(text="before"))
        base = h.state
    events = _events(base.input_clock, steps)
    pairs = list(enumerate(events, start=base.seq + 1))
    one_by_one = base
    for seq, ev in pairs:
        one_by_one = evolve(one_by_one, seq, ev)
    assert fold(pairs, base) == one_by_one
    assert fold(pairs, base).seq == base.seq + len(events)


@pytest.mark.parametrize("cut_every", [1, 2, 7])
def test_runs_cut_anywhere_fold_to_the_same_state(cut_every):
    """Folding a log in pieces (as a snapshot's tail is folded onto it) ends in the same state
    wherever the pieces cut a run of appends."""
    h = Harness.open()
    base = h.state
    events = _events(base.input_clock, [(480, VadState(speaking=i % 3 == 0, frame_fill=i)) for i in range(20)])
    pairs = list(enumerate(events, start=base.seq + 1))
    whole = fold(pairs, base)
    state = base
    for i in range(0, len(pairs), cut_every):
        state = fold(pairs[i : i + cut_every], state)
    assert state == whole
    assert state.buffer.append_seqs == tuple(s for s, _ in pairs)
    assert state.vad == VadState(speaking=19 % 3 == 0, frame_fill=19)
