"""The model map: which client model names a server serves, and by which engine.

Clients always send their own model name (``gpt-realtime``, ``gpt-4o-realtime-preview``, ...),
in the connection URL and in ``session.update``. ``serve --model NAME=ENGINE`` (repeatable) maps
names to engines; ``*`` stands for any other name. Without ``--model``, any name is served by the
deployment's one engine (:data:`DEFAULT_ENGINE`). The session logs both names: the one the
client asked for (``session.model``) and the engine that serves it (``config.engine``, and
``engine`` in every tick's inputs).
"""

from __future__ import annotations

import re
from typing import Iterable, Optional

import attrs

__all__ = ["DEFAULT_ENGINE", "FULL_DUPLEX_ENGINE", "MAX_MODEL_NAME_CHARS", "ModelMap", "parse_model_spec"]

#: The engine of the reference deployment: the CPU echo agent the workers run by default.
DEFAULT_ENGINE = "duplex-es-echo"

#: The reference full-duplex engine (docs/duplex.md): a model of this name is always served by
#: it, and its sessions start in ``full_duplex`` mode.
FULL_DUPLEX_ENGINE = "duplex-es-duplex"

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:/@+-]{0,127}$")

#: The longest model name a client may ask for.
MAX_MODEL_NAME_CHARS = 128


def parse_model_spec(spec: str) -> tuple[str, str]:
    """``"NAME=ENGINE"`` → ``(NAME, ENGINE)``; NAME may be ``*`` (any other name).

    Raises:
        ValueError: not of that form, or a name with characters other than letters, digits and
            ``. _ : / @ + -`` (at most 128).
    """
    name, sep, engine = spec.partition("=")
    name, engine = name.strip(), engine.strip()
    if not sep or not name or not engine:
        raise ValueError(f"expected NAME=ENGINE (e.g. gpt-realtime=duplex-es-echo), got {spec!r}")
    if name != "*" and not _NAME.match(name):
        raise ValueError(f"model name {name!r}: use letters, digits and . _ : / @ + - (at most 128)")
    if not _NAME.match(engine):
        raise ValueError(f"engine name {engine!r}: use letters, digits and . _ : / @ + - (at most 128)")
    return name, engine


@attrs.frozen
class ModelMap:
    """Client model names → engines.

    ``names`` maps exact names; ``fallback`` serves every other name (``None``: other names are
    refused with ``model_not_found``). ``full_duplex`` are the engines that are full-duplex
    (their sessions start in ``full_duplex`` mode); a model named after one of them is served by
    it unless ``names`` says otherwise.
    """

    names: dict[str, str] = attrs.field(factory=dict)
    fallback: Optional[str] = DEFAULT_ENGINE
    full_duplex: frozenset[str] = frozenset({FULL_DUPLEX_ENGINE})

    def is_full_duplex(self, engine: str) -> bool:
        """Whether ``engine`` hears its sessions' input continuously (docs/duplex.md)."""
        return engine in self.full_duplex

    @classmethod
    def from_specs(cls, specs: Iterable[str]) -> "ModelMap":
        """The map of ``serve --model`` values; with none, any name goes to :data:`DEFAULT_ENGINE`.

        Raises:
            ValueError: a malformed spec, or one name given twice.
        """
        names: dict[str, str] = {}
        fallback: Optional[str] = None
        given = False
        for spec in specs:
            given = True
            name, engine = parse_model_spec(spec)
            if name == "*":
                if fallback is not None:
                    raise ValueError("'*' is mapped twice")
                fallback = engine
            elif name in names:
                raise ValueError(f"model {name!r} is mapped twice")
            else:
                names[name] = engine
        if not given:
            return cls()
        return cls(names=names, fallback=fallback)

    def resolve(self, name: str) -> Optional[str]:
        """The engine serving model ``name``, or ``None`` if this server does not serve it (a
        name of over 128 characters is never served)."""
        if not 0 < len(name) <= MAX_MODEL_NAME_CHARS:
            return None
        if name in self.names:
            return self.names[name]
        return name if name in self.full_duplex else self.fallback

    @property
    def default_name(self) -> str:
        """The model a connection that names none gets: the first ``--model`` name (the Agents
        SDK, for one, names its model only in its first ``session.update``), else
        :data:`DEFAULT_ENGINE`."""
        return next(iter(self.names), DEFAULT_ENGINE)

    def describe(self) -> str:
        """The served names, for logs and error messages."""
        parts = [f"{n}={e}" for n, e in sorted(self.names.items())]
        if self.fallback is not None:
            parts.append(f"*={self.fallback}")
        return ", ".join(parts)
