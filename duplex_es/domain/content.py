"""What a ``message`` item may hold, by role (GA item types): the one rule
``conversation.item.create`` and ``response.create`` ``input`` share."""

from __future__ import annotations

from typing import Optional

from duplex_es.domain.errors import Code
from duplex_es.events import ContentPart

__all__ = ["content_problem"]

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
