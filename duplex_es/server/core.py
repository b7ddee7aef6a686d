"""The sans-I/O session core, in the manner of h11's ``Connection``: commands in, an append plan
out; committed records in, wire events out. No awaits, no sockets, no database, no clock of its
own: ids and the time are injected (docs/architecture.md, "The hot path").

:class:`~duplex_es.server.host.SessionHost` is the I/O shell around it: it holds the session's
lock, appends what the core plans through the log's writer, reads what the core asks for (the
audio a retrieve returns, whether an idempotency key was applied), and queues the wire events
for the listener. Every rule of that loop — which command is a retry, what a refusal of a retry
means, what a pump carries, when a session expires, what a resuming client is re-sent — is
here, and is tested without a log (``tests/unit/test_core.py``).
"""

from __future__ import annotations

import hashlib
from typing import Any, Callable, Optional

import attrs

from duplex_es.domain import (
    COMMAND_TYPES,
    MAX_OUT_OF_BAND_RESPONSES,
    UNSET,
    Code,
    Detach,
    Duplicate,
    Expire,
    Heartbeat,
    Invalid,
    Pump,
    RetrieveItem,
    TurnSignal,
    UpdateSession,
    decide,
    evolve,
    kind_of,
    new_state,
)
from duplex_es.domain.commands import Command
from duplex_es.domain.kinds import ENDED_BY
from duplex_es.events import AudioSegment, CommandRejected, Event, ItemRetrieved, segments_audio
from duplex_es.protocol import project, split_server_event_seq

__all__ = [
    "SessionCore",
    "AppendPlan",
    "Applied",
    "AudioWanted",
    "Catchup",
    "IdSource",
    "Clock",
    "ModelResolver",
    "idempotency_key",
    "MAX_REPLAY_EVENTS",
]

#: ``new_id(prefix) -> "prefix_…"``: a fresh id (the host's is :func:`~duplex_es.server.host.new_id`).
IdSource = Callable[[str], str]
#: ``clock() -> Unix ms``: the wall clock, read only by the shell and logged (docs/architecture.md, I11).
Clock = Callable[[], int]
#: ``resolve(model_name)``: the engine a model name is served by, or ``None`` for a name this
#: server does not serve.
ModelResolver = Callable[[str], Optional[str]]

#: Most wire events a resume re-sends; a client further behind gets ``session.resync_required``.
MAX_REPLAY_EVENTS = 20_000

#: Commands that change nothing but the log: a repeated ``event_id`` never makes them a retry.
_READ_ONLY = (RetrieveItem, Heartbeat, TurnSignal)

#: The host's own commands: they are not client activity and are not counted as verdicts.
_HOUSEKEEPING = (Pump, Detach, Expire)


def idempotency_key(command: object) -> Optional[str]:
    """The log's idempotency key for a client command, or ``None``: a client ``event_id`` is a
    correlation id, so only a repeat of the same ``event_id`` *with the same content* is a retry
    (docs/protocol.md, Event ids). Read-only commands and refusals are never keyed; world
    interaction ids (ints) are deduplicated by the domain itself (``duplicate_event``).

    The content is the command's ``digest`` (the protocol layer's fingerprint of the client's
    frame), else a fingerprint of the command's fields (Python API callers).
    """
    event_id = getattr(command, "event_id", None)
    if not isinstance(event_id, str) or isinstance(command, _READ_ONLY):
        return None
    digest = getattr(command, "digest", None)
    if digest is None:
        fields = attrs.evolve(command, event_id=None) if attrs.has(type(command)) else command  # type: ignore[misc]
        digest = hashlib.blake2b(repr(fields).encode("utf-8", "surrogatepass"), digest_size=16).hexdigest()
    return f"{event_id[:200]}#{digest}"


@attrs.frozen(kw_only=True)
class AppendPlan:
    """What the shell must append for a command: ``events`` in one batch at ``expected_seq``
    (optimistic concurrency), under the idempotency ``key`` (``None``: unkeyed).

    ``check_key``: the command is a refusal of a keyed command; before appending it the shell
    asks the log whether that key was already applied (a retry of an applied command may be
    refused on today's state, e.g. a commit of a buffer it emptied), and if so turns it into a
    duplicate (:meth:`SessionCore.duplicate`); otherwise it appends the refusal unkeyed.
    """

    command: Command
    events: tuple[Event, ...]
    expected_seq: int
    key: Optional[str]
    check_key: bool = False

    @property
    def rejected(self) -> bool:
        """True when the plan is one refusal."""
        return isinstance(self.events[0], CommandRejected)

    @property
    def counted(self) -> bool:
        """True for a client's command (its verdict is counted); false for the host's own."""
        return not isinstance(self.command, _HOUSEKEEPING)


