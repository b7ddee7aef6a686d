"""Full-duplex speech sessions: the model hears the input continuously and decides when to
talk (docs/duplex.md).

Appends of a ``full_duplex`` session do not fill the input buffer: they wait in
``state.duplex`` until a *unit* applies them — one unit in flight at a time, issued once at least
``chunk_period_ms`` of input audio waits, applying every waiting append in order. The engine's
answer to a unit listens or speaks; speaking with no open turn commits the user's utterance as a
user item and opens a response (its ids derived from the unit, so every replay names them the
same); ``end_of_turn`` ends it (the pump logs its ``response.done``). A cancelled unit (its epoch
moved: a barge-in, a cancel, the session's end) gives its appends back, so each append is
applied by exactly one committed unit (docs/architecture.md, I5).

User speech that begins while the model holds the turn goes through the overlap policy
(``overlap``): ``barge_in`` cancels the turn (``turn_detected``) and the speech reaches the model
in the next unit; ``listen`` lets the model go on. Each decision is an ``overlap.decided`` event.
What the model heard during its turn goes into the next user item, as what it heard before.

A *backchannel* (``backchannel``: "Mm-hm." while the user keeps talking) is a whole response
in one output that leaves the user's utterance uncommitted; one that breaks those rules fails
its unit with ``invalid_engine_backchannel``.
"""

from __future__ import annotations

from typing import Callable, Optional

from duplex_es.domain.calls import apply_chunk, call_problem, history_entry
from duplex_es.domain.commands import CreateResponse
from duplex_es.domain.errors import Code
from duplex_es.domain.playback import refresh_transcripts
from duplex_es.domain.replace import replace
from duplex_es.domain.limits import MAX_INSTRUCTIONS_CHARS
from duplex_es.domain.rules import grow_item, open_output_item, put_item, put_response, reject, shown
from duplex_es.domain.state import Item, Response, SessionState, TurnRequest
from duplex_es.domain.ticks import Verdict, judge_echo
from duplex_es.events import (
    AudioSegment,
    Event,
    OverlapDecided,
    SpeechInputs,
    TickIdentity,
    TurnRequested,
    UnitFailed,
    UnitIssued,
    UnitOutput,
)

__all__ = [
    "TURN_MODES",
    "OVERLAP_POLICIES",
    "CHUNK_PERIOD_RANGE_MS",
    "MAX_SILENCE_UNITS",
    "unit_due",
    "next_unit_due_ms",
    "wants_silence",
    "overlap_on_start",
    "overlap_ongoing",
    "overlap_on_stop",
    "end_drop",
    "unit_verdict",
    "backchannel_breach",
    "requeue",
    "evolve_unit_issued",
    "evolve_unit_output",
    "evolve_unit_failed",
    "evolve_overlap_decided",
    "add_pending",
    "queue_item",
    "request_turn",
    "evolve_turn_requested",
    "unit_inputs",
]

#: ``duplex.mode`` values: a response per turn, or the model listening all the time.
TURN_MODES = ("turn_based", "full_duplex")

#: ``duplex.overlap`` values: what user speech over the model's turn does.
OVERLAP_POLICIES = ("barge_in", "listen", "drop")

#: Allowed ``duplex.barge_in_ms`` (ms of speech over the model's turn before it barges in; 0:
#: at once).
BARGE_IN_RANGE_MS = (0, 10_000)

#: Allowed ``duplex.chunk_period_ms`` (ms of input audio per unit). vLLM-Omni's default is
#: 1000 ms; ours is 200 ms, which a CPU engine steps well within real time.
CHUNK_PERIOD_RANGE_MS = (20, 5000)


def _suffix(request_id: str) -> str:
    return request_id.removeprefix("req_")


def unit_inputs(state: SessionState) -> SpeechInputs:
    """The session's settings a unit carries for its engine (formats, voice, instructions, tools)."""
    cfg = state.config
    assert cfg is not None
    return SpeechInputs(
        input_format=cfg.input_format,
        output_format=cfg.output_format,
        instructions=cfg.instructions,
        voice=cfg.voice,
        output_modalities=cfg.output_modalities,
        engine=cfg.engine or cfg.model,
        model=cfg.model,
        max_output_tokens=cfg.max_output_tokens,
        speed=cfg.speed,
        temperature=cfg.temperature,
        tools=cfg.tools,
        tool_choice=cfg.tool_choice,
        parallel_tool_calls=cfg.parallel_tool_calls,
        backchannels=cfg.backchannels,
    )


