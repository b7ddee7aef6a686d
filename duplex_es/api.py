"""The Python API: the same sessions as the WebSocket, without a WebSocket.

::

    sessions = DuplexSessions(Database("sqlite:///duplex_es.db"))
    await sessions.start()
    session = await sessions.open_session()
    await session.submit(command_from_realtime({"type": "input.text.append", "text": "hi"}, new_id))
    await session.submit(Commit(item_id=new_id("item")))
    async for event in session.events():   # GA Realtime server events, as dicts
        ...
    await session.detach()                  # the session waits for a resume
    session = await sessions.resume_session(session.session_id, expected_generation=0)

Every command class of :mod:`duplex_es.domain.commands` is accepted by ``submit``; commands may
carry ``expected_epoch`` (refused with ``stale_fence`` once the session moved on). Sessions start
with server VAD on, as OpenAI's do; ``DuplexSessions(db, models=ModelMap.from_specs([...]))``
says which model names are served by which engine (``open_session`` raises
:class:`ModelNotServed` for another).
"""

from duplex_es.domain.commands import *  # noqa: F401,F403
from duplex_es.domain.commands import __all__ as _commands_all
from duplex_es.protocol.inbound import CommandError, command_from_realtime
from duplex_es.server.host import SessionHost as SessionHandle
from duplex_es.server.host import new_id
from duplex_es.server.models import ModelMap
from duplex_es.server.sessions import DEFAULT_MODEL, DuplexSessions, ModelNotServed, ResumeRefused
from duplex_es.store import Database

__all__ = [
    *_commands_all,
    "CommandError",
    "DEFAULT_MODEL",
    "Database",
    "DuplexSessions",
    "ModelMap",
    "ModelNotServed",
    "ResumeRefused",
    "SessionHandle",
    "command_from_realtime",
    "new_id",
]
