"""A test kit for engine plugin authors: run an engine (``duplex-es worker --engine-plugin``)
behind the real worker loop, against a real session on a real log, and check what it did.

::

    from duplex_es_tools.testkit import assert_engine_ok

    def test_my_model_behaves():
        assert_engine_ok(MyWorldModel())          # or MySpeechModel(), with audio=...

One session of the engine's kind runs in process on a new SQLite file: for ``speech``, audio is
appended and committed and one response is asked for; for ``world``, a session of ``chunks``
blocks is started. The worker claims every tick and hands it to the engine, as
``duplex-es worker`` would. Then the kit checks that every output echoed the identity of the tick
it answers exactly (request, response, epoch, chunk and applied events: docs/architecture.md, I5),
that the response completed or the world session delivered all its blocks, and that the session
passes ``duplex-es audit``.
"""

from __future__ import annotations

import asyncio
import base64
import json
import tempfile
import time
from pathlib import Path
from typing import Any, Optional

import attrs
import numpy as np

from duplex_es.api import Database, DuplexSessions, command_from_realtime, new_id
from duplex_es.audit import SessionAudit, audit_session
from duplex_es.protocol.world import parse_world_frame
from duplex_es.store import EventLog, upgrade
from duplex_es.worker.runner import Worker

__all__ = ["EngineCheck", "check_engine", "assert_engine_ok", "tone"]

#: The kinds the kit can drive a session of.
KINDS = ("speech", "world")