#: The most appends one unit applies, whatever their size: each is answered by its own
#: ``input_audio_buffer.processed`` in the unit's answer, and one log event projects to at most
#: 1000 wire events (docs/protocol.md, Event ids). A client sending appends of a few samples
#: gets units of fewer samples than a chunk period.
MAX_UNIT_APPENDS = 400

#: The most silence units in a row (no real input between them): a model that keeps
#: waiting without an answer stops being stepped until input comes (the reference's bound of
#: 64 per auto-response turn).
MAX_SILENCE_UNITS = 64


def wants_silence(state: SessionState) -> bool:
    """Whether the engine is to be stepped on without input: its turn is open, or its last
    answer asked to (``continue_turn``), and the silence bound is not reached."""
    d = state.duplex
    return state.full_duplex and (d.response_id is not None or d.continue_turn) and d.silent_units < MAX_SILENCE_UNITS


def unit_due(state: SessionState, request_id: Optional[str], *, epoch: Optional[int] = None, now_ms: Optional[int] = None) -> list[Event]:
    """The next unit, if one is due (docs/duplex.md, "Units"), for a full-duplex session with
    no unit in flight (``request_id`` ``None``: nothing can be issued):

    * at least one chunk period of input waits: a unit of the oldest waiting appends that make
      one period (whole appends) — so a session's units are the same whatever the timing, and a
      replay or a take-over after a crash hears the same units;
    * else, at once, when the client is waiting for the model: it created conversation items
      (a tool's output) or asked for the model's turn (``response.create``) — with what audio
      waits, if any;
    * else, while the engine is mid-turn (:func:`wants_silence`) and no input waits, a *silence
      unit* of one chunk period of quiet, one period after the last unit (``now_ms``, the
      host's clock); input that waits short of a period (a client that stopped mid-period) goes
      in a unit of its own two periods after the last one.
    """
    d = state.duplex
    if request_id is None or not state.full_duplex or d.unit is not None:
        return []
    cfg = state.config
    assert cfg is not None
    period = cfg.chunk_period_ms * cfg.input_format.rate // 1000
    take = min(len(d.pending), MAX_UNIT_APPENDS)
    quiet_ms = 0  # the quiet the unit adds to its audio
    if d.samples >= period or len(d.pending) >= MAX_UNIT_APPENDS:
        got, take = 0, 0
        while got < period and take < MAX_UNIT_APPENDS:
            got += d.segments[take].samples
            take += 1
    elif not (d.items or d.turn_request):
        waited = None if now_ms is None or d.last_unit_ms is None else now_ms - d.last_unit_ms
        wait = cfg.chunk_period_ms * (2 if d.pending else 1)
        if waited is None or waited < wait or not wants_silence(state):
            return []
        # On the clock: a period of quiet, or what input waits short of a period and the quiet
        # after it (the client stopped mid-period) — a whole period either way, so an engine
        # sizing its output by the unit's length keeps ahead of real time (docs/duplex.md).
        quiet_ms = cfg.chunk_period_ms - d.samples * 1000 // cfg.input_format.rate
    inputs = unit_inputs(state)
    if d.turn_request is not None and d.turn_request.instructions is not None:
        inputs = replace(inputs, instructions=d.turn_request.instructions)  # this turn's, from response.create
    return [
        UnitIssued(
            request_id=request_id,
            epoch=state.epoch if epoch is None else epoch,
            chunk_index=d.next_unit,
            applied_event_ids=d.pending[:take],
            audio=tuple(seg for seg in d.segments[:take] if seg.seq not in d.muted),
            start_sample=d.pending_start if d.pending else state.input_clock,
            response_id=d.response_id,
            engine_state=d.engine_state,
            inputs=inputs,
            silence_ms=quiet_ms,
            issued_at_ms=now_ms,
            items=tuple(history_entry(state.items[i]) for i in d.items if i in state.items),
            turn_requested=d.turn_request is not None,
            acknowledged=d.acknowledged,
        )
    ]


def next_unit_due_ms(state: SessionState) -> Optional[int]:
    """When a silence unit falls due (Unix ms, the host's clock), or ``None``: the session
    kind's wake-up (docs/architecture.md, "Session kinds")."""
    d = state.duplex
    if d.unit is not None or d.last_unit_ms is None or not wants_silence(state):
        return None
    return d.last_unit_ms + state.config.chunk_period_ms * (2 if d.pending else 1)  # type: ignore[union-attr]


