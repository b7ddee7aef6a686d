"""What the inspector serves, read-only over the log: the session list, one session's timeline,
waveform peaks, audio as WAV, events with verdicts, the state at any seq, the audit verdict and
world frames. Transport-free: :mod:`duplex_es.inspect.web` puts it on HTTP, and
:mod:`duplex_es.inspect.export` into one HTML file.

Timelines are cached per session and continued when the session grows (keyed by its head seq);
audits are cached by ``(session, head seq)`` for :data:`AUDIT_TTL_S`. Both caches are bounded
(:data:`CACHED_SESSIONS`). Neither sees rows edited in place (the head stays): a timeline shows
what was read, and an audit is redone after its TTL.
"""

from __future__ import annotations

import base64
import functools
import threading
import time
from collections import OrderedDict
from typing import Any, Callable, Optional

import numpy as np

from duplex_es.audit import audit_opened_archive, audit_session
from duplex_es.domain import evolve
from duplex_es.errors import DuplexError
from duplex_es.events import (
    CommandRejected,
    InteractionRejected,
    ResponseCreated,
    ResponseDone,
    SessionClosed,
    SessionDetached,
    SessionExpired,
    SessionOpened,
    SessionResumed,
    TickFailed,
    TranscriptionFailed,
    UnitFailed,
    WorldChunk,
    WorldClosed,
    WorldFailed,
    WorldStarted,
    WorldTickFailed,
    to_plain,
)
from duplex_es.inspect.lanes import BASE_MS, MAX_BUCKETS, Lane, peaks_of, wav_bytes
from duplex_es.inspect.shelf import Shelf, archive_error_status
from duplex_es.inspect.timeline import Timeline
from duplex_es.replay import summarize, verdict_of
from duplex_es.store import EventLog
from duplex_es.store.archives import ArchivedSession, ArchiveError
from duplex_es.store.gcpause import collector_paused

__all__ = ["AUDIT_TTL_S", "CACHED_SESSIONS", "MAX_EVENTS_PAGE", "MAX_WAV_MS", "InspectError", "Inspector"]

#: Timelines (and audits) kept in memory; the least recently used goes first.
CACHED_SESSIONS = 8
#: How long an audit verdict is reused for the same head (s): rows edited in place (tampering)
#: leave the head as it was.
AUDIT_TTL_S = 60.0
#: The most events one page of rows holds.
MAX_EVENTS_PAGE = 1000
#: The longest audio one WAV request returns (ms): 10 minutes (28.8 MB at 24 kHz PCM16).
MAX_WAV_MS = 600_000
#: seqs per read of chosen events (bounded ``IN`` lists).
_READ_BATCH = 500
#: Events read per query while building a timeline.
_PAGE = 5000

#: Event types counted for the session list, and what each counts toward.
_REFUSALS = (CommandRejected.TYPE, InteractionRejected.TYPE)
_FAILURES = (TickFailed.TYPE, UnitFailed.TYPE, TranscriptionFailed.TYPE, WorldTickFailed.TYPE, WorldFailed.TYPE)
_ENDS = {SessionClosed.TYPE: "closed", WorldClosed.TYPE: "closed", SessionExpired.TYPE: "expired", WorldFailed.TYPE: "failed"}
_COUNTED = (ResponseCreated.TYPE, ResponseDone.TYPE, WorldChunk.TYPE, SessionDetached.TYPE, SessionResumed.TYPE, *_REFUSALS, *_FAILURES, *_ENDS)


#: The furthest point of a session's clock a range may reach (ms): a week, beyond any session.
MAX_CLOCK_MS = 7 * 24 * 3600 * 1000


