"""A realtime load generator: many concurrent speech sessions over real WebSockets (issue 6 §4).

Each simulated client opens a session on ``/v1/realtime``, turns server VAD off
(``turn_detection: null``, so no response and no worker is ever involved) and turns the
``duplex.acknowledge_appends`` extension on, then appends 20 ms chunks of real PCM16 24 kHz
speech (the fixture, looped) **at real time**: chunk ``k`` of a session is due at
``start + k × chunk_ms`` on an absolute schedule (a late send is not carried forward as drift),
and the sessions' schedules are spread evenly over one chunk period so they do not burst in
step. Per append it measures **send → ``input_audio_buffer.appended`` received**: the append was
parsed, decided, committed to the log and projected back — "append → logged → acknowledged".

Bounded and local on purpose: only loopback URLs are accepted, at most :data:`MAX_SESSIONS`
sessions for at most :data:`MAX_DURATION_S` seconds per run. Units: times in seconds unless a
name ends in ``_ms``; latencies are reported in ms.
"""

from __future__ import annotations

import asyncio
import base64
import json
import time
from pathlib import Path
from typing import Any, Callable, Optional, Sequence
from urllib.parse import urlsplit
from duplex_es.errors import DuplexError

import attrs
import numpy as np

__all__ = [
    "LoadgenError",
    "RunResult",
    "RampResult",
    "MAX_SESSIONS",
    "MAX_DURATION_S",
    "DEFAULT_RAMP",
    "chunk_audio",
    "check_url",
    "default_pcm",
    "load_pcm",
    "run_load",
    "run_ramp",
    "run",
    "wait_idle",
]

#: The most concurrent sessions one run may open.
MAX_SESSIONS = 2000

#: The longest measured phase of one run, in seconds (the input buffer holds 10 minutes).
MAX_DURATION_S = 300.0

#: Session counts a ramp tries, in order, until one misses the target.
DEFAULT_RAMP = (1, 2, 5, 10, 25, 50, 100, 150, 200, 250, 300, 400, 500, 650, 800, 1000)

_LOOPBACK = frozenset({"127.0.0.1", "localhost", "::1"})
_ACK = '"type":"input_audio_buffer.appended"'


class LoadgenError(DuplexError):
    """The load cannot run as asked: a non-loopback URL, a bound exceeded, a server that does not
    acknowledge appends."""


@attrs.frozen
class RunResult:
    """One run of ``sessions`` concurrent sessions.

    Counts cover the measured phase (after the warm-up): ``appends`` sent, ``acked`` answered,
    ``missing`` never answered (within the drain time after the last send), ``late`` answered
    after ``late_ms``. ``errors`` counts ``error`` events, failed connections and sockets that
    closed early (``error_codes`` by code or exception name). Latencies (send → ack) are in ms;
    Percentiles are exact, over every measured append (numpy), not from a histogram.
    ``send_lag_p99_ms`` is how late the client itself sent, against its schedule (a large value
    means the load generator, not the server, was the bottleneck). ``held``: p99 ≤ the target
    with no error and nothing missing.
    """

    sessions: int
    duration_s: float
    chunk_ms: int
    appends: int
    acked: int
    missing: int
    late: int
    errors: int
    p50_ms: Optional[float]
    p95_ms: Optional[float]
    p99_ms: Optional[float]
    max_ms: Optional[float]
    send_lag_p99_ms: Optional[float]
    target_p99_ms: float
    late_ms: float
    held: bool
    error_codes: dict[str, int] = attrs.field(factory=dict)

    @property
    def appends_per_s(self) -> float:
        """Appends sent per second of the measured phase."""
        return self.appends / self.duration_s if self.duration_s else 0.0

    def as_dict(self) -> dict[str, Any]:
        """The result as JSON-ready data (with ``appends_per_s``)."""
        return {**attrs.asdict(self), "appends_per_s": round(self.appends_per_s, 1)}


@attrs.frozen
class RampResult:
    """The runs of a ramp, in the order tried; ``best`` is the largest session count that held
    (``None``: not even the first)."""

    trials: tuple[RunResult, ...]
    best: Optional[int]
    target_p99_ms: float
    stopped: str

    @property
    def best_trial(self) -> Optional[RunResult]:
        """The run that gave :attr:`best`."""
        return next((t for t in self.trials if t.sessions == self.best and t.held), None)

    def as_dict(self) -> dict[str, Any]:
        """The ramp as JSON-ready data."""
        return {"best": self.best, "target_p99_ms": self.target_p99_ms, "stopped": self.stopped, "trials": [t.as_dict() for t in self.trials]}


