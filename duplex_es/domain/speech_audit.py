"""The speech kind's audit: the tick, output, response and transcription rules checked on a
session's decoded events (docs/architecture.md, I5, I6; the ``audit`` command runs it).

The checks deliberately do not reuse the reducer's bookkeeping: they walk the events and
recompute what must hold, so a reducer bug cannot hide itself. The state is folded alongside
only for verdicts and for what a transcription names.

* **ticks** — each tick's ``applied_event_ids`` are strictly increasing, name accepted
  model-feeding events logged before the tick, and are never named by another tick; every
  model-feeding event is applied by exactly one committed tick or discarded by exactly one
  explicit event; a closed session leaves nothing pending;
* **outputs** — every output names an issued tick and echoes its identity exactly; no tick has
  two outputs;
* **responses** — each response ends with exactly one ``response.done`` and no accepted output
  follows it;
* **transcriptions** — each input transcription names a user item of the session, is answered
  at most once by an output echoing its request and item, and a closed session leaves none
  unanswered and uncancelled;
* **tool_calls** — every function call is made once: by the accepted output whose
  ``function_call`` chunk first names its ``call_id``, or by a client-created ``function_call``
  item, and no ``call_id`` is made twice; a call's later chunks come from its own response, name
  its function and stop at its ``done`` chunk; every ``function_call_output`` item answers a call of this
  session made earlier in the log whose arguments were complete, and no call is answered twice;
* **units** — in a full-duplex session every append is applied by exactly one committed unit,
  in log order, each answer echoing its unit; only appends after the last committed unit may be
  left over; a judge unit (``semantic_vad``'s, in a turn-based session) applies no append;
* **fold** — an event the reducer cannot fold at all (a forged one) is reported, and the audit
  goes on with the state before it.
"""

from __future__ import annotations

from typing import Optional, Sequence

import attrs

from duplex_es.domain.kind import Evolve, TickAudit, Violation
from duplex_es.domain.judge import answer_verdict
from duplex_es.domain.responses import classify_output
from duplex_es.domain.state import SessionState
from duplex_es.events import (
    JUDGE_UNIT,
    MODEL_FEEDING,
    EpochAdvanced,
    FunctionCallChunk,
    Event,
    ItemCreated,
    ResponseCreated,
    ResponseDone,
    SessionClosed,
    TickFailed,
    TickIssued,
    TickOutput,
    TranscriptionCompleted,
    TranscriptionFailed,
    TranscriptionRequested,
    AudioAppended,
    UnitFailed,
    UnitIssued,
    UnitOutput,
)

__all__ = ["audit_speech"]


