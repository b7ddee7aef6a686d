"""The inspector's timeline takes runs of audio appends a run at a time (docs/inspector.md, "Big
sessions"); what it shows is what the event-by-event pass shows: the overview, the clock
readings of every event, the kept states, and each audio lane's pieces, peaks and samples.
Checked on the recorded corpus (real sessions: server VAD, a barge-in, full duplex, a resume)
and on random sessions fed in pages that cut runs anywhere."""

from __future__ import annotations

import json
import random
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from duplex_es.events import decode, encode
from duplex_es.inspect.timeline import Timeline
from duplex_es.store import Recorded

from tests.harness import random_session

CORPUS = Path(__file__).resolve().parents[1] / "corpus"
SPEECH = sorted(p.name for p in CORPUS.glob("*.jsonl") if p.name != "world.jsonl")


def _records(name: str) -> list[Recorded]:
    rows = [json.loads(line) for line in (CORPUS / name).read_text().splitlines() if line.strip()]
    return [
        Recorded(r["position"], r["session_id"], r["seq"], decode(r["type"], r["version"], json.dumps(r["event"])), r["recorded_at_us"], r["hash"])
        for r in rows
    ]


def _one_by_one(records: list[Recorded]) -> Timeline:
    tl = Timeline(records[0].session_id)
    for r in records:
        tl._one(r)  # the reference: every event on its own
    return tl


def _assert_same(a: Timeline, b: Timeline) -> None:
    assert a.overview() == b.overview()
    assert (a.head, list(a.audio_ms), list(a.wall_ms)) == (b.head, list(b.audio_ms), list(b.wall_ms))
    assert a.checkpoints == b.checkpoints
    assert a.append_start == b.append_start and a.user_spans == b.user_spans
    assert sorted(a.lanes) == sorted(b.lanes)
    for name, lane in a.lanes.items():
        other = b.lanes[name]
        assert (list(lane.seqs), list(lane.starts), list(lane.counts), lane.samples) == (
            list(other.seqs), list(other.starts), list(other.counts), other.samples
        )
        for x, y in zip(lane.base_peaks(), other.base_peaks()):
            assert np.array_equal(x, y)


@pytest.mark.parametrize("name", SPEECH)
def test_a_recorded_session_draws_the_same_whatever_the_pass_takes_at_once(name):
    records = _records(name)
    batched = Timeline(records[0].session_id)
    batched.feed(records)
    _assert_same(batched, _one_by_one(records))


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), page=st.integers(1, 50))
def test_a_random_session_fed_in_pages_draws_as_event_by_event(seed, page):
    log = random_session(random.Random(seed), 150)
    records = []
    for seq, ev in log:
        t, v, text = encode(ev)
        records.append(Recorded(seq, "sess_random", seq, decode(t, v, text), 1_000_000 + seq * 20_000, "0" * 64))
    batched = Timeline("sess_random")
    for i in range(0, len(records), page):
        batched.feed(records[i : i + page])
    _assert_same(batched, _one_by_one(records))


def test_a_run_longer_than_the_checkpoint_spacing_keeps_a_state_at_every_checkpoint(monkeypatch):
    """Runs are cut at each checkpoint seq, so the kept state there is the state after it."""
    import duplex_es.inspect.timeline as timeline

    monkeypatch.setattr(timeline, "CHECKPOINT_EVERY", 7)
    records = _records("barge_in.jsonl")
    batched = Timeline(records[0].session_id)
    batched.feed(records)
    reference = _one_by_one(records)
    assert [s for s, _ in batched.checkpoints] == [0] + [s for s in range(7, records[-1].seq + 1, 7)]
    _assert_same(batched, reference)
