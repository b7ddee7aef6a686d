"""The session inspector: a read-only view of the log in the browser (docs/inspector.md).

:mod:`~duplex_es.inspect.service` computes what is shown (session list, timeline lanes on the
audio clock, waveform peaks, WAV audio, events with verdicts, state at any seq, audit),
:mod:`~duplex_es.inspect.web` serves it with the single-page UI in ``static/``, and
:mod:`~duplex_es.inspect.export` writes one self-contained HTML file.
"""

from duplex_es.inspect.service import InspectError, Inspector

__all__ = ["InspectError", "Inspector"]
