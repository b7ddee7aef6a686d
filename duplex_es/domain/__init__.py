"""The session state machine: ``decide(state, command) -> events`` and
``evolve(state, seq, event) -> state``, both pure (docs/architecture.md, I2). Sans-I/O in the manner of h11:
commands in, events out, explicit state, no sockets and no database here.

One module per concern holds the rules of its commands and events as named functions:
``lifecycle`` (config, close, lease), ``input`` (appends, commits, server VAD), ``items``,
``responses`` (ticks, epochs, cancels), ``playback`` (ledger and heard history),
``transcription``, and ``world`` for world sessions. Each session kind's table module
(``kinds/speech.py``, ``kinds/world.py``) lists which rule decides each command and which
evolver applies each event; ``kinds.KINDS`` registers the kinds.
"""

from duplex_es.domain.commands import *  # noqa: F401,F403
from duplex_es.domain.commands import __all__ as _commands_all
from duplex_es.domain.decide import decide
from duplex_es.domain.errors import Code
from duplex_es.domain.evolve import REDUCER_VERSION, evolve, fold, new_state
from duplex_es.domain.kind import IllegalTransition, SessionKind
from duplex_es.domain.kinds import KINDS, kind_of, named
from duplex_es.domain.limits import (
    MAX_BUFFER_MS,
    MAX_INPUT_TEXT_CHARS,
    MAX_INSTRUCTIONS_CHARS,
    MAX_OUT_OF_BAND_RESPONSES,
    MIN_COMMIT_MS,
    VOICES,
)
from duplex_es.domain.playback import history_transcript
from duplex_es.domain.responses import classify_output
from duplex_es.domain.ticks import Verdict
from duplex_es.domain.rules import COMMAND_TYPES
from duplex_es.domain.state import InputBuffer, Item, Lease, Response, ResponseStatus, SessionState, SessionStatus, Tick

__all__ = [
    *_commands_all,
    "COMMAND_TYPES",
    "MAX_BUFFER_MS",
    "MAX_INPUT_TEXT_CHARS",
    "MAX_INSTRUCTIONS_CHARS",
    "MAX_OUT_OF_BAND_RESPONSES",
    "MIN_COMMIT_MS",
    "REDUCER_VERSION",
    "VOICES",
    "Code",
    "IllegalTransition",
    "KINDS",
    "ResponseStatus",
    "SessionKind",
    "SessionStatus",
    "kind_of",
    "named",
    "new_state",
    "InputBuffer",
    "Item",
    "Lease",
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
