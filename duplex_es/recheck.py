"""Recheck: re-decide a session's logged commands with today's code and report where it would
have decided otherwise (``duplex-es replay --recheck``; docs/replay.md, "Rechecking history").

The log keeps what was decided, not the commands: each command's batch of events was appended
in one transaction, and every event of one batch carries the batch's ``recorded_at_us``. So the
recheck walks a session batch by batch: it folds the state up to the batch, rebuilds the command
that made the batch from what the batch logged (its ids, times and fields; the frame itself is
not logged), runs today's ``decide`` on the state before it, and compares the events decided
with the events logged, field by field. Where they agree, the batch is folded; where they
differ, the difference is reported and the *logged* batch is folded (the log is the truth), so
the recheck goes on and counts every batch decided otherwise.

What is re-decided: every client command of a speech or world session (appends with server VAD
run again on the logged audio, commits, items, responses, cancels, playback acks, session
updates, closes, world interactions and resets), the host's commands (the pump with the logged
request ids and clock, detach, resume, expire) and the retries recorded as deduplicated.
Worker answers are the engine's, not decided: each is judged again (the verdict today's code
gives it is shown in the report's context), and a changed verdict shows as the divergence of
the reaction that follows it (the pump that issues the next tick or ends the response).
A refusal logs only its code and message: a refused command whose decision depends on fields
the log does not keep is counted as *not rechecked*, with the reason (:class:`Skipped`).
"""

from __future__ import annotations

import base64
from typing import Any, Callable, Iterable, Optional, Sequence, Union

import attrs

from duplex_es.domain import COMMAND_TYPES, MAX_OUT_OF_BAND_RESPONSES, Code, decide, evolve, kind_of, new_state
from duplex_es.domain import commands as c
from duplex_es.domain.lifecycle import NOT_APPLIED_SETTINGS
from duplex_es.domain.world import CloseWorld, Interact, ResetWorld, StartWorld, WorldState
from duplex_es.events import (
    AudioAppended,
    CommandDeduplicated,
    CommandRejected,
    EpochAdvanced,
    Event,
    HeartbeatReceived,
    InputCleared,
    InputCommitted,
    InteractionAccepted,
    InteractionRejected,
    ItemCreated,
    ItemDeleted,
    ItemRetrieved,
    ItemTruncated,
    OutputAudioCleared,
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
    TextAppended,
    TickAnswer,
    TickIssued,
    TimeoutTriggered,
    TurnDetection,
    TurnRequested,
    TurnSignaled,
    UnitIssued,
    WorldClosed,
    WorldFailed,
    WorldReset,
    WorldStarted,
    WorldTickIssued,
    to_plain,
)
from duplex_es.replay import summarize, verdict_of
from duplex_es.store import EventLog, Recorded

__all__ = ["Row", "Divergence", "Skipped", "SessionRecheck", "recheck_records", "recheck_session", "recheck_log", "CONTEXT"]

#: Logged events shown before and after a divergent batch.
CONTEXT = 3

#: Field differences listed per divergent event (the rest are counted).
MAX_FIELD_DIFFS = 6

#: The longest excerpt of a refused frame the protocol layer logs (``inbound._printable``): a
#: shorter one is the whole frame, which can be parsed again.
_EXCERPT_LIMIT = 200


@attrs.frozen
class Row:
    """One event as a report shows it: its ``seq`` (``None`` for an event only the current code
    decides), wire ``type``, ``verdict`` (``accepted``, ``rejected: <code>``, ``decided``,
    ``discarded: <reason>``...) and one-line ``summary``."""

    seq: Optional[int]
    type: str
    verdict: str
    summary: str


@attrs.frozen
class Divergence:
    """A batch the current code decides otherwise.

    ``seq`` is the batch's first logged seq and ``seqs`` all of them; ``command`` names the
    command re-decided (its wire name and the client's ``event_id``, or ``session.pump``);
    ``logged`` and ``decided`` are the two batches; ``differences`` say what differs, one line
    per event (type and verdict, or the fields); ``context`` holds the logged events around the
    batch (:data:`CONTEXT` each side), the batch's own marked by :attr:`seqs`."""

    seq: int
    seqs: tuple[int, ...]
    command: str
    logged: tuple[Row, ...]
    decided: tuple[Row, ...]
    differences: tuple[str, ...]
    context: tuple[Row, ...] = ()


@attrs.frozen
class Skipped:
    """A logged batch that was not re-decided: its first ``seq``, the event ``type`` there and
    the ``reason`` (what the log does not keep)."""

    seq: int
    type: str
    reason: str


