"""The session's life: configuration, heartbeats and turn signals, close, and the lease
(detach, resume, expiry).

Time never comes from a clock here: a detach carries the host's time, an expiry the reaper's
(docs/architecture.md, I11). The lease rules shared with world sessions (resume, the detach and resume
evolvers) live in ``lease``.
"""

from __future__ import annotations

from typing import Any, Optional

import attrs

from duplex_es.audio import is_supported
from duplex_es.domain.commands import UNSET, CloseSession, OpenSession, Detach, Expire, Heartbeat, Resume, TurnSignal, UpdateSession, SessionPatch
from duplex_es.domain.content import tool_choice_problem
from duplex_es.domain.duplex import BARGE_IN_RANGE_MS, CHUNK_PERIOD_RANGE_MS, OVERLAP_POLICIES, TURN_MODES
from duplex_es.domain.errors import Code
from duplex_es.domain.input import end_speech
from duplex_es.domain.lease import grace_still_running_out, resume_events, with_token
from duplex_es.domain.limits import MAX_INSTRUCTIONS_CHARS, VOICES
from duplex_es.domain.replace import replace
from duplex_es.domain.responses import cancel_events
from duplex_es.domain.rules import reject, shown
from duplex_es.domain.state import SessionState, SessionStatus
from duplex_es.domain.vad import DETECTORS, detector_unavailable
from duplex_es.events import (
    Event,
    HeartbeatReceived,
    SessionClosed,
    SessionDetached,
    SessionExpired,
    SessionConfig,
    SessionOpened,
    SessionUpdated,
    TurnDetection,
    TurnSignaled,
    VadState,
)

__all__ = ["TURN_SIGNALS", "NOT_APPLIED_SETTINGS", "IDLE_TIMEOUT_RANGE_MS", "merge_turn_detection"]

#: Informational ``turn.signal`` names a client may send.
TURN_SIGNALS = frozenset({"user_started", "user_stopped", "assistant_started", "assistant_done"})

#: Settings an engine reads when it answers: a change must be applied by exactly one tick (I5).
_MODEL_FIELDS = (
    "instructions",
    "voice",
    "output_modalities",
    "output_format",
    "speed",
    "max_output_tokens",
    "tools",
    "tool_choice",
    "parallel_tool_calls",
    "temperature",
)

#: Settings accepted and echoed exactly, that nothing in duplex_es applies: a ``session.updated``
#: that sets one names it in ``not_applied`` (its wire path), so a replay shows why it had no
#: effect. ``temperature``, ``tools``, ``tool_choice`` and ``parallel_tool_calls`` reach the
#: engine, which reports itself what it ignored (``tick.output.not_applied``).
NOT_APPLIED_SETTINGS = {
    "noise_reduction": "session.audio.input.noise_reduction",
    "tracing": "session.tracing",
    "truncation": "session.truncation",
    "include": "session.include",
    "prompt": "session.prompt",
    "reasoning": "session.reasoning",
}

_TD = "session.audio.input.turn_detection"

#: Allowed ``idle_timeout_ms`` (ms of input audio), besides ``null``.
IDLE_TIMEOUT_RANGE_MS = (1_000, 600_000)