class InspectError(DuplexError):
    """A request the inspector refuses: ``code`` (``session_not_found``, ``invalid_parameter``,
    ``lane_not_found``, ``seq_out_of_range``, ``frame_not_found``, ``session_log_broken``: its
    seqs have a gap; ``archive_missing``, ``archive_unreadable``: an archived session whose file
    cannot be read), the HTTP ``status`` it maps to, and ``param``, the parameter at fault."""

    def __init__(self, code: str, message: str, *, status: int = 400, param: Optional[str] = None) -> None:
        super().__init__(message)
        self.code, self.message, self.status, self.param = code, message, status, param

    def json(self) -> dict[str, Any]:
        """``{"error": {"code", "message", "param"}}``, the API's error shape."""
        return {"error": {"code": self.code, "message": self.message, "param": self.param}}


def _locked(method: Callable[..., Any]) -> Callable[..., Any]:
    """Run an :class:`Inspector` method ``(self, session_id, ...)`` under the session's lock
    (:meth:`Inspector.session_lock`)."""

    @functools.wraps(method)
    def wrapper(self: "Inspector", session_id: str, *args: Any, **kwargs: Any) -> Any:
        with self.session_lock(session_id):
            return method(self, session_id, *args, **kwargs)

    return wrapper


def _not_found(session_id: str) -> InspectError:
    return InspectError("session_not_found", f"no session {session_id}", status=404, param="session_id")