@attrs.frozen
class SessionRecheck:
    """The recheck of one session: ``events`` logged, ``rechecked`` batches re-decided (each a
    command: a client's or the host's), ``answers`` worker answers judged and how many got each
    verdict today (``answer_verdicts``: ``accepted``, ``discarded: <reason>``, ...), the batches
    decided otherwise (``divergences``, in log order) and those not rechecked (``skipped``)."""

    session_id: str
    kind: str
    events: int
    rechecked: int
    answers: int
    divergences: tuple[Divergence, ...]
    skipped: tuple[Skipped, ...]
    answer_verdicts: dict[str, int] = attrs.field(factory=dict)

    @property
    def ok(self) -> bool:
        """True when the current code decides every rechecked batch as the log holds it."""
        return not self.divergences


@attrs.frozen
class _Rebuilt:
    command: Any
    label: str


_Reconstruction = Union[_Rebuilt, str]  # the command, or why it cannot be rebuilt
_Builder = Callable[[Any, list[Event]], _Reconstruction]


# ------------------------------------------------------------------------------------- the walk


def _batches(records: Sequence[Recorded]) -> Iterable[list[Recorded]]:
    """Consecutive records sharing ``recorded_at_us``: one append transaction each."""
    run: list[Recorded] = []
    for r in records:
        if run and r.recorded_at_us != run[-1].recorded_at_us:
            yield run
            run = []
        run.append(r)
    if run:
        yield run


def recheck_records(session_id: str, records: Sequence[Recorded]) -> SessionRecheck:
    """Recheck one session from its records (in seq order, as the log reads them).

    Raises:
        duplex_es.domain.IllegalTransition: the log folds to an illegal status move (a log no
            code could have written; ``audit`` reports it).
    """
    state: Any = new_state()
    rows: list[Row] = []
    divergences: list[Divergence] = []
    skipped: list[Skipped] = []
    rechecked = answers = 0
    verdicts: dict[str, int] = {}

    def fold_logged(batch: Sequence[Recorded]) -> None:
        nonlocal state
        for r in batch:
            rows.append(Row(r.seq, r.event.TYPE, verdict_of(state, r.event), summarize(r.event)))
            state = evolve(state, r.seq, r.event)

    for batch in _batches(records):
        i = 0
        while i < len(batch):
            rest = batch[i:]
            head = rest[0].event
            if isinstance(head, TickAnswer):  # a worker's answer: judged as the fold goes
                answers += 1
                fold_logged(rest[:1])
                verdicts[rows[-1].verdict] = verdicts.get(rows[-1].verdict, 0) + 1
                i += 1
                continue
            candidates = _rebuild(state, [r.event for r in rest])
            if isinstance(candidates, str):
                skipped.append(Skipped(rest[0].seq, head.TYPE, candidates))
                fold_logged(rest)
                break
            rechecked += 1
            outcomes = [_redecide(state, rest, built) for built in candidates]
            matched = next((n for n, found in outcomes if found is None), None)
            if matched is not None:
                fold_logged(rest[:matched])
                i += matched
                if i < len(batch):  # worker answers committed in the same transaction
                    continue
                break
            built, (_, found) = candidates[0], outcomes[0]  # the likelier command is reported
            assert found is not None
            differences, decided_rows = found
            divergences.append(
                Divergence(
                    seq=rest[0].seq,
                    seqs=tuple(r.seq for r in rest),
                    command=built.label,
                    logged=tuple(Row(r.seq, r.event.TYPE, verdict_of(state, r.event), summarize(r.event)) for r in rest),
                    decided=decided_rows,
                    differences=differences,
                )
            )
            fold_logged(rest)
            break
    kind = kind_of(state).name
    at = {r.seq: k for k, r in enumerate(rows)}
    shown = [attrs.evolve(d, context=tuple(rows[max(0, at[d.seqs[0]] - CONTEXT) : at[d.seqs[-1]] + CONTEXT + 1])) for d in divergences]
    return SessionRecheck(session_id, kind, len(records), rechecked, answers, tuple(shown), tuple(skipped), verdicts)


def _redecide(state: Any, logged: Sequence[Recorded], built: _Rebuilt) -> tuple[int, Optional[tuple[tuple[str, ...], tuple[Row, ...]]]]:
    """Decide ``built`` on ``state``: how many events it decided, and ``None`` when they are the
    logged batch, else the differences (:func:`_compare`)."""
    try:
        decided: Union[list[Event], Exception] = decide(state, built.command)
    except Exception as exc:  # a rule that now raises is a divergence too
        decided = exc
    return (0 if isinstance(decided, Exception) else len(decided)), _compare(state, logged, decided)


