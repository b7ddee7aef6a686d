"""duplex_es: an event-sourced session engine for full-duplex realtime sessions.

The log is the truth: every client command and every engine output is an immutable event; a pure
reducer rebuilds session state from the log; workers consume tick snapshots and append outputs.
"""

__version__ = "0.1.0"
