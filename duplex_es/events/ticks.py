"""The tick machinery every session kind shares, as the log sees it (docs/architecture.md,
"Session kinds" and "Ticks and workers").

A *tick* is one engine step: the session appends a tick snapshot (a :class:`TickRequest`), a
worker claims it, runs an engine and appends its answer (a :class:`TickAnswer`), which echoes
the tick's identity; the session accepts the answer only on an exact echo of a live tick
(docs/architecture.md, I5). An event that kills ticks in flight (a new epoch, a reset, a close)
is a :class:`TickCanceller` naming them.

These are role classes: a kind's event classes (speech's ``tick.issued``, world's
``world.tick.issued``, transcription's ``transcription.requested``, ...) inherit the role, so the
store, the worker, replay and audit find ticks by role and never name a kind.
"""

from __future__ import annotations

from typing import Any, ClassVar, Optional

import attrs

from duplex_es.events.base import Event

__all__ = ["TickRequest", "TickAnswer", "TickCanceller", "TickIdentity"]


class TickRequest(Event):
    """Role of a tick snapshot: the frozen input of one engine step.

    A subclass has ``request_id`` (unique in the log) and ``kind`` (the worker's routing key:
    ``speech``, ``world``, ``transcription``); a fenced one (``FENCED``) also has ``epoch``,
    ``chunk_index`` and ``applied_event_ids`` (the seqs or ids of the accepted input it applies,
    each applied by exactly one tick). ``failed(session_id, code, message)`` gives the answer a
    worker logs when its engine failed on the tick.
    """

    #: Whether an epoch change cancels the tick (transcription ticks are not fenced).
    FENCED: ClassVar[bool] = True

    def failed(self, session_id: str, code: str, message: str) -> "TickAnswer":
        """The failure answer to this tick (each tick class defines it)."""
        raise NotImplementedError


class TickAnswer(Event):
    """Role of a worker's answer to a tick (an output or a failure). A subclass has
    ``session_id`` and ``request_id``, and for fenced ticks the identity fields it echoes;
    ``FAILURE`` tells a failure from an output."""

    FAILURE: ClassVar[bool] = False


class TickCanceller(Event):
    """Role of an event that ends ticks in flight: a subclass has ``cancelled_request_ids``
    (those ticks' answers will be discarded, and the tick queue drops them)."""


@attrs.frozen(kw_only=True)
class TickIdentity:
    """What an answer must echo exactly to be accepted (docs/architecture.md, I5; vLLM-Omni's
    chunk metadata): the session, the tick's ``request_id``, its ``epoch``, its ``chunk_index``
    (steps of one response, or chunks of one world epoch, from 0), the ``applied_event_ids``
    and, for a speech tick, the ``response_id`` it belongs to (``None`` for other kinds)."""

    session_id: str
    request_id: str
    epoch: int
    chunk_index: int
    applied_event_ids: tuple[int, ...]
    response_id: Optional[str] = None

    @classmethod
    def of(cls, session_id: str, tick: Any) -> "TickIdentity":
        """The identity of a fenced tick snapshot (or of an answer: the identity it echoes)."""
        return cls(
            session_id=session_id,
            request_id=tick.request_id,
            epoch=tick.epoch,
            chunk_index=tick.chunk_index,
            applied_event_ids=tuple(tick.applied_event_ids),
            response_id=getattr(tick, "response_id", None),
        )

    def echoed_by(self, answer: Any) -> bool:
        """Whether ``answer`` (a :class:`TickAnswer` of a fenced tick) echoes this identity
        field for field."""
        return self == TickIdentity.of(answer.session_id, answer)