def chunk_audio(pcm: bytes, chunk_ms: int = 20, rate: int = 24000) -> list[str]:
    """Cut PCM16 mono audio at ``rate`` Hz into base64 chunks of ``chunk_ms`` ms (the last,
    partial chunk is dropped).

    Raises:
        LoadgenError: the audio is shorter than one chunk.
    """
    step = 2 * rate * chunk_ms // 1000
    chunks = [base64.b64encode(pcm[i : i + step]).decode("ascii") for i in range(0, len(pcm) - step + 1, step)]
    if not chunks:
        raise LoadgenError(f"the audio holds less than one {chunk_ms} ms chunk")
    return chunks


def default_pcm() -> bytes:
    """The shared fixture question (5.19 s of speech, PCM16 24 kHz)."""
    from duplex_es_tools.conversation import read_wav_pcm16
    from duplex_es_tools.conversation import default_audio

    return read_wav_pcm16(default_audio())


def check_url(url: str) -> None:
    """Refuse anything but a ``ws://`` URL on the loopback interface.

    Raises:
        LoadgenError: another scheme or host.
    """
    parts = urlsplit(url)
    if parts.scheme != "ws" or (parts.hostname or "") not in _LOOPBACK:
        raise LoadgenError(f"the load generator only drives ws:// servers on loopback (127.0.0.1, localhost, ::1), not {url!r}")


# ------------------------------------------------------------------------------------- one run


@attrs.define
class _Tally:
    """What every session of a run reports into (one event loop: no locking)."""

    measure_from: float
    late_s: float
    latencies: list[float] = attrs.Factory(list)
    lags: list[float] = attrs.Factory(list)
    appends: int = 0
    acked: int = 0
    missing: int = 0
    late: int = 0
    errors: dict[str, int] = attrs.Factory(dict)

    def error(self, code: str) -> None:
        self.errors[code] = self.errors.get(code, 0) + 1


def _percentile(values: Sequence[float], q: float) -> Optional[float]:
    return round(float(np.percentile(np.asarray(values) * 1000, q)), 3) if len(values) else None


async def _recv_json(ws: Any, want: str, timeout: float) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            raise LoadgenError(f"no {want} within {timeout} s")
        event = json.loads(await asyncio.wait_for(ws.recv(), left))
        if event.get("type") == want:
            return event
        if event.get("type") == "error":
            raise LoadgenError(f"the server refused the session set-up: {event.get('error')}")


class _Session:
    """One simulated client: open and configure (:meth:`open`), then stream (:meth:`stream`)."""

    def __init__(self, url: str, chunks: list[str], chunk_s: float, tally: _Tally, offset: int) -> None:
        self.url, self.chunks, self.chunk_s, self.tally, self.offset = url, chunks, chunk_s, tally, offset
        self.ws: Any = None
        self.sent: dict[int, float] = {}  # append number → send time, until acked
        self.closed = asyncio.Event()

    async def open(self, timeout: float) -> None:
        from websockets.asyncio.client import connect

        self.ws = await connect(self.url, compression=None, max_size=None, open_timeout=timeout, ping_interval=None)
        await _recv_json(self.ws, "session.created", timeout)
        update = {
            "type": "session.update",
            "session": {"type": "realtime", "audio": {"input": {"turn_detection": None}}, "duplex": {"acknowledge_appends": True}},
        }
        await self.ws.send(json.dumps(update))
        updated = await _recv_json(self.ws, "session.updated", timeout)
        if updated["session"].get("duplex", {}).get("acknowledge_appends") is not True:
            raise LoadgenError("the server did not turn acknowledge_appends on: it cannot be measured")

    async def stream(self, start: float, stop: float, drain_s: float) -> None:
        """Send on the absolute schedule ``start + k × chunk`` until ``stop``, then wait up to
        ``drain_s`` for the outstanding acks, then close the session."""
        reader = asyncio.create_task(self._read())
        try:
            await self._send(start, stop)
            deadline = time.monotonic() + drain_s
            while self.sent and time.monotonic() < deadline and not self.closed.is_set():
                await asyncio.sleep(0.01)
        finally:
            self._count_missing()
            await self._close(reader)

    async def _send(self, start: float, stop: float) -> None:
        tally, n = self.tally, len(self.chunks)
        k = 0
        due = start
        while due < stop and not self.closed.is_set():
            delay = due - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
            now = time.monotonic()
            frame = '{"type":"input_audio_buffer.append","event_id":"a%d","audio":"%s"}' % (k, self.chunks[(self.offset + k) % n])
            self.sent[k] = now
            if now >= tally.measure_from:
                tally.appends += 1
                tally.lags.append(now - due)
            try:
                await self.ws.send(frame)
            except Exception as exc:  # the server closed the socket
                tally.error(type(exc).__name__)
                self.closed.set()
                return
            k += 1
            due = start + k * self.chunk_s

    async def _read(self) -> None:
        tally = self.tally
        try:
            async for frame in self.ws:
                now = time.monotonic()
                if _ACK in frame:
                    event_id = json.loads(frame)["client_event_id"]
                    sent = self.sent.pop(int(event_id[1:]), None)
                    if sent is None or sent < tally.measure_from:
                        continue
                    latency = now - sent
                    tally.acked += 1
                    tally.latencies.append(latency)
                    if latency > tally.late_s:
                        tally.late += 1
                elif '"type":"error"' in frame:
                    tally.error(json.loads(frame)["error"].get("code") or "error")
                elif '"type":"session.closed"' in frame:
                    break
        except Exception as exc:  # the connection broke
            tally.error(type(exc).__name__)
        finally:
            self.closed.set()

    def _count_missing(self) -> None:
        self.tally.missing += sum(1 for t in self.sent.values() if t >= self.tally.measure_from)
        self.sent.clear()

    async def drop(self) -> None:
        """Close the socket without ``session.close`` (a set-up that failed)."""
        if self.ws is not None:
            try:
                await self.ws.close()
            except Exception:
                pass

    async def _close(self, reader: asyncio.Task) -> None:
        try:
            if not self.closed.is_set():
                await self.ws.send('{"type":"session.close"}')
                await asyncio.wait_for(self.closed.wait(), 10)
        except Exception:
            pass
        reader.cancel()
        try:
            await self.ws.close()
        except Exception:
            pass


