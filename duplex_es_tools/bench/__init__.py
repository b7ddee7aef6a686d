"""``make bench``: the benchmark suite of issue 6 §3.

Each row is measured against its comparison (``eventsourcing`` 9.5.6, raw ``sqlite3`` /
``psycopg`` loops) in the same run, back to back, on fresh databases, and reported with the
ratio. One module per job:

* :mod:`~duplex_es_tools.bench.report` — the row shape, ``results.json`` and ``RESULTS.md``;
* :mod:`~duplex_es_tools.bench.histogram` — latencies in HDR histograms (p50/p95/p99);
* :mod:`~duplex_es_tools.bench.machine` — CPU, platform, disk ``fdatasync`` latency, durability settings;
* :mod:`~duplex_es_tools.bench.targets` — what each row measures, where, and its target;
* :mod:`~duplex_es_tools.bench.context` — the run's settings and sizes (full or ``--quick``);
* :mod:`~duplex_es_tools.bench.databases` — a fresh SQLite file or PostgreSQL schema per measurement;
* :mod:`~duplex_es_tools.bench.workload` — the seeded events every contender writes;
* :mod:`~duplex_es_tools.bench.fill` — long sessions written in bulk with the project's codec and chain;
* :mod:`~duplex_es_tools.bench.order_check` — row 3's commit-order checks;
* :mod:`~duplex_es_tools.bench.timing` — running contenders back to back and timing them;
* :mod:`~duplex_es_tools.bench.ours` — duplex_es's side (``EventLog``, ``GroupCommitWriter``, ...);
* :mod:`~duplex_es_tools.bench.peer_eventsourcing` and :mod:`~duplex_es_tools.bench.peer_raw` — the peers;
* :mod:`~duplex_es_tools.bench.rows_append`, :mod:`~duplex_es_tools.bench.rows_read`,
  :mod:`~duplex_es_tools.bench.rows_ticks`, :mod:`~duplex_es_tools.bench.rows_growth` — the rows;
* :mod:`~duplex_es_tools.bench.extras` — figures outside the table (spoken turn, world block);
* :mod:`~duplex_es_tools.bench.run` — orchestration.

Rows 9–11 and 13–15 (serving) come from :mod:`duplex_es_tools.bench.serving`; row 13's peer,
the bare transport, is :mod:`duplex_es_tools.bare_transport`.
"""
