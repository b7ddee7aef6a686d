"""Input transcription (GA ``audio.input.transcription``): every committed user audio item is
transcribed by a worker, whether or not a response follows and whether or not it is cancelled.

A transcription is its own tick kind (``transcription.requested``): a worker claims it like any
other tick and appends ``transcription.completed`` or ``transcription.failed``, which must echo
the request and its item. It is not fenced by epochs (a barge-in does not take the user's words
away); only the session's end cancels what is still in flight. The item's place in the
conversation was fixed by its commit, so it never depends on when the transcript arrives.
"""

from __future__ import annotations

import hashlib
from typing import Union

from duplex_es.domain.replace import replace
from duplex_es.domain.rules import put_item
from duplex_es.domain.state import SessionState
from duplex_es.events import AudioSegment, Event, TranscriptionCompleted, TranscriptionFailed, TranscriptionRequested

__all__ = ["transcription_request", "transcription_verdict"]


def _request_id(state: SessionState, item_id: str) -> str:
    """The id of the transcription of ``item_id`` requested after event ``state.seq``: derived
    from ids that arrived in commands (docs/architecture.md, I2), unique in the whole log (tick ids are)."""
    digest = hashlib.blake2b(f"{state.session_id}/{state.seq}/{item_id}".encode("utf-8", "surrogatepass"), digest_size=12)
    return "req_tr_" + digest.hexdigest()


def transcription_request(state: SessionState, item_id: str, audio: tuple[AudioSegment, ...]) -> list[Event]:
    """The ``transcription.requested`` for a new user item with ``audio``, if the session asks
    for input transcription (``[]`` otherwise)."""
    cfg = state.config
    if cfg is None or cfg.transcription is None or not audio:
        return []
    return [
        TranscriptionRequested(
            request_id=_request_id(state, item_id), item_id=item_id, audio=audio, input_format=cfg.input_format, settings=cfg.transcription
        )
    ]


def transcription_verdict(state: SessionState, ev: Union[TranscriptionCompleted, TranscriptionFailed]) -> str:
    """``accepted``, or why a worker's transcription output is discarded: ``unknown_request``
    (none in flight with its id: already answered, or cancelled when the session ended),
    ``identity_mismatch`` (it names another session or item)."""
    item_id = state.transcriptions.get(ev.request_id)
    if item_id is None:
        return "unknown_request"
    if ev.item_id != item_id or ev.session_id != state.session_id:
        return "identity_mismatch"
    return "accepted"


def evolve_transcription_requested(ev: TranscriptionRequested, state: SessionState, seq: int) -> SessionState:
    item = state.items.get(ev.item_id)
    if item is not None:
        state = put_item(state, replace(item, transcription="requested"))
    return replace(state, transcriptions={**state.transcriptions, ev.request_id: ev.item_id})


def _settle(state: SessionState, ev: Union[TranscriptionCompleted, TranscriptionFailed], **changes: object) -> SessionState:
    if transcription_verdict(state, ev) != "accepted":
        return state
    item = state.items.get(ev.item_id)
    if item is not None:  # a deleted item keeps no transcript
        state = put_item(state, replace(item, **changes))
    return replace(state, transcriptions={k: v for k, v in state.transcriptions.items() if k != ev.request_id})


def evolve_transcription_completed(ev: TranscriptionCompleted, state: SessionState, seq: int) -> SessionState:
    return _settle(state, ev, transcript=ev.transcript, transcription="completed")


def evolve_transcription_failed(ev: TranscriptionFailed, state: SessionState, seq: int) -> SessionState:
    return _settle(state, ev, transcription="failed")