def _compare(state: Any, logged: Sequence[Recorded], decided: Union[list[Event], Exception]) -> Optional[tuple[tuple[str, ...], tuple[Row, ...]]]:
    """``None`` when ``decided`` is ``logged`` (or its start, followed by a worker's answer
    committed in the same transaction), else the differences and the decided rows."""
    if isinstance(decided, Exception):
        text = f"{type(decided).__name__}: {decided}"
        return (f"seq {logged[0].seq}: the log has {logged[0].event.TYPE}; the current code raises {text}",), (Row(None, "exception", "raised", text),)
    # The events compare cheaply as objects; their plain form (what the log stores) settles the rest.
    if _is_logged(decided, logged, lambda e: e) or _is_logged(decided, logged, to_plain):
        return None
    plain_logged = [to_plain(r.event) for r in logged]
    plain_decided = [to_plain(e) for e in decided]
    decided_rows = tuple(Row(None, e.TYPE, verdict_of(state, e), summarize(e)) for e in decided)
    lines: list[str] = []
    if not decided:
        lines.append(f"seq {logged[0].seq}: the log has {logged[0].event.TYPE} ({verdict_of(state, logged[0].event)}); the current code decides nothing")
    for k in range(max(len(decided), len(logged))):
        if k >= len(logged):
            e = decided[k]
            lines.append(f"after seq {logged[-1].seq}: the current code decides one more event: {e.TYPE} ({verdict_of(state, e)}) {summarize(e)}")
            continue
        r = logged[k]
        if k >= len(decided):
            if decided:
                lines.append(f"seq {r.seq}: the log has {r.event.TYPE} ({verdict_of(state, r.event)}); the current code decides no such event")
            continue
        e = decided[k]
        if type(e) is not type(r.event):
            lines.append(f"seq {r.seq}: the log has {r.event.TYPE} ({verdict_of(state, r.event)}); the current code decides {e.TYPE} ({verdict_of(state, e)})")
        elif plain_logged[k] != plain_decided[k]:
            lines.append(f"seq {r.seq} {r.event.TYPE}: " + "; ".join(_field_diffs(plain_logged[k], plain_decided[k])))
    return tuple(lines), decided_rows


def _is_logged(decided: list[Event], logged: Sequence[Recorded], form: Callable[[Event], Any]) -> bool:
    """Whether ``decided`` is the logged batch (or its start, followed by a worker's answer
    committed in the same transaction), comparing each event's ``form``."""
    if not decided or len(decided) > len(logged):
        return False
    if not all(type(e) is type(r.event) and form(e) == form(r.event) for e, r in zip(decided, logged, strict=False)):
        return False
    return len(decided) == len(logged) or _starts_batch(logged[len(decided)].event)


def _field_diffs(logged: dict[str, Any], decided: dict[str, Any]) -> list[str]:
    names = [k for k in sorted(set(logged) | set(decided)) if logged.get(k) != decided.get(k)]
    shown = [f"{k}: log {_clip(logged.get(k))}, current {_clip(decided.get(k))}" for k in names[:MAX_FIELD_DIFFS]]
    if len(names) > MAX_FIELD_DIFFS:
        shown.append(f"and {len(names) - MAX_FIELD_DIFFS} more fields")
    return shown


def _clip(value: Any, limit: int = 80) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _starts_batch(ev: Event) -> bool:
    """Whether ``ev``, logged in the same transaction right after a batch decided as logged,
    is the start of another writer's batch: only a worker's answer can be (a worker may commit
    several answers at once). Anything else there is part of the batch the current code no
    longer decides."""
    return isinstance(ev, TickAnswer)


# ------------------------------------------------------------------------------ rebuilding commands


def _rebuild(state: Any, batch: list[Event]) -> Union[list[_Rebuilt], str]:
    """The commands that may have made ``batch`` (its first event opens it), the likelier
    first, or why none can be rebuilt. Only a batch that opens with ``speech_stopped`` has two:
    a commit, clear, cancel or update ending the speech first, or the pump ending a turn the
    engine judged over (``semantic_vad``): the one that decides the logged batch is the one."""
    head = batch[0]
    if not isinstance(head, SpeechStopped):
        built = _rebuild_at(state, batch, 0)
        return built if isinstance(built, str) else [built]
    anchor = next((k for k, e in enumerate(batch) if not isinstance(e, SpeechStopped)), None)
    client = _rebuild_at(state, batch, anchor) if anchor is not None else "a batch of speech_stopped alone"
    pump = _pump(state, batch)
    assert isinstance(pump, _Rebuilt)
    if isinstance(client, str):
        return [pump]
    by_client = getattr(batch[anchor], "client_event_id", None) is not None  # type: ignore[index]
    return [client, pump] if by_client else [pump, client]