#: ``cancel(state, response) -> events``: how a barge-in cancels the model's turn.
CancelTurn = Callable[[SessionState, Response], list[Event]]


def _open_turn_of(state: SessionState) -> Optional[Response]:
    d = state.duplex
    resp = state.responses.get(d.response_id) if d.response_id else None
    return resp if resp is not None and resp.active else None


def overlap_on_start(state: SessionState, item_id: str, at_ms: int, cancel: CancelTurn) -> list[Event]:
    """The overlap policy when user speech ``item_id`` begins at ``at_ms`` while the model holds
    its turn (``[]`` when it does not, or when the decision waits): ``listen`` and ``drop`` are
    decided at once; ``barge_in`` too when ``barge_in_ms`` is 0 (with the events of ``cancel``:
    the epoch change and the turn's ``response.done``), else once the speech lasts that long
    (:func:`overlap_ongoing`) or ends shorter (:func:`overlap_on_stop`)."""
    resp = _open_turn_of(state)
    cfg = state.config
    if resp is None or cfg is None:
        return []
    policy = cfg.overlap
    if policy != "barge_in":
        return [OverlapDecided(decision=policy, reason=f"policy_{policy}", response_id=resp.id, audio_start_ms=at_ms, item_id=item_id)]
    if cfg.barge_in_ms > 0:
        return []
    decided = OverlapDecided(decision="barge_in", reason="user_speech_over_the_model", response_id=resp.id, audio_start_ms=at_ms, item_id=item_id)
    return [decided, *cancel(state, resp)]


def overlap_ongoing(state: SessionState, cancel: CancelTurn) -> list[Event]:
    """``barge_in`` with ``barge_in_ms``: speech over the model's turn, not decided yet, that
    has now lasted ``barge_in_ms`` (server VAD's speech start to the input clock) barges in."""
    resp, cfg, vad = _open_turn_of(state), state.config, state.vad
    if resp is None or cfg is None or cfg.overlap != "barge_in" or cfg.barge_in_ms <= 0 or not vad.speaking:
        return []
    if vad.item_id is None or vad.item_id == state.duplex.overlap_item:
        return []
    rate = cfg.input_format.rate
    # What has been said so far: from the speech's start to now, less the quiet since its last
    # voiced frame (server VAD's speech lasts until its silence duration has passed).
    if (state.input_clock - vad.start_sample - vad.silence_run) * 1000 < cfg.barge_in_ms * rate:
        return []
    start_ms = vad.start_sample * 1000 // rate
    decided = OverlapDecided(decision="barge_in", reason="long_overlap_speech", response_id=resp.id, audio_start_ms=start_ms, item_id=vad.item_id)
    return [decided, *cancel(state, resp)]


def overlap_on_stop(state: SessionState, item_id: str, start_ms: int) -> list[Event]:
    """``barge_in`` with ``barge_in_ms``: speech over the model's turn that ended before it
    lasted ``barge_in_ms`` was an acknowledgement ("mm-hm"): the model talks on."""
    resp, cfg = _open_turn_of(state), state.config
    # The turn may have ended meanwhile (a reply is generated faster than it is played): the
    # speech still began over it.
    turn_id = resp.id if resp is not None else state.duplex.overlap_turn
    if turn_id is None or cfg is None or cfg.overlap != "barge_in" or cfg.barge_in_ms <= 0 or item_id == state.duplex.overlap_item:
        return []
    return [OverlapDecided(decision="listen", reason="short_acknowledgement", response_id=turn_id, audio_start_ms=start_ms, item_id=item_id)]


def add_pending(state: SessionState, seq: int, samples: int, start_sample: int) -> SessionState:
    """A logged append waits for the next unit."""
    d = state.duplex
    if d.drop_item is not None:  # the overlap policy dropped this speech: applied, not heard
        d = replace(d, muted=d.muted + (seq,))
    d = replace(
        d,
        pending=d.pending + (seq,),
        segments=d.segments + (AudioSegment(seq=seq, offset=0, samples=samples),),
        samples=d.samples + samples,
        pending_start=d.pending_start if d.pending else start_sample,
    )
    return replace(state, duplex=d)


