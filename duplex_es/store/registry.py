"""Which storage backends exist, and which one a database URL selects.

Adding a backend is one line in :data:`BACKENDS` (after implementing
:class:`~duplex_es.store.backend.Backend` in its own module and passing
``tests/store_conformance.py``; docs/architecture.md, "Storage backends").
"""

from __future__ import annotations

import sqlalchemy as sa

from duplex_es.store.backend import Backend
from duplex_es.store.postgres import PostgresBackend
from duplex_es.store.sqlite import SqliteBackend

__all__ = ["BACKENDS", "backend_class", "backend_names", "normalize_url"]

#: Every backend, one line each.
BACKENDS: tuple[type[Backend], ...] = (
    SqliteBackend,
    PostgresBackend,
)


def backend_names() -> list[str]:
    """The registered backends' names (``sqlite``, ``postgresql``), for messages."""
    return [b.name for b in BACKENDS]


def normalize_url(url: str) -> str:
    """``url`` with the default driver of the backend it names, if it names none
    (``postgres://`` becomes ``postgresql+psycopg://``)."""
    for backend in BACKENDS:
        url = backend.normalize_url(url)
    return url


def backend_class(url_or_name: str) -> type[Backend]:
    """The backend of a SQLAlchemy URL, or of a dialect name (``sqlite``, ``postgresql``).

    Raises:
        ValueError: a malformed URL, or a backend that is not registered.
    """
    name = url_or_name
    if "://" in url_or_name:
        try:
            name = sa.engine.make_url(url_or_name).get_backend_name()
        except sa.exc.ArgumentError as exc:
            raise ValueError(f"not a database URL: {url_or_name!r}") from exc
    for backend in BACKENDS:
        if backend.name == name:
            return backend
    raise ValueError(f"unsupported database backend {name!r}: use {' or '.join(backend_names())}")
