"""The root of every exception duplex_es raises on purpose (docs/architecture.md, "Errors").

Refusals of client commands are not exceptions: they are logged ``command.rejected`` events
(docs/architecture.md, I3). Exceptions are for callers of the Python API, the store and the
tools: a lost append race, an unreadable row, a session owned elsewhere, a refused resume, a
failed engine step. Each layer's errors derive from :class:`DuplexError` (and, where callers
relied on it, from the built-in they used to be), so the command line catches one root and
prints one line instead of a traceback.

This module imports nothing: every layer may use it.
"""

from __future__ import annotations

__all__ = ["DuplexError", "LogError", "SessionError", "ProtocolError", "OperationRefused"]


class DuplexError(Exception):
    """Something duplex_es refused or could not do; ``str(err)`` names what and why."""


class LogError(DuplexError):
    """The event log refused or could not serve a read or write (``duplex_es.store``)."""


class SessionError(DuplexError):
    """A session could not be opened, resumed or written here (``duplex_es.server``)."""


class ProtocolError(DuplexError):
    """A wire message could not become a command (``duplex_es.protocol``)."""


class OperationRefused(DuplexError):
    """An operator's operation on one session that was not done; nothing changed
    (``duplex_es.erasure``, ``duplex_es.archive``).

    Attributes:
        code: what a caller branches on (each subclass lists its codes).
        session_id: the session.
    """

    def __init__(self, code: str, session_id: str, message: str) -> None:
        self.code = code
        self.session_id = session_id
        super().__init__(message)