@attrs.frozen
class AudioWanted:
    """Logged audio a projection needs (a retrieve returns an item's audio): the seqs to read,
    and how to cut them (``segments`` at ``width`` bytes per sample)."""

    seqs: tuple[int, ...]
    segments: tuple[AudioSegment, ...]
    width: int

    def cut(self, events: dict[int, Event]) -> bytes:
        """The audio, given the logged events at :attr:`seqs`."""
        return segments_audio(events, self.segments, self.width)


@attrs.frozen
class Applied:
    """One committed record folded: the state ``before`` and ``after`` it, and whether it ended
    the session."""

    seq: int
    event: Event
    before: Any
    after: Any
    ended: bool


class SessionCore:
    """The rules of one hosted session, without I/O.

    Args:
        session_id: the session.
        new_id: the id source (pumps, notices).
        clock: the wall clock (Unix ms), stamped into the commands that carry a time.
        resolve_model: the server's model map (``None``: any model name is accepted as is).
        state: the state to start from (default: a session before its first event).
    """

    def __init__(
        self,
        session_id: str,
        *,
        new_id: IdSource,
        clock: Clock,
        resolve_model: Optional[ModelResolver] = None,
        state: Any = None,
    ) -> None:
        self.session_id = session_id
        self.new_id = new_id
        self.clock = clock
        self.resolve_model = resolve_model
        self.state: Any = state if state is not None else new_state()
        self._reveal: Optional[tuple[str, str]] = None

    # ---------------------------------------------------------------------------- commands in

    def resolved(self, command: Command) -> Command:
        """``command`` with the engine its model name maps to; a ``session.update`` naming a
        model this server does not serve becomes its refusal (``model_not_found``)."""
        if self.resolve_model is None or not isinstance(command, UpdateSession):
            return command
        name = command.patch.model
        if name is UNSET or not isinstance(name, str):
            return command
        engine = self.resolve_model(name)
        if engine is None:
            return Invalid(
                event_id=command.event_id,
                command_type="session.update",
                code=Code.MODEL_NOT_FOUND,
                message=f"model {name[:64]!r} is not served here (serve --model NAME=ENGINE names the models)",
                param="session.model",
            )
        return attrs.evolve(command, patch=attrs.evolve(command.patch, engine=engine))

    @staticmethod
    def is_activity(command: Command) -> bool:
        """Whether ``command`` counts as client activity for the idle TTL."""
        return not isinstance(command, _HOUSEKEEPING)

    def plan(self, command: Command, key: Optional[str]) -> Optional[AppendPlan]:
        """Decide ``command`` on the current state: what to append, or ``None`` when there is
        nothing to do (only the host's own commands can decide nothing)."""
        events = decide(self.state, command)
        if not events:
            return None
        check = isinstance(events[0], CommandRejected) and key is not None
        # A refusal is never keyed: it changes nothing, and keying it would answer a corrected
        # retry with the old error.
        return AppendPlan(command=command, events=tuple(events), expected_seq=self.state.seq, key=None if check else key, check_key=check)

    @staticmethod
    def duplicate(command: Command, seqs: tuple[int, int]) -> Duplicate:
        """The command that records a retry of an applied command (same ``event_id``, same
        content) whose batch is at ``seqs`` (first, last): ``command.deduplicated``."""
        return Duplicate(
            event_id=getattr(command, "event_id", "") or "",
            command_type=COMMAND_TYPES.get(type(command)),
            first_seq=seqs[0],
            last_seq=seqs[1],
        )

    def pump(self) -> Pump:
        """The host's nudge after every change: it may issue a tick, start a deferred response,
        end a response whose last output committed. Carries fresh request ids and the time."""
        return Pump(request_ids=tuple(self.new_id("req") for _ in range(1 + MAX_OUT_OF_BAND_RESPONSES)), now_ms=self.clock())

    def expiry(self, now: int, last_activity_ms: int, *, disconnect_grace_ms: int, idle_ttl_ms: int) -> Optional[Expire]:
        """The ``Expire`` due at ``now`` (Unix ms), or ``None``: a detached session whose
        disconnect grace ran out, or one idle (no client command since ``last_activity_ms``)
        for its TTL (docs/protocol.md, leases)."""
        state = self.state
        if not state.is_open:
            return None
        detached = state.lease.detached_at_ms
        if detached is not None and now - detached >= disconnect_grace_ms:
            return Expire(reason="disconnect_grace_expired", now_ms=now, since_ms=detached)
        if now - last_activity_ms >= idle_ttl_ms:
            return Expire(reason="idle_ttl_expired", now_ms=now, since_ms=last_activity_ms)
        return None

    def pump_idle(self) -> bool:
        """Whether a pump now would decide nothing (its kind says so): the host skips it."""
        return kind_of(self.state).pump_idle(self.state)

    def wakeup_ms(self) -> Optional[int]:
        """When the session must be pumped unasked (Unix ms; its kind's clock), or ``None``."""
        return kind_of(self.state).wakeup_ms(self.state)

    # ---------------------------------------------------------------------- records in, wire out

    def apply(self, seq: int, event: Event) -> Applied:
        """Fold the committed event at ``seq`` (the next one).

        Raises:
            RuntimeError: ``seq`` is not the next seq (the log and the state disagree).
        """
        if seq != self.state.seq + 1:
            raise RuntimeError(f"session {self.session_id}: got seq {seq} after {self.state.seq}")
        before = self.state
        self.state = evolve(before, seq, event)
        return Applied(seq, event, before, self.state, isinstance(event, ENDED_BY))

    @staticmethod
    def audio_wanted(event: Event, after: Any) -> Optional[AudioWanted]:
        """The logged audio the projection of ``event`` needs (a retrieve returns its item's
        audio), or ``None``."""
        if not isinstance(event, ItemRetrieved):
            return None
        item = after.items.get(event.item_id)
        segments = item.audio if item is not None else ()
        width = 2 if item is not None and item.audio_format.type == "audio/pcm" else 1
        return AudioWanted(tuple(sorted({s.seq for s in segments})), segments, width)

    @staticmethod
    def wires(applied: Applied, audio: Optional[bytes] = None) -> list[dict[str, Any]]:
        """The wire events of a folded record (``audio``: what :meth:`audio_wanted` asked for)."""
        reader = (lambda _segments: audio) if audio is not None else None
        return project(applied.before, applied.seq, applied.event, applied.after, reader)

    def reveal_token(self, token_hash: str, token: str) -> None:
        """Hand ``token`` to the listener with the wire event of the next committed event that
        carries ``token_hash`` (``session.created``, ``session.started`` or ``session.resumed``),
        as its ``resume_token`` field. The log keeps only the hash, and a re-send carries no
        token (a rotated one is void anyway)."""
        self._reveal = (token_hash, token)

    def forget_token(self) -> None:
        """Drop a token waiting to be revealed (its resume was refused)."""
        self._reveal = None

    def revealed(self, event: Event, wires: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """``wires`` with the resume token added where :meth:`reveal_token` asked for it."""
        token_hash = getattr(event, "resume_token_hash", None)
        if wires and self._reveal is not None and token_hash == self._reveal[0]:
            wires = [{**wires[0], "resume_token": self._reveal[1]}] + wires[1:]
            self._reveal = None
        return wires

    def replaced(self, generation: int, **extra: str) -> dict[str, Any]:
        """The ``session.replaced`` told to a listener whose session went to another client."""
        return {"type": "session.replaced", "event_id": self.new_id("event"), "session_id": self.session_id, "lease_generation": generation, **extra}

    def catchup(self, resumed_seq: int, last_server_event_seq: Optional[int]) -> "Catchup":
        """What a client resuming at ``resumed_seq`` (the seq of its ``session.resumed``) is
        re-sent, having last received ``last_server_event_seq`` (see :class:`Catchup`)."""
        return Catchup(self, resumed_seq, last_server_event_seq)


class Catchup:
    """The wire events a resuming client gets before the live stream: those after its
    ``last_server_event_seq``, re-projected from the log (byte-identical to their first sending,
    docs/architecture.md, I13), then its ``session.resumed``; or ``session.resync_required``
    (reason ``ahead_of_log`` when it claims events the log does not hold, ``too_far_behind``
    when it missed more than :data:`MAX_REPLAY_EVENTS`) instead of the missed events.

    The shell loads the state before :attr:`first_seq` (a snapshot and a fold), then feeds
    every record from there up to the session's head with :meth:`feed`.
    """

    def __init__(self, core: SessionCore, resumed_seq: int, last: Optional[int]) -> None:
        self.core, self.resumed_seq, self.last = core, resumed_seq, last
        self.resync: Optional[str] = None
        if last is not None and split_server_event_seq(last)[0] >= resumed_seq:
            self.resync = "ahead_of_log"
        #: The first seq whose wire events may be re-sent.
        self.first_seq = split_server_event_seq(last)[0] if last is not None and self.resync is None else resumed_seq
        self._missed: list[dict[str, Any]] = []
        self._resumed: list[dict[str, Any]] = []

    def feed(self, applied: Applied, audio: Optional[bytes] = None) -> None:
        """One record of the replay, folded by the shell (in order, from the loaded state)."""
        if applied.seq < self.first_seq:
            return
        wires = SessionCore.wires(applied, audio)
        if applied.seq >= self.resumed_seq:
            self._resumed += self.core.revealed(applied.event, wires)
        elif self.resync is None:
            self._missed += [w for w in wires if w["server_event_seq"] > self.last]  # type: ignore[operator]
            if len(self._missed) > MAX_REPLAY_EVENTS:
                self.resync, self._missed = "too_far_behind", []

    def wires(self) -> list[dict[str, Any]]:
        """Everything to send, in order."""
        if self.resync is not None:
            notice = {
                "type": "session.resync_required",
                "event_id": self.core.new_id("event"),
                "session_id": self.core.session_id,
                "reason": self.resync,
                "last_server_event_seq": self.last,
            }
            return [notice] + self._resumed
        return self._missed + self._resumed