def audit_speech(session_id: str, events: Sequence[tuple[int, Event]], evolve: Evolve) -> TickAudit:
    """The violations of a speech session's events ``(seq, event)`` and its tick counts;
    ``evolve`` folds the state the verdicts are judged on."""
    bad: list[Violation] = []
    # ticks and outputs ---------------------------------------------------------------------
    feeding: dict[int, str] = {}  # seq -> type of every accepted model-feeding event
    applied_by: dict[int, str] = {}  # event seq -> request_id of the tick naming it
    discarded: dict[int, int] = {}  # event seq -> seq of the event discarding it
    ticks: dict[str, tuple[int, TickIssued]] = {}
    outputs: dict[str, int] = {}
    committed: set[str] = set()
    cancelled: set[str] = set()
    created: dict[str, int] = {}
    done: dict[str, int] = {}
    transcriptions: dict[str, tuple[int, str]] = {}  # request_id -> (seq, item_id)
    transcribed: dict[str, int] = {}  # request_id -> seq of its output
    closed = False
    calls = _ToolCalls()
    units = _Units()
    state = SessionState()
    for seq, ev in events:
        relevant = getattr(ev, "model_relevant", True) and getattr(ev, "in_conversation", True)
        if ev.TYPE in MODEL_FEEDING and relevant:
            feeding[seq] = ev.TYPE
        if isinstance(ev, TickIssued):
            if ev.request_id in ticks:
                bad.append(Violation("ticks", seq, f"request_id {ev.request_id} issued twice"))
            ticks[ev.request_id] = (seq, ev)
            ids = list(ev.applied_event_ids)
            if ids != sorted(set(ids)):
                bad.append(Violation("ticks", seq, f"applied_event_ids {ids} are not strictly increasing"))
            for a in ids:
                if a >= seq or a not in feeding:
                    bad.append(Violation("ticks", seq, f"applies seq {a}, which is not an accepted model-feeding event before it"))
                elif a in applied_by:
                    bad.append(Violation("ticks", seq, f"applies seq {a}, already applied by {applied_by[a]}"))
                elif a in units.applied_items:
                    bad.append(Violation("ticks", seq, f"applies seq {a}, whose item unit {units.applied_items[a]} applied"))
                elif a in discarded:
                    bad.append(Violation("ticks", seq, f"applies seq {a}, discarded at seq {discarded[a]}"))
                else:
                    applied_by[a] = ev.request_id
        elif isinstance(ev, (TickOutput, TickFailed)):
            issued = ticks.get(ev.request_id)
            if issued is None:
                bad.append(Violation("outputs", seq, f"output for unknown tick {ev.request_id}"))
            else:
                t = issued[1]
                echo = (ev.session_id, ev.response_id, ev.epoch, ev.chunk_index, tuple(ev.applied_event_ids))
                want = (session_id, t.response_id, t.epoch, t.chunk_index, tuple(t.applied_event_ids))
                if echo != want:
                    bad.append(Violation("outputs", seq, f"output does not echo tick {ev.request_id}: {echo} != {want}"))
            if ev.request_id in outputs:
                bad.append(Violation("outputs", seq, f"tick {ev.request_id} has a second output (first at seq {outputs[ev.request_id]})"))
            outputs[ev.request_id] = seq
            verdict = classify_output(state, ev)
            if isinstance(ev, TickOutput) and verdict.accepted:
                committed.add(ev.request_id)
                if ev.function_call is not None:
                    bad.extend(calls.chunk(seq, ev.function_call, ev.response_id))
                if ev.response_id in done:
                    bad.append(Violation("responses", seq, f"accepted output after response.done of {ev.response_id}"))
        elif isinstance(ev, EpochAdvanced):
            cancelled.update(ev.cancelled_request_ids)
            for d in ev.discarded_event_ids:
                if d not in feeding:
                    bad.append(Violation("ticks", seq, f"discards seq {d}, which is not a model-feeding event"))
                elif d in discarded:
                    bad.append(Violation("ticks", seq, f"discards seq {d} a second time"))
                else:
                    owner = applied_by.get(d)
                    if owner is not None and (owner in committed or owner not in ev.cancelled_request_ids):
                        bad.append(Violation("ticks", seq, f"discards seq {d}, applied by live or committed tick {owner}"))
                    if d in units.applied_items:
                        bad.append(Violation("ticks", seq, f"discards seq {d}, whose item unit {units.applied_items[d]} applied"))
                    discarded[d] = seq
        elif isinstance(ev, ResponseCreated):
            created[ev.response_id] = seq
        elif isinstance(ev, ResponseDone):
            if ev.response_id not in created:
                bad.append(Violation("responses", seq, f"response.done for unknown response {ev.response_id}"))
            if ev.response_id in done:
                bad.append(Violation("responses", seq, f"second response.done for {ev.response_id}"))
            done[ev.response_id] = seq
            calls.ended[ev.response_id] = ev.status
        elif isinstance(ev, TranscriptionRequested):
            if ev.request_id in transcriptions or ev.request_id in ticks:
                bad.append(Violation("transcriptions", seq, f"request_id {ev.request_id} issued twice"))
            transcriptions[ev.request_id] = (seq, ev.item_id)
            if ev.item_id not in state.items or state.items[ev.item_id].role != "user":
                bad.append(Violation("transcriptions", seq, f"transcription of {ev.item_id}, which is not a user item of this session"))
        elif isinstance(ev, (TranscriptionCompleted, TranscriptionFailed)):
            asked = transcriptions.get(ev.request_id)
            if asked is None:
                bad.append(Violation("transcriptions", seq, f"transcript for unknown request {ev.request_id}"))
            elif ev.item_id != asked[1] or ev.session_id != session_id:
                bad.append(Violation("transcriptions", seq, f"transcript of {ev.item_id} does not echo request {ev.request_id} (item {asked[1]})"))
            if ev.request_id in transcribed:
                bad.append(Violation("transcriptions", seq, f"request {ev.request_id} answered twice (first at seq {transcribed[ev.request_id]})"))
            transcribed[ev.request_id] = seq
        elif isinstance(ev, ItemCreated):  # logged only when accepted (refusals are command.rejected)
            bad.extend(calls.item(seq, ev))
            units.item_seqs[ev.item_id] = seq
        elif isinstance(ev, AudioAppended):
            units.appends.append(seq)
        elif isinstance(ev, UnitIssued):
            bad.extend(units.issued(seq, ev))
        elif isinstance(ev, (UnitOutput, UnitFailed)):
            bad.extend(units.answered(seq, ev, session_id, answer_verdict(state, ev).accepted))
        elif isinstance(ev, SessionClosed):
            closed = True
        known = state.responses.keys() if isinstance(ev, UnitOutput) else ()
        unit_call = isinstance(ev, UnitOutput) and ev.function_call is not None and answer_verdict(state, ev).accepted
        try:
            state = evolve(state, seq, ev)
        except Exception as exc:  # a forged event the reducer cannot take: report it, audit on
            bad.append(Violation("fold", seq, f"the reducer cannot fold this {ev.TYPE} ({type(exc).__name__}: {exc})"))
        if isinstance(ev, UnitOutput):
            for rid in state.responses.keys() - set(known):  # a full-duplex model opened its turn
                created[rid] = seq
            if unit_call and state.active_response_id is not None:  # the model's turn made a call
                bad.extend(calls.chunk(seq, ev.function_call, state.active_response_id))  # type: ignore[arg-type]

    for rid, (seq, t) in ticks.items():
        if t.applied_event_ids and rid not in committed and rid not in cancelled and closed:
            bad.append(Violation("ticks", seq, f"tick {rid} neither committed nor cancelled in a closed session"))
    applied_ok = {s for s, rid in applied_by.items() if rid in committed} | set(units.applied_items)  # items a full-duplex unit applied
    pending = [s for s in feeding if s not in applied_ok and s not in discarded]
    if closed:
        for s in pending:
            bad.append(Violation("ticks", s, f"{feeding[s]} at seq {s} was never applied nor discarded"))
    for rid, seq in created.items():
        if rid not in done and closed:
            bad.append(Violation("responses", seq, f"response {rid} never got response.done"))
    bad.extend(units.finish())
    for rid, (seq, item_id) in transcriptions.items():
        if closed and rid not in transcribed and rid not in cancelled:
            bad.append(Violation("transcriptions", seq, f"transcription {rid} of {item_id} neither answered nor cancelled in a closed session"))

    return TickAudit(
        violations=tuple(bad),
        ticks=len(ticks),
        committed_ticks=len(committed),
        applied_events=len(applied_ok),
        discarded_events=len(discarded),
        pending_events=len(pending),
        responses=len(created),
    )




