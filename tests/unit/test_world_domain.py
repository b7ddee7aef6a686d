"""The world kind's rules, pure (docs/world.md): decide and evolve on a world state with no
server, log or worker. What a tick applies, which interactions are refused and why, how a
broken echo fails the session closed, what a reset keeps, and which status moves the reducer
allows. The end-to-end behaviour over a real WebSocket is in tests/system/test_world.py."""

from __future__ import annotations

import pytest

from duplex_es.domain import IllegalTransition, decide, evolve, kind_of, named
from duplex_es.domain.commands import Pump
from duplex_es.domain.world import CloseWorld, Interact, ResetWorld, StartWorld, WorldState, next_tick_due_ms
from duplex_es.events import (
    Control,
    InteractionAccepted,
    InteractionRejected,
    TickIdentity,
    WorldChunk,
    WorldClosed,
    WorldConfig,
    WorldFailed,
    WorldTickIssued,
)

CAM = "duplex_es.camera_keys.v1"


class Sim:
    """A world session folded in memory: every decided event is applied at the next seq."""

    def __init__(self, **config: object) -> None:
        self.state: object = named("world").state_type()
        self.requests = iter(f"req_{i}" for i in range(1, 1000))
        self.run(StartWorld(session_id="world_t", config=WorldConfig(**config), at_ms=1_000))  # type: ignore[arg-type]

    def run(self, command: object) -> list:
        events = decide(self.state, command)
        for ev in events:
            self.state = evolve(self.state, self.state.seq + 1, ev)  # type: ignore[attr-defined]
        return events

    def apply(self, event: object) -> None:
        self.state = evolve(self.state, self.state.seq + 1, event)  # type: ignore[attr-defined,arg-type]

    def pump(self, now_ms: int = 1_000) -> list:
        return self.run(Pump(request_ids=(next(self.requests),), now_ms=now_ms))

    def answer(self, tick: WorldTickIssued, **changes: object) -> WorldChunk:
        """The worker's block for ``tick``, echoing it (or not, with ``changes``)."""
        identity = TickIdentity.of("world_t", tick)
        fields = dict(
            session_id=identity.session_id,
            request_id=identity.request_id,
            epoch=identity.epoch,
            chunk_index=identity.chunk_index,
            applied_event_ids=identity.applied_event_ids,
            engine_state={"x": tick.chunk_index},
        )
        fields.update(changes)
        return WorldChunk(**fields)  # type: ignore[arg-type]


@pytest.mark.invariant("I5")
def test_a_tick_applies_the_pending_interactions_in_id_order_with_the_last_prompt_and_each_tracks_last_value():
    w = Sim(prompt="a forest")
    for eid, prompt, keys in [(3, "a city", ["W"]), (1, "a beach", ["A"]), (2, None, ["D"])]:
        [ev] = w.run(Interact(event_id=eid, prompt=prompt, controls=(Control(track="camera", schema=CAM, data={"keys": keys}),)))
        assert isinstance(ev, InteractionAccepted)
    [tick] = w.pump()
    assert isinstance(tick, WorldTickIssued)
    assert tick.applied_event_ids == (1, 2, 3) and tick.prompt == "a city" and tick.controls[0].data == {"keys": ["W"]}
    assert [e.event_id for e in tick.control_events] == [1, 2, 3]
    assert w.pump() == []  # one tick in flight at a time
    w.apply(w.answer(tick))
    state = w.state
    assert isinstance(state, WorldState)
    assert state.pending == () and state.floor == 3 and state.chunk_index == 1 and state.engine_state == {"x": 0} and state.inflight is None


def test_duplicates_stale_ids_a_full_queue_and_empty_interactions_are_refused_with_their_codes():
    w = Sim(max_pending=2)
    w.run(Interact(event_id=5, prompt="p"))
    codes = []
    for command in [Interact(event_id=5, prompt="again"), Interact(event_id=6), Interact(event_id=7, prompt="q"), Interact(event_id=8, prompt="r")]:
        [ev] = w.run(command)
        codes.append(ev.code if isinstance(ev, InteractionRejected) else "accepted")
    assert codes == ["duplicate_event", "invalid_interaction", "accepted", "queue_full"]
    [tick] = w.pump()
    w.apply(w.answer(tick))
    [stale] = w.run(Interact(event_id=4, prompt="late"))
    assert isinstance(stale, InteractionRejected) and stale.code == "stale_event" and "floor 7" in stale.message


def test_a_block_that_does_not_echo_its_tick_fails_the_session_closed_until_a_reset():
    w = Sim()
    w.run(Interact(event_id=1, prompt="p"))
    [tick] = w.pump()
    bad = w.answer(tick, chunk_index=9)
    assert kind_of(w.state).judge(w.state, bad).reason == "identity_mismatch"
    w.apply(bad)
    [failed] = w.pump()
    assert isinstance(failed, WorldFailed) and failed.code == "tick_identity_mismatch" and w.state.status == "failed"
    w.run(Interact(event_id=2, prompt="kept"))  # refused: the session failed
    assert w.state.pending[0].event_id == 1 and len(w.state.pending) == 1
    [reset] = w.run(ResetWorld(at_ms=2_000))
    # The refused interaction 2 was never seen: the floor rises above what was accepted only.
    assert reset.epoch == 1 and reset.discarded_event_ids == (1,) and reset.floor == 1
    assert w.state.status == "active" and w.state.chunk_index == 0 and w.state.pending == ()
    [again] = w.run(Interact(event_id=1, prompt="discarded, not re-accepted"))
    assert isinstance(again, InteractionRejected) and again.code == "duplicate_event"
    [fresh] = w.run(Interact(event_id=2, prompt="now accepted"))
    assert isinstance(fresh, InteractionAccepted)
    assert w.pump(now_ms=1_999) == []  # the new epoch starts at the reset's time
    [nxt] = w.pump(now_ms=2_000)
    assert isinstance(nxt, WorldTickIssued) and nxt.reset and nxt.epoch == 1 and nxt.chunk_index == 0


@pytest.mark.invariant("I7")
def test_a_block_of_a_tick_a_reset_cancelled_is_discarded_and_changes_nothing():
    w = Sim()
    w.run(Interact(event_id=1, prompt="p"))
    [tick] = w.pump()
    w.run(ResetWorld(at_ms=2_000))
    before = w.state
    late = w.answer(tick)
    assert kind_of(before).judge(before, late).reason == "cancelled_tick"
    w.apply(late)
    assert w.state.chunks_committed == 0 and w.state.engine_state is None


def test_realtime_pacing_issues_one_chunk_ahead_of_playback():
    w = Sim(pacing="realtime", fps=10, frames_per_chunk=5)  # 500 ms per chunk
    assert next_tick_due_ms(w.state) == 1_000  # type: ignore[arg-type]
    [t0] = w.pump(now_ms=1_000)
    w.apply(w.answer(t0))
    [t1] = w.pump(now_ms=1_000)  # chunk 1 is due at once: one chunk ahead
    w.apply(w.answer(t1))
    assert next_tick_due_ms(w.state) == 1_500  # type: ignore[arg-type]
    assert w.pump(now_ms=1_499) == [] and len(w.pump(now_ms=1_500)) == 1


def test_a_closed_world_never_moves_again():
    w = Sim()
    [closed] = w.run(CloseWorld())
    assert isinstance(closed, WorldClosed) and w.state.ended and not w.state.is_open
    assert w.pump() == []
    with pytest.raises(IllegalTransition, match="from 'closed' to 'failed'"):
        w.apply(WorldFailed(code="engine_failed", message="x"))