def queue_item(state: SessionState, item_id: str, seq: int) -> SessionState:
    """A client-created conversation item of a full-duplex session (``item_id``, created by
    event ``seq``) waits for the next unit, which applies it (the model reads it there);
    nothing for a turn-based session (its responses read the conversation)."""
    if not state.full_duplex:
        return state
    d = state.duplex
    return replace(state, duplex=replace(d, items=d.items + (item_id,), item_seqs=d.item_seqs + (seq,)))


#: ``response.create`` settings a full-duplex turn request may repeat (with the session's
#: value) but not change: the model takes its turn with the session's settings.
_TURN_SETTINGS = ("output_modalities", "voice", "output_format", "max_output_tokens", "tools", "tool_choice", "parallel_tool_calls", "temperature", "speed")


def request_turn(state: SessionState, cmd: CreateResponse) -> list[Event]:
    """``response.create`` (in the conversation) of a full-duplex session: a request for the
    model's turn, carried by the next unit, which is issued at once (docs/duplex.md, "Function
    calls and client items"). Refused with ``conversation_already_has_active_response`` while
    the model's turn is open, and with ``full_duplex_response_options`` when it sets ``input``
    or a setting other than ``instructions`` to another value than the session's. Its
    ``metadata`` is echoed by the turn the model opens next (LiveKit finds its reply by it), its
    ``instructions`` ride in the next unit (LiveKit's ``generate_reply(instructions=...)``)."""
    cfg = state.config
    assert cfg is not None
    turn = _open_turn_of(state)
    if turn is not None:
        return reject(
            cmd,
            Code.ACTIVE_RESPONSE,
            f"Conversation already has an active response in progress: {turn.id}. "
            "Wait until the response is finished before creating a new one.",
        )
    o = cmd.options
    if o.input is not None:
        return reject(cmd, Code.FULL_DUPLEX_RESPONSE_OPTIONS, "a full-duplex model hears the conversation itself: response.input is not taken here", "response.input")
    for name in _TURN_SETTINGS:
        value = getattr(o, name)
        if value is not None and value != getattr(cfg, name):
            return reject(
                cmd,
                Code.FULL_DUPLEX_RESPONSE_OPTIONS,
                f"a full-duplex model takes its turn with the session's settings: response.{name} {shown(value)} differs from the session's "
                f"{shown(getattr(cfg, name))} (set it with session.update)",
                f"response.{name}",
            )
    if o.instructions is not None and len(o.instructions) > MAX_INSTRUCTIONS_CHARS:
        return reject(
            cmd, Code.INSTRUCTIONS_TOO_LONG, f"instructions of {len(o.instructions)} characters exceed the limit of {MAX_INSTRUCTIONS_CHARS}", "response.instructions"
        )
    return [TurnRequested(client_event_id=cmd.event_id, metadata=o.metadata, instructions=o.instructions)]


def evolve_turn_requested(ev: TurnRequested, state: SessionState, seq: int) -> SessionState:
    request = TurnRequest(metadata=ev.metadata, instructions=ev.instructions)
    return replace(state, duplex=replace(state.duplex, turn_request=request))


def requeue(state: SessionState) -> SessionState:
    """The unit in flight is cancelled: its appends wait again, before any that came since,
    and so do the client items and the turn request it carried."""
    d = state.duplex
    if d.unit is None:
        return state
    return replace(
        state,
        duplex=replace(
            d,
            unit=None,
            pending=d.unit_seqs + d.pending,
            segments=d.unit_segments + d.segments,
            samples=sum(s.samples for s in d.unit_segments) + d.samples,
            pending_start=d.unit_start,
            unit_seqs=(),
            unit_segments=(),
            items=d.unit_items + d.items,
            item_seqs=d.unit_item_seqs + d.item_seqs,
            unit_items=(),
            unit_item_seqs=(),
            turn_request=d.turn_request or d.unit_turn_request,
            unit_turn_request=None,
            acknowledged=d.acknowledged or d.unit_acknowledged,
            unit_acknowledged=False,
        ),
    )


# ------------------------------------------------------------------------------- verdicts


