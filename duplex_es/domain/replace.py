"""``replace(instance, **changes)``: :func:`attrs.evolve` for the domain's frozen value classes,
three to six times faster.

The reducer copies a state object for every event it folds (a 20 ms audio append folds into a
new ``SessionState`` and ``InputBuffer``, server VAD into a ``VadState`` per 10 ms frame), so
copying is on the hot path of every session. :func:`attrs.evolve` rebuilds the keyword
arguments from ``attrs.fields`` and calls ``__init__`` on every call; here each class gets a
copier once:

* a class without slots (the big state classes, ``SessionState`` and ``DuplexState``: many
  fields, copied once per event) is copied as its instance dict, one C-level ``dict.copy``,
  with the changes written into the copy;
* a slotted class gets a function compiled for it that copies the slots directly.

The result is the same object ``attrs.evolve`` would build: same class, same field values,
nothing shared that ``attrs.evolve`` would not share (values are never copied, only
referenced). A frozen attrs instance's dict holds exactly its fields (its ``__setattr__``
refuses anything else), so copying the dict copies the fields and nothing more.

Classes with anything ``__init__`` would run — validators, converters, ``__attrs_post_init__``,
fields not in ``__init__``, a field whose ``__init__`` argument has another name — or anything
that writes an instance's dict besides its fields (a ``cached_property``) go through
:func:`attrs.evolve` itself.
"""

from __future__ import annotations

import functools
from typing import Any, Callable, TypeVar

import attrs

__all__ = ["replace", "copier"]

T = TypeVar("T")

_COPIERS: dict[type, Callable[..., Any]] = {}
_MISSING = object()


def replace(inst: T, **changes: Any) -> T:
    """A copy of the attrs instance ``inst`` with ``changes`` (field name → new value) applied.

    Raises:
        TypeError: a name in ``changes`` is not a field of the class (as ``attrs.evolve``).
    """
    cls = inst.__class__
    copy = _COPIERS.get(cls)
    if copy is None:
        copy = _COPIERS[cls] = _compile(cls)
    return copy(inst, **changes)


def copier(cls: type[T]) -> Callable[..., T]:
    """``copier(cls)(inst, **changes)`` is ``replace(inst, **changes)`` for an instance of
    exactly ``cls``, without the lookup (for an evolver that copies one class on every event)."""
    copy = _COPIERS.get(cls)
    if copy is None:
        copy = _COPIERS[cls] = _compile(cls)
    return copy


def _plain(cls: type) -> bool:
    """True if constructing ``cls`` only stores its fields (so copying them is the same)."""
    if not attrs.has(cls) or hasattr(cls, "__attrs_post_init__") or hasattr(cls, "__attrs_pre_init__"):
        return False
    fields = attrs.fields(cls)
    if any(not f.init or f.validator is not None or f.converter is not None or f.alias != f.name for f in fields):
        return False
    if "__slots__" not in cls.__dict__:
        # Without slots: the instance dict must hold the fields and nothing else.
        return not any(isinstance(v, functools.cached_property) for c in cls.__mro__ for v in vars(c).values())
    # A slot that is not a field (attrs' cached hash, say) is something __init__ would set.
    slots = {s for c in cls.__mro__ for s in c.__dict__.get("__slots__", ())}
    return slots - {"__weakref__"} <= {f.name for f in fields}


def _compile(cls: type) -> Callable[..., Any]:
    if not _plain(cls):
        return attrs.evolve
    fields = attrs.fields(cls)
    if "__slots__" not in cls.__dict__:
        return _dict_copier(cls, frozenset(f.name for f in fields))
    params = ", ".join(f"{f.alias}=_M" for f in fields)
    lines = [f"def copy(inst, *, {params}):", "    new = _new(_cls)"]
    for f in fields:
        lines.append(f"    _set(new, {f.name!r}, inst.{f.name} if {f.alias} is _M else {f.alias})")
    lines.append("    return new")
    namespace: dict[str, Any] = {"_M": _MISSING, "_new": object.__new__, "_cls": cls, "_set": object.__setattr__}
    exec(compile("\n".join(lines), f"<replace {cls.__qualname__}>", "exec"), namespace)  # noqa: S102 - generated from field names
    return namespace["copy"]


def _dict_copier(cls: type, names: frozenset[str]) -> Callable[..., Any]:
    new_instance, set_attr = object.__new__, object.__setattr__

    def copy(inst: Any, **changes: Any) -> Any:
        d = inst.__dict__.copy()
        if changes:
            if not names.issuperset(changes):
                bad = sorted(set(changes) - names)
                raise TypeError(f"{cls.__qualname__} has no field {bad[0]!r}")
            d.update(changes)
        new = new_instance(cls)
        set_attr(new, "__dict__", d)
        return new

    return copy