_IS_INT = lambda v: isinstance(v, int) and not isinstance(v, bool)  # noqa: E731
_TD_CHECKS: dict[str, dict[str, tuple[Any, str]]] = {
    "server_vad": {
        "threshold": (lambda v: isinstance(v, (int, float)) and not isinstance(v, bool) and 0.0 <= v <= 1.0, "a number in [0, 1]"),
        "prefix_padding_ms": (lambda v: _IS_INT(v) and 0 <= v <= 10_000, "an integer in [0, 10000]"),
        "silence_duration_ms": (lambda v: _IS_INT(v) and 10 <= v <= 10_000, "an integer in [10, 10000]"),
        "create_response": (lambda v: isinstance(v, bool), "a boolean"),
        "interrupt_response": (lambda v: isinstance(v, bool), "a boolean"),
        "idle_timeout_ms": (
            lambda v: v is None or (_IS_INT(v) and IDLE_TIMEOUT_RANGE_MS[0] <= v <= IDLE_TIMEOUT_RANGE_MS[1]),
            f"null or an integer in [{IDLE_TIMEOUT_RANGE_MS[0]}, {IDLE_TIMEOUT_RANGE_MS[1]}]",
        ),
        "detector": (lambda v: v in DETECTORS, '"energy" or "silero"'),
    },
    "semantic_vad": {
        "eagerness": (lambda v: v in ("low", "medium", "high", "auto"), '"low", "medium", "high" or "auto"'),
        "create_response": (lambda v: isinstance(v, bool), "a boolean"),
        "interrupt_response": (lambda v: isinstance(v, bool), "a boolean"),
        "detector": (lambda v: v in DETECTORS, '"energy" or "silero"'),
    },
}


def merge_turn_detection(current: TurnDetection | None, patch: dict[str, Any]) -> tuple[TurnDetection | None, tuple[str, str] | None]:
    """Merge a partial ``turn_detection`` object field-wise into the current settings (OpenAI's
    defaults fill what was never set). Turning it on, or changing its type, needs a ``type``
    and starts from that type's defaults. Returns the result, or ``(None, (param, message))``."""
    if current is None and "type" not in patch:
        return None, (f"{_TD}.type", 'turn detection is off: turning it on needs type "server_vad" or "semantic_vad"')
    kind = patch.get("type", current.type if current else "server_vad")
    checks = _TD_CHECKS.get(kind) if isinstance(kind, str) else None
    if checks is None:
        return None, (f"{_TD}.type", f"turn detection type {str(kind)[:32]!r} is not supported; use server_vad, semantic_vad or null")
    if current is not None and current.type == kind:
        base = current
    else:
        base = TurnDetection(type=kind, eagerness="auto" if kind == "semantic_vad" else None)
    changes: dict[str, Any] = {}
    for key, value in patch.items():
        if key == "type":
            continue
        if key not in checks:
            name = key[:64]
            return None, (f"{_TD}.{name}", f"{name!r} is not a setting of {kind} (its settings: {', '.join(sorted(checks))})")
        ok, want = checks[key]
        if not ok(value):
            return None, (f"{_TD}.{key}", f"{key} must be {want}; got {shown(value)}")
        changes[key] = float(value) if key == "threshold" else value
    return replace(base, **changes), None


def open_session(cmd: OpenSession) -> list[Event]:
    """A speech session's first event. Turn detection starts as OpenAI's default (server VAD),
    which clients expect."""
    config = SessionConfig(model=cmd.model, engine=cmd.engine or cmd.model, turn_detection=TurnDetection())
    if cmd.full_duplex:
        config = replace(config, turn_mode="full_duplex", turn_modes=("turn_based", "full_duplex"))
    return [SessionOpened(session_id=cmd.session_id, config=config, resume_token_hash=cmd.resume_token_hash, principal=cmd.principal)]


