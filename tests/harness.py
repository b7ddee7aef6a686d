"""Driving the pure domain the way the session host does, for domain tests.

``Harness`` keeps a list of logged events and the folded state; ``run`` decides a command and
folds what it decided; ``output`` plays the engine's part for the live tick (a stand-in for the
GPU model, the one thing that cannot run here).
"""

from __future__ import annotations

import base64
import itertools
import random
from typing import Optional

import attrs

from duplex_es.domain import (
    AckPlayback,
    AppendAudio,
    AppendText,
    CancelResponse,
    ClearInput,
    Commit,
    CreateItem,
    CreateResponse,
    DeleteItem,
    Detach,
    Heartbeat,
    OpenSession,
    Pump,
    Resume,
    SessionPatch,
    SessionState,
    TruncateItem,
    UpdateSession,
    decide,
    evolve,
    fold,
)
from duplex_es.domain.world import Interact, ResetWorld, StartWorld
from duplex_es.domain.kinds import kind_of
from duplex_es.events import Control, ContentPart, Event, Mark, TickIssued, TickOutput, WorldChunk, WorldConfig

_ids = itertools.count(1)


def nid(prefix: str) -> str:
    return f"{prefix}_{next(_ids)}"


def pcm(ms: int, value: int = 1000) -> bytes:
    """``ms`` ms of a constant 24 kHz PCM16 signal."""
    return int(value).to_bytes(2, "little", signed=True) * (24 * ms)


def append_cmd(ms: int, event_id: Optional[str] = None) -> AppendAudio:
    raw = pcm(ms)
    return AppendAudio(event_id=event_id, audio=base64.b64encode(raw).decode(), nbytes=len(raw))


@attrs.define
class Harness:
    state: SessionState = attrs.Factory(SessionState)
    log: list[tuple[int, Event]] = attrs.Factory(list)

    @classmethod
    def open(cls) -> "Harness":
        h = cls()
        h.run(OpenSession(session_id="sess_test", model="m"))
        return h

    def apply(self, events: list[Event]) -> list[Event]:
        for ev in events:
            seq = self.state.seq + 1
            self.log.append((seq, ev))
            self.state = evolve(self.state, seq, ev)
        return events

    def run(self, command: object) -> list[Event]:
        return self.apply(decide(self.state, command))

    def pump(self) -> list[Event]:
        # As the host does: no pump where the session's kind says nothing can follow.
        if kind_of(self.state).pump_idle(self.state):
            return []
        return self.run(Pump(request_ids=tuple(nid("req") for _ in range(4))))

    def live_tick(self, response_id: Optional[str] = None) -> TickIssued:
        resp = self.state.responses[response_id] if response_id else self.state.active_response
        rid = resp.tick_in_flight
        return next(ev for _, ev in reversed(self.log) if isinstance(ev, TickIssued) and ev.request_id == rid)

    def output(self, *, ms: int = 500, text: str = "word ", final: bool = False, response_id: Optional[str] = None, **override) -> list[Event]:
        """The engine's output for the live tick (of the default response, or ``response_id``):
        ``ms`` of audio and ``text``."""
        t = self.live_tick(response_id)
        resp = self.state.responses[t.response_id]
        base = self.state.items[resp.item_id]
        if override.get("new_item_id"):
            base = attrs.evolve(base, full_text="", audio_samples=0)
        fields = dict(
            session_id=self.state.session_id,
            request_id=t.request_id,
            response_id=t.response_id,
            epoch=t.epoch,
            chunk_index=t.chunk_index,
            applied_event_ids=t.applied_event_ids,
            audio=base64.b64encode(pcm(ms)).decode(),
            text_delta=text,
            marks=(Mark(text_chars=len(base.full_text), audio_ms=base.generated_ms),),
            final=final,
        )
        fields.update(override)
        return self.apply([TickOutput(**fields)])

    def spoken_turn(self, ms: int = 300) -> str:
        """Append ``ms`` of audio, commit, create a response; returns the response id."""
        self.run(append_cmd(ms))
        self.run(Commit(item_id=nid("item")))
        rid = nid("resp")
        evs = self.run(CreateResponse(response_id=rid, item_id=nid("item"), request_id=nid("req")))
        assert evs[0].TYPE == "response.created", evs
        return rid

    def refold(self) -> SessionState:
        return fold(self.log)


