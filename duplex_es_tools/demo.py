"""``duplex-es demo``: the main job end to end on a new SQLite file.

Starts ``serve`` and ``worker`` as two OS processes, speaks the fixture question through the
official ``openai`` SDK, writes the spoken reply to a WAV file, and shows what ``replay`` and
``audit`` say about the session; then steers a world session for a few seconds, writes it as an
animated GIF, re-renders it from the log and audits it.
"""

from __future__ import annotations

import asyncio
import os
import sys
import datetime as dt
from pathlib import Path
from typing import Optional

from rich.console import Console

from duplex_es.audit import audit_session
from duplex_es.cli.render import audit_line, state_lines
from duplex_es.replay import replay, rerender
from duplex_es.store import Database, EventLog, upgrade
from duplex_es_tools.conversation import default_audio, read_wav_pcm16, speak_and_listen, write_wav_pcm16
from duplex_es_tools.processes import free_port, start_server, start_worker, wait_healthy
from duplex_es_tools.world_demo import steer

__all__ = ["run_demo"]


def run_demo(
    console: Console,
    *,
    db_url: Optional[str],
    audio: Optional[str],
    out_dir: str,
    port: int = 0,
    chunk_ms: int = 500,
) -> int:
    """Run the demo; returns the process exit code (0 when the audit passes)."""
    out = Path(out_dir).resolve()
    out.mkdir(parents=True, exist_ok=True)
    stamp = dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    url = db_url or f"sqlite:///{out / f'demo-{stamp}.db'}"
    wav_in = Path(audio) if audio else default_audio()
    pcm = read_wav_pcm16(wav_in)

    db = Database(url)
    upgrade(db)
    port = port or free_port()
    console.rule("[bold]duplex_es demo")
    console.print(f"database: {db.describe()}")
    console.print(f"input:    {wav_in} ({len(pcm) // 48} ms)")
    server = start_server(url, port, out / f"serve-{stamp}.log", ["--log-level", "WARNING"])
    worker = start_worker(url, out / f"worker-{stamp}.log", ["--chunk-ms", str(chunk_ms)])
    try:
        wait_healthy(port, server)
        console.print(f"serve (pid {server.pid}) on ws://127.0.0.1:{port}/v1/realtime and /v1/world, worker (pid {worker.pid})")
        with console.status("speaking the question and waiting for the reply..."):
            turn = asyncio.run(speak_and_listen(f"ws://127.0.0.1:{port}/v1", pcm))
        with console.status("steering a world session..."):
            world = steer(port, out / f"world-{stamp}.gif")
    finally:
        worker.stop()
        server.stop()

    reply_wav = out / f"reply-{stamp}.wav"
    write_wav_pcm16(reply_wav, turn.reply_audio)
    console.rule("[bold]conversation")
    console.print(f"session:          {turn.session_id}")
    console.print(f"user (heard):     [bold]{turn.user_transcript}[/]", highlight=False)
    console.print(f"assistant:        [bold]{turn.reply_transcript}[/]", highlight=False)
    console.print(f"assistant audio:  {reply_wav} ({len(turn.reply_audio) // 48} ms, {len(turn.reply_audio)} bytes PCM16 24 kHz)")
    console.print(f"server events:    {len(turn.events)} received, response {turn.response_status}")

    log = EventLog(db)
    result = replay(log, turn.session_id)
    console.rule(f"[bold]duplex-es replay {turn.session_id}")
    counts: dict[str, int] = {}
    for row in result.timeline:
        counts[row.type] = counts.get(row.type, 0) + 1
    console.print(", ".join(f"{n} {t}" for t, n in counts.items()), highlight=False)
    console.print("\n".join(state_lines(result.state)), highlight=False)
    console.rule(f"[bold]duplex-es audit {turn.session_id}")
    report = audit_session(log, turn.session_id)
    console.print(audit_line(report), highlight=False)
    for v in report.violations:
        console.print(f"  [red]seq {v.seq} [{v.check}][/] {v.message}", highlight=False)
    console.rule("[bold]world session")
    rendered = rerender(log, world.session_id)
    world_audit = audit_session(log, world.session_id)
    console.print(f"session:          {world.session_id}")
    console.print(f"steered video:    {world.gif} ({len(world.frames)} frames in {len(world.chunks)} chunks)")
    applied = [c["applied_event_ids"] for c in world.chunks if c["applied_event_ids"]]
    console.print(f"interactions applied per chunk: {applied}", highlight=False)
    console.print(
        f"replay --render:  {rendered.frames} frames re-rendered from the log, "
        + ("all identical to what was sent" if rendered.ok else f"{len(rendered.mismatches)} differ"),
        highlight=False,
    )
    console.print(audit_line(world_audit), highlight=False)
    exe = os.path.relpath(sys.argv[0]) if os.path.basename(sys.argv[0]) == "duplex-es" else "duplex-es"
    console.print(f"\nTry: {exe} replay {turn.session_id} --db {url}\n     {exe} audit --db {url}", highlight=False)
    return 0 if report.ok and world_audit.ok and rendered.ok and turn.response_status == "completed" else 1