def unit_verdict(state: SessionState, ev: UnitOutput | UnitFailed) -> Verdict:
    """Judge an engine's answer against the unit in flight (docs/architecture.md, I5, I7):
    discarded when no unit with its ``request_id`` is live (cancelled: ``stale_epoch``),
    rejected when it does not echo the unit (``identity_mismatch``) or its function call
    breaks the rules (``invalid_function_call``, :func:`unit_call_problem`), accepted
    otherwise."""
    d = state.duplex
    live = None
    if d.unit is not None:
        live = TickIdentity(session_id=state.session_id, request_id=d.unit, epoch=d.unit_epoch, chunk_index=d.next_unit - 1, applied_event_ids=d.unit_seqs)
    verdict = judge_echo(live, ev, epoch=state.epoch)
    if verdict.accepted and isinstance(ev, UnitOutput) and unit_call_problem(state, ev) is not None:
        return Verdict("rejected", "invalid_function_call")
    return verdict


def unit_new_item(state: SessionState, ev: UnitOutput) -> Optional[str]:
    """The id of the item an answer opens in the model's open turn, or ``None`` (it opens the
    turn, whose first item it fills, or adds to the turn's current item): a call other than
    the current item's opens ``item_c<unit>``, audio or text after a call ``item_m<unit>`` —
    derived from the unit, so every replay names them the same."""
    d = state.duplex
    resp = state.responses.get(d.response_id) if d.response_id else None
    if resp is None:
        return None
    item = state.items.get(resp.item_id)
    suffix = _suffix(ev.request_id)
    fc = ev.function_call
    if fc is not None:
        continuing = item is not None and item.type == "function_call" and item.call_id == fc.call_id
        return None if continuing else "item_c" + suffix
    if (ev.audio or ev.text_delta) and item is not None and item.type == "function_call":
        return "item_m" + suffix
    return None


def unit_call_problem(state: SessionState, ev: UnitOutput) -> Optional[str]:
    """Why an answer breaks the function-calling rules (docs/protocol.md, "Function calling":
    :func:`~duplex_es.domain.calls.call_problem` on the model's turn, the turn it would open
    when none is open), or ``None``."""
    content = bool(ev.audio or ev.text_delta or ev.marks)
    if ev.function_call is None and not content:
        return None
    if state.duplex.response_id is None:
        if ev.function_call is None:
            return None  # opening the turn with speech: nothing to check
        state = _open_turn(state, ev.request_id)
    resp = state.responses[state.duplex.response_id]  # type: ignore[index]
    return call_problem(state, resp, ev.function_call, content, unit_new_item(state, ev))


def backchannel_breach(state: SessionState, ev: UnitOutput) -> Optional[str]:
    """Why an accepted output's backchannel breaks its rules, or ``None`` (docs/duplex.md,
    "Backchannels"): a backchannel is a whole response of its own — it speaks, ends its turn
    (``end_of_turn``) in the same output, and comes only while the model holds no turn. A
    breach fails the unit with ``invalid_engine_backchannel`` (:func:`evolve_unit_output`)."""
    if not ev.backchannel:
        return None
    if state.duplex.response_id is not None:
        return "a backchannel while the model's turn is open"
    if not (ev.audio or ev.text_delta):
        return "a backchannel that says nothing"
    if not ev.end_of_turn:
        return "a backchannel without end_of_turn: it must be a whole turn of its own"
    return None


# ---------------------------------------------------------------------------------- evolvers


def evolve_unit_issued(ev: UnitIssued, state: SessionState, seq: int) -> SessionState:
    d = state.duplex
    taken = set(ev.applied_event_ids)
    rest = tuple(s for s in d.segments if s.seq not in taken)
    taken_segments = tuple(s for s in d.segments if s.seq in taken)
    d = replace(
        d,
        unit=ev.request_id,
        unit_epoch=ev.epoch,
        unit_seqs=ev.applied_event_ids,
        unit_segments=taken_segments,  # muted ones included: a cancelled unit gives all back
        unit_start=ev.start_sample,
        pending=tuple(s for s in d.pending if s not in taken),
        segments=rest,
        samples=sum(s.samples for s in rest),
        pending_start=ev.start_sample + sum(s.samples for s in taken_segments),
        next_unit=ev.chunk_index + 1,
        turn_item_id=d.turn_item_id or "item_" + _suffix(ev.request_id),
        last_unit_ms=ev.issued_at_ms if ev.issued_at_ms is not None else d.last_unit_ms,
        silent_units=d.silent_units + 1 if ev.silence_ms and not ev.applied_event_ids else 0,  # no input heard
        unit_items=tuple(e.item_id for e in ev.items),
        unit_item_seqs=tuple(s for i, s in zip(d.items, d.item_seqs) if i in {e.item_id for e in ev.items}),
        items=(),  # all of them went (a deleted one is not read)
        item_seqs=(),
        unit_turn_request=d.turn_request if ev.turn_requested else None,
        turn_request=None if ev.turn_requested else d.turn_request,
        unit_acknowledged=ev.acknowledged,
        acknowledged=d.acknowledged and not ev.acknowledged,
    )
    return replace(state, duplex=d)