def _rebuild_at(state: Any, batch: list[Event], at: int) -> _Reconstruction:
    builder = _BUILDERS.get(type(batch[at]))
    if builder is None:
        return f"no command of this code opens a batch with {batch[at].TYPE}"
    try:
        return builder(state, batch[at:])
    except Exception as exc:  # a log this code cannot read back into a command: say so, go on
        return f"the {batch[at].TYPE} cannot be read back into a command: {type(exc).__name__}: {exc}"


def _label(command: Any, event_id: Any = None) -> str:
    name = COMMAND_TYPES.get(type(command)) or _WIRE_NAMES.get(type(command), type(command).__name__)
    return f"{name} [{event_id}]" if event_id is not None else name


def _rebuilt(command: Any) -> _Rebuilt:
    return _Rebuilt(command, _label(command, getattr(command, "event_id", None)))


def _placeholder(state: Any, prefix: str) -> str:
    """An id the log never named (the command's id was not used by the batch): unique in the
    session, so a decision that uses it shows as a difference."""
    return f"{prefix}_unlogged_{state.seq + 1}"


def _first(batch: Sequence[Event], kind: type) -> Any:
    return next((e for e in batch if isinstance(e, kind)), None)


def _copied(command: type) -> _Builder:
    """A builder for a command whose fields its event logs under the same names (the client's
    ``event_id`` as ``client_event_id``). A playback ack logs the cursors after it, not the
    ones it sent: they decide as its own (the cursors only move forward; a truncation sets
    them); the response and item it logs are the ones it named or was resolved to."""
    names = [f.name for f in attrs.fields(command) if f.name not in ("event_id", "expected_epoch", "digest")]
    takes_id = "event_id" in attrs.fields_dict(command)

    def build(state: Any, batch: list[Event]) -> _Reconstruction:
        ev = batch[0]
        fields = {n: getattr(ev, n) for n in names if hasattr(ev, n)}
        if takes_id:
            fields["event_id"] = getattr(ev, "client_event_id", None)
        return _rebuilt(command(**fields))

    return build


def _opened(state: Any, batch: list[Event]) -> _Reconstruction:
    ev: SessionOpened = batch[0]  # type: ignore[assignment]
    cfg = ev.config
    return _rebuilt(
        c.OpenSession(
            session_id=ev.session_id,
            model=cfg.model,
            engine=cfg.engine,
            resume_token_hash=ev.resume_token_hash,
            principal=ev.principal,
            full_duplex=cfg.turn_mode == "full_duplex",
        )
    )


def _updated(state: Any, batch: list[Event]) -> _Reconstruction:
    """The patch is what changed (and the not-applied settings the update named): a patch that
    repeats a current value decides as one that leaves it out."""
    ev: SessionUpdated = batch[0]  # type: ignore[assignment]
    before, after = state.config, ev.config
    if before is None:
        return "a session.updated before the session opened"
    sent_unapplied = {name for name, path in NOT_APPLIED_SETTINGS.items() if path in ev.not_applied}
    fields: dict[str, Any] = {}
    for f in attrs.fields(c.SessionPatch):
        if f.name in ("turn_detection", "engine"):
            continue
        if getattr(after, f.name) != getattr(before, f.name) or f.name in sent_unapplied:
            fields[f.name] = getattr(after, f.name)
    if "model" in fields:
        fields["engine"] = after.engine
    if after.turn_detection != before.turn_detection:
        fields["turn_detection"] = _turn_detection_patch(before.turn_detection, after.turn_detection)
    return _rebuilt(c.UpdateSession(event_id=ev.client_event_id, patch=c.SessionPatch(**fields)))


def _turn_detection_patch(before: Optional[TurnDetection], after: Optional[TurnDetection]) -> Optional[dict[str, Any]]:
    if after is None:
        return None
    base = before if before is not None and before.type == after.type else TurnDetection(type=after.type, eagerness="auto" if after.type == "semantic_vad" else None)
    patch: dict[str, Any] = {"type": after.type}
    for f in attrs.fields(TurnDetection):
        if f.name != "type" and getattr(after, f.name) != getattr(base, f.name):
            patch[f.name] = getattr(after, f.name)
    return patch


