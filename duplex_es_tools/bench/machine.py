"""Facts about the machine a benchmark ran on: CPUs, platform, memory, the disk's ``fdatasync``
latency, and the durability settings of each database (SQLite ``PRAGMA synchronous`` and
``journal_mode``; PostgreSQL ``synchronous_commit`` and ``fsync``)."""

from __future__ import annotations

import os
import platform
import sqlite3
import tempfile
import time
from pathlib import Path
from typing import Any

import psycopg

from duplex_es_tools.bench.histogram import Latencies

__all__ = ["disk_fdatasync", "machine_facts", "sqlite_durability", "postgresql_facts"]

_SYNC_NAMES = {0: "OFF", 1: "NORMAL", 2: "FULL", 3: "EXTRA"}


def disk_fdatasync(folder: Path, n: int = 200) -> dict[str, Any]:
    """The latency of ``os.fdatasync`` after a 4 KiB append, on a temp file in ``folder``
    (where the bench's SQLite files live): ``{"folder", "n", "p50_ms", "p99_ms"}`` in ms."""
    lat = Latencies()
    fd, name = tempfile.mkstemp(prefix="fsync-probe-", dir=folder)
    try:
        block = os.urandom(4096)
        sync = getattr(os, "fdatasync", os.fsync)
        for _ in range(n):
            os.write(fd, block)
            t0 = time.perf_counter_ns()
            sync(fd)
            lat.since(t0)
    finally:
        os.close(fd)
        os.unlink(name)
    s = lat.summary_ms()
    return {"folder": str(folder), "n": n, "p50_ms": s["p50_ms"], "p99_ms": s["p99_ms"]}


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _memory_gib() -> float | None:
    try:
        pages, size = os.sysconf("SC_PHYS_PAGES"), os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None
    return round(pages * size / 2**30, 1)


def machine_facts(folder: Path) -> dict[str, Any]:
    """CPU count and model, memory (GiB), platform, Python and SQLite versions, and the disk's
    ``fdatasync`` latency in ``folder``."""
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return {
        "cpus": cpus,
        "cpu_model": _cpu_model(),
        "memory_gib": _memory_gib(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "sqlite_version": sqlite3.sqlite_version,
        "disk_fdatasync": disk_fdatasync(folder),
    }


def sqlite_durability(conn: sqlite3.Connection) -> str:
    """``"WAL, synchronous=FULL"`` (or whatever the connection runs with)."""
    journal = conn.execute("PRAGMA journal_mode").fetchone()[0]
    sync = conn.execute("PRAGMA synchronous").fetchone()[0]
    return f"{str(journal).upper()}, synchronous={_SYNC_NAMES.get(sync, sync)}"


def postgresql_facts(conninfo: str) -> dict[str, str]:
    """``{"version", "durability"}`` of the server at ``conninfo`` (a libpq URL), where
    durability reads like ``"synchronous_commit=on, fsync=on, wal_sync_method=fdatasync"``."""
    with psycopg.connect(conninfo, autocommit=True) as conn:
        show = {name: conn.execute(f"SHOW {name}").fetchone()[0] for name in ("server_version", "synchronous_commit", "fsync", "wal_sync_method")}
    return {
        "version": show["server_version"],
        "durability": f"synchronous_commit={show['synchronous_commit']}, fsync={show['fsync']}, wal_sync_method={show['wal_sync_method']}",
    }
