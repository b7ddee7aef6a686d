"""``duplex-es chaos`` (``make chaos``): resume after crashes, proven against a seeded schedule
of SIGKILLs.

Scripted sessions run against real ``serve`` and ``worker`` processes: speech sessions through
the official ``openai`` SDK (reconnecting with the resume keys in the URL, speaking the shared
fixture audio) and world sessions over a raw WebSocket (resuming with ``session.resume``).
Meanwhile a schedule drawn from ``--seed`` SIGKILLs the server or a worker at random instants and
restarts it. Clients behave as a careful client should: every command carries an ``event_id``,
and after a resume a command whose effect was not seen is sent again (the log's idempotency keys
make that safe).

Afterwards it checks, and exits 1 on any violation:

* every server event a client received is in the log: re-projecting the log gives the same
  event at the same ``server_event_seq``;
* no server event, audio chunk or ``world.chunk`` reached a client twice;
* every session passes ``audit`` (which also finds an output committed twice);
* every session's snapshot plus tail equals its full replay;
* every client finished its script (its session is closed).
"""

from __future__ import annotations

import asyncio
import base64
import datetime as dt
import faulthandler
import json
import random
import time
from pathlib import Path
from typing import Any, Callable, Optional

import attrs
from rich.console import Console
from rich.table import Table

from duplex_es.audit import audit_session
from duplex_es.domain import evolve, fold, new_state
from duplex_es.events import ItemRetrieved
from duplex_es.protocol import encode_wire, project
from duplex_es.snapshots import load_state
from duplex_es.store import Database, EventLog, SnapshotStore, upgrade
from duplex_es_tools.conversation import default_audio, read_wav_pcm16
from duplex_es_tools.processes import Proc, free_port, start_server, start_worker, wait_healthy

__all__ = ["run_chaos", "ChaosReport"]

MODEL = "duplex-es-echo"
# The SDK clients resume with the token in the URL; a server killed after it logged such a resume
# but before its reply left takes the rotated token with it, and the client retries with the old
# one. A server refuses that by default (a URL token is never good again); chaos grants the
# retry a leeway, since what it checks is that nothing acknowledged is lost or doubled.
SERVER_ARGS = ["--disconnect-grace-ms", "120000", "--snapshot-every", "25", "--reaper-interval-ms", "500", "--url-token-leeway-ms", "60000"]
# The worker default claim (5 s), extended by the worker's heartbeat while a step runs; a killed
# worker's tick is taken over once it expires.
WORKER_ARGS = ["--claim-ttl-ms", "5000", "--chunk-ms", "500"]


@attrs.define
class Received:
    """What one scripted client saw: every event (with the session it belonged to), its
    session, its newest resume token and the highest ``server_event_seq``."""

    kind: str
    name: str
    session_id: Optional[str] = None
    token: Optional[str] = None
    last: int = 0
    resumes: int = 0
    events: list[tuple[Optional[str], dict]] = attrs.Factory(list)
    done: bool = False
    notes: list[str] = attrs.Factory(list)
    current: Optional[str] = None  # the session the current connection speaks for

    def take(self, ev: dict) -> None:
        kind = ev.get("type")
        if kind in ("session.created", "session.started"):
            self.current = ev["session"]["id"] if kind == "session.created" else ev["session_id"]
            if self.session_id is None:
                self.session_id, self.token = self.current, ev.get("resume_token")
            else:  # a refused URL resume leaves the connection on a new session of its own
                self.notes.append(f"resume refused; the server opened {self.current}")
        elif kind == "session.resumed" and ev.get("resume_token"):
            self.current = self.session_id = ev["session_id"]
            self.token = ev["resume_token"]
            self.resumes += 1
        elif kind == "error" and ev["error"].get("code") in ("session_resume_conflict", "invalid_resume_token"):
            self.notes.append(f"resume refused: {ev['error']['code']}: {ev['error'].get('message')}")
        self.events.append((self.current, ev))
        if self.current != self.session_id:
            return
        if "server_event_seq" in ev:
            self.last = max(self.last, ev["server_event_seq"])
        if kind in ("session.closed", "session.expired"):
            self.done = True

    def resume_keys(self) -> dict[str, Any]:
        return {"session_id": self.session_id, "resume_token": self.token, "last_server_event_seq": self.last}

    def since(self, mark: int) -> list[dict]:
        return [ev for _, ev in self.events[mark:]]