def _appended(state: Any, batch: list[Event]) -> _Reconstruction:
    ev: AudioAppended = batch[0]  # type: ignore[assignment]
    nbytes = len(base64.b64decode(ev.audio))
    ids = None if ev.vad is None else _vad_ids(state, batch)
    return _rebuilt(c.AppendAudio(event_id=ev.client_event_id, audio=ev.audio, nbytes=nbytes, vad_ids=ids))


def _vad_ids(state: Any, batch: list[Event]) -> c.VadIds:
    """The ids server VAD took for what the append triggered: the first new utterance's item id
    (later ones derive from it with a suffix), and the ids of the response a turn started (the
    response of a derived utterance derives its ids with the utterance's suffix)."""
    ongoing = state.vad.item_id
    base = next(
        (e.item_id for e in batch[1:] if isinstance(e, (SpeechStarted, SpeechStopped, TimeoutTriggered)) and e.item_id != ongoing),
        None,
    ) or ongoing or _placeholder(state, "item")
    response_id, item_id, request_id = (_placeholder(state, p) for p in ("resp", "item_resp", "req"))
    answered: Optional[str] = None
    for k, e in enumerate(batch):
        if isinstance(e, InputCommitted):
            answered = e.item_id
        elif isinstance(e, ResponseCreated) and e.client_event_id is None:
            tick = batch[k + 1] if k + 1 < len(batch) and isinstance(batch[k + 1], TickIssued) else None
            response_id, item_id, request_id = e.response_id, e.item_id, tick.request_id if tick is not None else request_id  # type: ignore[union-attr]
            break
        elif isinstance(e, ResponseDeferred):
            response_id, item_id, request_id = e.response_id, e.item_id, e.request_id
            break
    # As input._auto_response derives it: what the answered item's id has beyond the base's.
    suffix = "" if answered is None or answered == base else answered[len(base) :]

    def strip(value: str) -> str:
        return value[: -len(suffix)] if suffix and value.endswith(suffix) else value

    return c.VadIds(item_id=base, response_id=strip(response_id), response_item_id=strip(item_id), request_id=strip(request_id))


def _committed(state: Any, batch: list[Event]) -> _Reconstruction:
    ev: InputCommitted = batch[0]  # type: ignore[assignment]
    created, deferred = _first(batch, ResponseCreated), _first(batch, ResponseDeferred)
    ids = None
    if created is not None:
        tick = _first(batch, TickIssued)
        ids = (created.response_id, created.item_id, tick.request_id if tick is not None else _placeholder(state, "req"))
    elif deferred is not None:
        ids = (deferred.response_id, deferred.item_id, deferred.request_id)
    return _rebuilt(c.Commit(event_id=ev.client_event_id, item_id=ev.item_id, create_response=ids is not None, response_ids=ids))


def _cleared(state: Any, batch: list[Event]) -> _Reconstruction:
    ev: InputCleared = batch[0]  # type: ignore[assignment]
    kind = c.CancelInput if ev.reason == "input_cancelled" else c.ClearInput
    return _rebuilt(kind(event_id=ev.client_event_id))


def _item_created(state: Any, batch: list[Event]) -> _Reconstruction:
    ev: ItemCreated = batch[0]  # type: ignore[assignment]
    # The log keeps the resolved place: "at the end" when it was the end, else the item named.
    previous = None if ev.previous_item_id == state.last_item_id else (ev.previous_item_id if ev.previous_item_id is not None else c.ROOT)
    width = 2 if state.config is not None and state.config.input_format.type == "audio/pcm" else 1
    return _rebuilt(
        c.CreateItem(
            event_id=ev.client_event_id,
            item_id=ev.item_id,
            role=ev.role,
            content=ev.content,
            previous_item_id=previous,
            audio_nbytes=ev.samples * width,
            type=ev.type,
            call_id=ev.call_id,
            name=ev.name,
            arguments=ev.arguments,
            output=ev.output,
        )
    )


def _response_created(state: Any, batch: list[Event]) -> _Reconstruction:
    ev: ResponseCreated = batch[0]  # type: ignore[assignment]
    deferred = getattr(state, "deferred_response", None)
    if ev.client_event_id is None and deferred is not None and deferred.response_id == ev.response_id:
        return _pump(state, batch)  # a server VAD turn's response that waited for the previous one
    tick = _first(batch, TickIssued)
    inputs = tick.inputs if tick is not None else None
    options = c.ResponseOptions(
        output_modalities=ev.output_modalities,
        instructions=ev.instructions,
        voice=ev.voice,
        output_format=ev.output_format,
        conversation=ev.conversation,
        metadata=ev.metadata,
        input=ev.input,
        max_output_tokens=ev.max_output_tokens,
        tools=inputs.tools if inputs is not None else None,
        tool_choice=inputs.tool_choice if inputs is not None else None,
        parallel_tool_calls=inputs.parallel_tool_calls if inputs is not None else None,
        temperature=inputs.temperature if inputs is not None else None,
        speed=inputs.speed if inputs is not None else None,
        not_applied=ev.not_applied,
    )
    request_id = tick.request_id if tick is not None else _placeholder(state, "req")
    return _rebuilt(c.CreateResponse(event_id=ev.client_event_id, response_id=ev.response_id, item_id=ev.item_id, request_id=request_id, options=options))


