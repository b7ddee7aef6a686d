"""Rendering replays and audits for people (rich tables) and for programs (JSON)."""

from __future__ import annotations

import datetime as dt
from typing import Any, Sequence

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from duplex_es.audit import SessionAudit
from duplex_es.domain.rules import clip
from duplex_es.domain import SessionState
from duplex_es.domain.world import WorldState
from duplex_es.events import to_plain
from duplex_es.recheck import SessionRecheck
from duplex_es.replay import Replay

__all__ = ["print_replay", "replay_json", "print_audit", "audit_line", "audit_json", "print_tamper_notes", "state_lines", "print_recheck", "recheck_json", "recheck_line"]

_VERDICT_STYLE = {"accepted": "green", "decided": "cyan"}


def _clock(us: int) -> str:
    return dt.datetime.fromtimestamp(us / 1e6, tz=dt.timezone.utc).strftime("%H:%M:%S.%f")[:-3]


def state_lines(state: SessionState | WorldState) -> list[str]:
    """A short human summary of a session state."""
    if isinstance(state, WorldState):
        return _world_lines(state)
    cfg = state.config
    lines = [
        f"session {state.session_id}: {state.status}, seq {state.seq}, epoch {state.epoch}",
    ]
    if cfg is not None:
        lines.append(
            f"config: model={cfg.model} voice={cfg.voice} modalities={','.join(cfg.output_modalities)} "
            f"input={cfg.input_format.type}@{cfg.input_format.rate} output={cfg.output_format.type}@{cfg.output_format.rate}"
        )
    lines.append(f"input buffer: {len(state.buffer.append_seqs)} appends, {state.buffer.samples} samples; audio clock {state.input_clock} samples")
    for item_id in state.item_order:
        it = state.items[item_id]
        if it.type == "function_call":
            lines.append(f"  call      {it.id} [{it.status}] {it.call_id}: {it.name}({clip(it.arguments, 120)})")
        elif it.type == "function_call_output":
            lines.append(f"  output    {it.id} [{it.status}] {it.call_id}: {clip(it.output or '', 120)!r}")
        else:
            lines.append(f"  {it.role:9} {it.id} [{it.status}] {it.audio_ms} ms: {it.transcript or it.input_text!r}")
    for r in state.responses.values():
        lines.append(
            f"  response {r.id} [{r.status}{'/' + r.status_reason if r.status_reason else ''}] "
            f"generated {r.generated_ms} ms, played {r.played_ms} ms, committed {r.committed_ms} ms, chunks {r.next_chunk}"
        )
    lines.append(f"unapplied model-feeding events: {list(state.unapplied)}")
    return lines


def _world_lines(state: WorldState) -> list[str]:
    cfg = state.config
    lines = [f"world session {state.session_id}: {state.status}, seq {state.seq}, epoch {state.epoch}, next chunk {state.chunk_index}"]
    if cfg is not None:
        lines.append(f"config: {cfg.width}x{cfg.height} @ {cfg.fps} fps, {cfg.frames_per_chunk} frames/chunk, seed {cfg.seed}, pacing {cfg.pacing}")
    lines.append(f"prompt: {state.prompt!r}; controls: " + (", ".join(f"{c.track}={c.data}" for c in state.controls) or "none"))
    lines.append(f"floor {state.floor}; pending {[p.event_id for p in state.pending]}; in flight {state.inflight.request_id if state.inflight else None}")
    if state.failure_code:
        lines.append(f"failed: {state.failure_code}: {state.failure_message}")
    lines.append(f"chunks committed: {state.chunks_committed}; engine state: {state.engine_state}")
    return lines


