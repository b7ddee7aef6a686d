"""Logging what went wrong in the server's background work: a database that is busy or down is
an expected condition, reported in one WARNING line; anything else is a bug, logged with its
traceback (docs/security.md, "No global stalls")."""

from __future__ import annotations

import logging

import sqlalchemy as sa

from duplex_es.store import LogUnavailable, WriteLockBusy
from duplex_es.store.database import DRIVER_ERRORS

__all__ = ["database_trouble", "log_failure"]

#: The most of an exception's first line a WARNING quotes (characters).
MAX_DETAIL_CHARS = 300


def database_trouble(exc: BaseException) -> bool:
    """Whether ``exc`` says the database is busy or unreachable rather than that our code is
    wrong: :class:`LogUnavailable`, :class:`WriteLockBusy`, a driver or SQLAlchemy
    ``OperationalError``."""
    if isinstance(exc, (LogUnavailable, WriteLockBusy, sa.exc.OperationalError)):
        return True
    return isinstance(exc, DRIVER_ERRORS) and type(exc).__name__ in ("OperationalError", "LockNotAvailable", "QueryCanceled")


def log_failure(logger: logging.Logger, exc: BaseException, message: str, *args: object) -> None:
    """Log ``message % args`` for ``exc``, caught in background work: one bounded WARNING line
    for database trouble, the traceback at ERROR for anything else."""
    if database_trouble(exc):
        first = (str(exc).splitlines() or [type(exc).__name__])[0][:MAX_DETAIL_CHARS]
        logger.warning(message + ": %s", *args, first)
    else:
        logger.error(message, *args, exc_info=exc)