class _Script:
    """The part every scripted client shares: sending through whatever connection is current,
    and waiting for an effect, re-sending after a resume."""

    def __init__(self, rec: Received, deadline: float) -> None:
        self.rec = rec
        self.deadline = deadline
        self.connected = asyncio.Event()
        self.calm = asyncio.Event()  # set once the kill schedule is over: scripts keep going until then

    async def send(self, payload: dict) -> None:
        raise NotImplementedError

    async def expect(self, sends: list[dict], pred: Callable[[dict], bool], *, patience: float = 25.0) -> dict:
        """Send ``sends``, then wait for an event matching ``pred``; send them again (same
        ``event_id``s) after every resume and whenever ``patience`` runs out."""
        while True:
            mark, resumes, sent_at = len(self.rec.events), self.rec.resumes, time.monotonic()
            try:
                await asyncio.wait_for(self.connected.wait(), max(0.0, self.deadline - time.monotonic()))
            except asyncio.TimeoutError:
                raise TimeoutError(f"{self.rec.name}: no connection before the deadline ({'; '.join(self.rec.notes[-3:])})") from None
            try:
                for payload in sends:
                    await self.send(payload)
            except Exception as exc:  # the connection died under the send: resend all once back
                self.rec.notes.append(f"send failed: {type(exc).__name__}")
                await asyncio.sleep(0.2)
                continue
            while True:
                for ev in self.rec.since(mark):
                    if pred(ev):
                        return ev
                if time.monotonic() > self.deadline:
                    raise TimeoutError(f"{self.rec.name}: gave up waiting (last events {[e['type'] for e in self.rec.since(mark)][-5:]})")
                if self.rec.resumes != resumes or time.monotonic() - sent_at > patience:
                    break
                await asyncio.sleep(0.02)


class SpeechClient(_Script):
    """A speech session through the SDK: ``turns`` spoken questions, each committed and
    answered, then ``session.close``."""

    def __init__(self, base_url: str, turns: list[bytes], rec: Received, deadline: float) -> None:
        super().__init__(rec, deadline)
        self.base_url = base_url
        self.turns = turns
        self.conn: Any = None

    def _query(self) -> dict[str, str]:
        if self.rec.session_id is None:
            return {}
        keys = self.rec.resume_keys()
        return {"resume_session": keys["session_id"], "resume_token": keys["resume_token"], "last_server_event_seq": str(keys["last_server_event_seq"])}

    async def send(self, payload: dict) -> None:
        await self.conn.send(payload)

    async def connections(self) -> None:
        from openai import AsyncOpenAI

        client = AsyncOpenAI(api_key="chaos", websocket_base_url=self.base_url)
        while not self.rec.done:
            try:
                async with client.realtime.connect(
                    model=MODEL, extra_query=self._query(), on_reconnecting=lambda ev: {"extra_query": self._query()}
                ) as conn:
                    self.conn = conn
                    self.connected.set()
                    async for event in conn:
                        self.rec.take(event.to_dict())
                        if self.rec.done:
                            return
            except Exception as exc:  # the SDK gave up reconnecting: start over with a resume
                self.rec.notes.append(f"reconnect: {type(exc).__name__}")
            self.connected.clear()
            await asyncio.sleep(0.5)

    async def script(self) -> None:
        await self.expect([{"type": "session.update", "event_id": "u", "session": {"type": "realtime", "audio": {"input": {"turn_detection": None}}}}],
                          lambda e: e["type"] == "session.updated" or _dup(e, "u"))
        t = 0
        while t < len(self.turns) or not self.calm.is_set():
            pcm = self.turns[t % len(self.turns)]
            step = 4800  # 100 ms
            appends = [
                {"type": "input_audio_buffer.append", "event_id": f"t{t}a{i}", "audio": base64.b64encode(pcm[o : o + step]).decode()}
                for i, o in enumerate(range(0, len(pcm), step))
            ]
            # Appends are not acknowledged; a heartbeat after them is. After a resume they are all
            # sent again: the ones already logged are deduplicated, the lost tail lands.
            await self.expect(appends + [{"type": "session.heartbeat"}], lambda e: e["type"] == "session.heartbeat_ack")
            await self.expect([{"type": "input_audio_buffer.commit", "event_id": f"t{t}c"}],
                              lambda e: e["type"] == "input_audio_buffer.committed" or _dup(e, f"t{t}c"))
            for attempt in range(6):
                done = await self.expect([{"type": "response.create", "event_id": f"t{t}r{attempt}"}], lambda e: e["type"] == "response.done", patience=60)
                if done["response"]["status"] == "completed":
                    break
                self.rec.notes.append(f"turn {t}: response {done['response']['status']}, asking again")
            t += 1
        await self.expect([{"type": "session.close", "event_id": "close"}], lambda e: e["type"] == "session.closed" or _closed_refusal(e))
        self.rec.done = True


