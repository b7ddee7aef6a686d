"""What of an event is content (sealed at rest) and what is structure (always in the clear).

Issue 17 (docs/privacy.md): with a master key configured, the log stores each event's content —
what was said, typed, prompted, answered or shown — encrypted under its session's data key, and
keeps in the clear what ordering, audit, ownership and the tick protocol need: event types, ids,
sequence numbers, times, sample counts, epochs, verdicts and error codes, ``applied_event_ids``.

This module is the catalogue's half of that rule, with no cryptography in it: per event class,
the *paths* of its content fields (``"audio"``, ``"config.instructions"``: a dotted path walks
nested value classes), and the two pure functions that move them out of an event's plain dict
and back in. :func:`split` leaves in the clear dict an *empty value of the same JSON kind* at
each path (``""`` for text, ``[]`` for lists, ``{}`` for objects, ``null`` otherwise), so the
clear text alone always decodes to a valid event of the same class: the event as it reads once
its content is erased (docs/privacy.md, "What an erased session shows").

``tests/unit/test_sealing.py`` fills every text field of every event class with a marker and
checks that it reaches the clear text only through fields listed in
:data:`CLEAR_TEXT_FIELDS`, so a field added to the catalogue later is content until someone
says otherwise.
"""

from __future__ import annotations

from typing import Any, Mapping

from duplex_es.events import catalogue as c
from duplex_es.events import duplex as d
from duplex_es.events import world as w

__all__ = ["SEALED_PATHS", "CLEAR_TEXT_FIELDS", "split", "merge"]

# Session configuration: the prompt and the tools are the operator's and the user's words; the
# model, voices, formats and turn detection are structure (the audio clock needs the formats).
_CONFIG = ("config.instructions", "config.tools", "config.prompt", "config.transcription", "config.tracing")
# What a tick hands an engine: the user's text, the prompt, the conversation so far.
_INPUTS = ("inputs.user_text", "inputs.instructions", "inputs.history", "inputs.tools")

#: Event class → the dotted paths of its content fields.
SEALED_PATHS: Mapping[type, tuple[str, ...]] = {
    c.SessionOpened: _CONFIG,
    c.SessionUpdated: _CONFIG,
    c.CommandRejected: ("message", "excerpt"),
    c.AudioAppended: ("audio",),
    c.TextAppended: ("text",),
    c.InputCommitted: ("text",),
    c.ItemCreated: ("content", "arguments", "output"),
    c.ResponseCreated: ("instructions", "metadata", "input"),
    c.TickIssued: _INPUTS,
    c.TickOutput: ("audio", "text_delta", "input_transcripts", "function_call.arguments_delta"),
    c.TranscriptionRequested: ("settings",),
    c.TranscriptionCompleted: ("transcript",),
    w.WorldStarted: ("config.prompt",),
    w.InteractionAccepted: ("prompt", "controls"),
    w.InteractionRejected: ("message",),
    w.WorldTickIssued: ("prompt", "controls", "control_events", "engine_state", "config.prompt"),
    w.WorldChunk: ("frames", "frame_hashes", "engine_state"),
    d.UnitIssued: ("engine_state", "items") + _INPUTS,
    d.UnitOutput: ("audio", "text_delta", "user_transcript_delta", "engine_state", "function_call.arguments_delta"),
    d.TurnRequested: ("metadata", "instructions"),
}

#: Text fields that stay in the clear although they hold strings: ids, wire names, enumerations,
#: codes, engine names, hashes and the engines' own error messages (they describe the engine,
#: not the conversation). Keyed by field name, whatever the class (nested value classes too).
CLEAR_TEXT_FIELDS: frozenset[str] = frozenset(
    {
        "session_id", "item_id", "previous_item_id", "response_id", "request_id", "call_id", "client_event_id",
        "new_item_id", "reply_to_item_id", "command_type", "code", "param", "error_type", "error_code",
        "type", "role", "name", "status", "reason", "signal", "decision", "listen_reason", "purpose", "kind",
        "incomplete_reason", "engine", "model", "voice", "principal", "resume_token_hash", "conversation",
        "transcript_on_truncate", "turn_mode", "overlap", "session_type", "eagerness", "detector", "model_state",
        "mime_type", "pacing", "track", "schema", "output_modalities", "turn_modes", "not_applied", "include",
        "cancelled_request_ids", "tool_choice", "truncation", "max_output_tokens", "by",
        # the client's settings for noise reduction and reasoning effort: knobs, not words
        "noise_reduction", "reasoning",
        # an engine's failure (tick.failed, unit.failed, world failures, response.done's error):
        # what went wrong in the engine, bounded, never the user's words
        "message", "error_message",
    }
)


def _empty_like(value: Any) -> Any:
    if isinstance(value, str):
        return ""
    if isinstance(value, list):
        return []
    if isinstance(value, dict):
        return {}
    return None


def split(cls: type, plain: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """Move the content of an event's plain dict (``to_plain(event)``) out of it.

    Args:
        cls: the event's class.
        plain: its unstructured fields; not changed.

    Returns:
        ``(clear, secret)``: ``clear`` is ``plain`` with an empty value of the same JSON kind at
        each content path that holds something (a path through a ``null`` is skipped);
        ``secret`` maps each such path to its value. Both are JSON-ready; ``secret`` is empty
        when the event holds no content.
    """
    paths = SEALED_PATHS.get(cls, ())
    secret: dict[str, Any] = {}
    clear = plain
    for path in paths:
        parts = path.split(".")
        node: Any = plain
        for p in parts[:-1]:
            node = node.get(p) if isinstance(node, dict) else None
        if not isinstance(node, dict) or parts[-1] not in node:
            continue
        value = node[parts[-1]]
        empty = _empty_like(value)
        if value == empty and type(value) is type(empty):
            continue  # nothing to hide: the clear text holds the same empty value
        if clear is plain:
            clear = _copy_path(plain, parts)
        else:
            clear = _copy_path(clear, parts)
        target = clear
        for p in parts[:-1]:
            target = target[p]
        target[parts[-1]] = empty
        secret[path] = value
    return clear, secret


def _copy_path(plain: dict[str, Any], parts: list[str]) -> dict[str, Any]:
    """``plain`` with the dicts along ``parts[:-1]`` copied (so a change there leaves ``plain`` be)."""
    top = dict(plain)
    node = top
    for p in parts[:-1]:
        node[p] = dict(node[p])
        node = node[p]
    return top


def merge(clear: dict[str, Any], secret: Mapping[str, Any]) -> dict[str, Any]:
    """Put the content of ``secret`` (``path → value``, from :func:`split`) back into ``clear``,
    in place, and return it.

    Raises:
        KeyError: a path does not lead through objects of ``clear``.
    """
    for path, value in secret.items():
        parts = path.split(".")
        node = clear
        for p in parts[:-1]:
            node = node[p]
            if not isinstance(node, dict):
                raise KeyError(path)
        node[parts[-1]] = value
    return clear


