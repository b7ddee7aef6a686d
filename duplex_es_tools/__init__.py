"""duplex_es's tooling, kept out of the runtime package: what measures, loads, breaks and shows
duplex_es rather than what serves sessions.

* :mod:`~duplex_es_tools.demo` (with :mod:`~duplex_es_tools.world_demo`) — ``duplex-es demo``;
* :mod:`~duplex_es_tools.chaos` — ``duplex-es chaos``: sessions while processes are SIGKILLed;
* :mod:`~duplex_es_tools.loadgen` — ``duplex-es loadgen``: concurrent realtime sessions;
* :mod:`~duplex_es_tools.bench` — ``duplex-es bench``: the benchmark suite;
* :mod:`~duplex_es_tools.processes` — ``serve`` and ``worker`` as OS processes (also for tests);
* :mod:`~duplex_es_tools.conversation` — a spoken turn through the ``openai`` SDK, WAV files,
  the shared fixture audio;
* :mod:`~duplex_es_tools.testkit` — for engine plugin authors: run an engine behind the real
  worker loop on a temporary log and check that its outputs echo their ticks;
* :mod:`~duplex_es_tools.commands` — the subcommands above, which ``duplex-es`` finds through
  the entry-point group ``duplex_es.commands`` (``pyproject.toml``).

It imports the runtime (``duplex_es``); the runtime never imports it (import-linter checks).
Its own dependencies are the extra ``tools``: ``pip install 'duplex-es[tools]'``.
"""