def tone(ms: int = 1000, *, hz: float = 440.0, rate: int = 24000) -> bytes:
    """``ms`` milliseconds of a sine at a third of full scale: mono PCM16 at ``rate`` Hz."""
    t = np.arange(rate * ms // 1000) / rate
    return (np.sin(2 * np.pi * hz * t) * 32767 / 3).astype("<i2").tobytes()


@attrs.frozen
class EngineCheck:
    """What :func:`check_engine` found.

    Attributes:
        kind: the session kind run (``speech`` or ``world``).
        session_id: the session, in the SQLite file ``db_url`` (kept when ``directory`` was given).
        steps: engine steps run.
        mismatches: one line per output whose echo differs from its tick's identity.
        problems: everything wrong, mismatches and audit violations included; empty when ok.
        wire: the server events a client of the session received (dicts, in order).
        audit: ``duplex-es audit`` of the session.
    """

    kind: str
    session_id: str
    db_url: str
    steps: int
    mismatches: tuple[str, ...]
    problems: tuple[str, ...]
    wire: tuple[dict[str, Any], ...]
    audit: SessionAudit

    @property
    def ok(self) -> bool:
        """True when nothing is wrong."""
        return not self.problems


class _Recording:
    """The engine under test, noting for each step the identity expected and the one echoed."""

    def __init__(self, engine: Any) -> None:
        self.engine = engine
        self.name = engine.name
        self.kinds = tuple(engine.kinds)
        self.steps: list[tuple[Any, Any]] = []

    def step(self, ctx: Any) -> Any:
        out = self.engine.step(ctx)
        self.steps.append((ctx.identity, out.echo))
        return out


def _speech_commands(audio: bytes) -> list[dict[str, Any]]:
    step = 24000 * 2 // 10  # 100 ms appends, as clients send them
    return [
        {"type": "session.update", "session": {"type": "realtime", "output_modalities": ["audio"], "audio": {
            "input": {"format": {"type": "audio/pcm", "rate": 24000}, "turn_detection": None},
            "output": {"format": {"type": "audio/pcm", "rate": 24000}},
        }}},
        *({"type": "input_audio_buffer.append", "audio": base64.b64encode(audio[i:i + step]).decode("ascii")} for i in range(0, len(audio), step)),
        {"type": "input_audio_buffer.commit"},
        {"type": "response.create"},
    ]


async def _run(engine: _Recording, db: Database, kind: str, audio: bytes, chunks: int, timeout_s: float) -> tuple[str, list[dict[str, Any]], list[str]]:
    log = EventLog(db)
    worker = Worker(log, [engine])
    sessions = DuplexSessions(db, reaper_interval_ms=3_600_000)
    await sessions.start()
    wire: list[dict[str, Any]] = []
    problems: list[str] = []
    try:
        if kind == "speech":
            host = await sessions.open_session()
        else:
            start = {"type": "session.start", "prompt": "green hills by the sea", "seed": 7, "width": 64, "height": 48,
                     "fps": 12, "frames_per_chunk": 3, "max_chunks": chunks, "pacing": "fast"}
            command = parse_world_frame(json.dumps(start), new_id, int(time.time() * 1000), started=False, session_id=new_id("world"))
            host = await sessions.open_world(command)  # type: ignore[arg-type]

        async def listen() -> None:
            async for event in host.events():
                wire.append(event)

        listener = asyncio.create_task(listen())
        if kind == "speech":
            for frame in _speech_commands(audio):
                await host.submit(command_from_realtime(frame, new_id))

        def finished() -> bool:
            types = [e["type"] for e in wire]
            if kind == "speech":
                return "response.done" in types
            return types.count("world.chunk") >= chunks or "session.failed" in types or "session.ended" in types

        deadline = time.monotonic() + timeout_s
        while not finished():
            if time.monotonic() > deadline:
                problems.append(f"timed out after {timeout_s:g} s: the {'response' if kind == 'speech' else 'session'} did not finish")
                break
            if not await asyncio.to_thread(worker.run_once):
                await asyncio.sleep(0.01)  # let the session take up the output and issue the next tick
        if kind == "speech":
            close = command_from_realtime({"type": "session.close"}, new_id)
        else:
            close = parse_world_frame('{"type": "session.close"}', new_id, int(time.time() * 1000), started=True, session_id=host.session_id)
        await host.submit(close)  # type: ignore[arg-type]
        await asyncio.wait_for(listener, 10)
        return host.session_id, wire, problems
    finally:
        worker.wakeup.close()
        await sessions.stop()


def check_engine(
    engine: Any,
    *,
    kind: Optional[str] = None,
    audio: Optional[bytes] = None,
    chunks: int = 6,
    directory: Optional[Path] = None,
    timeout_s: float = 60.0,
) -> EngineCheck:
    """Run ``engine`` behind a worker for one session and report what it did.

    Args:
        engine: an object of the engine protocol (:class:`duplex_es.worker.engine.Engine`:
            ``name``, ``kinds``, ``step``), as ``--engine-plugin`` would load it.
        kind: the session kind to run; default the first of ``engine.kinds`` the kit drives.
        audio: speech: the user's turn, mono PCM16 at 24 kHz (default one second of :func:`tone`).
        chunks: world: the blocks the session asks for (``max_chunks``).
        directory: where the SQLite file goes and stays (default a temporary folder, removed).
        timeout_s: wall-clock limit for the session to finish, in seconds.

    Returns:
        The :class:`EngineCheck`; ``ok`` when every output echoed its tick, the response completed
        (speech) or every block arrived (world), and the audit holds.

    Raises:
        ValueError: the engine runs none of the kinds the kit drives (``speech``, ``world``), or
            ``kind`` is not one of them.
    """
    kinds = [k for k in engine.kinds if k in KINDS]
    kind = kind or (kinds[0] if kinds else None)
    if kind not in KINDS or kind not in engine.kinds:
        raise ValueError(f"the kit drives {' or '.join(KINDS)} sessions; this engine runs {tuple(engine.kinds)}" + (f", not {kind!r}" if kind else ""))
    recording = _Recording(engine)
    with tempfile.TemporaryDirectory(prefix="duplex-es-testkit-") as tmp:
        path = Path(directory or tmp) / f"testkit-{new_id(kind)}.db"
        db = Database(f"sqlite:///{path}")
        try:
            upgrade(db)
            session_id, wire, problems = asyncio.run(_run(recording, db, kind, audio if audio is not None else tone(), chunks, timeout_s))
            audit = audit_session(EventLog(db), session_id)
        finally:
            db.dispose()
    mismatches = tuple(
        f"step {i}: echoed {echoed!r}, the tick is {expected!r}" for i, (expected, echoed) in enumerate(recording.steps) if echoed != expected
    )
    problems += mismatches
    types = [e["type"] for e in wire]
    if kind == "speech":
        statuses = [e["response"]["status"] for e in wire if e["type"] == "response.done"]
        if statuses and statuses != ["completed"]:
            details = [e["response"].get("status_details") for e in wire if e["type"] == "response.done"]
            problems.append(f"the response ended {statuses[0]}: {details[0]}")
    elif types.count("world.chunk") < chunks:
        problems.append(f"{types.count('world.chunk')} of {chunks} world blocks arrived")
    problems += [f"audit: seq {v.seq} [{v.check}] {v.message}" for v in audit.violations]
    return EngineCheck(
        kind=kind,
        session_id=session_id,
        db_url=f"sqlite:///{path}",
        steps=len(recording.steps),
        mismatches=mismatches,
        problems=tuple(problems),
        wire=tuple(wire),
        audit=audit,
    )


def assert_engine_ok(engine: Any, **options: Any) -> EngineCheck:
    """:func:`check_engine`, for a test: returns the check when it is ok.

    Raises:
        AssertionError: with every problem found, one per line.
    """
    check = check_engine(engine, **options)
    if not check.ok:
        raise AssertionError(f"engine {engine.name} in a {check.kind} session {check.session_id}:\n" + "\n".join(check.problems))
    return check
