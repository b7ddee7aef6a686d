"""The event base class and the type registry.

Every event duplex_es writes to its log is a frozen attrs class registered here under a stable
wire name (``TYPE``) and a schema version (``VERSION``). The wire name is what the log's ``type``
column stores; it never changes once released. A change of shape bumps ``VERSION`` and registers
an upcaster in :mod:`duplex_es.events.codec`.
"""

from __future__ import annotations

from typing import Callable, ClassVar, TypeVar

import attrs

__all__ = ["Event", "Refusal", "event", "event_class", "registry"]

_REGISTRY: dict[str, type["Event"]] = {}

E = TypeVar("E", bound=type)


class Event:
    """Base of every logged event.

    Subclasses are declared with :func:`event`, which makes them frozen, keyword-only attrs
    classes and registers them. ``TYPE`` is the stable wire name, ``VERSION`` the schema version
    of the current shape.
    """

    TYPE: ClassVar[str] = ""
    VERSION: ClassVar[int] = 1


class Refusal(Event):
    """Role of an event that records a refused command (``command.rejected``, a world session's
    ``world.interaction.rejected``): it has ``code``, ``message`` and ``param``, and changes no
    derived state (docs/architecture.md, I3). Replay and audit find refusals by this role."""


def event(type_name: str, version: int = 1) -> Callable[[E], E]:
    """Declare and register an event class.

    Args:
        type_name: the stable wire name stored in the log, e.g. ``"response.created"``.
        version: the schema version of this shape (>= 1).

    Raises:
        ValueError: if ``type_name`` is already registered or ``version`` < 1.
    """
    if version < 1:
        raise ValueError(f"event {type_name!r}: version must be >= 1, got {version}")

    def wrap(cls: E) -> E:
        if type_name in _REGISTRY:
            raise ValueError(f"event type {type_name!r} is registered twice")
        cls.TYPE = type_name  # type: ignore[attr-defined]
        cls.VERSION = version  # type: ignore[attr-defined]
        frozen = attrs.frozen(kw_only=True)(cls)
        _REGISTRY[type_name] = frozen
        return frozen

    return wrap


def registry() -> dict[str, type[Event]]:
    """A copy of the wire-name → class map of every registered event type."""
    return dict(_REGISTRY)


def event_class(type_name: str) -> type[Event] | None:
    """The class registered under wire name ``type_name``, ``None`` if none is: the decoder's
    per-event lookup (:func:`registry` copies the whole map, which cost a rebuild 8% of its
    time)."""
    return _REGISTRY.get(type_name)