def _turn_requested(state: Any, batch: list[Event]) -> _Reconstruction:
    ev: TurnRequested = batch[0]  # type: ignore[assignment]
    ids = {p: _placeholder(state, p) for p in ("resp", "item", "req")}
    options = c.ResponseOptions(metadata=ev.metadata, instructions=ev.instructions)  # what a turn request keeps
    return _rebuilt(c.CreateResponse(event_id=ev.client_event_id, response_id=ids["resp"], item_id=ids["item"], request_id=ids["req"], options=options))


def _pump(state: Any, batch: list[Event]) -> _Reconstruction:
    """The host's pump, with the request ids its ticks took and the clock its units and world
    ticks logged (its other request ids were never used)."""
    taken = [e.request_id for e in batch if isinstance(e, (TickIssued, UnitIssued, WorldTickIssued))]
    spare = [f"{_placeholder(state, 'req')}_{n}" for n in range(1 + MAX_OUT_OF_BAND_RESPONSES)]
    clock = next((e.issued_at_ms for e in batch if isinstance(e, (UnitIssued, WorldTickIssued)) and e.issued_at_ms is not None), None)
    return _Rebuilt(c.Pump(request_ids=tuple(taken + spare)[: max(len(taken), 1 + MAX_OUT_OF_BAND_RESPONSES)], now_ms=clock), "session.pump")


def _response_done(state: Any, batch: list[Event]) -> _Reconstruction:
    ev: ResponseDone = batch[0]  # type: ignore[assignment]
    if ev.client_event_id is not None:
        return "a response.done carrying a client event id opens no batch of this code"
    return _pump(state, batch)


def _epoch(state: Any, batch: list[Event]) -> _Reconstruction:
    ev: EpochAdvanced = batch[0]  # type: ignore[assignment]
    done = _first(batch, ResponseDone)
    event_id = done.client_event_id if done is not None else None
    if ev.reason == "response_failed":
        return _pump(state, batch)
    if ev.reason == "barge_in":
        return _rebuilt(c.BargeIn(event_id=event_id))
    if ev.reason == "output_audio_buffer_clear":
        cleared = _first(batch, OutputAudioCleared)
        return _rebuilt(c.ClearOutputAudio(event_id=event_id, response_id=cleared.response_id if cleared is not None else None))
    if ev.reason == "session_closed":
        closed = _first(batch, SessionClosed)
        return _CLOSE(state, [closed]) if closed is not None else "a session_closed epoch change without session.closed"
    if ev.reason == "session_expired":
        expired = _first(batch, SessionExpired)
        return _expired(state, [expired]) if expired is not None else "a session_expired epoch change without session.expired"
    if done is None:
        return f"an epoch change ({ev.reason}) that ends no response: no command of this code decides one"
    # response.cancel: the log keeps the response it ended (named here) and the cause.
    return _rebuilt(c.CancelResponse(event_id=event_id, response_id=done.response_id, cause=ev.reason))


def _resumed(state: Any, batch: list[Event]) -> _Reconstruction:
    """The resume token is never logged (only its digest's successor): the rebuilt resume
    presents none, as an in-process caller does, so its token check is not rechecked."""
    ev: SessionResumed = batch[0]  # type: ignore[assignment]
    return _rebuilt(
        c.Resume(
            event_id=ev.client_event_id,
            expected_generation=ev.lease_generation - 1,
            at_ms=ev.at_ms,
            new_token_hash=ev.resume_token_hash,
            last_server_event_seq=ev.last_server_event_seq,
            token_in_url=ev.token_in_url,
        )
    )


def _expired(state: Any, batch: list[Event]) -> _Reconstruction:
    ev: SessionExpired = batch[0]  # type: ignore[assignment]
    return _Rebuilt(c.Expire(reason=ev.reason, now_ms=ev.decided_at_ms, since_ms=ev.since_ms), "session.expire")


