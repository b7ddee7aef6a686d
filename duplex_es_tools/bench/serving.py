"""Rows 9–11 and 13 of issue 6 §3 and issue 16: the serving path, measured end to end against a real
``duplex-es serve`` process over real WebSockets on loopback.

* **Row 9** — worker output commit → the client's WebSocket frame. The bench process plays the
  worker: it claims each tick from the :class:`~duplex_es.store.TickQueue` and commits an output
  shaped like the reference engine's (:func:`~duplex_es.worker.contracts.output_events`, 500 ms of
  PCM16 audio and a transcript delta); the clock starts when ``commit`` returns and stops when a
  client thread receives the first frame projected from that output (its
  ``server_event_seq // 1000`` is the output's log seq).
* **Row 10** — the load generator (:mod:`duplex_es_tools.loadgen`) against one server on the backend:
  sessions appending 20 ms PCM16 chunks of the fixture at real time, ``turn_detection: null`` (no
  responses, no workers), ``acknowledge_appends`` on; a ramp finds the largest session count
  whose append → ``input_audio_buffer.appended`` p99 stays ≤ 50 ms.
* **Row 13** — the bare transport ceiling (issue 16): the same ramp against
  :mod:`duplex_es_tools.bare_transport`, a peer on the same Starlette + uvicorn stack with the same
  options as ``duplex-es serve`` but no session logic (it parses each append, decodes its base64
  and acknowledges it). Measured once per run (it has no backend) and compared with row 10 of
  each backend: row 10 reports ours / ceiling.
* **Row 11** — the same ramp against the same server code and options on an in-memory log (a
  SQLite file on ``/dev/shm`` with ``PRAGMA synchronous=OFF``); the ratio of the two counts is
  the cost of durability.
* **Row 14** — steady light load (issue 12): 10 sessions as in row 10 for 60 s against one
  server, append → ack percentiles; beside it the same load on the in-memory log, in the same
  run. The tail (p99) is what stalls of the event loop show up in: a commit waiting for a lock,
  a WAL checkpoint inside a commit (docs/security.md, "No global stalls").

Latencies are in ms (from HDR histograms); rates in events (appends) per second.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Optional

from duplex_es.events import TickIssued
from duplex_es.store import Database, EventLog, TickQueue, upgrade
from duplex_es.worker.engine import EngineOutput, TickIdentity
from duplex_es.worker.contracts import output_events
from duplex_es_tools.bench.histogram import Latencies
from duplex_es_tools.bench.report import Row, build_row, comparison
from duplex_es_tools.bench.report import ratio as figure_ratio
from duplex_es_tools.bench.targets import MEASUREMENTS, NO_BACKEND, target
from duplex_es_tools.loadgen import RampResult, run, run_load, run_ramp
from duplex_es_tools.bench.ours import BENCH_MASTER_KEY, can_seal
from duplex_es_tools.processes import Proc, free_port, start_bare_transport, start_server, wait_healthy

__all__ = [
    "run_serving_rows",
    "output_to_frame",
    "ramp_sessions",
    "transport_ceiling",
    "ceiling_row",
    "IN_MEMORY",
    "BARE_TRANSPORT",
]

#: How row 11's in-memory log is made, stated beside its figure.
IN_MEMORY = "SQLite on /dev/shm (tmpfs), PRAGMA synchronous=OFF, WAL"

#: What row 13's peer is, stated beside its figure.
BARE_TRANSPORT = (
    "duplex_es_tools.bare_transport: Starlette + uvicorn (websockets-sansio, serve's HTTP protocol and frame limit), "
    "no session logic: parse each append, decode its base64, answer input_audio_buffer.appended"
)

#: Session counts rows 10, 11 and 13 try (then bisect): fine at the low end, where a server that is
#: far from the target still gets a figure, and up to five times the target.
_ROW10_STEPS = (1, 2, 5, 10, 25, 50, 75, 100, 150, 200, 250, 300, 400, 500)

#: The in-memory ramp of this process, reused by the second backend of a run (same server code,
#: same machine, minutes apart): ``{quick: RampResult}``.
_IN_MEMORY_CACHE: dict[bool, RampResult] = {}


def run_serving_rows(
    backend: str,
    url: str,
    *,
    quick: bool,
    out_dir: Path,
    rows: Iterable[int] = (9, 10, 11, 14),
    say: Optional[Callable[[str], Any]] = None,
    ceiling: Optional[RampResult] = None,
) -> list[dict]:
    """Measure rows 9, 10, 11, 14 and 15 (:mod:`duplex_es_tools.bench.rows_duplex`) on ``backend`` (``sqlite`` or ``postgresql``) whose fresh
    database is ``url``; server logs and the ramps' JSON go to ``out_dir``.

    Args:
        backend: ``sqlite`` or ``postgresql``.
        url: a fresh database on it (a SQLAlchemy URL; ``serve`` migrates it).
        quick: a smoke run (seconds; the figures mean little).
        out_dir: for ``serve`` logs and ``ramp-*.json``.
        rows: which of 9, 10, 11, 14, 15 to measure.
        say: hears a line per trial of row 15 (progress of a long ramp).
        ceiling: row 13's ramp of this run (:func:`transport_ceiling`), if measured: row 10
            then reports ours / ceiling among its comparisons.

    Returns:
        One row dict per measured row (see :mod:`duplex_es_tools.bench.report`).
    """
    out_dir.mkdir(parents=True, exist_ok=True)
    wanted = set(rows)
    out: list[dict] = []
    if 9 in wanted:
        out.append(_row9(backend, url, quick=quick, out_dir=out_dir))
    if wanted & {10, 11}:
        durable = ramp_sessions(url, out_dir / f"serve-row10-{backend}.log", quick=quick)
        (out_dir / f"ramp-{backend}.json").write_text(json.dumps(durable.as_dict(), indent=2))
        memory = _in_memory_ramp(out_dir, quick=quick) if 11 in wanted else None
        sealed = _sealed_ramp(out_dir, quick=quick) if 10 in wanted and backend == "sqlite" and can_seal() else None
        if 10 in wanted:
            out.append(_row10(backend, durable, memory, ceiling, sealed))
        if 11 in wanted and memory is not None:
            out.append(_row11(backend, durable, memory))
    if 14 in wanted:
        out.append(_row14(backend, url, quick=quick, out_dir=out_dir))
    if 15 in wanted:
        from duplex_es_tools.bench.rows_duplex import duplex_row

        out.append(duplex_row(backend, url, quick=quick, out_dir=out_dir, say=say))
    return out


# ------------------------------------------------------------------------------------ servers


@contextlib.contextmanager
def _server(db_url: str, log_path: Path, extra: tuple[str, ...] = ()) -> Iterator[int]:
    """``duplex-es serve`` on 127.0.0.1 (migrating ``db_url``), stopped afterwards; yields the port."""
    port = free_port()
    proc: Proc = start_server(db_url, port, log_path, extra=("--log-level", "WARNING", *extra))
    try:
        wait_healthy(port, proc, timeout=60)
        yield port
    finally:
        proc.stop()


@contextlib.contextmanager
def _bare_transport(log_path: Path) -> Iterator[int]:
    """Row 13's peer (:mod:`duplex_es_tools.bare_transport`) on 127.0.0.1, stopped afterwards;
    yields the port."""
    port = free_port()
    proc = start_bare_transport(port, log_path, extra=("--log-level", "WARNING"))
    try:
        wait_healthy(port, proc, timeout=60)
        yield port
    finally:
        proc.stop()


def _ramp(port: int, *, quick: bool) -> RampResult:
    """The ramp of rows 10, 11 and 13 against whatever listens on ``port``."""
    url = f"ws://127.0.0.1:{port}/v1/realtime"
    if quick:
        return run(run_ramp(url, steps=(1, 5, 10, 25), duration_s=2.0, warmup_s=0.5, time_budget_s=40, refine=0, pause_s=0.5))
    return run(run_ramp(url, steps=_ROW10_STEPS, duration_s=10.0, warmup_s=2.0, time_budget_s=300, refine=3))


def ramp_sessions(db_url: str, log_path: Path, *, quick: bool, extra: tuple[str, ...] = ()) -> RampResult:
    """Start a server on ``db_url`` and ramp the load generator against it (see :func:`run_ramp`)."""
    with _server(db_url, log_path, extra) as port:
        return _ramp(port, quick=quick)


def transport_ceiling(*, quick: bool, out_dir: Path) -> RampResult:
    """Row 13: start the bare transport peer and ramp it exactly as row 10 ramps a server; its log
    and ``ramp-bare-transport.json`` go to ``out_dir``.

    Raises:
        RuntimeError: the peer did not start.
        LoadgenError: no session could be opened on it.
    """
    out_dir.mkdir(parents=True, exist_ok=True)
    with _bare_transport(out_dir / "bare-transport.log") as port:
        result = _ramp(port, quick=quick)
    (out_dir / "ramp-bare-transport.json").write_text(json.dumps(result.as_dict(), indent=2))
    return result


@contextlib.contextmanager
def _in_memory_url() -> Iterator[str]:
    """A new SQLite file on ``/dev/shm`` (the in-memory log: see :data:`IN_MEMORY`), deleted after."""
    shm = Path("/dev/shm")
    folder = shm if shm.is_dir() and os.access(shm, os.W_OK) else Path(tempfile.gettempdir())
    path = folder / f"duplex-es-bench-{os.getpid()}-{secrets.token_hex(4)}.db"
    try:
        yield f"sqlite:///{path}"
    finally:
        for suffix in ("", "-wal", "-shm", "-journal"):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(f"{path}{suffix}")


def _sealed_ramp(out_dir: Path, *, quick: bool) -> RampResult:
    """Row 10's ramp on a fresh SQLite file (FULL) with ``serve --master-key-file``: every
    append's audio sealed under its session's data key (issue 17's cost of sealing)."""
    key = out_dir / "bench-master.key"
    fd = os.open(key, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(BENCH_MASTER_KEY.hex() + "\n")
    db_file = out_dir / "row10-sealed.db"
    for p in out_dir.glob("row10-sealed.db*"):
        p.unlink()
    result = ramp_sessions(f"sqlite:///{db_file}", out_dir / "serve-row10-sealed.log", quick=quick, extra=("--master-key-file", str(key)))
    (out_dir / "ramp-sqlite-sealed.json").write_text(json.dumps(result.as_dict(), indent=2))
    for p in out_dir.glob("row10-sealed.db*"):
        p.unlink()
    return result


def _in_memory_ramp(out_dir: Path, *, quick: bool) -> RampResult:
    if quick in _IN_MEMORY_CACHE:
        return _IN_MEMORY_CACHE[quick]
    with _in_memory_url() as url:
        result = ramp_sessions(url, out_dir / "serve-row11-in-memory.log", quick=quick, extra=("--sqlite-synchronous", "OFF"))
    (out_dir / "ramp-in-memory.json").write_text(json.dumps(result.as_dict(), indent=2))
    _IN_MEMORY_CACHE[quick] = result
    return result


# --------------------------------------------------------------------------------------- row 9


class _Frames:
    """A WebSocket client that timestamps every frame on arrival (in its own thread) and lets the
    bench wait for the first frame projected from a given log seq."""

    def __init__(self, port: int) -> None:
        from websockets.sync.client import connect

        self.ws = connect(f"ws://127.0.0.1:{port}/v1/realtime?model=bench", max_size=None, compression=None)
        self._first: dict[int, int] = {}  # log seq → perf_counter_ns of its first frame
        self._cond = threading.Condition()
        self.types: dict[str, int] = {}
        self.session_id = json.loads(self.ws.recv(timeout=30))["session"]["id"]
        self._thread = threading.Thread(target=self._read, daemon=True, name="row9-client")
        self._thread.start()

    def _read(self) -> None:
        try:
            for frame in self.ws:
                now = time.perf_counter_ns()
                event = json.loads(frame)
                seq = event.get("server_event_seq")
                with self._cond:
                    self.types[event["type"]] = self.types.get(event["type"], 0) + 1
                    if seq is not None:
                        self._first.setdefault(seq // 1000, now)
                    self._cond.notify_all()
        except Exception:  # the socket closed
            with self._cond:
                self._cond.notify_all()

    def send(self, obj: dict[str, Any]) -> None:
        self.ws.send(json.dumps(obj))

    def arrival_ns(self, seq: int, timeout: float = 10.0) -> int:
        """When the first frame of log event ``seq`` arrived (``perf_counter_ns``).

        Raises:
            TimeoutError: none arrived within ``timeout`` seconds.
        """
        deadline = time.monotonic() + timeout
        with self._cond:
            while seq not in self._first:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError(f"no frame of log event {seq} within {timeout} s")
                self._cond.wait(left)
            return self._first[seq]

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.ws.close()
        self._thread.join(timeout=5)


def output_to_frame(queue: TickQueue, frames: _Frames, *, audio: bytes, timeout: float = 10.0) -> tuple[int, bool]:
    """Claim the session's next tick, commit an output for it as a worker would, and return
    (ns from the commit's return to the first frame of that output, whether it was the final
    chunk). The output is final on chunk 9, so a response has ten chunks."""
    deadline = time.monotonic() + timeout
    claim = None
    while claim is None:
        claim = queue.claim("bench-row9", ttl_ms=30_000, kinds=("speech",))
        if claim is None:
            if time.monotonic() > deadline:
                raise TimeoutError("no tick to claim: the server issued none")
            time.sleep(0.0005)
    tick = claim.tick
    assert isinstance(tick, TickIssued)
    final = tick.chunk_index >= 9
    out = EngineOutput(
        echo=TickIdentity.of(claim.session_id, tick),
        audio=audio,
        text_delta=f"chunk {tick.chunk_index} ",
        final=final,
    )
    result = queue.commit(claim, output_events(claim.session_id, "bench-row9", out))
    committed = time.perf_counter_ns()
    seq = result.records[0].seq
    return frames.arrival_ns(seq, timeout) - committed, final


def _row9(backend: str, url: str, *, quick: bool, out_dir: Path) -> Row:
    n = 30 if quick else 300
    db = Database(url)
    upgrade(db)
    queue = TickQueue(EventLog(db))
    audio = b"\x10\x00" * 24 * 500  # 500 ms of PCM16 24 kHz, as the reference worker sends
    lat = Latencies()
    try:
        with _server(url, out_dir / f"serve-row9-{backend}.log") as port:
            frames = _Frames(port)
            try:
                frames.send({"type": "session.update", "session": {"type": "realtime", "audio": {"input": {"turn_detection": None}}}})
                warm, measured = 0, 0
                while measured < n:
                    frames.send({"type": "input.text.append", "text": "what is the weather in Lisbon"})
                    frames.send({"type": "input_audio_buffer.commit"})
                    frames.send({"type": "response.create"})
                    final = False
                    while not final:
                        ns, final = output_to_frame(queue, frames, audio=audio)
                        if warm < 5:
                            warm += 1  # the first outputs warm caches and connections
                        elif measured < n:
                            lat.record_ns(max(ns, 1))
                            measured += 1
                    time.sleep(0.05)  # let response.done go out before the next turn
                frames.send({"type": "session.close"})
            finally:
                frames.close()
    finally:
        db.dispose()
    s = lat.summary_ms()
    goal = 20.0 if backend == "sqlite" else 10.0
    met = s["p99_ms"] is not None and s["p99_ms"] <= goal
    how = "polling every 5 ms" if backend == "sqlite" else "whatever wake-up the server's log follower has (LISTEN/NOTIFY when present)"
    row = build_row(
        9,
        backend,
        MEASUREMENTS[9],
        s,
        n=lat.count,
        target=target(9, backend),
        met=met,
        durability="",
        ratio_of="p99_ms",
        comparisons=[],
        note=(
            f"the bench process is the worker: it claims each tick and commits a reference-shaped output (500 ms PCM16 + text); "
            f"timed from the commit's return to the client's first frame of that output ({how}); "
            f"{lat.count} outputs after 5 warm-up ones, 10 chunks per response, one session, server on loopback"
        ),
    )
    del row["durability"]
    return row


# ---------------------------------------------------------------------------------- rows 10, 11


def _trials_text(ramp: RampResult) -> str:
    return "; ".join(
        f"{t.sessions}: p99 {t.p99_ms} ms{'' if not (t.errors or t.missing) else f', {t.errors} errors, {t.missing} unacked'} "
        f"({'held' if t.held else 'missed'})"
        for t in ramp.trials
    )


def _ramp_figures(ramp: RampResult) -> dict[str, Any]:
    trial = ramp.best_trial
    if trial is None:
        return {"events_per_s": None, "p50_ms": None, "p95_ms": None, "p99_ms": None}
    return {"events_per_s": round(trial.appends_per_s, 1), "p50_ms": trial.p50_ms, "p95_ms": trial.p95_ms, "p99_ms": trial.p99_ms}


def _held(ramp: RampResult) -> str:
    """``"N sessions"``, or ``"≥ N sessions"`` when no step missed (the ramp ran out of steps or
    time, so N is a lower bound)."""
    bound = "" if "missed" in ramp.stopped else "≥ "
    return f"{bound}{ramp.best if ramp.best is not None else 'no'} sessions"


#: Row 10's session count target per backend (issue 16), and its share of the bare transport
#: ceiling on SQLite.
_ROW10_SESSIONS = {"sqlite": 150, "postgresql": 100}
_ROW10_CEILING_SHARE = 0.5


def _row10_met(backend: str, best: Optional[int], ceiling: Optional[RampResult], ceiling_ratio: Optional[float]) -> Optional[bool]:
    """Issue 16's row 10: enough sessions held and, on SQLite, ≥ 0.5× the ceiling of the same run.
    ``None`` when the count is met but the share cannot be decided: row 13 was not measured, or
    its ceiling is only a lower bound (no step missed) while the share it gives is ≥ 0.5."""
    if best is None or best < _ROW10_SESSIONS.get(backend, 100):
        return False
    if backend != "sqlite":
        return True
    if ceiling is None or ceiling_ratio is None:
        return None
    if ceiling_ratio < _ROW10_CEILING_SHARE:
        return False
    return True if "missed" in ceiling.stopped else None


def _row10(
    backend: str, ramp: RampResult, memory: Optional[RampResult], ceiling: Optional[RampResult] = None, sealed: Optional[RampResult] = None
) -> Row:
    best = ramp.best
    trial = ramp.best_trial
    figures = _ramp_figures(ramp)
    comparisons = []
    if memory is not None:
        comparisons.append(comparison(f"in-memory log ({IN_MEMORY}): {memory.best} sessions", _ramp_figures(memory), figures, "events_per_s"))
    if sealed is not None:
        comparisons.append(
            comparison(f"the same server with --master-key-file (content sealed; issue 17): {_held(sealed)}", _ramp_figures(sealed), figures, "events_per_s")
        )
    ceiling_ratio = None
    if ceiling is not None:
        # ev/s at the held counts: every session appends 50 chunks/s, so this is the sessions' ratio.
        beside = comparison(f"bare transport ceiling (row 13, same run): {_held(ceiling)}", _ramp_figures(ceiling), figures, "events_per_s")
        comparisons.append(beside)
        ceiling_ratio = beside.get("ratio")
    row = build_row(
        10,
        backend,
        f"{MEASUREMENTS[10]}: {best if best is not None else 'no'} sessions held p99 ≤ 50 ms",
        figures,
        n=trial.acked if trial is not None else 0,
        target=target(10, backend),
        met=_row10_met(backend, best, ceiling, ceiling_ratio),
        durability="",
        ratio_of="events_per_s",
        comparisons=comparisons,
        note=(
            f"largest session count held: {best}; "
            + (f"ours / bare transport ceiling = {ceiling_ratio}× (issue 16 aims for ≥ {_ROW10_CEILING_SHARE}× on SQLite); " if ceiling is not None else "")
            + f"ramp (sessions: append → ack p99; a miss is run once more): {_trials_text(ramp)}; "
            f"stopped: {ramp.stopped}. "
            "Each session: 20 ms PCM16 24 kHz appends of the fixture at real time, turn_detection null (no responses, no workers), "
            "duplex.acknowledge_appends on; latency = send → input_audio_buffer.appended received; events_per_s = appends/s at the held count"
        ),
    )
    del row["durability"]  # the suite states the backend's settings and the disk's fsync latency
    row["sessions_held"] = best  # type: ignore[typeddict-unknown-key]
    row["trials"] = [t.as_dict() for t in ramp.trials]  # type: ignore[typeddict-unknown-key]
    if ceiling is not None:
        row["ceiling_ratio"] = ceiling_ratio  # type: ignore[typeddict-unknown-key]
    return row


# -------------------------------------------------------------------------------------- row 13


def ceiling_row(ceiling: RampResult, rows10: Iterable[Row] = ()) -> Row:
    """Row 13 from its ramp (:func:`transport_ceiling`), with row 10 of each backend of the same
    run (``rows10``) as its comparisons.

    The row's figures are the peer's, not duplex-es's; so that a ratio means the same everywhere
    in the report (duplex-es / its peer), each comparison's ``ratio`` is row 10 / this ceiling,
    the number row 10 reports too. ``backend`` is :data:`NO_BACKEND`.
    """
    figures = _ramp_figures(ceiling)
    trial = ceiling.best_trial
    comparisons = []
    for r in rows10:
        if r.get("row") != 10 or r.get("sessions_held") is None:  # type: ignore[typeddict-item]
            continue
        theirs = {k: r.get(k) for k in ("events_per_s", "p50_ms", "p95_ms", "p99_ms")}
        c = comparison(f"duplex-es row 10 on {r['backend']} (same run): {r['sessions_held']} sessions", theirs, figures, "events_per_s")  # type: ignore[typeddict-item]
        c["ratio"] = figure_ratio(theirs.get("events_per_s"), figures.get("events_per_s"))  # row 10 / ceiling: see the docstring
        comparisons.append(c)
    row = build_row(
        13,
        NO_BACKEND,
        f"{MEASUREMENTS[13]}: {_held(ceiling)} held p99 ≤ 50 ms",
        figures,
        n=trial.acked if trial is not None else 0,
        target=target(13, NO_BACKEND),
        met=None,
        durability="none: nothing is logged",
        ratio_of="events_per_s",
        comparisons=comparisons,
        note=(
            f"the peer: {BARE_TRANSPORT}; largest session count held: {ceiling.best}"
            f"{'' if 'missed' in ceiling.stopped else ' (a lower bound: no step missed)'}; "
            f"ramp (the same as row 10's): {_trials_text(ceiling)}; stopped: {ceiling.stopped}; "
            f"client send lag p99 at the held count {trial.send_lag_p99_ms if trial is not None else None} ms "
            "(how late the load generator itself sent: near the ceiling the client shares the CPU). "
            + ("Comparisons: row 10 of each backend, ratio = row 10 / this ceiling." if comparisons else "Row 10 was not measured in this run: nothing to compare.")
        ),
    )
    row["sessions_held"] = ceiling.best  # type: ignore[typeddict-unknown-key]
    row["trials"] = [t.as_dict() for t in ceiling.trials]  # type: ignore[typeddict-unknown-key]
    return row


def _row11(backend: str, durable: RampResult, memory: RampResult) -> Row:
    ours = _ramp_figures(durable)
    theirs = _ramp_figures(memory)
    ratio = round(durable.best / memory.best, 2) if durable.best and memory.best else None
    row = build_row(
        11,
        backend,
        f"{MEASUREMENTS[11]}: {durable.best} durable / {memory.best} in-memory sessions",
        ours,
        n=durable.best or 0,
        target=target(11, backend),
        met=None if ratio is None else ratio >= 0.8,
        durability="",
        ratio_of="events_per_s",
        comparisons=[{**comparison(f"in-memory log ({IN_MEMORY})", theirs, ours, "events_per_s"), "durability": IN_MEMORY}],
        note=(
            f"ratio = sessions held on {backend} / sessions held on the in-memory log = {durable.best} / {memory.best} = {ratio} "
            f"(the ev/s ratio is the same: every session appends 50 chunks/s); in-memory ramp: {_trials_text(memory)}"
        ),
    )
    del row["durability"]
    row["sessions_held"] = durable.best  # type: ignore[typeddict-unknown-key]
    row["in_memory_sessions_held"] = memory.best  # type: ignore[typeddict-unknown-key]
    row["ratio"] = ratio  # type: ignore[typeddict-unknown-key]
    return row


# -------------------------------------------------------------------------------------- row 14

#: Row 14's load: sessions, measured seconds, warm-up seconds (quick: a smoke run).
ROW14_LOAD = (10, 60.0, 2.0)
ROW14_QUICK = (10, 3.0, 0.5)


def _steady(db_url: str, log_path: Path, *, quick: bool, extra: tuple[str, ...] = ()) -> Any:
    sessions, duration_s, warmup_s = ROW14_QUICK if quick else ROW14_LOAD
    with _server(db_url, log_path, extra) as port:
        return run(run_load(f"ws://127.0.0.1:{port}/v1/realtime", sessions, duration_s=duration_s, warmup_s=warmup_s))


def _run_figures(result: Any) -> dict[str, Any]:
    return {
        "events_per_s": round(result.appends_per_s, 1),
        "p50_ms": result.p50_ms,
        "p95_ms": result.p95_ms,
        "p99_ms": result.p99_ms,
        "max_ms": result.max_ms,
    }


def _row14(backend: str, url: str, *, quick: bool, out_dir: Path) -> Row:
    ours = _steady(url, out_dir / f"serve-row14-{backend}.log", quick=quick)
    with _in_memory_url() as memory_url:
        memory = _steady(memory_url, out_dir / f"serve-row14-{backend}-in-memory.log", quick=quick, extra=("--sqlite-synchronous", "OFF"))
    figures, theirs = _run_figures(ours), _run_figures(memory)
    (out_dir / f"row14-{backend}.json").write_text(json.dumps({"durable": figures, "in_memory": theirs}, indent=2))
    sessions, duration_s, _ = ROW14_QUICK if quick else ROW14_LOAD
    met = None
    if backend == "sqlite" and ours.p99_ms is not None:
        met = ours.p99_ms < 20 and ours.missing == 0
    return build_row(
        14,
        backend,
        f"{MEASUREMENTS[14]}: p99 {ours.p99_ms} ms",
        figures,
        n=ours.acked,
        target=target(14, backend),
        met=met,
        durability="",
        ratio_of="p99_ms",
        comparisons=[{**comparison(f"in-memory log ({IN_MEMORY})", theirs, figures, "p99_ms"), "durability": IN_MEMORY}],
        note=(
            f"{sessions} sessions × {duration_s:.0f} s, 20 ms PCM16 24 kHz appends at real time, turn_detection null, "
            f"acknowledge_appends on; {ours.acked} acked, {ours.missing} missing, {ours.late} later than 50 ms, "
            f"client send lag p99 {ours.send_lag_p99_ms} ms (how late the load generator itself sent)"
        ),
    )