@attrs.define
class _Call:
    """One function call as the events made it: where (``seq``), by which response (``None``:
    a client-created item), its arguments so far, and the seqs that completed and answered it."""

    seq: int
    name: str
    response_id: Optional[str]
    arguments: str = ""
    done_seq: Optional[int] = None
    answered_seq: Optional[int] = None


def _maker(call: _Call) -> str:
    how = f"response {call.response_id}" if call.response_id is not None else "a client function_call item"
    return f"{how} at seq {call.seq}"


@attrs.define
class _ToolCalls:
    """The tool-call rules, recomputed from the events alone (not from the reducer's items)."""

    calls: dict[str, _Call] = attrs.Factory(dict)
    ended: dict[str, str] = attrs.Factory(dict)  # response_id -> status of its response.done

    def chunk(self, seq: int, c: FunctionCallChunk, response_id: str) -> list[Violation]:
        """An accepted output's ``function_call`` chunk ``c`` in response ``response_id`` (a
        tick's, or a full-duplex model's turn): it opens a new call or extends its own."""
        call = self.calls.get(c.call_id)
        if call is None:
            call = self.calls[c.call_id] = _Call(seq, c.name, response_id)
        elif call.response_id != response_id:
            return [Violation("tool_calls", seq, f"call {c.call_id} made twice: by {_maker(call)} and by response {response_id}")]
        elif call.done_seq is not None:
            return [Violation("tool_calls", seq, f"call {c.call_id} extended after its done chunk at seq {call.done_seq}")]
        elif c.name != call.name:
            return [Violation("tool_calls", seq, f"chunk of call {c.call_id} names {c.name!r}, the call (seq {call.seq}) is {call.name!r}")]
        call.arguments += c.arguments_delta
        if c.done:
            call.done_seq = seq
        return []

    def item(self, seq: int, ev: ItemCreated) -> list[Violation]:
        """A client-created item: a ``function_call`` makes a call, a ``function_call_output``
        answers one."""
        if ev.type not in ("function_call", "function_call_output"):
            return []
        if not ev.call_id:
            return [Violation("tool_calls", seq, f"{ev.type} item {ev.item_id} names no call_id")]
        call = self.calls.get(ev.call_id)
        if ev.type == "function_call":
            if call is not None:
                return [Violation("tool_calls", seq, f"call {ev.call_id} made twice: by {_maker(call)} and by item {ev.item_id}")]
            self.calls[ev.call_id] = _Call(seq, ev.name or "", None, ev.arguments or "", done_seq=seq)
            return []
        if call is None:
            return [Violation("tool_calls", seq, f"output item {ev.item_id} answers call {ev.call_id}, which no call of this session made before it (a call of another session, or none)")]
        if call.answered_seq is not None:
            return [Violation("tool_calls", seq, f"call {ev.call_id} answered twice: at seq {call.answered_seq} and at seq {seq}")]
        call.answered_seq = seq
        if call.done_seq is None:
            cut = f"its response {call.response_id} ended {self.ended[call.response_id]}" if call.response_id in self.ended else "they were still streaming"
            return [Violation("tool_calls", seq, f"output item {ev.item_id} answers call {ev.call_id}, whose arguments never completed ({cut})")]
        return []