def _deduplicated(state: Any, batch: list[Event]) -> _Reconstruction:
    ev: CommandDeduplicated = batch[0]  # type: ignore[assignment]
    cmd = c.Duplicate(event_id=ev.client_event_id, command_type=ev.command_type, first_seq=ev.first_seq, last_seq=ev.last_seq)
    return _Rebuilt(cmd, f"{ev.command_type or '?'} retry [{ev.client_event_id}]")


#: Refused commands whose decision needs none of the fields the log drops: wire name → the codes
#: (besides ``session_closed``) it is rechecked for → how to rebuild it from the refusal.
_PAYLOAD_FREE: dict[str, tuple[frozenset[str], Callable[[Any, CommandRejected], Any]]] = {
    "input_audio_buffer.commit": (
        frozenset({Code.COMMIT_EMPTY, Code.FULL_DUPLEX_NO_BUFFER}),
        lambda state, ev: c.Commit(event_id=ev.client_event_id, item_id=_placeholder(state, "item")),
    ),
    "input_audio_buffer.clear": (frozenset({Code.FULL_DUPLEX_NO_BUFFER}), lambda state, ev: c.ClearInput(event_id=ev.client_event_id)),
    "input.cancel": (frozenset({Code.FULL_DUPLEX_NO_BUFFER}), lambda state, ev: c.CancelInput(event_id=ev.client_event_id)),
    "barge_in": (frozenset({Code.CANCEL_NOT_ACTIVE}), lambda state, ev: c.BargeIn(event_id=ev.client_event_id)),
    # Refused before any setting but ``conversation`` is read, and only in the conversation.
    "response.create": (
        frozenset({Code.ACTIVE_RESPONSE, Code.TRANSCRIPTION_SESSION}),
        lambda state, ev: c.CreateResponse(
            event_id=ev.client_event_id, response_id=_placeholder(state, "resp"), item_id=_placeholder(state, "item"), request_id=_placeholder(state, "req")
        ),
    ),
    "session.heartbeat": (frozenset(), lambda state, ev: c.Heartbeat(event_id=ev.client_event_id)),
    "session.close": (frozenset(), lambda state, ev: c.CloseSession(event_id=ev.client_event_id)),
}

#: Refusals that name no target (``param`` empty) of commands that may name one.
_UNNAMED: dict[str, tuple[frozenset[str], Callable[[Any, CommandRejected], Any]]] = {
    "response.cancel": (frozenset({Code.CANCEL_NOT_ACTIVE}), lambda state, ev: c.CancelResponse(event_id=ev.client_event_id)),
    "output_audio_buffer.clear": (frozenset({Code.CANCEL_NOT_ACTIVE}), lambda state, ev: c.ClearOutputAudio(event_id=ev.client_event_id)),
}


def _rejected(state: Any, batch: list[Event]) -> _Reconstruction:
    ev: CommandRejected = batch[0]  # type: ignore[assignment]
    what = ev.command_type or "a frame"
    if isinstance(state, WorldState):
        return f"refused {what} ({ev.code}) by the world protocol: the frame is not logged"
    if ev.excerpt is not None:
        return _reparsed(state, ev)
    table = dict(_PAYLOAD_FREE)
    if ev.param is None:
        table.update(_UNNAMED)
    entry = table.get(ev.command_type or "")
    if entry is not None and (ev.code in entry[0] or ev.code == Code.SESSION_CLOSED):
        return _rebuilt(entry[1](state, ev))
    return f"refused {what} ({ev.code}): the log keeps the refusal's code and message, not the fields it was decided on"


def _reparsed(state: Any, ev: CommandRejected) -> _Reconstruction:
    """A frame the protocol layer could not parse logs its start: the whole frame when short,
    which is parsed again (Realtime GA dialect)."""
    from duplex_es.protocol.inbound import parse_frame

    excerpt = ev.excerpt or ""
    if len(excerpt) >= _EXCERPT_LIMIT or "\\x00" in excerpt:
        return f"refused frame ({ev.code}): the log keeps only its first {len(excerpt)} characters"
    serial = iter(range(1_000_000))
    command = parse_frame(excerpt, lambda prefix: f"{prefix}_{_placeholder(state, 'parsed')}_{next(serial)}")
    if isinstance(command, c.Invalid):
        return _Rebuilt(command, f"{ev.command_type or 'frame'} (parsed again from the logged excerpt)")
    return _Rebuilt(command, f"{_label(command)} (the logged excerpt parses now)")


# ---------------------------------------------------------------------------------------- world


