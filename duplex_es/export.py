"""Export: a session's log (or the whole log) as JSON Lines, every event in its current shape;
and import: such a file appended to another log.

Each line is one event with its log coordinates: ``position``, ``session_id``, ``seq``,
``recorded_at_us``, ``hash`` (of the stored row), ``type``, ``version`` (the current schema
version: older rows are upcast on the way out, as on every read path) and ``event`` (its fields).
An event whose sealed content the exporting reader could not open (no master key, or the
session was erased: docs/privacy.md) carries ``"withheld": true`` — its content fields are
empty — and an import refuses it rather than record a conversation that never took place.
"""

from __future__ import annotations

import json
from typing import Any, Iterable, Iterator, Optional, TextIO

from duplex_es.errors import DuplexError
from duplex_es.events import Event, decode_data, to_plain
from duplex_es.store import EventLog, Recorded

__all__ = ["export_lines", "write_jsonl", "import_jsonl", "ImportFileError"]

#: Events read from the global log per query when exporting everything.
PAGE = 1000


def _records(log: EventLog, session_id: Optional[str]) -> Iterator[Recorded]:
    if session_id is not None:
        yield from log.read_session(session_id)
        return
    after = 0
    while True:
        page = log.tail(after, limit=PAGE)
        if not page:
            return
        yield from page
        after = page[-1].position


def export_lines(log: EventLog, session_id: Optional[str] = None) -> Iterator[dict[str, Any]]:
    """The events of ``session_id`` (default: every session, in position order) as dicts.

    Raises:
        duplex_es.store.StoredEventError: a row cannot be decoded (its position and type named).
    """
    for r in _records(log, session_id):
        yield {
            "position": r.position,
            "session_id": r.session_id,
            "seq": r.seq,
            "recorded_at_us": r.recorded_at_us,
            "hash": r.hash,
            "type": r.event.TYPE,
            "version": r.event.VERSION,
            "event": to_plain(r.event),
            **({"withheld": True} if r.withheld else {}),
        }


def write_jsonl(log: EventLog, out: TextIO, session_id: Optional[str] = None) -> int:
    """Write :func:`export_lines` to ``out``, one JSON object per line; returns the count."""
    n = 0
    for line in export_lines(log, session_id):
        out.write(json.dumps(line, sort_keys=True, ensure_ascii=False) + "\n")
        n += 1
    return n


class ImportFileError(DuplexError, ValueError):
    """A JSON-lines file that cannot be imported: ``line`` (1-based) and what is wrong."""

    def __init__(self, line: int, message: str) -> None:
        self.line = line
        super().__init__(f"line {line}: {message}")


#: The keys every exported line has that an import reads.
_EXPORTED_KEYS = ("session_id", "seq", "recorded_at_us", "type", "version", "event")


def import_jsonl(log: EventLog, lines: Iterable[str]) -> dict[str, int]:
    """Append the events of an export (:func:`write_jsonl`'s lines) to ``log``, each session's
    from its seq 1: the sessions must not exist in ``log``. Events that shared one append (the
    same ``recorded_at_us`` in a row) are appended together again, so the batches a command
    wrote stay recognisable (``replay --recheck`` needs them); the new rows get this log's
    times and hash chain. Ticks are queued as on any append: a worker on ``log`` would claim the
    ones the export left unanswered. Batches are appended one by one: a file refused halfway
    leaves the batches before the bad line in ``log``.

    Returns:
        session id → events appended, in the file's order.

    Raises:
        ImportFileError: a line is not an exported event, was exported without its content
            (``withheld``), or a session's seqs are not 1, 2, ...
        duplex_es.store.WrongExpectedSeq: a session already has events in ``log``.
    """
    counts: dict[str, int] = {}
    run: list[Event] = []
    run_key: Optional[tuple[str, int]] = None

    def flush() -> None:
        if run_key is not None and run:
            log.append(run_key[0], list(run), expected_seq=counts[run_key[0]] - len(run))
        run.clear()

    for n, text in enumerate(lines, 1):
        if not text.strip():
            continue
        try:
            row = json.loads(text)
        except ValueError as exc:
            raise ImportFileError(n, f"not JSON: {exc}") from exc
        if not isinstance(row, dict):
            raise ImportFileError(n, f"not an exported event: a JSON {type(row).__name__}, not an object")
        missing = [k for k in _EXPORTED_KEYS if k not in row]
        if missing:
            raise ImportFileError(n, f"not an exported event: no {', '.join(repr(k) for k in missing)}")
        if row.get("withheld"):
            raise ImportFileError(
                n, f"event {str(row['session_id'])[:64]}#{row['seq']} was exported without its content (sealed, and the export "
                "had no master key, or the session was erased): export again with --master-key-file",
            )
        try:
            sid, seq, at = row["session_id"], row["seq"], row["recorded_at_us"]
            ev = decode_data(row["type"], row["version"], row["event"])
        except (ValueError, KeyError, TypeError, DuplexError) as exc:
            raise ImportFileError(n, f"not an exported event: {exc}") from exc
        if seq != counts.get(sid, 0) + 1:
            raise ImportFileError(n, f"session {sid} goes from seq {counts.get(sid, 0)} to {seq}")
        if (sid, at) != run_key:
            flush()
            run_key = (sid, at)
        run.append(ev)
        counts[sid] = seq
    flush()
    return counts