def evolve_unit_output(ev: UnitOutput, state: SessionState, seq: int) -> SessionState:
    verdict = unit_verdict(state, ev)
    if verdict.kind == "discarded":
        return state
    if verdict.reason == "invalid_function_call":
        return _unit_failed(state, Code.INVALID_FUNCTION_CALL, unit_call_problem(state, ev) or "")
    if verdict.kind == "rejected":
        return _fail(state, "tick_identity_mismatch", "engine output does not echo its unit")
    breach = backchannel_breach(state, ev)
    if breach is not None:  # as if the engine had failed on the unit: what it said is dropped
        return _unit_failed(state, Code.INVALID_BACKCHANNEL, breach)
    new_item = unit_new_item(state, ev)
    d = state.duplex
    d = replace(
        d,
        unit=None,
        unit_seqs=(),
        unit_segments=(),
        unit_items=(),
        unit_item_seqs=(),
        unit_turn_request=None,
        unit_acknowledged=False,
        # The request this unit carried waits for the turn the model opens (its metadata).
        answering=d.unit_turn_request or d.answering,
        engine_state=ev.engine_state,
        continue_turn=ev.continue_turn,
        processed=d.processed + len(d.unit_seqs),
        muted=tuple(s for s in d.muted if s not in d.unit_seqs) if d.muted else (),
        # Heard while the model spoke too (overlap "listen"): the next user item holds it.
        turn_audio=d.turn_audio + tuple(s for s in d.unit_segments if s.seq not in d.muted),
        turn_transcript=d.turn_transcript + ev.user_transcript_delta,
    )
    state = _applied_items(replace(state, duplex=d), state.duplex.unit_item_seqs)
    if ev.audio or ev.text_delta or ev.function_call is not None:
        if d.response_id is None:
            state = _open_turn(state, ev.request_id, backchannel=ev.backchannel)
        state = _speak(state, ev, seq, new_item)
    if ev.end_of_turn and state.duplex.response_id is not None:
        resp = state.responses[state.duplex.response_id]
        state = put_response(state, replace(resp, final_seen=True))
        state = replace(state, duplex=replace(state.duplex, response_id=None))
    return state


def evolve_unit_failed(ev: UnitFailed, state: SessionState, seq: int) -> SessionState:
    verdict = unit_verdict(state, ev)
    if verdict.kind == "discarded":
        return state
    return _unit_failed(state, ev.code, ev.message)


def _unit_failed(state: SessionState, code: str, message: str) -> SessionState:
    """The unit in flight failed with ``code``: it answered its appends and items (the model will not
    hear them again: retrying a failing step would fail again); the open turn, if any, fails."""
    d = state.duplex
    done = replace(
        d, unit=None, unit_seqs=(), unit_segments=(), processed=d.processed + len(d.unit_seqs),
        unit_items=(), unit_item_seqs=(), unit_turn_request=None, unit_acknowledged=False,
    )
    return _fail(_applied_items(replace(state, duplex=done), d.unit_item_seqs), code, message)


def _applied_items(state: SessionState, seqs: tuple[int, ...]) -> SessionState:
    """The client items a unit carried (their ``conversation.item.created`` ``seqs``) are
    applied: no tick takes them again (docs/architecture.md, I5)."""
    if not seqs:
        return state
    return replace(state, unapplied=tuple(s for s in state.unapplied if s not in seqs))


def _fail(state: SessionState, code: str, message: str) -> SessionState:
    d = state.duplex
    if d.response_id is None:
        return replace(state, duplex=replace(d, unit=None))
    resp = state.responses[d.response_id]
    state = put_response(state, replace(resp, failure_code=code, failure_message=message))
    return replace(state, duplex=replace(d, unit=None, response_id=None))