def _interaction(state: Any, batch: list[Event]) -> _Reconstruction:
    ev: InteractionAccepted = batch[0]  # type: ignore[assignment]
    return _Rebuilt(Interact(event_id=ev.event_id, prompt=ev.prompt, controls=ev.controls), f"session.interaction [{ev.event_id}]")


#: World refusals decided on the interaction's id and the session alone (a full queue is checked
#: after the content: an interaction refused for it had a prompt or controls).
_WORLD_ORDER_CODES = frozenset({Code.SESSION_FAILED, Code.DUPLICATE_EVENT, Code.STALE_EVENT, Code.QUEUE_FULL})


def _interaction_refused(state: Any, batch: list[Event]) -> _Reconstruction:
    ev: InteractionRejected = batch[0]  # type: ignore[assignment]
    by_id = ev.code in _WORLD_ORDER_CODES or (ev.code == Code.INVALID_INTERACTION and ev.param == "event_id")
    if ev.event_id is None or not by_id:
        return f"refused session.interaction ({ev.code}): the log keeps the refusal, not the interaction's prompt and controls"
    # Its id decides these refusals; the content it had is not logged (a stand-in prompt).
    return _Rebuilt(Interact(event_id=ev.event_id, prompt=""), f"session.interaction [{ev.event_id}]")


def _world_closed(state: Any, batch: list[Event]) -> _Reconstruction:
    ev: WorldClosed = batch[0]  # type: ignore[assignment]
    if ev.reason in ("idle_ttl_expired", "disconnect_grace_expired"):
        # The reaper's times are not logged for a world: the expiry is rebuilt from the lease.
        since = state.lease.detached_at_ms if state.lease.detached_at_ms is not None else 0
        return _Rebuilt(c.Expire(reason=ev.reason, now_ms=since, since_ms=since), "session.expire")
    return _rebuilt(CloseWorld(event_id=ev.client_event_id, reason=ev.reason))


_WIRE_NAMES: dict[type, str] = {
    StartWorld: "session.start",
    Interact: "session.interaction",
    ResetWorld: "session.reset",
    CloseWorld: "session.close",
    c.Pump: "session.pump",
    c.Detach: "session.detach",
    c.Expire: "session.expire",
    c.Duplicate: "command.duplicate",
    c.Invalid: "frame",
}

_CLOSE = _copied(c.CloseSession)

#: The first event of a batch → how to rebuild the command that made it.
_BUILDERS: dict[type, _Builder] = {
    SessionOpened: _opened,
    SessionUpdated: _updated,
    AudioAppended: _appended,
    TextAppended: _copied(c.AppendText),
    InputCommitted: _committed,
    InputCleared: _cleared,
    ItemCreated: _item_created,
    ItemDeleted: _copied(c.DeleteItem),
    ItemRetrieved: _copied(c.RetrieveItem),
    ItemTruncated: _copied(c.TruncateItem),
    ResponseCreated: _response_created,
    TurnRequested: _turn_requested,
    TickIssued: _pump,
    UnitIssued: _pump,
    ResponseDone: _response_done,
    EpochAdvanced: _epoch,
    OutputAudioCleared: _copied(c.ClearOutputAudio),
    PlaybackAcked: _copied(c.AckPlayback),
    SessionClosed: _CLOSE,
    SessionDetached: _copied(c.Detach),
    SessionResumed: _resumed,
    SessionExpired: _expired,
    HeartbeatReceived: _copied(c.Heartbeat),
    TurnSignaled: _copied(c.TurnSignal),
    CommandRejected: _rejected,
    CommandDeduplicated: _deduplicated,
    WorldStarted: _copied(StartWorld),
    InteractionAccepted: _interaction,
    InteractionRejected: _interaction_refused,
    WorldTickIssued: _pump,
    WorldFailed: _pump,
    WorldReset: _copied(ResetWorld),
    WorldClosed: _world_closed,
}


# ---------------------------------------------------------------------------------- over the log


def recheck_session(log: EventLog, session_id: str) -> SessionRecheck:
    """Recheck one session of ``log``.

    Raises:
        KeyError: the session has no events.
        duplex_es.store.StoredEventError: an event cannot be decoded.
    """
    records = log.read_session(session_id)
    if not records:
        raise KeyError(session_id)
    return recheck_records(session_id, records)


def recheck_log(log: EventLog, session_ids: Optional[Sequence[str]] = None) -> list[SessionRecheck]:
    """Recheck ``session_ids`` (default: every session of ``log``), in that order."""
    ids = list(session_ids) if session_ids else log.every_session_id()
    return [recheck_session(log, sid) for sid in ids]