def print_replay(console: Console, result: Replay) -> None:
    """Print a replay's timeline and its final state."""
    table = Table(title=f"session {result.session_id}: events 1..{result.state.seq} of {result.head}")
    table.add_column("seq", justify="right")
    table.add_column("time (UTC)")
    table.add_column("type")
    table.add_column("verdict")
    table.add_column("key fields", overflow="fold")
    for row in result.timeline:
        style = _VERDICT_STYLE.get(row.verdict.split(":")[0], "yellow" if row.verdict.startswith("discarded") else "red")
        summary = f"[magenta](content withheld)[/] {escape(row.summary)}" if row.withheld else escape(row.summary)
        table.add_row(str(row.seq), _clock(row.recorded_at_us), row.type, f"[{style}]{row.verdict}[/]", summary)
    console.print(table)
    console.print("\n".join(state_lines(result.state)), highlight=False)


def replay_json(result: Replay) -> dict[str, Any]:
    """A replay as JSON-ready data."""
    return {
        "session_id": result.session_id,
        "seq": result.state.seq,
        "head": result.head,
        "timeline": [to_plain(r) for r in result.timeline],
        "state": to_plain(result.state),
    }


def print_audit(console: Console, audits: Sequence[SessionAudit]) -> None:
    """Print audit results and every violation."""
    table = Table(title="audit")
    for col in ("session", "events", "ticks", "committed", "applied", "discarded", "pending", "responses", "snapshots", "sealed", "result"):
        table.add_column(col, justify="right" if col not in ("session", "result") else "left")
    for a in audits:
        result = "[green]ok[/]" if a.ok else f"[red]{len(a.violations)} violation(s)[/]"
        table.add_row(
            a.session_id, str(a.events), str(a.ticks), str(a.committed_ticks), str(a.applied_events),
            str(a.discarded_events), str(a.pending_events), str(a.responses), str(a.snapshots), str(a.sealed_events), result,
        )
    console.print(table)
    for a in audits:
        if a.archive is not None:  # docs/privacy.md, "Archives": its events were read from the file
            console.print(f"{escape(a.session_id)}: archived, read from {escape(a.archive)}", highlight=False)
        if a.erased_at_us is not None:  # docs/privacy.md: the erasure is part of what the audit reports
            console.print(f"{escape(a.session_id)}: content erased at {_utc(a.erased_at_us)} ({a.sealed_events} sealed events unreadable)", highlight=False)
    for a in audits:
        for v in a.violations:
            # Escaped: "[chain]" would otherwise be read as a style tag and vanish.
            console.print(f"[red]{escape(a.session_id)} seq {v.seq} \\[{v.check}][/] {escape(v.message)}", highlight=False)
    if not audits:
        console.print("no sessions in the log")


