"""What a ``message`` item may hold, by role (GA item types): the one rule
``conversation.item.create`` and ``response.create`` ``input`` share."""

from __future__ import annotations

from typing import Optional

from duplex_es.domain.errors import Code
from duplex_es.domain.limits import MAX_BUFFER_MS, MAX_INPUT_TEXT_CHARS
from duplex_es.events import AudioFormat, ContentPart

__all__ = ["content_problem", "size_problem", "tool_choice_problem"]

_PARTS_BY_ROLE = {"user": {"input_text", "input_audio"}, "system": {"input_text"}, "assistant": {"output_text"}}


def content_problem(role: str, content: tuple[ContentPart, ...], path: str = "item") -> Optional[tuple[str, str, str]]:
    """Why a ``message`` item of ``role`` cannot hold ``content``: ``(code, message, param)``,
    or ``None``. Shared by ``conversation.item.create`` and ``response.create`` ``input``."""
    if role not in _PARTS_BY_ROLE:
        return Code.INVALID_ITEM, f"role must be user, assistant or system, not {role[:32]!r}", f"{path}.role"
    allowed = _PARTS_BY_ROLE[role]
    for i, part in enumerate(content):
        if part.type not in allowed:
            if role == "assistant" and part.type in ("output_audio", "audio"):
                return Code.TRUNCATE_UNSUPPORTED_CONTENT, "assistant audio messages cannot be created", f"{path}.content[{i}].type"
            return (
                Code.INVALID_ITEM,
                f"a {role} item cannot hold {part.type[:32]!r} content (allowed: {', '.join(sorted(allowed))})",
                f"{path}.content[{i}].type",
            )
    if not content:
        return Code.INVALID_ITEM, "an item needs at least one content part", f"{path}.content"
    for i, part in enumerate(content):
        empty = not part.audio if part.type == "input_audio" else not part.text
        if empty:
            what = "audio" if part.type == "input_audio" else "text"
            return Code.INVALID_ITEM, f"a {part.type} part needs non-empty {what}", f"{path}.content[{i}].{what}"
    return None


def tool_choice_problem(tools: tuple, tool_choice: object) -> Optional[str]:
    """Why ``tool_choice`` cannot go with ``tools`` (a named function none of them is), or
    ``None``."""
    if isinstance(tool_choice, dict) and tool_choice.get("type") == "function":
        names = [t.get("name") for t in tools if isinstance(t, dict) and t.get("type", "function") == "function"]
        if tool_choice.get("name") not in names:
            listed = ", ".join(repr(n) for n in names[:8]) or "none"
            return f"tool_choice names function {str(tool_choice.get('name'))[:64]!r}, which is not among the tools ({listed})"
    return None


def size_problem(fmt: AudioFormat, content: tuple[ContentPart, ...], audio_nbytes: int, what: str, path: str) -> Optional[tuple[str, str, str]]:
    """Why an item's content is too big, or its audio not whole samples of ``fmt``:
    ``(code, message, param)``, or ``None``. ``audio_nbytes`` are its decoded audio bytes; the
    bounds are the input buffer's (:data:`MAX_INPUT_TEXT_CHARS`, :data:`MAX_BUFFER_MS`)."""
    text = sum(len(p.text) for p in content)
    if text > MAX_INPUT_TEXT_CHARS:
        return Code.INPUT_TEXT_TOO_LONG, f"{what} holds {text} characters of text; at most {MAX_INPUT_TEXT_CHARS}", path
    per_sample = 2 if fmt.type == "audio/pcm" else 1
    if audio_nbytes % per_sample:
        return Code.INVALID_AUDIO_LENGTH, f"{fmt.type} audio needs a multiple of {per_sample} bytes; {what} has {audio_nbytes}", path
    samples = audio_nbytes // per_sample
    if samples * 1000 > MAX_BUFFER_MS * fmt.rate:
        return Code.BUFFER_FULL, f"{what} holds {samples * 1000 // fmt.rate} ms of audio; at most {MAX_BUFFER_MS // 1000} s", path
    return None