def decide_update_session(cmd: UpdateSession, state: SessionState) -> list[Event]:
    cfg = state.config
    assert cfg is not None
    p = cmd.patch
    if p.model is not UNSET and p.model != cfg.model:
        engine = cfg.engine or cfg.model
        if p.engine is UNSET or p.engine != engine:
            served = f"engine {p.engine!r}" if p.engine is not UNSET else "a different engine"
            return reject(
                cmd,
                Code.MODEL_UPDATE_UNSUPPORTED,
                f"the session's model {cfg.model!r} (engine {engine!r}) cannot change to {str(p.model)[:64]!r} ({served}); "
                "a model name of the same engine may be given",
                "session.model",
            )
    for name, param in (("input_format", "session.audio.input.format"), ("output_format", "session.audio.output.format")):
        fmt = getattr(p, name)
        if fmt is not UNSET and not is_supported(fmt.type, fmt.rate):
            return reject(
                cmd,
                Code.UNSUPPORTED_AUDIO_FORMAT,
                f"unsupported audio format {fmt.type} at {fmt.rate} Hz; supported: audio/pcm at 24000 or 16000 Hz, "
                "audio/pcmu and audio/pcma at 8000 Hz",
                param,
            )
    if p.input_format is not UNSET and p.input_format != cfg.input_format and state.buffer.samples:
        return reject(
            cmd,
            Code.BUFFER_NOT_EMPTY,
            f"the input format cannot change while the input buffer holds audio ({state.buffer.samples} samples of "
            f"{cfg.input_format.type} at {cfg.input_format.rate} Hz); commit or clear it first",
            "session.audio.input.format",
        )
    if p.session_type is not UNSET and p.session_type != cfg.session_type and state.live_responses():
        return reject(
            cmd,
            Code.ACTIVE_RESPONSE,
            f"session.type cannot change from {cfg.session_type!r} to {p.session_type!r} while response "
            f"{state.live_responses()[0].id} is in progress",
            "session.type",
        )
    turn_detection = cfg.turn_detection
    if p.turn_detection is not UNSET:
        if p.turn_detection is None:
            turn_detection = None
        else:
            turn_detection, problem = merge_turn_detection(cfg.turn_detection, p.turn_detection)  # type: ignore[arg-type]
            if problem is not None:
                return reject(cmd, Code.UNSUPPORTED_TURN_DETECTION, problem[1], problem[0])
            why = detector_unavailable(turn_detection)
            if why is not None:  # refused, not silently served by another detector
                return reject(cmd, Code.SERVER_VAD_UNAVAILABLE, f"the {turn_detection.detector} detector cannot run on this server: {why}", f"{_TD}.detector")  # type: ignore[union-attr]
    if p.output_modalities is not UNSET and p.output_modalities not in (("audio",), ("text",)):
        return reject(
            cmd,
            Code.UNSUPPORTED_MODALITIES,
            f'output_modalities must be ["audio"] or ["text"]; got {list(p.output_modalities)}',  # type: ignore[call-overload]
            "session.output_modalities",
        )
    if p.voice is not UNSET and p.voice not in VOICES:
        return reject(
            cmd,
            Code.UNSUPPORTED_VOICE,
            f"unknown voice {str(p.voice)[:64]!r}; choose one of {', '.join(sorted(VOICES))}",
            "session.audio.output.voice",
        )
    if p.voice is not UNSET and p.voice != cfg.voice and state.audio_output_started:
        return reject(
            cmd,
            Code.VOICE_UPDATE_AFTER_AUDIO,
            f"the voice cannot change from {cfg.voice!r} to {p.voice!r}: the session already produced audio",
            "session.audio.output.voice",
        )
    if p.instructions is not UNSET and len(p.instructions) > MAX_INSTRUCTIONS_CHARS:  # type: ignore[arg-type]
        return reject(
            cmd,
            Code.INSTRUCTIONS_TOO_LONG,
            f"instructions of {len(p.instructions)} characters exceed the limit of {MAX_INSTRUCTIONS_CHARS}",  # type: ignore[arg-type]
            "session.instructions",
        )
    if p.transcript_on_truncate is not UNSET and p.transcript_on_truncate not in ("heard_prefix", "remove"):
        return reject(
            cmd,
            Code.INVALID_EVENT,
            f'transcript_on_truncate must be "heard_prefix" or "remove"; got {shown(p.transcript_on_truncate)}',
            "session.duplex.transcript_on_truncate",
        )
    if p.acknowledge_appends is not UNSET and not isinstance(p.acknowledge_appends, bool):
        return reject(cmd, Code.INVALID_EVENT, "acknowledge_appends must be a boolean", "session.duplex.acknowledge_appends")
    refused = _duplex_problem(p, state)
    if refused is not None:
        return reject(cmd, *refused)
    changes = {
        f.name: getattr(p, f.name)
        for f in attrs.fields(type(p))
        if getattr(p, f.name) is not UNSET and f.name not in ("turn_detection", "engine")
    }
    new = replace(cfg, turn_detection=turn_detection, **changes)
    unknown_choice = tool_choice_problem(new.tools, new.tool_choice)
    if unknown_choice is not None:
        return reject(cmd, Code.INVALID_EVENT, unknown_choice, "session.tool_choice")
    relevant = any(getattr(new, f) != getattr(cfg, f) for f in _MODEL_FIELDS)
    not_applied = tuple(path for name, path in NOT_APPLIED_SETTINGS.items() if getattr(p, name) is not UNSET)
    ending = end_speech(state) if turn_detection is None else []
    return ending + [SessionUpdated(client_event_id=cmd.event_id, config=new, model_relevant=relevant, not_applied=not_applied)]


