"""``replay --recheck`` reads every command back out of the batch it logged: logs made by driving
today's domain (random client commands, engine outputs and pumps, refusals included; the
harness of the domain tests) recheck without a divergence, and the batches whose command the
log cannot give back are the refusals that depend on dropped fields, reported as such."""

from __future__ import annotations

import random

import pytest

import harness
from duplex_es.events import CommandRejected, InteractionRejected
from duplex_es.recheck import recheck_records
from duplex_es.store import Recorded


def _batched_log(monkeypatch: pytest.MonkeyPatch, seed: int, n: int) -> list[Recorded]:
    """A random session from the domain harness, each ``decide`` (or engine answer) one batch,
    as the log would hold it: the events of one batch share ``recorded_at_us``."""
    stamps: list[int] = []
    apply = harness.Harness.apply

    def stamped(self, events):  # noqa: ANN001, ANN202
        stamps.extend([len(stamps) + 1] * len(events) if not stamps else [stamps[-1] + 1] * len(events))
        return apply(self, events)

    monkeypatch.setattr(harness.Harness, "apply", stamped)
    log = harness.random_session(random.Random(seed), n)
    # Drop a batch the harness cut short at n events.
    cut = len(log)
    while cut and cut < len(stamps) and stamps[cut] == stamps[cut - 1]:
        cut -= 1
    session_id = "sess"
    return [Recorded(seq, session_id, seq, ev, stamps[seq - 1], "") for seq, ev in log[:cut]]


@pytest.mark.parametrize("seed", range(60))
def test_random_sessions_decided_by_todays_code_recheck_without_a_divergence(monkeypatch: pytest.MonkeyPatch, seed: int):
    records = _batched_log(monkeypatch, seed, 120)
    result = recheck_records("sess", records)
    assert result.ok, [(d.seq, d.command, d.differences) for d in result.divergences]
    for s in result.skipped:  # only refusals whose command the log does not keep
        event = next(r.event for r in records if r.seq == s.seq)
        assert isinstance(event, (CommandRejected, InteractionRejected)), s
        assert "not the" in s.reason or "not logged" in s.reason, s
    assert result.rechecked + result.answers + len(result.skipped) > 10


def test_a_full_duplex_turn_request_with_metadata_and_instructions_rechecks(monkeypatch: pytest.MonkeyPatch):
    """``response.create`` in a full-duplex session keeps its metadata and instructions in the
    log (``duplex.turn.requested``): the recheck rebuilds the command with them."""
    from duplex_es.domain import CreateResponse, OpenSession, ResponseOptions

    stamps: list[int] = []
    apply = harness.Harness.apply

    def stamped(self, events):  # noqa: ANN001, ANN202
        stamps.extend([(stamps[-1] if stamps else 0) + 1] * len(events))
        return apply(self, events)

    monkeypatch.setattr(harness.Harness, "apply", stamped)
    h = harness.Harness()
    h.run(OpenSession(session_id="sess", model="duplex-es-duplex", engine="duplex-es-duplex", full_duplex=True))
    options = ResponseOptions(metadata={"tag": "m1"}, instructions="Say the weather.")
    (asked,) = h.run(CreateResponse(response_id=harness.nid("resp"), item_id=harness.nid("item"), request_id=harness.nid("req"), options=options))
    assert asked.TYPE == "duplex.turn.requested" and asked.metadata == {"tag": "m1"}
    records = [Recorded(seq, "sess", seq, ev, stamps[seq - 1], "") for seq, ev in h.log]
    result = recheck_records("sess", records)
    assert result.ok and result.rechecked == 2, [(d.seq, d.command, d.differences) for d in result.divergences]
