"""A session's timeline in one pass over its log: the lanes the inspector draws, on one clock.

The clock is the **audio clock** (ms of input audio the session has taken, the clock server VAD,
commits and truncations speak in) when the session has input audio, else the **wall clock** (ms
since its first event was recorded); world sessions use the wall clock. Every event is placed at
the clock's reading when it was logged. A response's audio is drawn from the clock reading at its
``response.created``, its chunks one after the other (the client may have started playing later:
its played cursor and truncation are relative to that start, as the log records them).

The pass folds every event through the reducer (verdicts of engine answers need the state before
them), keeps a state every :data:`CHECKPOINT_EVERY` events (so the state at any seq is at most
that many events away) and folds audio into waveform peaks (:mod:`duplex_es.inspect.lanes`).
It can be continued when the session grows (:meth:`Timeline.feed` more records).
"""

from __future__ import annotations

import bisect
from array import array
from typing import Any, Optional

from duplex_es.domain import evolve, fold, new_state
from duplex_es.events import (
    AudioAppended,
    CommandRejected,
    EpochAdvanced,
    SessionErased,
    Event,
    InputCleared,
    InputCommitted,
    InteractionAccepted,
    InteractionRejected,
    ItemTruncated,
    OutputAudioCleared,
    OverlapDecided,
    PlaybackAcked,
    ResponseCreated,
    ResponseDeferred,
    ResponseDone,
    SessionClosed,
    SessionDetached,
    SessionExpired,
    SessionOpened,
    SessionResumed,
    SessionUpdated,
    SpeechStarted,
    SpeechStopped,
    TickAnswer,
    TickFailed,
    TickIssued,
    TickOutput,
    TickRequest,
    TimeoutTriggered,
    TranscriptionFailed,
    TranscriptionRequested,
    TurnSignaled,
    UnitFailed,
    UnitIssued,
    UnitOutput,
    WorldChunk,
    WorldClosed,
    WorldFailed,
    WorldReset,
    WorldStarted,
    WorldTickFailed,
    WorldTickIssued,
    to_plain,
)
from duplex_es.events.audio import audio_bytes
from duplex_es.inspect.lanes import Lane
from duplex_es.replay import summarize, verdict_of
from duplex_es.store import Recorded

__all__ = ["CHECKPOINT_EVERY", "Timeline"]

#: A state is kept every this many events (the state at a seq replays at most this many).
CHECKPOINT_EVERY = 2000

#: Events shown on the lifecycle lane (resume, detach, overlap decisions, epochs...).
_LIFECYCLE = (
    SessionOpened, SessionUpdated, SessionDetached, SessionResumed, SessionExpired, SessionClosed, EpochAdvanced,
    OverlapDecided, ResponseDeferred, TurnSignaled, TimeoutTriggered, InputCleared, WorldStarted, WorldReset, WorldClosed,
)
#: Events that change what the timeline shows of a response (its ledger, items, status).
_TOUCH_RESPONSE = (ResponseCreated, TickOutput, UnitOutput, ResponseDone, PlaybackAcked, OutputAudioCleared, ItemTruncated)
#: Failures of engines and sessions, shown on the errors lane with refusals.
_FAILURES = (TickFailed, UnitFailed, TranscriptionFailed, WorldTickFailed, WorldFailed)


def _tick_kind(ev: TickRequest) -> str:
    return str(getattr(ev, "kind", "tick"))


