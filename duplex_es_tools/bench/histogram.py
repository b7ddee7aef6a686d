"""Latencies in an HDR histogram (the ``hdrhistogram`` package): nanosecond values with 3
significant digits from 1 ns to 60 s, read back as p50/p95/p99 in ms."""

from __future__ import annotations

import time
from typing import Optional

from hdrh.histogram import HdrHistogram

__all__ = ["Latencies"]

_HIGHEST_NS = 60_000_000_000


class Latencies:
    """A latency histogram. Record with :meth:`record_ns` / :meth:`record_s`, or time a call
    with :meth:`since` (``t0 = time.perf_counter_ns()`` ... ``lat.since(t0)``)."""

    def __init__(self) -> None:
        self._h = HdrHistogram(1, _HIGHEST_NS, 3)

    def record_ns(self, ns: int) -> None:
        """Record one latency of ``ns`` nanoseconds (clamped to 1 ns .. 60 s)."""
        self._h.record_value(min(max(int(ns), 1), _HIGHEST_NS))

    def record_s(self, seconds: float) -> None:
        """Record one latency of ``seconds`` s."""
        self.record_ns(round(seconds * 1e9))

    def since(self, t0_ns: int) -> int:
        """Record ``perf_counter_ns() - t0_ns``; returns that latency (ns)."""
        ns = time.perf_counter_ns() - t0_ns
        self.record_ns(ns)
        return ns

    def add(self, other: "Latencies") -> None:
        """Merge ``other``'s values into this histogram."""
        self._h.add(other._h)

    @property
    def count(self) -> int:
        """How many latencies were recorded."""
        return self._h.get_total_count()

    def percentile_ms(self, p: float) -> Optional[float]:
        """The ``p``-th percentile in ms (4 decimals, so 0.1 µs shows), ``None`` if empty."""
        if not self.count:
            return None
        return round(self._h.get_value_at_percentile(p) / 1e6, 4)

    def summary_ms(self) -> dict[str, Optional[float]]:
        """``{"p50_ms", "p95_ms", "p99_ms"}`` in ms."""
        return {f"p{p}_ms": self.percentile_ms(p) for p in (50, 95, 99)}