class WorldClient(_Script):
    """A world session over a raw WebSocket: steer it until ``chunks`` chunks arrived, then close."""

    def __init__(self, url: str, chunks: int, seed: int, rec: Received, deadline: float) -> None:
        super().__init__(rec, deadline)
        self.url = url
        self.chunks = chunks
        self.seed = seed
        self.ws: Any = None

    async def send(self, payload: dict) -> None:
        try:
            await self.ws.send(json.dumps(payload))
        except Exception:
            pass  # the connection died; expect() sends again after the resume

    async def connections(self) -> None:
        import websockets

        while not self.rec.done:
            try:
                async with websockets.connect(self.url, max_size=None, open_timeout=5) as ws:
                    if self.rec.session_id is not None:
                        await ws.send(json.dumps({"type": "session.resume", **self.rec.resume_keys()}))
                    self.ws = ws
                    self.connected.set()
                    async for frame in ws:
                        ev = json.loads(frame)
                        if ev.get("type") == "error" and ev["error"]["code"] == "session_closed":
                            self.rec.done = True
                        self.rec.take(ev)
                        if self.rec.done:
                            return
            except Exception as exc:
                self.rec.notes.append(f"reconnect: {type(exc).__name__}")
            self.connected.clear()
            await asyncio.sleep(0.3)

    async def script(self) -> None:
        start = {"type": "session.start", "prompt": "rolling hills", "seed": self.seed, "width": 48, "height": 32, "fps": 16,
                 "frames_per_chunk": 4, "pacing": "realtime"}
        await self.expect([start], lambda e: e["type"] in ("session.started", "session.resumed"))
        rng = random.Random(self.seed)
        next_id = 1
        while sum(1 for _, e in self.rec.events if e["type"] == "world.chunk") < self.chunks or not self.calm.is_set():
            i = next_id
            keys = rng.sample(["W", "A", "S", "D", "J", "L"], rng.randint(0, 2))
            msg = {"type": "session.interaction", "event_id": i, "controls": [{"track": "camera", "schema": "duplex_es.camera_keys.v1", "data": {"keys": keys}}]}
            await self.expect([msg], lambda e: (e["type"] == "session.interaction.accepted" and e["interaction_event_id"] == i)
                              or (e["type"] == "error" and e["error"].get("event_id") == i))
            next_id += 1
            await asyncio.sleep(0.25)
        await self.expect([{"type": "session.close", "event_id": "close"}], lambda e: e["type"] == "session.closed")
        self.rec.done = True


def _dup(ev: dict, event_id: str) -> bool:
    """The server's answer to a re-sent command it had already applied."""
    return ev["type"] == "command.deduplicated" and ev.get("client_event_id") == event_id


def _closed_refusal(ev: dict) -> bool:
    return ev["type"] == "error" and ev["error"].get("code") == "session_closed"


async def _drive(client: SpeechClient | WorldClient) -> None:
    conns = asyncio.create_task(client.connections())
    try:
        await client.script()
    except Exception as exc:
        client.rec.notes.append(f"script failed: {exc}")
    finally:
        conns.cancel()
        try:
            await conns
        except BaseException:
            pass


@attrs.define
class Stack:
    """The serve and worker processes under test, and their restarts."""

    url: str
    port: int
    out: Path
    server: Optional[Proc] = None
    workers: list[Proc] = attrs.Factory(list)
    restarts: int = 0

    def start_server(self) -> None:
        self.restarts += 1
        self.server = start_server(self.url, self.port, self.out / f"serve-{self.restarts}.log", SERVER_ARGS)
        wait_healthy(self.port, self.server, timeout=60)

    def start_worker(self, i: int) -> None:
        self.restarts += 1
        proc = start_worker(self.url, self.out / f"worker{i}-{self.restarts}.log", WORKER_ARGS)
        if i < len(self.workers):
            self.workers[i] = proc
        else:
            self.workers.append(proc)

    def stop(self) -> None:
        for p in [*self.workers, self.server]:
            if p is not None:
                p.stop()