def evolve_overlap_decided(ev: OverlapDecided, state: SessionState, seq: int) -> SessionState:
    # A barge-in is its consequences (the cancel logged after it); a drop mutes the speech; a
    # short acknowledgement is told to the model in the next unit (it does not answer it).
    d = state.duplex
    d = replace(
        d,
        overlap_item=ev.item_id,
        drop_item=ev.item_id if ev.decision == "drop" else d.drop_item,
        acknowledged=d.acknowledged or ev.reason == "short_acknowledgement",
    )
    return replace(state, duplex=d)


def end_drop(state: SessionState, item_id: str) -> SessionState:
    """Speech ``item_id`` stopped: if it was being dropped, later appends are heard again."""
    d = state.duplex
    return replace(state, duplex=replace(d, drop_item=None)) if d.drop_item is not None and d.drop_item == item_id else state


def _open_turn(state: SessionState, request_id: str, *, backchannel: bool = False) -> SessionState:
    """The model starts to speak: what it heard of the user since the last user item becomes a
    user item, and its turn a response (ids derived from the unit that opened it). A
    ``backchannel`` leaves the user's utterance going on: no user item, nothing reset."""
    cfg = state.config
    assert cfg is not None
    d = state.duplex
    suffix = _suffix(request_id)
    # Silence the client streamed is no utterance: a user item is made of speech (server VAD
    # heard some) or of words (the engine heard some); with no VAD, of any audio.
    heard = d.turn_speech or d.turn_transcript.strip() or cfg.turn_detection is None
    if d.turn_audio and heard and not backchannel:
        user = Item(
            id=d.turn_item_id or "item_u" + suffix,
            role="user",
            audio=d.turn_audio,
            input_samples=sum(s.samples for s in d.turn_audio),
            transcript=d.turn_transcript,
            transcription="heard",
            audio_format=cfg.input_format,
        )
        state = put_item(state, user)
    response_id, item_id = "resp_" + suffix, "item_r" + suffix
    resp = Response(
        id=response_id,
        item_ids=(item_id,),
        epoch=state.epoch,
        output_modalities=cfg.output_modalities,
        voice=cfg.voice,
        instructions=cfg.instructions,
        output_format=cfg.output_format,
        by_units=True,
        started_at_sample=state.input_clock,
        inputs=unit_inputs(state),  # what the turn's function calls are checked against
        backchannel=backchannel,
        metadata=None if backchannel or d.answering is None else d.answering.metadata,
    )
    item = Item(
        id=item_id,
        role="assistant",
        status="in_progress",
        content_type="output_audio" if "audio" in cfg.output_modalities else "output_text",
        response_id=response_id,
        audio_format=cfg.output_format,
    )
    state = put_item(put_response(state, resp), item)
    duplex = replace(state.duplex, response_id=response_id)
    if not backchannel:
        duplex = replace(duplex, answering=None)  # the turn answers the client's request, if any
        # (Speech going on goes on into the next user item.)
        duplex = replace(duplex, turn_audio=(), turn_transcript="", turn_item_id=None, turn_speech=state.vad.speaking)
    return replace(state, active_response_id=response_id, duplex=duplex, idle_since_sample=None)


def _speak(state: SessionState, ev: UnitOutput, seq: int, new_item: Optional[str]) -> SessionState:
    """Add a unit's audio and text, or its function call chunk, to the model's turn (as a tick
    output adds to a response), in item ``new_item`` when it opens one."""
    resp = state.responses[state.duplex.response_id]  # type: ignore[index]
    fc = ev.function_call
    if fc is not None:
        state, resp, _ = apply_chunk(state, resp, fc, new_item)
        resp = replace(resp, usage=resp.usage if ev.usage is None else resp.usage + ev.usage, next_chunk=resp.next_chunk + 1)
        return put_response(state, resp)
    if new_item is not None:
        state, resp, _ = open_output_item(state, resp, new_item, "output_audio" if "audio" in resp.output_modalities else "output_text")
    item, new_samples = grow_item(state.items[resp.item_id], seq, ev.audio, ev.text_delta, ev.marks, ev.end_of_turn)
    resp = replace(
        resp,
        usage=resp.usage if ev.usage is None else resp.usage + ev.usage,
        next_chunk=resp.next_chunk + 1,
        generated_ms=item.offset_ms + item.generated_ms,
    )
    state = replace(state, audio_output_started=state.audio_output_started or new_samples > 0)
    state = put_response(put_item(state, item), resp)
    return refresh_transcripts(state, resp.id)