def _duplex_problem(p: SessionPatch, state: SessionState) -> Optional[tuple[str, str, str]]:
    """Why the patch's full-duplex settings cannot apply: ``(code, message, param)`` or
    ``None`` (docs/duplex.md, "Settings")."""
    cfg = state.config
    assert cfg is not None
    if p.turn_mode is not UNSET and p.turn_mode != cfg.turn_mode:
        if p.turn_mode not in TURN_MODES:
            return Code.INVALID_EVENT, f"duplex.mode must be one of {', '.join(TURN_MODES)}; got {shown(p.turn_mode)}", "session.duplex.mode"
        if p.turn_mode not in cfg.turn_modes:
            return (
                Code.FULL_DUPLEX_UNSUPPORTED,
                f"engine {cfg.engine or cfg.model!r} is not full-duplex; use a full-duplex model (such as 'duplex-es-duplex')",
                "session.duplex.mode",
            )
        busy = state.active_response is not None or not state.buffer.empty or state.duplex.unit is not None or state.duplex.pending
        if busy:
            return (
                Code.TURN_MODE_BUSY,
                (
                    "duplex.mode changes only while no unit or response runs and no input waits (let the model finish its turn and hear the audio sent)"
                    if state.full_duplex
                    else "duplex.mode changes only while no response runs and no input waits (commit or clear the buffer, let the model finish)"
                ),
                "session.duplex.mode",
            )
    low, high = CHUNK_PERIOD_RANGE_MS
    if p.chunk_period_ms is not UNSET and not (isinstance(p.chunk_period_ms, int) and not isinstance(p.chunk_period_ms, bool) and low <= p.chunk_period_ms <= high):
        return Code.INVALID_EVENT, f"duplex.chunk_period_ms must be an integer in {low}..{high}; got {shown(p.chunk_period_ms)}", "session.duplex.chunk_period_ms"
    if p.overlap is not UNSET and p.overlap not in OVERLAP_POLICIES:
        return Code.INVALID_EVENT, f"duplex.overlap must be one of {', '.join(OVERLAP_POLICIES)}; got {shown(p.overlap)}", "session.duplex.overlap"
    if p.extension_events is not UNSET and not isinstance(p.extension_events, bool):
        return Code.INVALID_EVENT, f"duplex.extension_events must be a boolean; got {shown(p.extension_events)}", "session.duplex.extension_events"
    if p.backchannels is not UNSET and not isinstance(p.backchannels, bool):
        return Code.INVALID_EVENT, f"duplex.backchannels must be a boolean; got {shown(p.backchannels)}", "session.duplex.backchannels"
    low, high = BARGE_IN_RANGE_MS
    if p.barge_in_ms is not UNSET and not (isinstance(p.barge_in_ms, int) and not isinstance(p.barge_in_ms, bool) and low <= p.barge_in_ms <= high):
        return Code.INVALID_EVENT, f"duplex.barge_in_ms must be an integer in {low}..{high}; got {shown(p.barge_in_ms)}", "session.duplex.barge_in_ms"
    return None


def decide_heartbeat(cmd: Heartbeat, state: SessionState) -> list[Event]:
    return [HeartbeatReceived(client_event_id=cmd.event_id)]


