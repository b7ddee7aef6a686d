"""Row 15 (issue 14, "Done when"): how many full-duplex sessions one worker process holds in real
time, with ``--batch-size 1`` and ``--batch-size 16``, each beside the turn-based path measured
on the same ``serve`` and ``worker`` processes in the same run.

**The load.** N concurrent clients on one event loop (asyncio + websockets, as
:mod:`duplex_es_tools.loadgen`: the bench shares the machine's cores with the server and the
worker), each streaming the shared fixture question (5.2 s, "Hi there. Can you tell me what the
weather will be like in Lisbon tomorrow afternoon?") and then silence, as 20 ms PCM16 24 kHz
appends on an absolute real-time schedule. The clients' start times are spread evenly over one
second, so their utterances (and the engine's decodes, one per second of speech) do not all
fall in step. Nobody commits and nobody sends ``response.create``: the model answers by itself.

**Held in real time** (full duplex, ``?model=duplex-es-duplex``): the model keeps up with the
audio clock. Per append, the lag is the wall time its ``input_audio_buffer.processed`` arrives
minus the wall time the append was sent (the event's ``audio_end_ms`` names the append: append
``k`` ends at ``(k + 1) × 20`` ms). A unit takes ``duplex.chunk_period_ms`` (200 ms) of input,
so the first append of a unit waits that long by design. N sessions are held when the lag p99 is
≤ 1000 ms (a few chunk periods), every measured append got its ``processed``, no ``error`` came,
and every session's question was answered (a ``response.done`` with status ``completed``).
Appends sent in the last second of a session's stream are sent but not measured: they may be
left waiting in a unit that is never filled once the client stops.

**The turn-based path beside it**: the same N clients and audio into normal sessions
(``?model=gpt-realtime``, server VAD commits and starts the response) with
``duplex.acknowledge_appends`` on, so each append is answered by ``input_audio_buffer.appended``;
held when the append → ack p99 is ≤ 1000 ms, every measured append acked, no error, and every
question answered (``response.done`` ``completed``).

**The ramp**: N = 1, 2, 4, 8, 16, 32 (quick: 1, 2) until a count is not held (a miss is run
once more before it counts: the machine is shared), then at most one bisection step, within a
time budget per ramp. The row reports the largest N held with B = 16 (its lag percentiles are the
row's figures) and compares it with B = 1 and with the turn-based path under each B.

Latencies in ms; times in seconds unless a name ends in ``_ms``.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import time
from pathlib import Path
from typing import Any, Iterator, Optional, Sequence

import attrs
import numpy as np

from duplex_es_tools.bench.report import Row, build_row, comparison
from duplex_es_tools.bench.targets import MEASUREMENTS, target
from duplex_es_tools.loadgen import check_url, run, wait_idle
from duplex_es_tools.processes import free_port, start_server, start_worker, wait_healthy

__all__ = ["Trial", "Ramp", "Load", "FULL_LOAD", "QUICK_LOAD", "WARM_UP", "measure", "run_trial", "ramp", "duplex_row", "HELD_P99_MS", "BATCH_SIZES"]

#: The lag (processed or ack) p99 a session count must stay within to be held (ms).
HELD_P99_MS = 1000.0

#: The worker batch sizes row 15 reports.
BATCH_SIZES = (1, 16)

#: The two paths: (label, model named on connect, the event that answers an append).
_PATHS = {
    "duplex": ("full duplex", "duplex-es-duplex", "input_audio_buffer.processed"),
    "turns": ("turn-based", "gpt-realtime", "input_audio_buffer.appended"),
}

_CHUNK_MS = 20
_CHUNK_BYTES = 2 * 24_000 * _CHUNK_MS // 1000  # 960: 20 ms of PCM16 mono at 24 kHz


@attrs.frozen
class Load:
    """How a ramp loads the server: ``steps`` (session counts, increasing), ``tail_s`` of silence
    streamed after the question, ``drain_s`` to wait after the last send for outstanding answers,
    ``spread_s`` over which the sessions' starts are spread, ``budget_s`` per ramp, ``refine``
    bisection steps after the first miss."""

    steps: tuple[int, ...]
    tail_s: float
    drain_s: float
    spread_s: float
    budget_s: float
    refine: int


#: ``make bench``'s load: 13.2 s streamed per session.
FULL_LOAD = Load(steps=(1, 2, 4, 8, 16, 32), tail_s=8.0, drain_s=15.0, spread_s=1.0, budget_s=300.0, refine=1)
#: ``--quick``: a smoke run of at most 2 sessions (the reply finishes during the drain).
QUICK_LOAD = Load(steps=(1, 2), tail_s=2.0, drain_s=15.0, spread_s=0.2, budget_s=60.0, refine=0)
#: The unmeasured session that warms a fresh worker up before each pair of ramps.
WARM_UP = Load(steps=(1,), tail_s=1.0, drain_s=10.0, spread_s=0.0, budget_s=30.0, refine=0)


@attrs.frozen
class Trial:
    """One run of ``sessions`` concurrent clients on one path.

    ``measured`` appends had their lag recorded (``missing`` never answered within the drain);
    ``answered`` sessions got a completed ``response.done`` (``unanswered`` did not);
    ``errors`` counts ``error`` events and broken sockets (``error_codes`` by code). Lags are
    append sent → its answer (ms); ``reply_p50_ms``: the end of the question (its last append
    sent) → ``response.done`` completed; ``send_lag_p99_ms``: how late the clients themselves
    sent against their schedule (large: the load generator, not the server, fell behind).
    """

    path: str
    batch_size: int
    sessions: int
    measured: int
    missing: int
    answered: int
    unanswered: int
    errors: int
    p50_ms: Optional[float]
    p95_ms: Optional[float]
    p99_ms: Optional[float]
    max_ms: Optional[float]
    reply_p50_ms: Optional[float]
    reply_max_ms: Optional[float]
    send_lag_p99_ms: Optional[float]
    held: bool
    error_codes: dict[str, int] = attrs.field(factory=dict)

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready data."""
        return attrs.asdict(self)