def random_session(rng: random.Random, n_events: int) -> list[tuple[int, Event]]:
    """A log of exactly ``n_events`` events (a prefix of what it ran) made by driving the
    domain with random client commands and engine outputs: a speech session, or a world
    session when ``rng`` says so. Used by property tests of whatever reads logs."""
    if rng.random() < 0.25:
        return _random_world(rng, n_events)

    def nid(prefix: str) -> str:  # random ids: sorted order is not creation order
        return f"{prefix}_{rng.getrandbits(64):016x}"

    h = Harness.open()
    while len(h.log) < n_events:
        before = h.state
        resp = before.active_response
        step = rng.choice(
            ["append", "append", "text", "commit", "commit", "clear", "create", "create", "cancel", "output", "output",
             "final", "ack", "truncate", "pump", "update", "item", "delete", "detach", "resume", "heartbeat"]
        )
        if step == "append":
            h.run(append_cmd(rng.choice([20, 120, 300])))
        elif step == "text":
            h.run(AppendText(text=rng.choice(["hi", "what is the weather", "é ☃"])))
        elif step == "commit":
            h.run(Commit(item_id=nid("item")))
        elif step == "clear":
            h.run(ClearInput())
        elif step == "create":
            h.run(CreateResponse(response_id=nid("resp"), item_id=nid("item"), request_id=nid("req")))
        elif step == "cancel":
            h.run(CancelResponse())
        elif step in ("output", "final") and resp is not None and resp.tick_in_flight:
            h.output(ms=rng.choice([100, 500]), final=step == "final")
        elif step == "ack" and before.responses:
            r = list(before.responses.values())[-1]
            h.run(AckPlayback(response_id=r.id, played_ms=r.generated_ms // 2))
        elif step == "truncate" and before.responses:
            r = list(before.responses.values())[-1]
            h.run(TruncateItem(item_id=r.item_id, audio_end_ms=r.generated_ms // 3))
        elif step == "update":
            h.run(UpdateSession(patch=SessionPatch(instructions=rng.choice(["be brief", "be kind"]))))
        elif step == "item":
            content = (ContentPart(type="input_text", text="typed"),)
            h.run(CreateItem(item_id=nid("item"), role="user", content=content))
        elif step == "delete" and before.item_order:
            h.run(DeleteItem(item_id=rng.choice(before.item_order)))
        elif step == "detach":
            h.run(Detach(at_ms=1_000 * len(h.log)))
        elif step == "resume":
            h.run(Resume(expected_generation=before.lease.generation, at_ms=1_000 * len(h.log)))
        elif step == "heartbeat":
            h.run(Heartbeat())
        else:
            h.run(Pump(request_ids=tuple(nid("req") for _ in range(4))))
    return h.log[:n_events]


def _random_world(rng: random.Random, n_events: int) -> list[tuple[int, Event]]:
    h = Harness()
    cfg = WorldConfig(pacing="fast", max_pending=8)
    h.run(StartWorld(session_id="world_prop", config=cfg, at_ms=0, resume_token_hash="0" * 64))
    next_id = 1
    while len(h.log) < n_events:
        state = h.state
        step = rng.choice(["interact", "interact", "pump", "chunk", "chunk", "bad", "reset", "detach", "resume"])
        if step == "interact":
            keys = rng.sample(["W", "A", "S", "D", "J", "L"], rng.randint(0, 2))
            prompt = rng.choice([None, None, "snowy peaks"])
            h.run(Interact(event_id=next_id, prompt=prompt, controls=(Control(track="camera", schema="duplex_es.camera_keys.v1", data={"keys": keys}),)))
            next_id += rng.choice([1, 1, 2])
        elif step in ("chunk", "bad") and state.inflight is not None:
            t = state.inflight
            index = t.chunk_index if step == "chunk" else t.chunk_index + 7
            h.apply([WorldChunk(session_id=state.session_id, request_id=t.request_id, epoch=t.epoch, chunk_index=index,
                                applied_event_ids=t.applied_event_ids, frames=("AA==",), frame_hashes=("0" * 64,),
                                engine_state={"x": len(h.log), "yaw": 0.5})])
            h.pump()
        elif step == "reset":
            h.run(ResetWorld(at_ms=len(h.log)))
        elif step == "detach":
            h.run(Detach(at_ms=len(h.log)))
        elif step == "resume":
            h.run(Resume(expected_generation=state.lease.generation, at_ms=len(h.log)))
        else:
            h.run(Pump(request_ids=(nid("req"),), now_ms=len(h.log)))
    return h.log[:n_events]