def decide_turn_signal(cmd: TurnSignal, state: SessionState) -> list[Event]:
    if cmd.signal not in TURN_SIGNALS:
        return reject(cmd, Code.INVALID_TURN_SIGNAL, f"unknown turn signal {cmd.signal[:32]!r}; use one of {', '.join(sorted(TURN_SIGNALS))}", "event")
    return [TurnSignaled(client_event_id=cmd.event_id, signal=cmd.signal)]


def _ending(state: SessionState, cause: str, reason: str, message: str, event_id=None) -> list[Event]:  # noqa: ANN001
    """Fence everything in flight and discard what no tick will apply: the session ends. A
    response still generating ends ``cancelled`` with ``reason`` — GA's, since clients accept
    no other (docs/protocol.md, "Responses and faults") — and the real cause, ``cause``
    (``session_closed`` or ``session_expired``), as its error code, explained by ``message``."""
    live = state.live_responses()
    # A full-duplex unit in flight is fenced even with no turn open: its answer, logged after
    # the end, must not open a turn nobody will end.
    if not live and not state.ticks and not state.unapplied and not state.transcriptions and state.duplex.unit is None:
        return []
    return cancel_events(
        state, live, cause=cause, reason=reason, event_id=event_id, discard_pending=True, error_code=cause, error_message=message
    )


def decide_close_session(cmd: CloseSession, state: SessionState) -> list[Event]:
    message = "the client closed the session (session.close) before the response finished"
    return _ending(state, "session_closed", "client_cancelled", message, cmd.event_id) + [
        SessionClosed(client_event_id=cmd.event_id, reason=cmd.reason)
    ]


def decide_detach(cmd: Detach, state: SessionState) -> list[Event]:
    """The listener is gone (its connection dropped, or its server restarted): only the lease
    changes. A response in progress keeps generating and its outputs are logged; a client that
    resumes within the disconnect grace is re-sent what it missed (docs/protocol.md, "Responses
    and faults"). Only the grace running out ends it (:func:`decide_expire`)."""
    if state.lease.detached_at_ms is not None:
        return []
    return [SessionDetached(at_ms=cmd.at_ms, reason=cmd.reason)]


def decide_resume(cmd: Resume, state: SessionState) -> list[Event]:
    return resume_events(cmd, state)


def decide_expire(cmd: Expire, state: SessionState) -> list[Event]:
    if not grace_still_running_out(cmd, state.lease):
        return []
    if cmd.reason == "disconnect_grace_expired":
        message = f"no client resumed the session within its disconnect grace (detached at {cmd.since_ms} ms, expired at {cmd.now_ms} ms)"
    else:
        message = f"the session was idle past its TTL (last client command at {cmd.since_ms} ms, expired at {cmd.now_ms} ms)"
    return _ending(state, "session_expired", "client_cancelled", message) + [
        SessionExpired(reason=cmd.reason, decided_at_ms=cmd.now_ms, since_ms=cmd.since_ms)
    ]


# ---------------------------------------------------------------------------------- evolvers


def evolve_session_opened(ev: SessionOpened, state: SessionState, seq: int) -> SessionState:
    return with_token(replace(state, session_id=ev.session_id, status=SessionStatus.OPEN, config=ev.config), ev.resume_token_hash, ev.principal)


def evolve_session_updated(ev: SessionUpdated, state: SessionState, seq: int) -> SessionState:
    unapplied = state.unapplied + (seq,) if ev.model_relevant else state.unapplied
    vad = state.vad if ev.config.turn_detection is not None else VadState()
    return replace(state, config=ev.config, unapplied=unapplied, vad=vad)


def evolve_session_closed(ev: SessionClosed, state: SessionState, seq: int) -> SessionState:
    return replace(state, status=SessionStatus.CLOSED, close_reason=ev.reason)


def evolve_session_expired(ev: SessionExpired, state: SessionState, seq: int) -> SessionState:
    return replace(state, status=SessionStatus.EXPIRED, close_reason=ev.reason)