async def _kill_schedule(stack: Stack, rng: random.Random, kills: int, window_s: float, stop: asyncio.Event, record: list[dict]) -> None:
    """SIGKILL and restart processes at seeded instants; a restart that fails raises (the harness
    records it as a violation: the clients would otherwise wait for a server that never returns)."""
    start = time.monotonic()
    victims = ["server"] * ((kills + 1) // 2) + ["worker"] * (kills // 2)  # half of each, in a seeded order
    rng.shuffle(victims)
    for at, victim in zip(sorted(rng.uniform(1.0, window_s) for _ in range(kills)), victims):
        delay = start + at - time.monotonic()
        if delay > 0:
            try:
                await asyncio.wait_for(stop.wait(), delay)
                return
            except asyncio.TimeoutError:
                pass
        down = rng.uniform(0.1, 1.0)
        if victim == "server":
            assert stack.server is not None
            stack.server.kill()
            await asyncio.sleep(down)
            await asyncio.to_thread(stack.start_server)
        else:
            i = rng.randrange(len(stack.workers))
            stack.workers[i].kill()
            await asyncio.sleep(down)
            stack.start_worker(i)
        record.append({"at_s": round(time.monotonic() - start, 2), "killed": victim, "down_s": round(down, 2)})


def _projection(log: EventLog, session_id: str) -> dict[int, dict]:
    """``server_event_seq`` → the wire event the log says was sent (decoded JSON)."""
    state: Any = new_state()
    out: dict[int, dict] = {}
    for r in log.read_session(session_id):
        before, state = state, evolve(state, r.seq, r.event)
        if isinstance(r.event, ItemRetrieved):
            continue  # scripted clients never retrieve
        for wire in project(before, r.seq, r.event, state):
            out[wire["server_event_seq"]] = json.loads(encode_wire(wire))
    return out


@attrs.frozen
class ChaosReport:
    """What ``chaos`` found."""

    sessions: int
    finished: int
    kills: tuple[dict, ...]
    events_checked: int
    log_events: int
    violations: tuple[str, ...]
    seconds: float

    @property
    def ok(self) -> bool:
        return not self.violations


def check(log: EventLog, recs: list[Received]) -> tuple[int, int, list[str]]:
    """The checks of the module docstring; returns (client events checked, log events, violations)."""
    bad: list[str] = []
    checked = 0
    projections: dict[str, dict[int, dict]] = {}
    for rec in recs:
        if not rec.done:
            bad.append(f"{rec.name}: did not finish its script ({'; '.join(rec.notes[-3:])})")
        seen: dict[tuple[str, int], int] = {}
        chunks: set[tuple[str, int, int]] = set()
        for sid, ev in rec.events:
            seq = ev.get("server_event_seq")
            if seq is None or sid is None:
                continue
            if (sid, seq) in seen:
                bad.append(f"{rec.name}: server event {seq} of {sid} delivered twice")
            seen[(sid, seq)] = 1
            if ev["type"] == "world.chunk":
                key = (sid, ev["epoch"], ev["chunk_index"])
                if key in chunks:
                    bad.append(f"{rec.name}: world.chunk {key[1:]} delivered twice")
                chunks.add(key)
            if sid not in projections:
                projections[sid] = _projection(log, sid)
            logged = projections[sid].get(seq)
            sent = {k: v for k, v in ev.items() if k != "resume_token"}
            checked += 1
            if logged is None:
                bad.append(f"{rec.name}: {ev['type']} {seq} of {sid} is not in the log")
            elif logged != sent:
                bad.append(f"{rec.name}: {ev['type']} {seq} of {sid} differs from the log's projection")
    snaps = SnapshotStore(log.db)
    total = 0
    for sid in log.session_ids():
        report = audit_session(log, sid)
        total += report.events
        bad += [f"audit {sid} seq {v.seq} [{v.check}]: {v.message}" for v in report.violations]
        full = fold((r.seq, r.event) for r in log.read_session(sid))
        if load_state(log, snaps, sid, resnapshot=False).state != full:
            bad.append(f"{sid}: snapshot + tail differs from the full replay")
    return checked, total, bad


def run_chaos(
    console: Console,
    *,
    db_url: Optional[str],
    out_dir: str,
    speech_sessions: int,
    world_sessions: int,
    kills: int,
    seed: int,
    window_s: float,
    turns: int = 2,
    world_chunks: int = 24,
    workers: int = 2,
    timeout_s: float = 600,
) -> ChaosReport:
    """Run the harness; see the module docstring. Writes ``chaos-results.json`` into ``out_dir``."""
    out = Path(out_dir).resolve()
    out.mkdir(parents=True, exist_ok=True)
    stamp = dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    url = db_url or f"sqlite:///{out / f'chaos-{stamp}.db'}"
    db = Database(url)
    upgrade(db)
    questions = [read_wav_pcm16(default_audio()), read_wav_pcm16(default_audio().with_name("correction_24k.wav"))]
    stack = Stack(url=url, port=free_port(), out=out / f"logs-{stamp}")
    rng = random.Random(seed)
    started = time.monotonic()
    kill_log: list[dict] = []
    recs: list[Received] = []
    problems: list[str] = []
    # A hang the deadlines do not cover still leaves a trace: every thread's stack on stderr.
    faulthandler.dump_traceback_later(timeout_s + 120, exit=False)
    try:
        stack.start_server()
        for i in range(workers):
            stack.start_worker(i)

        async def main() -> None:
            deadline = time.monotonic() + timeout_s
            clients: list[SpeechClient | WorldClient] = []
            for i in range(speech_sessions):
                rec = Received("speech", f"speech-{i}")
                recs.append(rec)
                order = [questions[(i + t) % len(questions)] for t in range(turns)]
                clients.append(SpeechClient(f"ws://127.0.0.1:{stack.port}/v1", order, rec, deadline))
            for i in range(world_sessions):
                rec = Received("world", f"world-{i}")
                recs.append(rec)
                clients.append(WorldClient(f"ws://127.0.0.1:{stack.port}/v1/world", world_chunks, seed + i, rec, deadline))
            stop = asyncio.Event()
            schedule = asyncio.create_task(_kill_schedule(stack, rng, kills, window_s, stop, kill_log))

            async def calm_after_schedule() -> None:
                try:
                    await schedule
                except Exception as exc:
                    problems.append(f"kill schedule stopped: {type(exc).__name__}: {str(exc)[:2000]}")
                finally:
                    for c in clients:
                        c.calm.set()

            with console.status(f"{len(clients)} sessions, {kills} kills scheduled within {window_s:.0f} s (seed {seed})"):
                calming = asyncio.create_task(calm_after_schedule())
                try:
                    # The scripts check the deadline themselves; this bounds a step that hangs.
                    await asyncio.wait_for(asyncio.gather(*(_drive(c) for c in clients)), timeout_s + 30)
                except asyncio.TimeoutError:
                    problems.append(f"the scripts did not end within {timeout_s + 30:.0f} s")
                stop.set()
                await calming

        asyncio.run(main())
    finally:
        faulthandler.cancel_dump_traceback_later()
        stack.stop()
    log = EventLog(db)
    checked, log_events, violations = check(log, recs)
    violations = problems + violations
    if violations:
        _print_process_logs(console, stack.out)
    report = ChaosReport(
        sessions=len(recs),
        finished=sum(r.done for r in recs),
        kills=tuple(kill_log),
        events_checked=checked,
        log_events=log_events,
        violations=tuple(violations),
        seconds=round(time.monotonic() - started, 1),
    )
    (out / "chaos-results.json").write_text(json.dumps({**attrs.asdict(report), "seed": seed, "database": db.describe(),
                                                        "clients": [{"name": r.name, "session": r.session_id, "resumes": r.resumes, "notes": r.notes} for r in recs]}, indent=2))
    _print(console, report, recs, seed, db.describe())
    db.dispose()
    return report


def _print(console: Console, report: ChaosReport, recs: list[Received], seed: int, where: str) -> None:
    table = Table(title=f"chaos (seed {seed}) on {where}")
    for col in ("client", "session", "events received", "resumes", "finished", "notes"):
        table.add_column(col)
    for r in recs:
        table.add_row(r.name, r.session_id or "-", str(len(r.events)), str(r.resumes), "yes" if r.done else "[red]no[/]", "; ".join(r.notes[:3]))
    console.print(table)
    servers = sum(1 for k in report.kills if k["killed"] == "server")
    console.print(
        f"sessions {report.sessions} (finished {report.finished}); kills {len(report.kills)} "
        f"(server {servers}, worker {len(report.kills) - servers}); client events checked against the log "
        f"{report.events_checked}; log events audited {report.log_events}; violations {len(report.violations)}; "
        f"{report.seconds} s",
        highlight=False,
    )
    for v in report.violations[:50]:
        console.print(f"[red]violation:[/] {v}", highlight=False)


def _print_process_logs(console: Console, logs: Path, lines: int = 15) -> None:
    """The warnings and errors each server and worker logged, last ``lines`` of each: what a
    violation is usually explained by."""
    for path in sorted(logs.glob("*.log")):
        bad = [ln for ln in path.read_text(errors="replace").splitlines() if " INFO " not in ln]
        if bad:
            console.print(f"--- {path.name} (not INFO, last {lines})", highlight=False)
            console.print("\n".join(bad[-lines:]), highlight=False, markup=False)