async def run_load(
    url: str,
    sessions: int,
    *,
    duration_s: float = 10.0,
    warmup_s: float = 1.0,
    chunk_ms: int = 20,
    pcm: Optional[bytes] = None,
    target_p99_ms: float = 50.0,
    late_ms: Optional[float] = None,
    drain_s: float = 5.0,
    connect_timeout_s: float = 30.0,
    connect_concurrency: int = 32,
) -> RunResult:
    """Run ``sessions`` concurrent clients against ``url`` (``ws://127.0.0.1:PORT/v1/realtime``).

    Args:
        url: the server's realtime endpoint, on loopback.
        sessions: concurrent sessions (1..:data:`MAX_SESSIONS`).
        duration_s: the measured phase, after ``warmup_s`` of the same load (appends sent during
            the warm-up are not counted).
        chunk_ms: audio per append (ms of PCM16 24 kHz).
        pcm: the audio to loop (default: the shared fixture question).
        target_p99_ms: the p99 a run must stay within to have ``held``.
        late_ms: an ack later than this is counted ``late`` (default: ``target_p99_ms``).
        drain_s: how long to wait for outstanding acks after the last send.
        connect_timeout_s: per connection and set-up message.
        connect_concurrency: connections opened at once while setting up.

    Raises:
        LoadgenError: a non-loopback URL, bounds exceeded, or no session could be set up.
    """
    check_url(url)
    if not 1 <= sessions <= MAX_SESSIONS:
        raise LoadgenError(f"sessions must be 1..{MAX_SESSIONS}, got {sessions}")
    if not 0 < duration_s <= MAX_DURATION_S or not 0 <= warmup_s <= 60:
        raise LoadgenError(f"duration must be in (0, {MAX_DURATION_S}] s and warm-up in [0, 60] s")
    if not 5 <= chunk_ms <= 1000:
        raise LoadgenError(f"chunk_ms must be 5..1000, got {chunk_ms}")
    chunks = chunk_audio(pcm if pcm is not None else default_pcm(), chunk_ms)
    chunk_s = chunk_ms / 1000
    tally = _Tally(measure_from=float("inf"), late_s=(late_ms if late_ms is not None else target_p99_ms) / 1000)
    # Each client starts at another place in the audio, so the log does not hold one chunk n times.
    clients = [_Session(url, chunks, chunk_s, tally, offset=(i * 37) % len(chunks)) for i in range(sessions)]
    gate = asyncio.Semaphore(connect_concurrency)

    async def open_one(c: _Session) -> bool:
        async with gate:
            try:
                await c.open(connect_timeout_s)
                return True
            except LoadgenError:
                raise
            except Exception as exc:
                tally.error(f"connect:{type(exc).__name__}")
                await c.drop()
                return False

    opened = await asyncio.gather(*(open_one(c) for c in clients), return_exceptions=True)
    refused = next((o for o in opened if isinstance(o, BaseException)), None)
    live = [c for c, ok in zip(clients, opened) if ok is True]
    if refused is not None or not live:
        await asyncio.gather(*(c.drop() for c in clients))
        if refused is not None:
            raise refused
        raise LoadgenError(f"no session could be opened at {url}: {tally.errors}")
    begin = time.monotonic() + 0.5
    tally.measure_from = begin + warmup_s
    stop = tally.measure_from + duration_s
    # Spread the sessions' schedules evenly over one chunk period.
    await asyncio.gather(*(c.stream(begin + chunk_s * i / sessions, stop, drain_s) for i, c in enumerate(live)))

    p99 = _percentile(tally.latencies, 99)
    errors = sum(tally.errors.values())
    return RunResult(
        sessions=sessions,
        duration_s=duration_s,
        chunk_ms=chunk_ms,
        appends=tally.appends,
        acked=tally.acked,
        missing=tally.missing,
        late=tally.late,
        errors=errors,
        p50_ms=_percentile(tally.latencies, 50),
        p95_ms=_percentile(tally.latencies, 95),
        p99_ms=p99,
        max_ms=round(max(tally.latencies) * 1000, 3) if tally.latencies else None,
        send_lag_p99_ms=_percentile(tally.lags, 99),
        target_p99_ms=target_p99_ms,
        late_ms=tally.late_s * 1000,
        held=p99 is not None and p99 <= target_p99_ms and errors == 0 and tally.missing == 0,
        error_codes=dict(tally.errors),
    )