@attrs.define
class _Units:
    """The full-duplex rule (docs/duplex.md, "Units"), recomputed from the events: every
    append is applied by exactly one committed unit, in log order — a unit applies appends
    logged before it, after everything earlier committed units applied; a cancelled unit's
    appends are applied by a later one. Only appends after the last committed unit may be
    left over (the session ended or the model is still hearing them). A client item reaches
    the model in at most one committed unit."""

    appends: list[int] = attrs.Factory(list)
    read: dict[str, str] = attrs.Factory(dict)  # client item id -> the committed unit that carried it
    item_seqs: dict[str, int] = attrs.Factory(dict)  # client item id -> seq of its conversation.item.created
    applied_items: dict[int, str] = attrs.Factory(dict)  # that seq -> the committed unit that applied it
    units: dict[str, tuple[int, UnitIssued]] = attrs.Factory(dict)
    applied: dict[int, str] = attrs.Factory(dict)  # append seq -> committed unit
    answers: dict[str, int] = attrs.Factory(dict)  # unit -> seq of its answer

    def issued(self, seq: int, ev: UnitIssued) -> list[Violation]:
        if ev.request_id in self.units:
            return [Violation("units", seq, f"unit {ev.request_id} issued twice")]
        self.units[ev.request_id] = (seq, ev)
        ids = list(ev.applied_event_ids)
        if ev.purpose == JUDGE_UNIT and ids:
            return [Violation("units", seq, f"judge unit {ev.request_id} applies appends {ids[:8]}: the input buffer's commit does")]
        known = set(self.appends)
        if ids != sorted(set(ids)) or not set(ids) <= known:
            return [Violation("units", seq, f"unit {ev.request_id} applies {ids[:8]}, not increasing seqs of appends logged before it")]
        return []

    def answered(self, seq: int, ev: UnitOutput | UnitFailed, session_id: str, accepted: bool) -> list[Violation]:
        issued = self.units.get(ev.request_id)
        if issued is None:
            return [Violation("units", seq, f"answer to unknown unit {ev.request_id}")]
        u = issued[1]
        bad = []
        if (ev.session_id, ev.epoch, ev.chunk_index, tuple(ev.applied_event_ids)) != (session_id, u.epoch, u.chunk_index, tuple(u.applied_event_ids)):
            bad.append(Violation("units", seq, f"answer does not echo unit {ev.request_id}"))
        if ev.request_id in self.answers:
            bad.append(Violation("units", seq, f"unit {ev.request_id} answered twice (first at seq {self.answers[ev.request_id]})"))
        self.answers[ev.request_id] = seq
        if not accepted:
            return bad
        last = max(self.applied, default=0)
        for a in u.applied_event_ids:
            if a in self.applied:
                bad.append(Violation("units", seq, f"append {a} applied twice: by {self.applied[a]} and {ev.request_id}"))
            elif a < last:
                bad.append(Violation("units", seq, f"append {a} applied after later append {last}"))
            self.applied[a] = ev.request_id
        for entry in u.items:
            if entry.item_id in self.read:
                bad.append(Violation("units", seq, f"item {entry.item_id} reached the model twice: in {self.read[entry.item_id]} and {ev.request_id}"))
            self.read[entry.item_id] = ev.request_id
            if entry.item_id in self.item_seqs:
                self.applied_items[self.item_seqs[entry.item_id]] = ev.request_id
        return bad

    def finish(self) -> list[Violation]:
        if all(u.purpose == JUDGE_UNIT for _, u in self.units.values()):
            return []  # a turn-based session: appends are committed into items instead
        last = max(self.applied, default=0)
        return [Violation("units", a, f"append {a} was never applied, yet later appends were") for a in self.appends if a < last and a not in self.applied]