@attrs.frozen
class Ramp:
    """The trials of one ramp, in the order run; ``best`` is the largest count held (``None``:
    not even the first), ``stopped`` why the ramp ended."""

    path: str
    batch_size: int
    trials: tuple[Trial, ...]
    best: Optional[int]
    stopped: str

    @property
    def best_trial(self) -> Optional[Trial]:
        """The held trial that gave :attr:`best` (the last one, if it was run twice)."""
        return next((t for t in reversed(self.trials) if t.sessions == self.best and t.held), None)

    def figures(self) -> dict[str, Any]:
        """``p50_ms`` / ``p95_ms`` / ``p99_ms`` at :attr:`best` (``None`` when nothing held)."""
        t = self.best_trial
        return {"events_per_s": None, "p50_ms": t.p50_ms if t else None, "p95_ms": t.p95_ms if t else None, "p99_ms": t.p99_ms if t else None}

    def held_text(self) -> str:
        """:attr:`best` as the row shows it: ``"≥ 32"`` when every step held (the ramp's cap, not
        the worker's), ``"no"`` when nothing held."""
        if self.best is None:
            return "no"
        return f"≥ {self.best}" if self.stopped == "every step held" else str(self.best)

    def trials_text(self) -> str:
        """``"1: p99 230 ms (held); 2: ..."`` for the row's note."""
        parts = []
        for t in self.trials:
            extra = [f"{t.missing} unanswered appends"] * bool(t.missing) + [f"{t.unanswered} questions unanswered"] * bool(t.unanswered)
            extra += [f"{t.errors} errors {t.error_codes}"] * bool(t.errors)
            parts.append(f"{t.sessions}: p99 {t.p99_ms} ms{''.join(', ' + e for e in extra)} ({'held' if t.held else 'missed'})")
        return "; ".join(parts)

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready data."""
        return {"path": self.path, "batch_size": self.batch_size, "best": self.best, "stopped": self.stopped, "trials": [t.as_dict() for t in self.trials]}


# ------------------------------------------------------------------------------------ one trial


@attrs.define
class _Tally:
    """What the clients of one trial report into (one event loop: no locking)."""

    lags: list[float] = attrs.Factory(list)
    replies: list[float] = attrs.Factory(list)
    send_lags: list[float] = attrs.Factory(list)
    missing: int = 0
    answered: int = 0
    errors: dict[str, int] = attrs.Factory(dict)

    def error(self, code: str) -> None:
        self.errors[code] = self.errors.get(code, 0) + 1


def _ms(values: Sequence[float], q: float) -> Optional[float]:
    return round(float(np.percentile(np.asarray(values) * 1000, q)), 1) if len(values) else None


class _Client:
    """One simulated microphone: opens a session of ``model``, streams ``chunks`` (base64 20 ms
    appends) at real time, and times the answer to every append it measures."""

    def __init__(self, url: str, path: str, chunks: list[str], speech_chunks: int, tally: _Tally) -> None:
        self.url, self.path, self.chunks, self.speech_chunks, self.tally = url, path, chunks, speech_chunks, tally
        self.answer = '"type":"%s"' % _PATHS[path][2]
        self.ws: Any = None
        self.sent: dict[int, float] = {}  # append index → send time, until answered (measured ones only)
        self.question_sent: Optional[float] = None
        self.done = asyncio.Event()  # a completed response.done came
        self.closed = asyncio.Event()

    async def open(self, timeout: float) -> None:
        from websockets.asyncio.client import connect

        model = _PATHS[self.path][1]
        self.ws = await connect(f"{self.url}?model={model}", compression=None, max_size=None, open_timeout=timeout, ping_interval=None)
        created = await self._expect("session.created", timeout)
        mode = created["session"].get("duplex", {}).get("mode")
        if self.path == "duplex" and mode != "full_duplex":
            raise RuntimeError(f"model {model} did not open a full-duplex session (duplex.mode {mode!r})")
        # Per-append answers: vLLM-Omni's input_audio_buffer.processed (full duplex) or the
        # append acknowledgement, its turn-based counterpart; both are asked for.
        setting = "extension_events" if self.path == "duplex" else "acknowledge_appends"
        await self.ws.send(json.dumps({"type": "session.update", "session": {"type": "realtime", "duplex": {setting: True}}}))
        updated = await self._expect("session.updated", timeout)
        if updated["session"].get("duplex", {}).get(setting) is not True:
            raise RuntimeError(f"the server did not turn duplex.{setting} on")

    async def _expect(self, kind: str, timeout: float) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while True:
            event = json.loads(await asyncio.wait_for(self.ws.recv(), max(0.01, deadline - time.monotonic())))
            if event.get("type") == kind:
                return event
            if event.get("type") == "error":
                raise RuntimeError(f"the server refused the session set-up: {event.get('error')}")

    async def stream(self, start: float, drain_s: float) -> None:
        """Send every chunk on the schedule ``start + k × 20 ms``, measuring those due before the
        last second; then wait up to ``drain_s`` for their answers and the reply; then close."""
        reader = asyncio.create_task(self._read())
        try:
            n = len(self.chunks)
            measure_below = max(1, n - 1000 // _CHUNK_MS)
            for k in range(n):
                if self.closed.is_set():
                    break
                due = start + k * _CHUNK_MS / 1000
                delay = due - time.monotonic()
                if delay > 0:
                    await asyncio.sleep(delay)
                now = time.monotonic()
                if k < measure_below:
                    self.sent[k] = now
                    self.tally.send_lags.append(now - due)
                if k == self.speech_chunks - 1:
                    self.question_sent = now
                try:
                    await self.ws.send('{"type":"input_audio_buffer.append","event_id":"a%d","audio":"%s"}' % (k, self.chunks[k]))
                except Exception as exc:  # the server closed the socket
                    self.tally.error(type(exc).__name__)
                    break
            deadline = time.monotonic() + drain_s
            while (self.sent or not self.done.is_set()) and time.monotonic() < deadline and not self.closed.is_set():
                await asyncio.sleep(0.02)
        finally:
            self.tally.missing += len(self.sent)
            self.sent.clear()
            await self._close(reader)

    def _append_index(self, event: dict[str, Any]) -> Optional[int]:
        if self.path == "duplex":
            end = event.get("audio_end_ms")
            return end // _CHUNK_MS - 1 if isinstance(end, int) else None
        cid = event.get("client_event_id") or ""
        return int(cid[1:]) if cid.startswith("a") and cid[1:].isdigit() else None

    async def _read(self) -> None:
        tally = self.tally
        try:
            async for frame in self.ws:
                now = time.monotonic()
                if self.answer in frame:
                    k = self._append_index(json.loads(frame))
                    sent = self.sent.pop(k, None) if k is not None else None
                    if sent is not None:
                        tally.lags.append(now - sent)
                elif '"type":"response.done"' in frame:
                    status = json.loads(frame)["response"].get("status")
                    if status == "completed" and not self.done.is_set() and self.question_sent is not None:
                        self.done.set()
                        tally.answered += 1
                        tally.replies.append(now - self.question_sent)
                elif '"type":"error"' in frame:
                    tally.error(json.loads(frame)["error"].get("code") or "error")
                elif '"type":"session.closed"' in frame:
                    break
        except Exception as exc:  # the connection broke
            tally.error(type(exc).__name__)
        finally:
            self.closed.set()

    async def _close(self, reader: asyncio.Task) -> None:
        with contextlib.suppress(Exception):
            if not self.closed.is_set():
                await self.ws.send('{"type":"session.close"}')
                await asyncio.wait_for(self.closed.wait(), 10)
        reader.cancel()
        with contextlib.suppress(Exception):
            await self.ws.close()


def _chunks(pcm: bytes, tail_s: float) -> tuple[list[str], int]:
    """The question then ``tail_s`` of silence as base64 20 ms appends, and how many carry the
    question."""
    question = [base64.b64encode(pcm[i : i + _CHUNK_BYTES].ljust(_CHUNK_BYTES, b"\0")).decode("ascii") for i in range(0, len(pcm), _CHUNK_BYTES)]
    silence = base64.b64encode(bytes(_CHUNK_BYTES)).decode("ascii")
    return question + [silence] * round(tail_s * 1000 / _CHUNK_MS), len(question)


async def run_trial(url: str, path: str, sessions: int, *, pcm: bytes, load: Load, batch_size: int) -> Trial:
    """Run ``sessions`` concurrent clients of ``path`` (``duplex`` or ``turns``) against the
    server's realtime endpoint ``url`` (``ws://127.0.0.1:PORT/v1/realtime``, loopback only);
    ``batch_size`` is recorded (the worker's, set when it was started).

    Raises:
        LoadgenError: a non-loopback URL.
        RuntimeError: no session could be opened, or the server did not open the kind asked for.
    """
    check_url(url)
    chunks, speech = _chunks(pcm, load.tail_s)
    tally = _Tally()
    clients = [_Client(url, path, chunks, speech, tally) for _ in range(sessions)]
    opened = await asyncio.gather(*(c.open(30.0) for c in clients), return_exceptions=True)
    failed = [o for o in opened if isinstance(o, BaseException)]
    if failed:
        for c in clients:
            with contextlib.suppress(Exception):
                if c.ws is not None:
                    await c.ws.close()
        raise RuntimeError(f"{len(failed)} of {sessions} {path} sessions could not be opened: {failed[0]!r}")
    begin = time.monotonic() + 0.3
    await asyncio.gather(*(c.stream(begin + load.spread_s * i / sessions, load.drain_s) for i, c in enumerate(clients)))
    p99 = _ms(tally.lags, 99)
    errors = sum(tally.errors.values())
    unanswered = sessions - tally.answered
    return Trial(
        path=path,
        batch_size=batch_size,
        sessions=sessions,
        measured=len(tally.lags),
        missing=tally.missing,
        answered=tally.answered,
        unanswered=unanswered,
        errors=errors,
        p50_ms=_ms(tally.lags, 50),
        p95_ms=_ms(tally.lags, 95),
        p99_ms=p99,
        max_ms=round(max(tally.lags) * 1000, 1) if tally.lags else None,
        reply_p50_ms=_ms(tally.replies, 50),
        reply_max_ms=round(max(tally.replies) * 1000, 1) if tally.replies else None,
        send_lag_p99_ms=_ms(tally.send_lags, 99),
        held=p99 is not None and p99 <= HELD_P99_MS and tally.missing == 0 and errors == 0 and unanswered == 0,
        error_codes=dict(tally.errors),
    )


async def ramp(url: str, path: str, *, pcm: bytes, load: Load, batch_size: int, say: Any = None) -> Ramp:
    """Ramp the session count of ``path`` through ``load.steps`` (see the module docstring);
    ``say`` (a callable) hears one line per trial."""
    started = time.monotonic()
    per_trial = len(pcm) / 48_000 + load.tail_s + load.spread_s + 5.0  # streaming, set-up and close, roughly
    trials: list[Trial] = []
    stopped = "every step held"

    async def holds(n: int) -> bool:
        for attempt in range(2):  # a miss is run once more: the machine is shared
            if attempt and time.monotonic() - started + per_trial > load.budget_s:
                return False
            t = await run_trial(url, path, n, pcm=pcm, load=load, batch_size=batch_size)
            trials.append(t)
            if say is not None:
                say(f"  row 15 {path} B={batch_size} N={n}: p50 {t.p50_ms} / p99 {t.p99_ms} ms, {t.answered}/{n} answered, {t.missing} missing, {t.errors} errors → {'held' if t.held else 'missed'}")
            await wait_idle(url)  # an overloaded worker may still be working through a backlog
            if t.held:
                return True
        return False

    best: Optional[int] = None
    failed: Optional[int] = None
    for n in load.steps:
        if time.monotonic() - started + per_trial > load.budget_s:
            stopped = f"time budget ({load.budget_s:.0f} s) before {n} sessions"
            break
        if await holds(n):
            best = n
        else:
            failed, stopped = n, f"{n} sessions missed"
            break
    lo = best or 0
    for _ in range(load.refine):
        if failed is None or failed - lo <= 1 or time.monotonic() - started + per_trial > load.budget_s:
            break
        mid = (lo + failed) // 2
        if await holds(mid):
            lo = best = mid
        else:
            failed = mid
    return Ramp(path=path, batch_size=batch_size, trials=tuple(trials), best=best, stopped=stopped)


# ------------------------------------------------------------------------------------------ row


@contextlib.contextmanager
def _serving(db_url: str, folder: Path, batch_size: int) -> Iterator[str]:
    """One ``serve`` and one ``worker --batch-size B`` on ``db_url``, stopped afterwards; yields
    the realtime endpoint's URL (without a query)."""
    port = free_port()
    server = start_server(db_url, port, folder / f"serve-row15-b{batch_size}.log", ("--log-level", "WARNING"))
    worker = None
    try:
        wait_healthy(port, server, timeout=60)
        worker = start_worker(db_url, folder / f"worker-row15-b{batch_size}.log", ("--log-level", "WARNING", "--batch-size", str(batch_size)))
        yield f"ws://127.0.0.1:{port}/v1/realtime"
    finally:
        if worker is not None:
            worker.stop()
        server.stop()


def measure(db_url: str, folder: Path, *, quick: bool, say: Any = None) -> dict[tuple[str, int], Ramp]:
    """Both paths under each of :data:`BATCH_SIZES`: ``{(path, B): Ramp}``; for each B one
    server and one worker serve a warm-up session (:data:`WARM_UP`, not counted), then the
    full-duplex ramp, then the turn-based one. ``row15.json`` in ``folder`` keeps every trial."""
    from duplex_es_tools.conversation import default_audio, read_wav_pcm16

    pcm = read_wav_pcm16(default_audio())
    load = QUICK_LOAD if quick else FULL_LOAD
    folder.mkdir(parents=True, exist_ok=True)
    out: dict[tuple[str, int], Ramp] = {}
    warm: dict[str, Any] = {}
    for b in BATCH_SIZES:
        with _serving(db_url, folder, b) as url:
            # One session first, not counted: a fresh worker loads its recognizer and synthesizer
            # on its first unit, which costs the first session seconds of lag.
            warm[f"b{b}"] = run(run_trial(url, "duplex", 1, pcm=pcm, load=WARM_UP, batch_size=b)).as_dict()
            run(wait_idle(url))
            for path in ("duplex", "turns"):
                out[path, b] = run(ramp(url, path, pcm=pcm, load=load, batch_size=b, say=say))
    data = {"warm_up": warm, **{f"{p}-b{b}": r.as_dict() for (p, b), r in out.items()}}
    (folder / "row15.json").write_text(json.dumps(data, indent=2))
    return out


def duplex_row(backend: str, db_url: str, *, quick: bool, out_dir: Path, say: Any = None) -> Row:
    """Measure row 15 on ``backend`` whose fresh database is ``db_url``; logs and ``row15.json``
    go to ``out_dir``. The row's figures are the full-duplex lag at the count held with B = 16;
    its comparisons are B = 1 and the turn-based path under each B."""
    ramps = measure(db_url, out_dir, quick=quick, say=say)
    head = ramps["duplex", 16]
    ours = head.figures()

    def named(path: str, b: int) -> str:
        r = ramps[path, b]
        what = "processed lag" if path == "duplex" else "append → ack lag"
        return f"{_PATHS[path][0]} ({_PATHS[path][1]}), B = {b}: {r.held_text()} sessions held ({what} at that count)"

    comparisons = [comparison(named(p, b), ramps[p, b].figures(), ours, "p99_ms") for p, b in (("duplex", 1), ("turns", 16), ("turns", 1))]
    held = {f"{p}_b{b}": r.best for (p, b), r in ramps.items()}
    ramp_text = " | ".join(
        f"{_PATHS[p][0]} B = {b} (stopped: {r.stopped}; reply p50 at best {r.best_trial.reply_p50_ms if r.best_trial else None} ms): {r.trials_text()}"
        for (p, b), r in ramps.items()
    )
    t = head.best_trial
    row = build_row(
        15,
        backend,
        f"{MEASUREMENTS[15]}: B = 16 {head.held_text()} sessions, B = 1 {ramps['duplex', 1].held_text()} "
        f"(turn-based: B = 16 {ramps['turns', 16].held_text()}, B = 1 {ramps['turns', 1].held_text()})",
        ours,
        n=t.measured if t else 0,
        target=target(15, backend),
        met=head.best is not None and head.best >= 8,
        durability="",
        ratio_of="p99_ms",
        comparisons=comparisons,
        note=(
            "N clients on one event loop stream the fixture question (5.2 s) then "
            f"{(QUICK_LOAD if quick else FULL_LOAD).tail_s:.0f} s of silence as 20 ms PCM16 24 kHz appends at real time (starts spread over "
            f"{(QUICK_LOAD if quick else FULL_LOAD).spread_s:g} s) through one serve and one worker --batch-size B; full duplex: lag = "
            "send → input_audio_buffer.processed of that append (audio_end_ms names it; chunk_period_ms 200, so a unit's first append "
            f"waits 200 ms by design); held = lag p99 ≤ {HELD_P99_MS:.0f} ms, every measured append processed, no error, every question "
            "answered (response.done completed); the last second of each stream is not measured. Turn-based beside it, same processes: "
            "gpt-realtime sessions, server VAD answers, duplex.acknowledge_appends on, lag = send → input_audio_buffer.appended, held by the "
            "same rule. Ramp (a miss is run twice; 'reply' = last question append sent → response.done completed): " + ramp_text
        ),
    )
    del row["durability"]  # the suite states the backend's settings
    row["sessions_held"] = held  # type: ignore[typeddict-unknown-key]
    row["trials"] = {f"{p}_b{b}": [x.as_dict() for x in r.trials] for (p, b), r in ramps.items()}  # type: ignore[typeddict-unknown-key]
    return row