class Timeline:
    """The timeline of one session, built by :meth:`feed` from its records in seq order.

    Attributes:
        head: the last seq fed.
        lanes: the audio lanes by name (``user``, ``response:<id>``).
        checkpoints: ``(seq, state)`` pairs, ``(0, new_state())`` first.
    """

    def __init__(self, session_id: str) -> None:
        self.session_id = session_id
        self.head = 0
        self.state: Any = new_state()
        self.kind = "speech"
        self.t0_us: Optional[int] = None
        self.last_us = 0
        # Per event (index = seq - 1): the clock readings, for "which event is at this ms".
        self.audio_ms = array("q")
        self.wall_ms = array("q")
        self.lanes: dict[str, Lane] = {}
        self.append_start: dict[int, int] = {}  # append seq -> its first sample on the input clock
        self.user_spans: list[list[int]] = []  # [start_ms, end_ms, first_seq, last_seq], merged
        self.vad: list[dict[str, Any]] = []
        self.commits: list[dict[str, Any]] = []
        self.responses: dict[str, dict[str, Any]] = {}
        self._response_state: dict[str, Any] = {}
        self._item_state: dict[str, Any] = {}
        self.ticks: dict[str, dict[str, Any]] = {}
        self.errors: list[dict[str, Any]] = []
        self.lifecycle: list[dict[str, Any]] = []
        # Sealed content this reader did not open (docs/privacy.md): how many events, and the
        # erasure that destroyed the key, if that is why.
        self.withheld = 0
        self.erased: Optional[dict[str, Any]] = None
        self.markers: list[tuple[int, str, str]] = []  # (seq, type, verdict) of every non-append event
        self.interactions: dict[int, dict[str, Any]] = {}  # world: accepted interactions by the client's event id
        self.chunks: list[dict[str, Any]] = []  # world: one per chunk tick
        self.world_config: Optional[dict[str, Any]] = None
        self.checkpoints: list[tuple[int, Any]] = [(0, self.state)]

    # ------------------------------------------------------------------------------ clock

    def _input_rate(self) -> int:
        cfg = getattr(self.state, "config", None)
        fmt = getattr(cfg, "input_format", None)
        return fmt.rate if fmt is not None else 24000

    def _now_audio_ms(self) -> int:
        clock = getattr(self.state, "input_clock", 0)
        return clock * 1000 // self._input_rate()

    @property
    def clock(self) -> str:
        """``audio`` or ``wall``: which clock the timeline is drawn on (module docstring)."""
        return "audio" if self.kind == "speech" and "user" in self.lanes and self.lanes["user"].samples else "wall"

    def at_ms(self, seq: int) -> int:
        """The clock reading (ms) when event ``seq`` was logged."""
        arr = self.audio_ms if self.clock == "audio" else self.wall_ms
        return arr[seq - 1] if 1 <= seq <= len(arr) else 0

    def seq_at(self, ms: int) -> int:
        """The last event logged at or before clock reading ``ms`` (1 at the least)."""
        arr = self.audio_ms if self.clock == "audio" else self.wall_ms
        return max(1, min(self.head, bisect.bisect_right(arr, ms)))

    # ------------------------------------------------------------------------------- pass

    def feed(self, records: list[Recorded]) -> None:
        """Fold ``records`` (the events after :attr:`head`, in seq order) into the timeline.

        Runs of audio appends (most of a speech session) are taken a run at a time: one fold
        step, one audio decode and one peaks update per run (docs/inspector.md, "Big sessions").

        Raises:
            ValueError: a record does not follow :attr:`head`.
        """
        self.withheld += sum(1 for r in records if r.withheld)
        i, n = 0, len(records)
        while i < n:
            r = records[i]
            if r.seq != self.head + 1:
                raise ValueError(f"session {self.session_id}: expected seq {self.head + 1}, got {r.seq}")
            if type(r.event) is not AudioAppended or self.t0_us is None:
                self._one(r)
                i += 1
                continue
            # The run: consecutive appends, ending at the next checkpoint's seq at the latest, so
            # the state after that seq is kept.
            j, stop = i + 1, min(n, i + 1 + (-r.seq) % CHECKPOINT_EVERY)
            while j < stop and type(records[j].event) is AudioAppended and records[j].seq == records[j - 1].seq + 1:
                j += 1
            self._appends(records[i:j])
            i = j

    def _one(self, r: Recorded) -> None:
        ev = r.event
        before = self.state
        # An append's verdict is always "accepted" (a refused one is logged as command.rejected);
        # skipping it saves a tenth of a long session's first read.
        verdict = "accepted" if isinstance(ev, AudioAppended) else verdict_of(before, ev)
        self.state = evolve(before, r.seq, ev)
        self.head = r.seq
        if self.t0_us is None:
            self.t0_us = r.recorded_at_us
            if isinstance(ev, WorldStarted):
                self.kind = "world"
        self.last_us = r.recorded_at_us
        wall = (r.recorded_at_us - self.t0_us) // 1000
        self.wall_ms.append(wall)
        self.audio_ms.append(self._now_audio_ms() if self.kind == "speech" else wall)
        if isinstance(ev, AudioAppended):
            self._append(r.seq, ev)
        else:
            self.markers.append((r.seq, ev.TYPE, verdict))
            if self.kind == "world":
                self._world(r.seq, ev, verdict)
            else:
                self._speech(r.seq, ev, verdict, before)
            if isinstance(ev, _LIFECYCLE):
                self.lifecycle.append({"seq": r.seq, "type": ev.TYPE, "summary": summarize(ev)})
            if isinstance(ev, SessionErased):
                self.erased = {"seq": r.seq, "at_us": ev.at_us, "by": ev.by, "reason": ev.reason}
            if isinstance(ev, (CommandRejected, InteractionRejected, *_FAILURES)):
                self.errors.append(self._error(r.seq, ev, verdict))
            elif isinstance(ev, TickAnswer) and not verdict.startswith("accepted"):
                self.errors.append(self._error(r.seq, ev, verdict))
        if r.seq % CHECKPOINT_EVERY == 0:
            self.checkpoints.append((r.seq, self.state))

    def _appends(self, run: list[Recorded]) -> None:
        """A run of audio appends (consecutive seqs, none but the last at a checkpoint seq): what
        :meth:`_one` does for each, a run at a time."""
        seqs = [r.seq for r in run]
        evs: list[AudioAppended] = [r.event for r in run]  # type: ignore[misc]
        before = self.state
        self.state = fold(zip(seqs, evs), before)
        self.head = seqs[-1]
        self.last_us = run[-1].recorded_at_us
        t0 = self.t0_us or 0
        self.wall_ms.extend([(r.recorded_at_us - t0) // 1000 for r in run])
        rate = self._input_rate()
        clock = before.input_clock
        readings = []
        for ev in evs:
            clock += ev.samples
            readings.append(clock * 1000 // rate)
        self.audio_ms.extend(readings)
        cfg = self.state.config
        lane = self.lanes.get("user")
        if lane is None:
            lane = self.lanes["user"] = Lane("user", cfg.input_format.type, cfg.input_format.rate)
        lane.add_many(seqs, [audio_bytes(ev) for ev in evs])
        rate = lane.rate
        spans = self.user_spans
        last = spans[-1] if spans else None
        for seq, ev in zip(seqs, evs):
            self.append_start[seq] = ev.start_sample
            start, end = ev.start_sample * 1000 // rate, (ev.start_sample + ev.samples) * 1000 // rate
            if last is not None and last[1] == start:
                last[1], last[3] = end, seq
            else:
                last = [start, end, seq, seq]
                spans.append(last)
        if self.head % CHECKPOINT_EVERY == 0:
            self.checkpoints.append((self.head, self.state))

    def _error(self, seq: int, ev: Event, verdict: str) -> dict[str, Any]:
        return {"seq": seq, "type": ev.TYPE, "code": getattr(ev, "code", None), "verdict": verdict, "summary": summarize(ev)}

    def _append(self, seq: int, ev: AudioAppended) -> None:
        cfg = self.state.config
        lane = self.lanes.get("user")
        if lane is None:
            lane = self.lanes["user"] = Lane("user", cfg.input_format.type, cfg.input_format.rate)
        self.append_start[seq] = ev.start_sample
        lane.add(seq, ev.start_sample, lane.decode(ev))
        rate = lane.rate
        start, end = ev.start_sample * 1000 // rate, (ev.start_sample + ev.samples) * 1000 // rate
        last = self.user_spans[-1] if self.user_spans else None
        if last is not None and last[1] == start:
            last[1], last[3] = end, seq
        else:
            self.user_spans.append([start, end, seq, seq])

    # ----------------------------------------------------------------------------- speech

    def _speech(self, seq: int, ev: Event, verdict: str, before: Any) -> None:
        now = self._now_audio_ms()
        if isinstance(ev, SpeechStarted):
            self.vad.append({"item_id": ev.item_id, "start_ms": ev.audio_start_ms, "end_ms": None, "seq": seq, "stop_seq": None})
        elif isinstance(ev, SpeechStopped):
            for v in reversed(self.vad):
                if v["item_id"] == ev.item_id:
                    v["end_ms"], v["stop_seq"] = ev.audio_end_ms, seq
                    break
        elif isinstance(ev, InputCommitted):
            self._commit(seq, ev)
        elif isinstance(ev, ResponseCreated):
            self._open_response(ev.response_id, seq, now)
        elif isinstance(ev, ResponseDone) and ev.response_id in self.responses:
            self.responses[ev.response_id].update(done_seq=seq, done_ms=now)
        elif isinstance(ev, (TickIssued, UnitIssued, TranscriptionRequested)):
            self._issue(seq, ev, now)
        elif isinstance(ev, TickAnswer):
            turn = self.state.active_response_id
            if isinstance(ev, UnitOutput) and turn is not None and turn not in self.responses:
                # A full-duplex model's turn: its first output (speech or a call) opens the
                # response, which may end in the same unit.
                self._open_response(turn, seq, now)
            self._answer(seq, ev, verdict, now, before)
        if isinstance(ev, _TOUCH_RESPONSE):
            self._remember_response(ev)

    def _open_response(self, rid: str, seq: int, now: int) -> None:
        """Start response ``rid``'s lane at clock reading ``now`` (its audio in the format the
        state gives it)."""
        resp = self.state.responses.get(rid)
        fmt = resp.output_format if resp is not None else self.state.config.output_format
        self.lanes[f"response:{rid}"] = Lane(f"response:{rid}", fmt.type, fmt.rate)
        self.responses[rid] = {"id": rid, "seq": seq, "start_ms": now, "done_seq": None, "done_ms": None}

    def _commit(self, seq: int, ev: InputCommitted) -> None:
        lane = self.lanes.get("user")
        rate = lane.rate if lane is not None else self._input_rate()
        start = None
        if ev.segments and ev.segments[0].seq in self.append_start:
            start = self.append_start[ev.segments[0].seq] + ev.segments[0].offset
        self.commits.append({
            "seq": seq,
            "item_id": ev.item_id,
            "start_ms": None if start is None else start * 1000 // rate,
            "end_ms": None if start is None else (start + ev.samples) * 1000 // rate,
            "audio_ms": ev.samples * 1000 // rate,
            "text": ev.text,
        })

    def _issue(self, seq: int, ev: TickRequest, now: int) -> None:
        applied = list(getattr(ev, "applied_event_ids", ()) or ())
        if isinstance(ev, TranscriptionRequested):
            applied = [s.seq for s in ev.audio]
        self.ticks[ev.request_id] = {
            "request_id": ev.request_id,
            "kind": _tick_kind(ev),
            "response_id": getattr(ev, "response_id", None),
            "item_id": getattr(ev, "item_id", None),
            "chunk": getattr(ev, "chunk_index", None),
            "epoch": getattr(ev, "epoch", None),
            "seq": seq,
            "at_ms": now,
            "applied": applied,
            "answers": [],
            "summary": summarize(ev),
        }

    def _answer(self, seq: int, ev: TickAnswer, verdict: str, now: int, before: Any) -> None:
        tick = self.ticks.get(ev.request_id)  # type: ignore[attr-defined]
        if tick is not None:
            tick["answers"].append({"seq": seq, "at_ms": now, "type": ev.TYPE, "verdict": verdict, "summary": summarize(ev)})
        if verdict != "accepted" or not getattr(ev, "audio", ""):
            return
        rid = ev.response_id if isinstance(ev, TickOutput) else (tick or {}).get("response_id") or before.duplex.response_id or self.state.duplex.response_id
        lane = self.lanes.get(f"response:{rid}")
        if lane is not None:
            lane.add(seq, lane.samples, lane.decode(ev))

    def _remember_response(self, ev: Event) -> None:
        rid = getattr(ev, "response_id", None)
        if isinstance(ev, ItemTruncated):
            item = self.state.items.get(ev.item_id)
            rid = item.response_id if item is not None else None
        if isinstance(ev, UnitOutput):
            rid = self.state.duplex.response_id
        resp = self.state.responses.get(rid) if rid else None
        if resp is None:
            return
        self._response_state[rid] = resp
        for iid in resp.item_ids:
            item = self.state.items.get(iid)
            if item is not None:
                self._item_state[iid] = item

    # ------------------------------------------------------------------------------ world

    def _world(self, seq: int, ev: Event, verdict: str) -> None:
        now = (self.last_us - (self.t0_us or 0)) // 1000
        if isinstance(ev, WorldStarted):
            self.world_config = to_plain(ev.config)
        elif isinstance(ev, InteractionAccepted):
            self.interactions[ev.event_id] = {"seq": seq, "event_id": ev.event_id, "prompt": ev.prompt, "controls": [to_plain(c) for c in ev.controls]}
        elif isinstance(ev, WorldTickIssued):
            self.ticks[ev.request_id] = {
                "request_id": ev.request_id, "kind": "world", "chunk": ev.chunk_index, "epoch": ev.epoch, "seq": seq,
                "at_ms": now, "applied": list(ev.applied_event_ids), "answers": [], "summary": summarize(ev),
            }
        elif isinstance(ev, (WorldChunk, WorldTickFailed)):
            tick = self.ticks.get(ev.request_id)
            if tick is not None:
                tick["answers"].append({"seq": seq, "at_ms": now, "type": ev.TYPE, "verdict": verdict, "summary": summarize(ev)})
            if isinstance(ev, WorldChunk):
                self.chunks.append({
                    "seq": seq, "at_ms": now, "chunk": ev.chunk_index, "epoch": ev.epoch, "verdict": verdict,
                    "frames": len(ev.frames), "mime_type": ev.mime_type, "request_id": ev.request_id,
                    "applied": [self.interactions.get(i, {"event_id": i}) for i in ev.applied_event_ids],
                })

    # ---------------------------------------------------------------------------- output

    def overview(self) -> dict[str, Any]:
        """The timeline as JSON-ready data (docs/inspector.md, "Session overview")."""
        clock = self.clock
        at = self.audio_ms if clock == "audio" else self.wall_ms
        user = self.lanes.get("user")
        responses = []
        for rid, r in self.responses.items():
            lane = self.lanes[f"response:{rid}"]
            resp = self._response_state.get(rid)
            start = r["start_ms"] if clock == "audio" else at[r["seq"] - 1]
            done = None if r["done_seq"] is None else (r["done_ms"] if clock == "audio" else at[r["done_seq"] - 1])
            responses.append({
                **r,
                "start_ms": start,
                "done_ms": done,
                "audio_ms": lane.ms,
                "rate": lane.rate,
                "format": lane.type,
                "status": str(resp.status) if resp else "in_progress",
                "reason": resp.status_reason if resp else None,
                "error_code": resp.status_error_code if resp else None,
                "played_ms": resp.played_ms if resp else 0,
                "committed_ms": resp.committed_ms if resp else 0,
                "cap_ms": resp.cap_ms if resp else None,
                "items": [self._item_json(iid) for iid in (resp.item_ids if resp else ()) if iid in self._item_state],
                "spans": self._spans(lane, start),
            })
        ticks = []
        for t in self.ticks.values():
            ticks.append({**t, "at_ms": t["at_ms"] if clock == "audio" else at[t["seq"] - 1],
                          "answers": [{**a, "at_ms": a["at_ms"] if clock == "audio" else at[a["seq"] - 1]} for a in t["answers"]]})
        return {
            "session_id": self.session_id,
            "kind": self.kind,
            "head": self.head,
            "clock": clock,
            "started_at_us": self.t0_us,
            "wall_ms": (self.last_us - (self.t0_us or 0)) // 1000,
            "duration_ms": max([at[-1] if at else 0, user.ms if user else 0] + [r["start_ms"] + r["audio_ms"] for r in responses]),
            "status": str(getattr(self.state, "status", "")),
            "user": {
                "audio_ms": user.ms if user else 0,
                "rate": user.rate if user else None,
                "format": user.type if user else None,
                "spans": self.user_spans,
                "vad": self.vad,
                "commits": self.commits,
            },
            "responses": responses,
            "ticks": ticks,
            "errors": [{**e, "at_ms": at[e["seq"] - 1]} for e in self.errors],
            "lifecycle": [{**e, "at_ms": at[e["seq"] - 1]} for e in self.lifecycle],
            "markers": [[seq, at[seq - 1], typ, verdict] for seq, typ, verdict in self.markers],
            "world": None if self.kind != "world" else {"config": self.world_config, "chunks": self.chunks},
            "content": {"withheld_events": self.withheld, "erased": self.erased},
        }

    def _item_json(self, iid: str) -> dict[str, Any]:
        it = self._item_state[iid]
        rate = it.audio_format.rate
        return {
            "id": iid,
            "type": it.type,
            "offset_ms": it.offset_ms,
            "audio_ms": it.audio_samples * 1000 // rate,
            "text": it.full_text,
            "transcript": it.transcript,
            "truncated_ms": it.truncated_ms,
            "marks": [[m.text_chars, m.audio_ms] for m in it.marks],
        }

    @staticmethod
    def _spans(lane: Lane, start_ms: int) -> list[list[int]]:
        """The lane's pieces merged into contiguous runs of seqs, on the session clock."""
        out: list[list[int]] = []
        for seq, at, n in zip(lane.seqs, lane.starts, lane.counts):
            a, b = start_ms + at * 1000 // lane.rate, start_ms + (at + n) * 1000 // lane.rate
            if out and out[-1][1] == a:
                out[-1][1], out[-1][3] = b, seq
            else:
                out.append([a, b, seq, seq])
        return out

    def state_from(self, seq: int) -> tuple[int, Any]:
        """The newest checkpoint at or before ``seq``: ``(its seq, its state)``."""
        i = bisect.bisect_right([s for s, _ in self.checkpoints], seq) - 1
        return self.checkpoints[max(0, i)]