# ------------------------------------------------------------------------------------------ ramp


async def run_ramp(
    url: str,
    *,
    steps: Sequence[int] = DEFAULT_RAMP,
    duration_s: float = 10.0,
    warmup_s: float = 1.0,
    time_budget_s: float = 300.0,
    refine: int = 2,
    retry_missed: bool = True,
    pause_s: float = 1.0,
    on_trial: Optional[Callable[[RunResult], None]] = None,
    **run_args: Any,
) -> RampResult:
    """Find the largest session count whose append → ack p99 stays within the target.

    Tries ``steps`` in increasing order until one does not hold (or the time budget, in
    seconds, would be exceeded by the next run), then bisects between the last count that held
    and the first that did not (to within 10 %, or one session below ten), at most ``refine`` more runs.
    With ``retry_missed`` a count that misses is run a second time and holds if that run does
    (every run is in :attr:`RampResult.trials`). Each run opens fresh sessions and
    closes them; ``run_args`` go to :func:`run_load`; ``on_trial`` sees each result.

    Raises:
        LoadgenError: as :func:`run_load`.
    """
    check_url(url)
    started = time.monotonic()
    per_run = duration_s + warmup_s + 8.0  # set-up, drain and close, roughly
    trials: list[RunResult] = []
    best: Optional[int] = None
    failed: Optional[int] = None
    stopped = "every step held"

    async def trial(n: int) -> RunResult:
        result = await run_load(url, n, duration_s=duration_s, warmup_s=warmup_s, **run_args)
        trials.append(result)
        if on_trial is not None:
            on_trial(result)
        await asyncio.sleep(pause_s)
        await wait_idle(url)  # an overloaded server may still be working through a backlog
        return result

    async def holds(n: int) -> bool:
        if (await trial(n)).held:
            return True
        # A miss is run once more before it counts (a machine shared with other work stalls now
        # and then); both runs are reported.
        return retry_missed and time.monotonic() - started + per_run <= time_budget_s and (await trial(n)).held

    for n in sorted(set(steps)):
        if time.monotonic() - started + per_run > time_budget_s:
            stopped = "time budget"
            break
        if await holds(n):
            best = n
        else:
            failed, stopped = n, f"{n} sessions missed the target"
            break
    lo, hi = best or 0, failed
    for _ in range(refine):
        if hi is None or hi - lo <= max(1, lo // 10) or time.monotonic() - started + per_run > time_budget_s:
            break
        mid = (lo + hi) // 2
        if await holds(mid):
            lo = best = mid
        else:
            hi = mid
    return RampResult(trials=tuple(trials), best=best, target_p99_ms=trials[0].target_p99_ms if trials else 50.0, stopped=stopped)


async def wait_idle(url: str, timeout_s: float = 120.0) -> bool:
    """Wait until the server at ``url`` hosts no session (its ``/healthz`` says ``sessions: 0``):
    the sessions a run closed are done, backlog included. ``False`` if that took longer than
    ``timeout_s`` seconds (or ``/healthz`` did not answer)."""
    import urllib.request

    parts = urlsplit(url)
    health = f"http://{parts.netloc}/healthz"

    def sessions() -> int:
        with urllib.request.urlopen(health, timeout=5) as r:
            return int(json.loads(r.read())["sessions"])

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if await asyncio.to_thread(sessions) == 0:
                return True
        except (OSError, ValueError, KeyError):
            return False
        await asyncio.sleep(0.25)
    return False


def load_pcm(path: Optional[Path]) -> bytes:
    """The audio to loop: a mono PCM16 WAV file (resampled to 24 kHz), or the shared fixture."""
    if path is None:
        return default_pcm()
    from duplex_es_tools.conversation import read_wav_pcm16

    return read_wav_pcm16(path)


def run(coro: Any) -> Any:
    """Run a coroutine on uvloop when it is installed (less client overhead), else asyncio."""
    try:
        import uvloop
    except ImportError:
        return asyncio.run(coro)
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        return runner.run(coro)