class Inspector:
    """The inspector over one :class:`EventLog`.

    A session ``duplex-es archive`` moved out of the log is read from its file, found where
    it was written or by name in ``archive_dirs`` (:mod:`duplex_es.inspect.shelf`); the list
    shows it with status ``archived``, its counts once it was opened.

    Args:
        log: the log to read (never written). Who may read which session is the caller's
            business (:mod:`duplex_es.inspect.web` checks it before asking).
        archive_dirs: where archive files moved from where they were written may be found.
    """

    def __init__(self, log: EventLog, *, archive_dirs: tuple[str, ...] = ()) -> None:
        self.log = log
        self._lock = threading.Lock()
        self._timelines: OrderedDict[str, Timeline] = OrderedDict()
        self._audits: OrderedDict[tuple[str, int], dict[str, Any]] = OrderedDict()
        # Session id -> held while its timeline is built or read (it grows in place).
        self._building: dict[str, threading.RLock] = {}
        self._shelf = Shelf(log, archive_dirs, self.session_lock)
        # Archived session id -> its list row, counted the first time its file was opened (an
        # archive does not change; its erasure is counted from the log).
        self._archived_rows: dict[str, dict[str, Any]] = {}

    # ---------------------------------------------------------------------------- sessions

    def sessions(
        self,
        *,
        kind: Optional[str] = None,
        status: Optional[str] = None,
        text: Optional[str] = None,
        has_errors: Optional[bool] = None,
        may_read: Optional[Callable[[Optional[str]], bool]] = None,
    ) -> list[dict[str, Any]]:
        """The session list, oldest first: ``{"id", "kind", "status", "started_at_us",
        "duration_ms" (wall, first to last event), "events", "responses", "chunks",
        "errors" (refusals + failures), "owner", "audit"}``; ``audit`` is the cached verdict
        (``ok``/``violations``) or ``None`` until :meth:`audit` computed it for this head.
        Filters: ``kind`` (speech/world), ``status`` (open/detached/closed/expired/failed/
        archived), ``text`` (in the id), ``has_errors``; ``may_read(owner)`` hides other
        principals'. An archived session is listed after the log's, with ``"status":
        "archived"`` and ``archived`` (``{"location", "file_bytes", "archived_at_us",
        "ended_at_us"}``); until its file was first opened its ``kind``, ``started_at_us``,
        ``duration_ms``, ``responses``, ``chunks`` and ``errors`` are ``None`` (kind and error
        filters leave it out)."""
        rows = self._rows(self.log, may_read)
        for rec in self._shelf.records():
            if may_read is not None and not may_read(rec.principal):
                continue
            row = self._archived_rows.get(rec.session_id)
            if row is None:
                row = {
                    "id": rec.session_id, "kind": None, "started_at_us": None, "duration_ms": None, "events": rec.events,
                    "responses": None, "chunks": None, "errors": None, "owner": rec.principal,
                }
            row = {**row, "status": "archived", "archived": _archived(rec), "audit": self._cached_audit(rec.session_id, row["events"])}
            rows.append(row)
        out = []
        for row in rows:
            if kind and row["kind"] != kind or status and row["status"] != status:
                continue
            if text and text.lower() not in row["id"].lower():
                continue
            if has_errors is not None and (row["errors"] is None or bool(row["errors"]) != has_errors):
                continue
            out.append(row)
        return out

    def _rows(self, log: EventLog, may_read: Optional[Callable[[Optional[str]], bool]] = None) -> list[dict[str, Any]]:
        """The list rows of ``log``'s sessions (see :meth:`sessions`), unfiltered but for
        ``may_read``."""
        stats = log.session_stats(_COUNTED)
        firsts = log.first_events([s.session_id for s in stats])
        rows = []
        for s in stats:
            first = firsts.get(s.session_id)
            ev = first.event if first is not None else None
            owner = getattr(ev, "principal", None)
            if may_read is not None and not may_read(owner):
                continue
            n = dict(zip(_COUNTED, s.counts))
            rows.append({
                "id": s.session_id,
                "kind": "world" if isinstance(ev, WorldStarted) else "speech" if isinstance(ev, SessionOpened) else "unknown",
                "status": self._status(n),
                "started_at_us": s.first_us,
                "duration_ms": (s.last_us - s.first_us) // 1000,
                "events": s.events,
                # A full-duplex model's turns have no response.created (a unit opens them):
                # each ends with a response.done.
                "responses": max(n[ResponseCreated.TYPE], n[ResponseDone.TYPE]),
                "chunks": n[WorldChunk.TYPE],
                "errors": sum(n[t] for t in (*_REFUSALS, *_FAILURES)),
                "owner": owner,
                "audit": self._cached_audit(s.session_id, s.events),
            })
        return rows

    def _cached_audit(self, session_id: str, head: int) -> Optional[dict[str, Any]]:
        cached = self._audits.get((session_id, head))
        return _public(cached) if cached is not None and time.monotonic() - cached["_at"] < AUDIT_TTL_S else None

    @staticmethod
    def _status(n: dict[str, int]) -> str:
        for typ, name in _ENDS.items():
            if n[typ]:
                return name
        return "detached" if n[SessionDetached.TYPE] > n[SessionResumed.TYPE] else "open"

    def owner(self, session_id: str) -> tuple[bool, Optional[str]]:
        """``(exists, owner)``: whether the session has a first event (or was archived), and
        the principal it names."""
        # The same two indexed reads whether the session exists or not, as GET
        # /v1/sessions/{id} does: "not yours" costs what "not there" costs (docs/security.md,
        # "Ownership").
        first = self.log.read_seqs(session_id, [1])
        record = self._shelf.record(session_id)
        if first:
            return True, getattr(first[0].event, "principal", None)
        return (True, record.principal) if record is not None else (False, None)

    def _opened(self, session_id: str) -> Any:
        """The session's archive opened (:class:`duplex_es.archive.OpenedArchive`), ``None``
        when its events are in the log. Call with the session's lock held.

        Raises:
            InspectError: ``archive_missing`` / ``archive_unreadable``: its file cannot be read.
        """
        try:
            return self._shelf.opened(session_id)
        except ArchiveError as exc:
            raise InspectError(
                exc.code, f"session {session_id} is archived and its file cannot be read: {exc}", status=archive_error_status(exc), param="session_id"
            ) from exc

    def _head(self, session_id: str) -> tuple[Any, EventLog, int]:
        """``(opened archive or None, the log holding the session, its head seq)`` (the
        session's lock held).

        Raises:
            InspectError: ``session_not_found``; an archived one whose file cannot be read.
        """
        opened = self._opened(session_id)
        log = opened.log if opened is not None else self.log
        head = log.head(session_id)
        if head == 0:
            raise _not_found(session_id)
        return opened, log, head

    def _log(self, session_id: str) -> EventLog:
        """The log holding the session's events: its archive's when it was archived (the
        session's lock held)."""
        opened = self._opened(session_id)
        return opened.log if opened is not None else self.log

    # ---------------------------------------------------------------------------- timeline

    def timeline(self, session_id: str) -> Timeline:
        """The session's :class:`Timeline`, up to date with its head (cached; continued from
        where it was when the session grew).

        Raises:
            InspectError: ``session_not_found``.
        """
        with self.session_lock(session_id):
            opened, log, head = self._head(session_id)
            with self._lock:
                tl = self._timelines.get(session_id)
            if tl is None or tl.head > head:
                tl = Timeline(session_id)
            # The pass keeps what it builds (states, peaks, rows): the cyclic collector would
            # only walk it again and again, a tenth of a long session's first read.
            with collector_paused(head - tl.head >= _PAGE):
                while tl.head < head:
                    try:
                        tl.feed(log.read_session(session_id, after_seq=tl.head, up_to_seq=min(head, tl.head + _PAGE)))
                    except ValueError as exc:  # a gap in the seqs: rows deleted (the audit's chain check names them)
                        raise InspectError("session_log_broken", str(exc), status=500, param="session_id") from exc
            if opened is not None and session_id not in self._archived_rows:
                self._archived_rows.update((row["id"], row) for row in self._rows(opened.log) if row["id"] == session_id)
            with self._lock:
                self._timelines[session_id] = tl
                self._timelines.move_to_end(session_id)
                while len(self._timelines) > CACHED_SESSIONS:
                    gone, _ = self._timelines.popitem(last=False)
                    # Its lock goes too, unless a reader holds it (a new lock beside a held
                    # one would let two readers, or a reader and the shelf, in at once).
                    lock = self._building.get(gone)
                    if lock is not None and lock.acquire(blocking=False):
                        del self._building[gone]
                        lock.release()
            return tl

    def close(self) -> None:
        """Close the archives opened for reading (their private copies are deleted)."""
        self._shelf.close()

    def session_lock(self, session_id: str) -> threading.RLock:
        """The lock held while the session's timeline is built or read: one build per session at
        a time, other sessions not held up, and no read of a timeline while it grows."""
        with self._lock:
            return self._building.setdefault(session_id, threading.RLock())

    def overview(self, session_id: str) -> dict[str, Any]:
        """:meth:`Timeline.overview` of the session (docs/inspector.md); an archived session's
        adds ``archived`` (``{"location", "file_bytes", "archived_at_us", "ended_at_us",
        "mismatches"}``: how the file differs from the one archived, if it does)."""
        with self.session_lock(session_id):
            out = self.timeline(session_id).overview()
            opened = self._opened(session_id)
            if opened is not None and opened.record is not None:
                # A file of this session that is not the one archived shows, flagged (its audit fails).
                out["archived"] = {**_archived(opened.record), "mismatches": list(opened.mismatches)}
            return out

    def seq_at(self, session_id: str, ms: int) -> int:
        """The last event logged at or before clock reading ``ms``."""
        with self.session_lock(session_id):
            return self.timeline(session_id).seq_at(ms)

    # ------------------------------------------------------------------------------ audio

    def _lane(self, tl: Timeline, name: str) -> Lane:
        lane = tl.lanes.get(name)
        if lane is None:
            raise InspectError("lane_not_found", f"session {tl.session_id} has no audio lane {name!r}", status=404, param="lane")
        return lane

    def _range(self, lane: Lane, from_ms: Optional[int], to_ms: Optional[int]) -> tuple[int, int]:
        a = 0 if from_ms is None else from_ms
        b = lane.ms if to_ms is None else to_ms
        if a < 0:
            raise InspectError("invalid_parameter", f"from_ms must be 0 or more, got {a}", param="from_ms")
        if b <= a:
            raise InspectError("invalid_parameter", f"to_ms ({b}) must be after from_ms ({a})", param="to_ms")
        if b > MAX_CLOCK_MS:
            raise InspectError("invalid_parameter", f"to_ms must be at most {MAX_CLOCK_MS} (a week of audio), got {str(b)[:24]}", param="to_ms")
        return a, b

    def _events(self, session_id: str, seqs: list[int]) -> dict[int, Any]:
        out: dict[int, Any] = {}
        log = self._log(session_id)
        for i in range(0, len(seqs), _READ_BATCH):
            out.update((r.seq, r.event) for r in log.read_seqs(session_id, seqs[i : i + _READ_BATCH]))
        return out

    @_locked
    def samples(self, session_id: str, lane_name: str, from_ms: Optional[int] = None, to_ms: Optional[int] = None) -> tuple[np.ndarray, int]:
        """``(int16 samples, rate)`` of a lane from ``from_ms`` to ``to_ms`` (ms on the lane's own
        clock: the input clock for ``user``, the response's audio for ``response:<id>``; default
        the whole lane), read from the logged events (G.711 decoded); silence past the lane's end.

        Raises:
            InspectError: unknown session or lane, a bad range, longer than :data:`MAX_WAV_MS`.
        """
        tl = self.timeline(session_id)
        lane = self._lane(tl, lane_name)
        a, b = self._range(lane, from_ms, to_ms)
        if b - a > MAX_WAV_MS:
            raise InspectError("invalid_parameter", f"at most {MAX_WAV_MS} ms of audio per request, asked for {b - a} ms", param="to_ms")
        sa_ = a * lane.rate // 1000
        sb = lane.samples if to_ms is None else b * lane.rate // 1000  # the whole lane: to the sample
        events = self._events(session_id, [seq for seq, _, _ in lane.pieces(sa_, sb)])
        return lane.cut(events, sa_, sb), lane.rate

    def wav(self, session_id: str, lane_name: str, from_ms: Optional[int] = None, to_ms: Optional[int] = None) -> bytes:
        """:meth:`samples` as a PCM16 WAV file at the lane's rate (its duration is ``to_ms -
        from_ms``, to the sample)."""
        pcm, rate = self.samples(session_id, lane_name, from_ms, to_ms)
        return wav_bytes(pcm, rate)

    @_locked
    def peaks(self, session_id: str, lane_name: str, from_ms: Optional[int] = None, to_ms: Optional[int] = None, buckets: int = 1000) -> dict[str, Any]:
        """Waveform peaks of a lane: ``{"lane", "from_ms", "to_ms", "buckets", "min": [...],
        "max": [...]}``, int16 values, one pair per bucket of ``(to_ms - from_ms) / buckets`` ms.
        Buckets of :data:`BASE_MS` or more come from the peaks kept while the timeline was built;
        finer ones read that range's audio from the log.

        Raises:
            InspectError: unknown session or lane, a bad range, ``buckets`` outside 1..4000.
        """
        if not 1 <= buckets <= MAX_BUCKETS:
            raise InspectError("invalid_parameter", f"buckets must be 1..{MAX_BUCKETS}, got {buckets}", param="buckets")
        tl = self.timeline(session_id)
        lane = self._lane(tl, lane_name)
        a, b = self._range(lane, from_ms, to_ms)
        width = (b - a) / buckets
        if width >= BASE_MS:
            mins, maxs = lane.base_peaks()
            edges = [int(a / BASE_MS + j * width / BASE_MS) for j in range(buckets + 1)]
            lo, hi = peaks_of(mins, maxs, edges)
        else:
            pcm, _ = self.samples(session_id, lane_name, a, b)
            edges = [int(j * pcm.size / buckets) for j in range(buckets + 1)]
            lo, hi = peaks_of(pcm, pcm, edges)
        return {"lane": lane_name, "from_ms": a, "to_ms": b, "buckets": buckets, "min": lo, "max": hi}

    # ----------------------------------------------------------------------- events, state

    def _state_before(self, tl: Timeline, seq: int) -> Any:
        """The state after event ``seq - 1``, from the nearest checkpoint."""
        at, state = tl.state_from(seq - 1)
        if at < seq - 1:
            for r in self._log(tl.session_id).read_session(tl.session_id, after_seq=at, up_to_seq=seq - 1):
                state = evolve(state, r.seq, r.event)
        return state

    @_locked
    def events(self, session_id: str, from_seq: int = 1, limit: int = 200, *, full: bool = False) -> dict[str, Any]:
        """A page of the session's events from ``from_seq``: ``{"head", "from_seq", "rows":
        [{"seq", "position", "recorded_at_us", "at_ms", "type", "verdict", "summary"}]}`` with
        replay's verdicts and summaries (a function call's completed arguments are shown as its
        last chunk's delta); ``full`` adds each event's fields (``event``).

        Raises:
            InspectError: unknown session, ``from_seq`` outside 1..head, ``limit`` outside
                1..:data:`MAX_EVENTS_PAGE`.
        """
        tl = self.timeline(session_id)
        if not 1 <= from_seq <= tl.head:
            raise InspectError("seq_out_of_range", f"from_seq {from_seq} is outside session {session_id}, whose events are 1..{tl.head}", param="from_seq")
        if not 1 <= limit <= MAX_EVENTS_PAGE:
            raise InspectError("invalid_parameter", f"limit must be 1..{MAX_EVENTS_PAGE}, got {limit}", param="limit")
        state = self._state_before(tl, from_seq)
        rows = []
        for r in self._log(session_id).read_session(session_id, after_seq=from_seq - 1, up_to_seq=from_seq + limit - 1):
            verdict = verdict_of(state, r.event)
            state = evolve(state, r.seq, r.event)
            row = {
                "seq": r.seq, "position": r.position, "recorded_at_us": r.recorded_at_us, "at_ms": tl.at_ms(r.seq),
                "type": r.event.TYPE, "verdict": verdict, "summary": summarize(r.event),
            }
            if full:
                row["event"] = _event_json(r.event)
            rows.append(row)
        return {"session_id": session_id, "head": tl.head, "from_seq": from_seq, "rows": rows}

    @_locked
    def state_at(self, session_id: str, seq: int) -> dict[str, Any]:
        """The state after event ``seq`` (the reducer's, as ``GET /v1/sessions/{id}`` shows it)
        and that event's row: ``{"session_id", "seq", "state", "event": row}``.

        Raises:
            InspectError: unknown session, ``seq`` outside 1..head.
        """
        tl = self.timeline(session_id)
        if not 1 <= seq <= tl.head:
            raise InspectError("seq_out_of_range", f"seq {seq} is outside session {session_id}, whose events are 1..{tl.head}", param="seq")
        row = self.events(session_id, seq, 1, full=True)["rows"][0]
        at, state = tl.state_from(seq)
        for r in self._log(session_id).read_session(session_id, after_seq=at, up_to_seq=seq):
            state = evolve(state, r.seq, r.event)
        return {"session_id": session_id, "seq": seq, "state": to_plain(state), "event": row}

    @_locked
    def states_at(self, session_id: str, seqs: list[int]) -> dict[int, dict[str, Any]]:
        """:meth:`state_at` for many seqs in one forward walk (from the nearest kept state when
        it is ahead), without the event rows: ``{seq: {"session_id", "seq", "state"}}``.

        Raises:
            InspectError: unknown session, a seq outside 1..head.
        """
        tl = self.timeline(session_id)
        log = self._log(session_id)
        out: dict[int, dict[str, Any]] = {}
        at, state = 0, None
        for seq in sorted(set(seqs)):
            if not 1 <= seq <= tl.head:
                raise InspectError("seq_out_of_range", f"seq {seq} is outside session {session_id}, whose events are 1..{tl.head}", param="seq")
            kept, kept_state = tl.state_from(seq)
            if state is None or kept > at:
                at, state = kept, kept_state
            for r in log.read_session(session_id, after_seq=at, up_to_seq=seq):
                state = evolve(state, r.seq, r.event)
            at = seq
            out[seq] = {"session_id": session_id, "seq": seq, "state": to_plain(state)}
        return out

    def audit(self, session_id: str) -> dict[str, Any]:
        """The audit verdict (:func:`duplex_es.audit.audit_session`), cached per head seq for
        :data:`AUDIT_TTL_S`:
        ``{"ok", "head", "checks": {name: "ok"|"failed"}, "violations": [{"check", "seq",
        "message"}], counts...}``; the first failing check is ``failed_check``.

        An archived session is audited from its file, and the file checked against what the
        log recorded of it (check ``archive``: :func:`duplex_es.audit.audit_opened_archive`).

        Raises:
            InspectError: unknown session; an archived one whose file cannot be read.
        """
        with self.session_lock(session_id):
            opened, log, head = self._head(session_id)
            key = (session_id, head)
            with self._lock:
                cached = self._audits.get(key)
            # An edit in place leaves the head as it was: a verdict is trusted for AUDIT_TTL_S only.
            if cached is not None and time.monotonic() - cached["_at"] < AUDIT_TTL_S:
                return _public(cached)
            report = audit_opened_archive(opened, session_id) if opened is not None else audit_session(log, session_id)
        violations = [{"check": v.check, "seq": v.seq, "message": v.message} for v in report.violations]
        checks = {name: "ok" for name in ("chain", "key", "decode", report.kind, "snapshots", *(("archive",) if opened is not None else ()))}
        for v in violations:
            checks[v["check"]] = "failed"
        out = {
            "session_id": session_id, "head": head, "ok": report.ok, "kind": report.kind, "checks": checks,
            "failed_check": violations[0]["check"] if violations else None, "violations": violations,
            "ticks": report.ticks, "committed_ticks": report.committed_ticks, "applied_events": report.applied_events,
            "discarded_events": report.discarded_events, "pending_events": report.pending_events, "responses": report.responses,
            "_at": time.monotonic(),
        }
        with self._lock:
            self._audits[key] = out
            while len(self._audits) > CACHED_SESSIONS * 16:
                self._audits.popitem(last=False)
        return _public(out)

    # ------------------------------------------------------------------------------ world

    def frame(self, session_id: str, seq: int, index: int) -> tuple[bytes, str]:
        """``(image bytes, mime type)`` of frame ``index`` of the ``world.chunk`` at ``seq``.

        Raises:
            InspectError: unknown session; ``frame_not_found`` (no chunk at ``seq``, or no such
                frame in it).
        """
        with self.session_lock(session_id):
            self.timeline(session_id)  # session_not_found first
            got = self._log(session_id).read_seqs(session_id, [seq])
        ev = got[0].event if got else None
        if not isinstance(ev, WorldChunk) or not 0 <= index < len(ev.frames):
            raise InspectError("frame_not_found", f"session {session_id} has no frame {index} in a world.chunk at seq {seq}", status=404, param="seq")
        return base64.b64decode(ev.frames[index]), ev.mime_type


def _archived(record: ArchivedSession) -> dict[str, Any]:
    """What the list and overview say of an archived session's file."""
    return {"location": record.location, "file_bytes": record.file_bytes, "archived_at_us": record.archived_at_us, "ended_at_us": record.ended_at_us}


def _public(audit: dict[str, Any]) -> dict[str, Any]:
    """An audit answer without its cache bookkeeping."""
    return {k: v for k, v in audit.items() if k != "_at"}


def _event_json(ev: Any) -> dict[str, Any]:
    """An event's fields for display, its base64 payloads (audio, frames) replaced by their size."""
    plain = to_plain(ev)
    for key in ("audio", "frames"):
        val = plain.get(key)
        if isinstance(val, str) and val:
            plain[key] = f"<{len(val) * 3 // 4} bytes of base64 audio>"
        elif isinstance(val, list) and val and isinstance(val[0], str):
            plain[key] = [f"<{len(v) * 3 // 4} bytes of base64 image>" for v in val]
    return plain
