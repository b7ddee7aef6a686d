"""``replace(instance, **changes)``: :func:`attrs.evolve` for the domain's frozen value classes,
about three times faster.

The reducer copies a state object for every event it folds (a 20 ms audio append folds into a
new ``SessionState`` and ``InputBuffer``, server VAD into a ``VadState`` per 10 ms frame), so
copying is on the hot path of every session. :func:`attrs.evolve` rebuilds the keyword
arguments from ``attrs.fields`` and calls ``__init__`` on every call; here one function per
class is compiled once that copies the slots directly. The result is the same object
``attrs.evolve`` would build: same class, same field values, nothing shared that ``attrs.evolve``
would not share (values are never copied, only referenced).

Classes with anything ``__init__`` would run — validators, converters, ``__attrs_post_init__``,
fields not in ``__init__`` — or without slots go through :func:`attrs.evolve` itself.
"""

from __future__ import annotations

from typing import Any, Callable, TypeVar

import attrs

__all__ = ["replace"]

T = TypeVar("T")

_COPIERS: dict[type, Callable[..., Any]] = {}
_MISSING = object()


def replace(inst: T, **changes: Any) -> T:
    """A copy of the attrs instance ``inst`` with ``changes`` (field name → new value) applied.

    Raises:
        TypeError: a name in ``changes`` is not a field of the class (as ``attrs.evolve``).
    """
    cls = inst.__class__
    copier = _COPIERS.get(cls)
    if copier is None:
        copier = _COPIERS[cls] = _compile(cls)
    return copier(inst, **changes)


def _plain(cls: type) -> bool:
    """True if constructing ``cls`` only stores its fields (so copying slots is the same)."""
    if "__slots__" not in cls.__dict__ or hasattr(cls, "__attrs_post_init__") or hasattr(cls, "__attrs_pre_init__"):
        return False
    fields = attrs.fields(cls)
    if any(not f.init or f.validator is not None or f.converter is not None for f in fields):
        return False
    # A slot that is not a field (attrs' cached hash, say) is something __init__ would set.
    slots = {s for c in cls.__mro__ for s in c.__dict__.get("__slots__", ())}
    return slots - {"__weakref__"} <= {f.name for f in fields}


def _compile(cls: type) -> Callable[..., Any]:
    if not _plain(cls):
        return attrs.evolve
    fields = attrs.fields(cls)
    params = ", ".join(f"{f.alias}=_M" for f in fields)
    lines = [f"def copy(inst, *, {params}):", "    new = _new(_cls)"]
    for f in fields:
        lines.append(f"    _set(new, {f.name!r}, inst.{f.name} if {f.alias} is _M else {f.alias})")
    lines.append("    return new")
    namespace: dict[str, Any] = {"_M": _MISSING, "_new": object.__new__, "_cls": cls, "_set": object.__setattr__}
    exec(compile("\n".join(lines), f"<replace {cls.__qualname__}>", "exec"), namespace)  # noqa: S102 - generated from field names
    return namespace["copy"]