def _utc(us: int) -> str:
    return dt.datetime.fromtimestamp(us / 1e6, dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")


def audit_line(a: SessionAudit) -> str:
    """One line: the verdict and the counts behind it."""
    verdict = "ok" if a.ok else f"FAILED ({len(a.violations)} violations)"
    what = "interactions" if a.kind == "world" else "model-feeding events"
    tail = "" if a.kind == "world" else f"; {a.responses} response(s)"
    if a.snapshots:
        tail += f"; {a.snapshots} snapshot(s) equal the replay"
    if a.sealed_events:
        tail += f"; {a.sealed_events} sealed"
    if a.erased_at_us is not None:
        tail += f"; content erased at {_utc(a.erased_at_us)}"
    if a.archive is not None:
        tail += f"; read from archive {a.archive}"
    return (
        f"audit: {verdict} — {a.events} events, hash chain and seqs intact; {a.ticks} ticks "
        f"({a.committed_ticks} committed); {a.applied_events} {what} applied exactly once, "
        f"{a.discarded_events} discarded, {a.pending_events} pending{tail}"
    )


def audit_json(audits: Sequence[SessionAudit]) -> dict[str, Any]:
    """Audit results as JSON-ready data."""
    return {"ok": all(a.ok for a in audits), "sessions": [to_plain(a) for a in audits]}


def print_tamper_notes(console: Console, audits: Sequence[SessionAudit], keys: Any, checkpoint: Any, findings: Sequence[Any]) -> None:
    """Say plainly what the audit could not detect (docs/security.md, "Tamper evidence"), and
    print each checkpoint failure with its session and seq."""
    unkeyed = [a for a in audits if a.unkeyed_events]
    if unkeyed:
        console.print(
            f"chain not keyed: edits with a recomputed chain are not detected ({sum(a.unkeyed_events for a in unkeyed)} "
            f"unkeyed events in {len(unkeyed)} session(s); serve and worker with --chain-key-file sign new ones)",
            highlight=False,
        )
    if keys is not None:
        signed = sorted({k for a in audits for k in a.key_ids})
        if signed:
            console.print(f"keyed chain: events signed with chain key(s) {', '.join(signed)}; the key ring holds {', '.join(sorted(keys.keys))}", highlight=False)
    if checkpoint is None:
        if audits:
            console.print("no checkpoint given (--checkpoint): a cut tail or a deleted session is not detected", highlight=False)
        return
    for f in findings:
        where = f"{f.session_id} seq {f.seq}" if f.session_id else "log"
        console.print(f"[red]{escape(where)} \\[checkpoint][/] {escape(f.message)}", highlight=False)
    if not findings:
        console.print(f"checkpoints in {checkpoint}: the log holds everything they pinned", highlight=False)


# ------------------------------------------------------------------------------------- recheck


def recheck_line(r: SessionRecheck) -> str:
    """One line per session: OK or the number of divergences, and what was covered."""
    judged = ", ".join(f"{n} {v}" for v, n in sorted(r.answer_verdicts.items()))
    covered = f"{r.rechecked} batches re-decided, {r.answers} worker answers judged{f' ({judged})' if judged else ''}, {len(r.skipped)} not rechecked"
    if r.ok:
        return f"{r.session_id} ({r.kind}, {r.events} events): OK — {covered}"
    return f"{r.session_id} ({r.kind}, {r.events} events): {len(r.divergences)} divergence(s) — {covered}"


def print_recheck(console: Console, results: Sequence[SessionRecheck]) -> None:
    """Each session's verdict; for a session decided otherwise, its first divergence in context
    (the logged events around it, the batch marked ``>``, and what the current code decides)."""
    for r in results:
        style = "green" if r.ok else "red"
        console.print(f"[{style}]{escape(recheck_line(r))}[/]", highlight=False)
        for s in r.skipped:
            console.print(f"  not rechecked: seq {s.seq} {s.type}: {escape(s.reason)}", highlight=False)
        if r.ok:
            continue
        d = r.divergences[0]
        console.print(f"  first divergence at seq {d.seq}: {escape(d.command)}", highlight=False)
        for line in d.differences:
            console.print(f"    [red]{escape(line)}[/]", highlight=False)
        table = Table(title=f"{r.session_id}: the log around seq {d.seq} (> the batch re-decided)", title_justify="left")
        for col in ("", "seq", "type", "verdict", "summary"):
            table.add_column(col)
        for row in d.context:
            mark = ">" if row.seq in d.seqs else ""
            table.add_row(mark, str(row.seq), row.type, row.verdict, escape(row.summary))
        for row in d.decided:
            table.add_row("now", "", row.type, row.verdict, escape(row.summary), style="magenta")
        console.print(table)
        if len(r.divergences) > 1:
            later = ", ".join(f"seq {x.seq} ({x.command})" for x in r.divergences[1:6])
            console.print(f"  later divergences: {escape(later)}{' ...' if len(r.divergences) > 6 else ''}", highlight=False)


def recheck_json(results: Sequence[SessionRecheck]) -> dict[str, Any]:
    """The recheck of each session as JSON: ``ok`` overall, and per session its counts, every
    divergence (with its context) and every batch not rechecked."""
    return {
        "ok": all(r.ok for r in results),
        "sessions": [
            {
                "session_id": r.session_id,
                "kind": r.kind,
                "ok": r.ok,
                "events": r.events,
                "rechecked": r.rechecked,
                "answers": r.answers,
                "answer_verdicts": r.answer_verdicts,
                "divergences": [to_plain(d) for d in r.divergences],
                "not_rechecked": [to_plain(s) for s in r.skipped],
            }
            for r in results
        ],
    }
