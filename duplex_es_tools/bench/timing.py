"""Running contenders back to back and timing them.

A contender is one way of doing a row's operation (duplex_es through ``EventLog.append``, through
the group-commit writer, ``eventsourcing``'s ``app.save``, a raw driver loop), each on its own
fresh database. :func:`run_back_to_back` warms every contender up, then runs them in alternating
rounds of the same number of operations, so drift of the machine (page cache, other load) falls
on all of them alike; every operation's latency goes into an HDR histogram.
"""

from __future__ import annotations

import threading
import time
from typing import Callable, Optional, Protocol, Sequence

import attrs

from duplex_es_tools.bench.histogram import Latencies

__all__ = [
    "Figures",
    "Contender",
    "SerialContender",
    "FnContender",
    "ThreadedContender",
    "run_back_to_back",
    "time_calls",
    "alternate_calls",
]


@attrs.define
class Figures:
    """What one contender measured: ``events`` written or read in ``seconds`` (s) of wall time,
    and one latency per operation."""

    events: int = 0
    seconds: float = 0.0
    lat: Latencies = attrs.Factory(Latencies)
    ops: int = 0

    @property
    def events_per_s(self) -> Optional[float]:
        """Throughput in ev/s (``None`` if nothing was timed)."""
        return round(self.events / self.seconds, 1) if self.seconds > 0 else None

    def as_dict(self, *, throughput: bool = True) -> dict[str, Optional[float]]:
        """``{"events_per_s", "p50_ms", "p95_ms", "p99_ms"}`` (ev/s, ms)."""
        out: dict[str, Optional[float]] = {"events_per_s": self.events_per_s if throughput else None}
        out.update(self.lat.summary_ms())
        return out


class Contender(Protocol):
    """One side of a comparison."""

    name: str
    events_per_op: int

    def run(self, start: int, count: int, lat: Latencies) -> float:
        """Do operations ``start .. start+count-1``, record each one's latency; returns the
        wall time (s)."""

    def close(self) -> None:
        """Release connections, threads and files."""


class SerialContender:
    """A contender that does one operation at a time on the calling thread: subclasses define
    :meth:`op`."""

    name = "?"
    events_per_op = 1

    def op(self, i: int) -> None:
        """Operation ``i`` (one command)."""
        raise NotImplementedError

    def run(self, start: int, count: int, lat: Latencies) -> float:
        """See :class:`Contender`."""
        op, clock = self.op, time.perf_counter_ns
        t_start = clock()
        for i in range(start, start + count):
            t0 = clock()
            op(i)
            lat.record_ns(clock() - t0)
        return (clock() - t_start) / 1e9

    def close(self) -> None:
        """Nothing to release by default."""


class FnContender(SerialContender):
    """A serial contender made of a function: ``op(i)`` does operation ``i``; ``close()``
    (optional) releases what it holds."""

    def __init__(self, name: str, op: Callable[[int], None], *, close: Optional[Callable[[], None]] = None, events_per_op: int = 1) -> None:
        self.name = name
        self.op = op  # type: ignore[method-assign]
        self._close = close
        self.events_per_op = events_per_op

    def close(self) -> None:
        """Call the ``close`` given, if any."""
        if self._close is not None:
            self._close()


class ThreadedContender:
    """A contender whose operations are spread over ``threads`` threads, each with a worker
    object made by :meth:`make_worker` (its own session, its own connection)."""

    name = "?"
    events_per_op = 1
    threads = 4

    def __init__(self) -> None:
        self._workers: list[Callable[[int], None]] = []

    def make_worker(self, index: int) -> Callable[[int], None]:
        """The operation function of thread ``index``: called with the operation number."""
        raise NotImplementedError

    def run(self, start: int, count: int, lat: Latencies) -> float:
        """See :class:`Contender`: ``count`` operations dealt round-robin to the threads,
        started together behind a barrier."""
        if not self._workers:
            self._workers = [self.make_worker(k) for k in range(self.threads)]
        barrier = threading.Barrier(self.threads + 1)
        hists = [Latencies() for _ in range(self.threads)]
        errors: list[BaseException] = []

        def body(k: int) -> None:
            op, h, clock = self._workers[k], hists[k], time.perf_counter_ns
            barrier.wait()
            try:
                for i in range(start + k, start + count, self.threads):
                    t0 = clock()
                    op(i)
                    h.record_ns(clock() - t0)
            except BaseException as exc:  # noqa: BLE001 - reported after join
                errors.append(exc)

        ts = [threading.Thread(target=body, args=(k,), daemon=True) for k in range(self.threads)]
        for t in ts:
            t.start()
        barrier.wait()
        t_start = time.perf_counter_ns()
        for t in ts:
            t.join()
        elapsed = (time.perf_counter_ns() - t_start) / 1e9
        if errors:
            raise errors[0]
        for h in hists:
            lat.add(h)
        return elapsed

    def close(self) -> None:
        """Nothing to release by default."""


def run_back_to_back(contenders: Sequence[Contender], ops: int, *, rounds: int = 4, warmup: int = 100) -> list[Figures]:
    """Warm every contender up with ``warmup`` untimed operations, then time ``ops`` operations
    each, in ``rounds`` alternating rounds (contender A, B, C, A, B, C, ...). Returns one
    :class:`Figures` per contender, in order."""
    figures = [Figures() for _ in contenders]
    for c in contenders:
        c.run(0, warmup, Latencies())
    per_round = max(ops // rounds, 1)
    for r in range(rounds):
        for c, f in zip(contenders, figures):
            start = warmup + r * per_round
            f.seconds += c.run(start, per_round, f.lat)
            f.events += per_round * c.events_per_op
            f.ops += per_round
    return figures


def time_calls(fn: Callable[[], int], reps: int, *, warmup: int = 1) -> Figures:
    """Call ``fn`` (which returns how many events it processed) ``warmup`` times untimed, then
    ``reps`` times timed: events/s over the timed calls, one latency per call."""
    for _ in range(warmup):
        fn()
    f = Figures()
    for _ in range(reps):
        t0 = time.perf_counter_ns()
        f.events += fn()
        ns = f.lat.since(t0)
        f.seconds += ns / 1e9
        f.ops += 1
    return f


def alternate_calls(calls: Sequence[Callable[[], int]], reps: int, *, warmup: int = 1) -> list[Figures]:
    """Like :func:`time_calls` for several calls at once, alternating them (A, B, C, A, B, C,
    ...) so they share the machine's drift; one :class:`Figures` per call, in order."""
    for _ in range(warmup):
        for fn in calls:
            fn()
    figures = [Figures() for _ in calls]
    for _ in range(reps):
        for fn, f in zip(calls, figures):
            t0 = time.perf_counter_ns()
            f.events += fn()
            f.seconds += f.lat.since(t0) / 1e9
            f.ops += 1
    return figures
