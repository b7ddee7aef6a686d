"""Session state: what :func:`~duplex_es.domain.evolve.evolve` rebuilds from the log.

Every class is frozen; maps are plain dicts that are never mutated, only replaced. One
:class:`Item` aggregate holds everything about a conversation item (DESIGN §4, "one item
aggregate"); one :class:`Response` holds a response's lifecycle and its playback ledger.
"""

from __future__ import annotations

from typing import Optional

import attrs

from duplex_es.events import AudioFormat, Mark, SessionConfig, SpeechInputs

__all__ = ["InputBuffer", "Item", "Response", "Tick", "SessionState", "ACTIVE", "TERMINAL_STATUSES"]

ACTIVE = "in_progress"
TERMINAL_STATUSES = frozenset({"completed", "cancelled", "failed", "incomplete"})


@attrs.frozen(kw_only=True)
class InputBuffer:
    """The uncommitted input: appended audio (by seq) and text, in log order.

    ``samples`` is the buffered audio's length in samples of the session's input format.
    """

    append_seqs: tuple[int, ...] = ()
    samples: int = 0
    text_seqs: tuple[int, ...] = ()
    text: str = ""

    @property
    def empty(self) -> bool:
        """True if nothing is buffered."""
        return not self.append_seqs and not self.text_seqs


@attrs.frozen(kw_only=True)
class Item:
    """One conversation item.

    User items come from a commit: ``append_seqs`` name their audio, ``input_samples`` its
    length, ``input_text`` the text appended with it, ``transcript`` what the engine heard.
    Assistant items belong to ``response_id``: ``full_text`` is everything generated,
    ``transcript`` what the history keeps (the heard prefix), ``audio_samples`` the generated
    audio in the response's output format (the sum of the delta bytes / 2), ``marks`` the
    text/audio alignment and ``truncated_ms`` the hard cap set by a truncate.
    """

    id: str
    role: str
    previous_item_id: Optional[str] = None
    status: str = "completed"
    content_type: str = "input_audio"
    append_seqs: tuple[int, ...] = ()
    input_samples: int = 0
    input_text: str = ""
    transcript: str = ""
    response_id: Optional[str] = None
    full_text: str = ""
    audio_samples: int = 0
    audio_rate: int = 24000
    marks: tuple[Mark, ...] = ()
    truncated_ms: Optional[int] = None

    @property
    def generated_ms(self) -> int:
        """Generated audio in ms."""
        return self.audio_samples * 1000 // self.audio_rate

    @property
    def audio_ms(self) -> int:
        """The item's audio length in ms: generated audio, cut at the truncation cap if any."""
        if self.truncated_ms is None:
            return self.generated_ms
        return min(self.generated_ms, self.truncated_ms)


@attrs.frozen(kw_only=True)
class Response:
    """One response: lifecycle, tick progress and playback ledger.

    ``inputs`` are what its first tick gave the engine; every later tick repeats them.
    Ledger (ms of this response's audio): ``generated_ms`` accepted from the engine (each
    accepted chunk is sent to the client after it commits, so it is also the sent position),
    ``played_ms`` and ``committed_ms`` from the client's acks (monotonic), capped by truncation.
    """

    id: str
    item_id: str
    status: str = ACTIVE
    epoch: int = 0
    output_modalities: tuple[str, ...] = ("audio",)
    voice: str = "alloy"
    instructions: str = ""
    output_format: AudioFormat = AudioFormat()
    conversation: str = "auto"
    inputs: SpeechInputs = SpeechInputs()
    next_chunk: int = 0
    tick_in_flight: Optional[str] = None
    final_seen: bool = False
    failure_code: Optional[str] = None
    failure_message: Optional[str] = None
    status_reason: Optional[str] = None
    generated_ms: int = 0
    played_ms: int = 0
    committed_ms: int = 0
    acked: bool = False

    @property
    def sent_ms(self) -> int:
        """Audio sent to the client: every accepted chunk is, after its commit (DESIGN I4)."""
        return self.generated_ms

    @property
    def active(self) -> bool:
        """True until the response's ``response.done``."""
        return self.status == ACTIVE


@attrs.frozen(kw_only=True)
class Tick:
    """A tick the session issued and has not resolved (committed, cancelled or failed)."""

    request_id: str
    response_id: str
    epoch: int
    chunk_index: int
    applied_event_ids: tuple[int, ...] = ()
    status: str = "issued"  # issued | failed


@attrs.frozen(kw_only=True)
class SessionState:
    """The whole derived state of one session after its event ``seq``.

    ``unapplied`` are the seqs of accepted model-feeding events no tick has taken yet, in log
    order (DESIGN I5). ``input_clock`` is the number of input samples appended since the
    session began: the audio clock of DESIGN I12.
    """

    session_id: str = ""
    seq: int = 0
    status: str = "new"  # new | open | closed
    close_reason: Optional[str] = None
    config: Optional[SessionConfig] = None
    epoch: int = 0
    input_clock: int = 0
    buffer: InputBuffer = InputBuffer()
    item_order: tuple[str, ...] = ()
    items: dict[str, Item] = attrs.Factory(dict)
    responses: dict[str, Response] = attrs.Factory(dict)
    active_response_id: Optional[str] = None
    ticks: dict[str, Tick] = attrs.Factory(dict)
    unapplied: tuple[int, ...] = ()
    audio_output_started: bool = False

    @property
    def active_response(self) -> Optional[Response]:
        """The response that holds the default conversation, if any."""
        return self.responses.get(self.active_response_id) if self.active_response_id else None

    @property
    def last_item_id(self) -> Optional[str]:
        """The newest item in the conversation, if any."""
        return self.item_order[-1] if self.item_order else None

    def last_user_item(self) -> Optional[Item]:
        """The newest user item, if any."""
        for item_id in reversed(self.item_order):
            item = self.items[item_id]
            if item.role == "user":
                return item
        return None
