"""The session state machine: ``decide(state, command) -> events`` and
``evolve(state, seq, event) -> state``, both pure (DESIGN I2). Sans-I/O in the manner of h11:
commands in, events out, explicit state, no sockets and no database here.
"""

from duplex_es.domain.commands import *  # noqa: F401,F403
from duplex_es.domain.commands import __all__ as _commands_all
from duplex_es.domain.decide import COMMAND_TYPES, decide
from duplex_es.domain.limits import MAX_BUFFER_MS, MAX_INPUT_TEXT_CHARS, MAX_INSTRUCTIONS_CHARS, MIN_COMMIT_MS, VOICES
from duplex_es.domain.errors import Code
from duplex_es.domain.evolve import evolve, fold, history_transcript
from duplex_es.domain.state import InputBuffer, Item, Response, SessionState, Tick
from duplex_es.domain.verdicts import Verdict, classify_output

__all__ = [
    *_commands_all,
    "COMMAND_TYPES",
    "MAX_BUFFER_MS",
    "MAX_INPUT_TEXT_CHARS",
    "MAX_INSTRUCTIONS_CHARS",
    "MIN_COMMIT_MS",
    "VOICES",
    "Code",
    "InputBuffer",
    "Item",
    "Response",
    "SessionState",
    "Tick",
    "Verdict",
    "classify_output",
    "decide",
    "evolve",
    "fold",
    "history_transcript",
]
