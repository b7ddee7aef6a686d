"""Driving the pure domain the way the session host does, for domain tests.

``Harness`` keeps a list of logged events and the folded state; ``run`` decides a command and
folds what it decided; ``output`` plays the engine's part for the live tick (a stand-in for the
GPU model, the one thing that cannot run here).
"""

from __future__ import annotations

import base64
import itertools
from typing import Optional

import attrs

from duplex_es.domain import (
    AppendAudio,
    Commit,
    CreateResponse,
    OpenSession,
    Pump,
    SessionState,
    decide,
    evolve,
    fold,
)
from duplex_es.events import Event, Mark, TickIssued, TickOutput

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
