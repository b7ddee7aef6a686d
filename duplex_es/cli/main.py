"""``duplex-es``: the command line.

Every command takes ``--db URL``; the default is ``DUPLEX_ES_DATABASE_URL``, else the SQLite file
``duplex_es.db`` in the working directory.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import logging
import os
import signal
import socket
import sys
from typing import TYPE_CHECKING, Any, Iterator, Optional, Sequence

import attrs
import sqlalchemy as sa
from rich.console import Console
from rich.markup import escape

from duplex_es.cli.arguments import CliError, non_negative_int, port, positive_int
from duplex_es.cli.discovery import add_tool_commands
from duplex_es.errors import DuplexError
from duplex_es.store import Database, DatabaseNotFound, EventLog, KeyRing, upgrade
from duplex_es.store.archives import ArchiveError, archived_records
from duplex_es.store.database import resolve_url
from duplex_es.store.datakeys import MasterKeys

if TYPE_CHECKING:
    from duplex_es.server.principals import Keyring

__all__ = ["main", "build_parser"]

# Piped output keeps whole session ids instead of rich's 80-column default.
console = Console() if Console().is_terminal or "COLUMNS" in os.environ else Console(width=200)
#: Errors go to stderr, so a command's output piped to a file (export, replay) stays clean.
errors = Console(stderr=True)

LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")


def _open_db(args: argparse.Namespace, *, migrate: bool = True, create: bool = True) -> Database:
    # --sqlite-synchronous exists on serve only (the benchmark's in-memory log); FULL elsewhere.
    db = Database(args.db, create=create, synchronous=getattr(args, "sqlite_synchronous", "FULL"))
    if migrate:
        upgrade(db)
    return db


def _chain_keys(args: argparse.Namespace) -> Optional[KeyRing]:
    """The chain key ring of ``--chain-key-file`` (``None``: the unkeyed chain). Loaded before
    the database is opened, so a bad key file creates nothing."""
    path = getattr(args, "chain_key_file", None)
    if not path:
        return None
    ring = KeyRing.load(path)
    logging.getLogger(__name__).info("chain key %s signs new events (%d key(s) in %s)", ring.signing_id, len(ring.keys), path)
    return ring


def _master_keys(args: argparse.Namespace) -> Optional[MasterKeys]:
    """The master key ring of ``--master-key-file`` (``None``: content stored in the clear, and
    sealed content read as withheld). Loaded before the database is opened (a bad file creates
    nothing); docs/privacy.md."""
    path = getattr(args, "master_key_file", None)
    if not path:
        return None
    ring = MasterKeys.load(path)
    logger = logging.getLogger(__name__)
    if os.stat(path).st_mode & 0o077:
        logger.warning("master key file %s can be read by other users (mode %o): chmod 600 it", path, os.stat(path).st_mode & 0o777)
    logger.info("master key %s wraps new data keys (%d key(s) in %s)", ring.current_id, len(ring.keys), path)
    return ring


def _read_db(args: argparse.Namespace) -> Database:
    """The database of a command that only reads: it must exist; migrate it if it is old."""
    return _open_db(args, create=False)


def _resolve_session(log: EventLog, given: str) -> str:
    if not given:
        raise SystemExit("duplex-es: the session id is empty")
    if log.head(given) or archived_records(log.db, [given]):
        return given
    matches = log.find_session(given) + [sid for sid in archived_records(log.db) if sid.startswith(given)]
    if len(matches) == 1:
        return matches[0]
    if not matches:
        raise SystemExit(f"duplex-es: no session {given!r} in this database")
    raise SystemExit(f"duplex-es: {given!r} matches {len(matches)} sessions; give more of the id")


@attrs.frozen
class _Reading:
    """What a read command reads: ``log``, and ``session_id`` when one was named. For an
    archived session (``--archive FILE``, or one the database moved to a file) ``log`` is its
    archive opened as a log (duplex_es.archive.open_archive), and ``archive`` says so."""

    log: EventLog
    session_id: Optional[str]
    archive: Any = None  # duplex_es.archive.OpenedArchive


@contextlib.contextmanager
def _reading(args: argparse.Namespace, given: Optional[str], *, keys: Optional[KeyRing] = None, strict: bool = True) -> Iterator[_Reading]:
    """The log a read command (replay, audit, inspect, export) works on: ``--db``'s, or, for
    ``--archive FILE`` or a session archived in ``--db`` (its file found where it was written,
    or in ``--archive-dir``), that session's archive (docs/privacy.md, "Archives"). With
    ``--archive``, ``--db`` is optional: it brings the session's key and erasure, and the
    record the file is checked against.

    A session's file that is not the one ``--db`` recorded (another digest, count or head, or
    another session's file under its name) is refused ``archive_mismatch`` when ``strict``
    (what it shows would not be what was archived; ``audit`` says how it differs); a file given
    with ``--archive`` is read anyway, with a warning."""
    from duplex_es.archive import locate, open_archive

    master = _master_keys(args)
    path = getattr(args, "archive", None)
    try:
        if path:
            try:
                hot: Optional[EventLog] = EventLog(_read_db(args), keys=keys, master_keys=master)
            except DatabaseNotFound:
                hot = None
            with open_archive(path, hot=hot, keys=keys, master_keys=master) as opened:
                sid = opened.header.session_id
                if given and not sid.startswith(given):
                    raise CliError(f"--archive {path} holds session {sid}, not {given!r}")
                if strict and opened.mismatches:
                    errors.print(f"warning: --archive {escape(path)}: {escape('; '.join(opened.mismatches))}", highlight=False, soft_wrap=True)
                yield _Reading(opened.log, sid, opened)
            return
        log = EventLog(_read_db(args), keys=keys, master_keys=master)
        sid = _resolve_session(log, given) if given else None
        record = archived_records(log.db, [sid]).get(sid) if sid else None
        if record is None:
            yield _Reading(log, sid)
            return
        with open_archive(locate(record, getattr(args, "archive_dir", None) or ()), hot=log, keys=keys, master_keys=master, session_id=sid) as opened:
            if strict and opened.mismatches:
                raise CliError(
                    f"archive_mismatch: session {sid}'s file {opened.path} is not the one archived: {'; '.join(opened.mismatches)} "
                    f"(`duplex-es audit {sid}` reports it; --archive {opened.path} reads it anyway)"
                )
            yield _Reading(opened.log, sid, opened)
    except ArchiveError as exc:
        hint = " (moved? give --archive-dir DIR or --archive FILE)" if exc.code == "archive_missing" else ""
        raise CliError(f"{exc.code}: {exc}{hint}") from None


# ------------------------------------------------------------------------------------ commands


def cmd_db(args: argparse.Namespace) -> int:
    from duplex_es.store.migrate import current_revision, head_revision

    db = Database(args.db, create=args.db_command == "upgrade")
    if args.db_command == "upgrade":
        rev = upgrade(db)
        console.print(f"database {db.describe()} is at revision [bold]{rev}[/]")
    else:
        console.print(f"database {db.describe()}: revision {current_revision(db)} (head {head_revision()})")
    return 0


def cmd_serve(args: argparse.Namespace) -> int:
    import uvicorn

    from duplex_es.protocol import MAX_FRAME_BYTES
    from duplex_es.server.app import create_app
    from duplex_es.server.handshake import handshake_protocol
    from duplex_es.server.models import ModelMap
    from duplex_es.server.throttle import ResumeThrottle

    try:
        models = ModelMap.from_specs(args.model or ())
    except ValueError as err:
        print(f"duplex-es serve: --model: {err}", file=sys.stderr)
        return 2
    keys = _chain_keys(args)
    master_keys = _master_keys(args)
    keyring = _keyring(args)
    if master_keys is None and (args.retain_days is not None or keyring.retention()):
        # Retention erases by destroying data keys: with content in the clear it could never
        # erase anything, and saying nothing would let an operator believe otherwise.
        raise CliError(
            ("--retain-days" if args.retain_days is not None else "retain_days in --api-keys")
            + ": retention erases sealed sessions, and without --master-key-file nothing is sealed (docs/privacy.md)"
        )
    if args.workers > 1 and sa.engine.make_url(resolve_url(args.db)).get_backend_name() == "sqlite":
        # Measured (docs/scaling.md): SQLite takes one writer at a time, so the processes wait
        # on each other's commits, and the append p99 got worse, not better.
        raise CliError(
            f"--workers {args.workers}: several server processes on one SQLite file write one at a time and wait on "
            "each other's commits (slower than one process: docs/scaling.md, \"Several processes on one port\"); "
            "use PostgreSQL (--db postgresql+psycopg://...) for --workers, or one process"
        )
    _open_db(args).dispose()  # migrate without a bound: a migration may run long
    server_id = args.server_id or f"{socket.gethostname()}:{args.port}"
    if args.workers > 1 and args.listen_fd is None:
        from duplex_es.cli.workers import listen_socket, supervise

        # The options were checked and the schema migrated once, here; each child serves on
        # the socket bound here (duplex_es/cli/workers.py, docs/scaling.md).
        return supervise(args.argv, listen_socket(args.host, args.port), server_id, args.workers)
    db = Database(args.db, synchronous=args.sqlite_synchronous, write_timeout_ms=args.commit_timeout_ms)
    app = create_app(
        db,
        keyring=keyring,
        resume_throttle=ResumeThrottle(args.resume_throttle_window_ms),
        url_token_leeway_ms=args.url_token_leeway_ms,
        poll_ms=args.poll_ms,
        idle_ttl_ms=args.idle_ttl_ms,
        disconnect_grace_ms=args.disconnect_grace_ms,
        reaper_interval_ms=args.reaper_interval_ms,
        snapshot_every=args.snapshot_every,
        server_id=server_id,
        owner_ttl_ms=args.owner_ttl_ms,
        group_commit_window_ms=args.group_commit_window_ms,
        models=models,
        commit_timeout_ms=args.commit_timeout_ms,
        chain_keys=keys,
        master_keys=master_keys,
        retain_days=args.retain_days,
        retention_interval_ms=args.retention_interval_ms,
        archive_dirs=args.archive_dir or (),
    )
    # What exists now (modules, the app, the engine) lives as long as the process: out of the
    # cyclic collector's sight, its full collections scan only what sessions made since. They
    # were 40-60 ms pauses of the event loop under 30 sessions: the append p99's tail
    # (docs/performance.md, "The append path").
    gc.collect()
    gc.freeze()
    config = uvicorn.Config(
        app,
        host=args.host,
        port=args.port,
        ws="websockets-sansio",
        # A connection must send a whole request head (the WebSocket upgrade) within this.
        http=handshake_protocol(args.handshake_timeout_ms),
        # Twice our own limit, so a frame up to 32 MiB still gets a frame_too_large error event;
        # anything larger closes the connection with 1009.
        ws_max_size=2 * MAX_FRAME_BYTES,
        log_level=args.log_level.lower(),
    )
    # A child of `serve --workers N` accepts on the socket its parent bound.
    sockets = [socket.socket(fileno=args.listen_fd)] if args.listen_fd is not None else None
    uvicorn.Server(config).run(sockets=sockets)
    return 0


def _loopback_only(host: str) -> bool:
    """Whether every address ``host`` resolves to is a loopback one (``127.1``, ``localhost``
    and ``::1`` are; a name that does not resolve is not)."""
    try:
        infos = socket.getaddrinfo(host, None)
    except (socket.gaierror, UnicodeError):
        return False
    import ipaddress

    return bool(infos) and all(ipaddress.ip_address(str(info[4][0]).split("%")[0]).is_loopback for info in infos)


def _keyring(args: argparse.Namespace) -> "Keyring":
    """The API keys ``serve`` was given, after refusing to serve without any on an address
    other hosts can reach unless ``--allow-unauthenticated`` says so (docs/security.md).

    Raises:
        CliError: both ``--api-key`` and ``--api-keys``; no key on a non-loopback ``--host``
            without ``--allow-unauthenticated``.
        KeysFileError: the keys file or the key is unusable (the message names the entry).
    """

    from duplex_es.server.principals import Keyring

    if args.api_key is not None and args.api_keys is not None:
        raise CliError("give --api-key (or $DUPLEX_ES_API_KEY) or --api-keys, not both")
    if args.api_keys is not None:
        return Keyring.load(args.api_keys)
    if args.api_key is not None:
        return Keyring.single(args.api_key)
    if not _loopback_only(args.host) and not args.allow_unauthenticated:
        raise CliError(
            f"--host {args.host} is reachable from other machines, but no --api-key or --api-keys is set: anyone "
            "could open and read sessions; give keys, or --allow-unauthenticated if that is what you want"
        )
    return Keyring()


def _load_plugin(spec: str) -> object:
    """An engine from ``module:Class`` (a GPU model behind the engine protocol, say)."""
    import importlib

    module, _, name = spec.partition(":")
    if not module or not name:
        raise CliError(f"--engine-plugin {spec!r}: expected module:Class")
    try:
        cls = getattr(importlib.import_module(module), name)
    except ModuleNotFoundError as exc:
        hint = " (is its folder on PYTHONPATH?)" if exc.name == module.split(".")[0] else ""
        raise CliError(f"--engine-plugin {spec!r}: {exc}{hint}") from exc
    except (ImportError, AttributeError) as exc:
        raise CliError(f"--engine-plugin {spec!r}: {exc}") from exc
    try:
        engine = cls()
    except Exception as exc:
        raise CliError(f"--engine-plugin {spec!r}: {name}() failed: {type(exc).__name__}: {exc}") from exc
    kinds = getattr(engine, "kinds", None)
    if (
        not isinstance(getattr(engine, "name", None), str)
        or not isinstance(kinds, (tuple, list))
        or not all(isinstance(k, str) for k in kinds)
        or not callable(getattr(engine, "step", None))
    ):
        raise CliError(f"--engine-plugin {spec!r}: not an engine (it needs name: str, kinds: tuple of tick kinds and step(ctx); docs/architecture.md, Where to add things)")
    from duplex_es.worker.contracts import CONTRACTS

    unknown = sorted(set(kinds) - set(CONTRACTS))
    if unknown:
        raise CliError(f"--engine-plugin {spec!r}: unknown tick kinds {unknown}; this worker runs {sorted(CONTRACTS)}")
    return engine


def _batch_size(text: str) -> int:
    """An argparse type: a worker batch size, 1 to ``MAX_BATCH``."""
    from duplex_es.store.ticks import MAX_BATCH

    value = positive_int(text)
    if value > MAX_BATCH:
        raise argparse.ArgumentTypeError(f"must be at most {MAX_BATCH} ticks, got {text}")
    return value


def cmd_worker(args: argparse.Namespace) -> int:
    from duplex_es.worker.runner import Worker

    engines: list = [_load_plugin(spec) for spec in args.engine_plugin]  # before the database: a bad plugin creates nothing
    keys = _chain_keys(args)
    master_keys = _master_keys(args)
    db = _open_db(args)
    kinds = {k for e in engines for k in e.kinds}
    if args.engine in ("speech", "all") and not {"speech", "transcription", "duplex"} <= kinds:
        from duplex_es.worker.speech.asr import Recognizer
        from duplex_es.worker.speech.engine import CascadeSpeechEngine, PocketsphinxTranscriber

        recognizer = Recognizer()  # one decoder process serves both
        if "speech" not in kinds:
            engines.append(CascadeSpeechEngine(chunk_ms=args.chunk_ms, recognizer=recognizer))
        if "transcription" not in kinds:
            engines.append(PocketsphinxTranscriber(recognizer))
        if "duplex" not in kinds:
            from duplex_es.worker.speech.duplex import FullDuplexEngine

            engines.append(FullDuplexEngine(recognizer))
    if args.engine in ("world", "all") and "world" not in kinds:
        from duplex_es.worker.world.engine import WorldEngine

        engines.append(WorldEngine())
    worker = Worker(
        EventLog(db, keys=keys, master_keys=master_keys),
        engines,
        worker_id=args.worker_id,
        claim_ttl_ms=args.claim_ttl_ms,
        poll_ms=args.poll_ms,
        step_delay_ms=args.step_delay_ms,
        batch_size=args.batch_size,
        batch_wait_ms=args.batch_wait_ms,
    )

    def stop(signum: int, _frame: object) -> None:
        logging.getLogger(__name__).info("signal %d: stopping after the current batch of ticks", signum)
        worker.stopping.set()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    worker.run()
    return 0


def cmd_sessions(args: argparse.Namespace) -> int:
    from rich.table import Table

    log = EventLog(_read_db(args))
    table = Table(title=f"sessions in {log.db.describe()}")
    for col in ("session", "events"):
        table.add_column(col)
    for sid in log.session_ids():
        table.add_row(sid, str(log.head(sid)))
    console.print(table)
    archived = archived_records(log.db)
    if archived:
        table = Table(title="archived sessions (their events in files: docs/privacy.md, \"Archives\")")
        for col in ("session", "events", "file", "bytes"):
            table.add_column(col)
        for rec in archived.values():
            table.add_row(rec.session_id, str(rec.events), rec.location, f"{rec.file_bytes:,}")
        console.print(table)
    return 0


def cmd_archive(args: argparse.Namespace) -> int:
    """``archive [SESSION ...] --to DIR``: move ended sessions into compressed files
    (docs/privacy.md, "Archives"); ``--ended-days N`` takes every session that ended N days
    ago or more; ``--compact`` then gives the space back to the file system."""
    import time

    from duplex_es.archive import ArchiveRefused, archive_ended, archive_session
    from duplex_es.retention import DAY_US

    if args.session_id and args.ended_days is not None:
        raise CliError("archive: name the sessions, or give --ended-days N (every session that ended N days ago or more), not both")
    if not args.session_id and args.ended_days is None:
        raise CliError("archive: name the sessions to archive, or give --ended-days N (every session that ended N days ago or more)")
    if not os.path.isdir(args.to):
        raise CliError(f"archive: --to {args.to} is not a directory")
    db = _read_db(args)
    log = EventLog(db)
    size_before = _db_bytes(db)
    refused: list[ArchiveRefused] = []
    if args.session_id:
        # Every id resolved before the first is archived: a typo stops the run before it
        # moves anything, not half-way through.
        sids = list(dict.fromkeys(_resolve_session(log, given) for given in args.session_id))
        done = []
        for sid in sids:
            try:
                a = archive_session(log, sid, args.to)
            except ArchiveRefused as exc:
                refused.append(exc)
                _say_refused(exc)
            else:
                done.append(a)
                _say_archived(a)
    else:
        done, refused = archive_ended(
            log, args.to, ended_before_us=time.time_ns() // 1000 - int(args.ended_days * DAY_US), on_archived=_say_archived, on_refused=_say_refused
        )
    console.print(
        f"{len(done)} session(s) archived, {sum(a.events for a in done)} events, {sum(a.stored_bytes for a in done):,} bytes of rows "
        f"-> {sum(a.file_bytes for a in done):,} bytes of files",
        highlight=False,
    )
    if args.compact:
        from duplex_es.store.archives import compact

        compact(db)
        console.print(f"compacted {db.describe()}: {size_before:,} -> {_db_bytes(db):,} bytes", highlight=False)
    return 1 if refused and args.session_id else 0


def _say_archived(a: Any) -> None:
    """One line per archived session, printed as it is done (a run stopped by a fault later
    has said what it moved)."""
    console.print(f"archived session {a.session_id}: {a.events} events, {a.stored_bytes:,} bytes in the database -> {a.path} ({a.file_bytes:,} bytes)", highlight=False)


def _say_refused(exc: Any) -> None:
    errors.print(f"not archived: session {escape(exc.session_id)} ({exc.code}): {escape(str(exc))}", highlight=False, soft_wrap=True)


def _db_bytes(db: Database) -> int:
    """The database's size on disk (bytes): the SQLite file and its WAL, or PostgreSQL's
    total relation size of the log's tables."""
    if db.backend.name == "sqlite":
        path = sa.engine.make_url(db.url).database or ""
        return sum(os.path.getsize(p) for p in (path, path + "-wal") if p and os.path.exists(p))
    with db.read() as conn:
        return int(
            conn.execute(
                sa.text(
                    "SELECT sum(pg_total_relation_size(c)) FROM unnest(ARRAY['events', 'idempotency', 'snapshots', 'ticks', 'session_owners']) AS c"
                )
            ).scalar_one()
        )


def cmd_replay(args: argparse.Namespace) -> int:
    from duplex_es.cli.render import print_replay, replay_json
    from duplex_es.replay import replay

    if args.recheck:
        if args.archive or len(args.session_id) == 1:
            with _reading(args, args.session_id[0] if args.session_id else None) as reading:
                return _recheck(args, reading.log, [reading.session_id])  # type: ignore[list-item]
        return _recheck(args, EventLog(_read_db(args), master_keys=_master_keys(args)), args.session_id)
    if len(args.session_id) > 1 or (not args.session_id and not args.archive):
        raise CliError("replay takes one session id (several, or none for all, only with --recheck)")
    with _reading(args, args.session_id[0] if args.session_id else None) as reading:
        log, session_id = reading.log, reading.session_id
        assert session_id is not None
        head = log.head(session_id)
        if args.at is not None and not 1 <= args.at <= head:
            raise CliError(f"--at {args.at} is outside session {session_id}, whose events are 1..{head}")
        result = replay(log, session_id, at=args.at)
        if args.json:
            print(json.dumps(replay_json(result), indent=2))
        else:
            if reading.archive is not None:
                console.print(f"read from archive {reading.archive.path}", highlight=False)
            print_replay(console, result)
        if args.render is None:
            return 0
        from duplex_es.replay import rerender

        report = rerender(log, session_id, args.render)
    console.print(
        f"re-rendered {report.frames} frames into {args.render}: "
        + ("all match the recorded hashes" if report.ok else f"{len(report.mismatches)} differ: {list(report.mismatches)[:10]}"),
        highlight=False,
    )
    for epoch, chunk, engine in report.skipped:
        console.print(f"skipped epoch {epoch} chunk {chunk}: rendered by {engine}, not the reference engine", highlight=False)
    return 0 if report.ok else 1


def _recheck(args: argparse.Namespace, log: EventLog, given: Sequence[str]) -> int:
    """``replay --recheck``: re-decide the sessions' logged commands; 1 on any difference.
    An archived session is rechecked from its file when it is the only one named."""
    from duplex_es.cli.render import print_recheck, recheck_json
    from duplex_es.recheck import recheck_log

    if args.at is not None or args.render is not None:
        raise CliError("--recheck re-decides whole sessions: it takes neither --at nor --render")
    sids = [_resolve_session(log, s) for s in given]
    archived = sorted(archived_records(log.db, sids)) if len(sids) > 1 else []
    if archived:
        raise CliError(f"--recheck: session(s) {', '.join(archived)} are archived: recheck each alone (`replay SESSION --recheck` reads its file)")
    results = recheck_log(log, sids)
    if args.json:
        print(json.dumps(recheck_json(results), indent=2))
    else:
        print_recheck(console, results)
    return 0 if all(r.ok for r in results) else 1


def cmd_audit(args: argparse.Namespace) -> int:
    from duplex_es.audit import audit_all, audit_archived, audit_opened_archive, audit_session
    from duplex_es.cli.render import audit_json, print_audit, print_tamper_notes

    keys = _chain_keys(args)
    if args.checkpoint and keys is None:
        raise CliError(f"--checkpoint {args.checkpoint}: checkpoints are signed with the chain key; give --chain-key-file (or $DUPLEX_ES_CHAIN_KEY_FILE)")
    if args.checkpoint and args.archive:
        raise CliError("--checkpoint checks the log of --db, not an archive file")
    findings = []
    key_known = True
    record = None
    if args.session_id and not args.archive:
        hot = EventLog(_read_db(args), keys=keys, master_keys=_master_keys(args))
        session_id = _resolve_session(hot, args.session_id)
        record = archived_records(hot.db, [session_id]).get(session_id)
    if record is not None:
        # One archived session: a file missing, unreadable or not the one recorded is a
        # violation (exit 1), as in the audit of every session, not a failure to run.
        audits = [audit_archived(hot, record, args.archive_dir or ())]
    else:
        with _reading(args, args.session_id, keys=keys, strict=False) as reading:
            log, session_id, opened = reading.log, reading.session_id, reading.archive
            if opened is not None:  # --archive FILE
                audits = [audit_opened_archive(opened, session_id)]  # type: ignore[arg-type]
                key_known = opened.key_known
            else:
                audits = [audit_session(log, session_id)] if session_id else audit_all(log, archive_dirs=args.archive_dir or ())
    if args.checkpoint:  # against the log of --db, an archived session's file included
        from duplex_es.store.checkpoint import verify_checkpoints

        hot = EventLog(_read_db(args), keys=keys)
        findings = verify_checkpoints(hot, args.checkpoint, keys, session_id=session_id, archive_dirs=args.archive_dir or ())  # type: ignore[arg-type]
    if args.json:
        out = audit_json(audits)
        out["checkpoint"] = None if not args.checkpoint else {"file": args.checkpoint, "failures": [attrs.asdict(f) for f in findings]}
        out["ok"] = out["ok"] and not findings
        print(json.dumps(out, indent=2))
    else:
        print_audit(console, audits)
        print_tamper_notes(console, audits, keys, args.checkpoint, findings)
        if not key_known:
            console.print(
                "the archive was read without the database that holds its data key (--db): its content reads as withheld, "
                "and whether its key was destroyed only by an erasure was not checked",
                highlight=False,
            )
    return 0 if all(a.ok for a in audits) and not findings else 1


def cmd_checkpoint(args: argparse.Namespace) -> int:
    from duplex_es.store.checkpoint import write_checkpoint

    keys = _chain_keys(args)
    if keys is None:
        raise CliError("checkpoint: a checkpoint is signed with the chain key; give --chain-key-file (or $DUPLEX_ES_CHAIN_KEY_FILE)")
    if not args.out:
        raise CliError("checkpoint: give --out FILE|DIR (or $DUPLEX_ES_CHECKPOINTS): where checkpoints are appended, outside the database")
    log = EventLog(_read_db(args), keys=keys)
    path, cp = write_checkpoint(log, args.out, keys)
    console.print(
        f"checkpoint of {len(cp.sessions)} session(s), {cp.events} events up to position {cp.head_position}, "
        f"signed with chain key {cp.key_id}, appended to {path}",
        highlight=False,
    )
    return 0


def cmd_chain_key(args: argparse.Namespace) -> int:
    return _key_file(args.chain_key_command, args.file, KeyRing.load, lambda r: r.signing_id, "chain key", "signs new events", "verifying")


def _key_file(command: str, path: str, load: Any, current: Any, what: str, role: str, kept_for: str, hint: str = "") -> int:
    """``list`` the key ids of a key file, or make one / rotate it (``new``): the new key goes
    first (it is the one in use from now on); older keys stay for ``kept_for``."""
    from duplex_es.store.chain import new_key_line

    if command == "list":
        ring = load(path)
        for kid in ring.keys:
            console.print(f"{kid}{f'  ({role})' if kid == current(ring) else ''}", highlight=False)
        return 0
    old = load(path) if os.path.exists(path) else None
    _prepend_key(path, new_key_line(), old is not None)
    ring = load(path)
    kept = f"; keeps {len(ring.keys) - 1} older key(s) for {kept_for}{hint}" if old is not None else ""
    console.print(f"new {what} {current(ring)} in {path}{kept}", highlight=False)
    return 0


def _prepend_key(path: str, line: str, exists: bool) -> None:
    """Write ``line`` as the first key of the key file ``path`` (mode 0600), keeping the keys
    already there after it; atomically (a new file, fsynced, renamed over the old)."""
    previous = open(path, encoding="ascii").read() if exists else ""
    fd = os.open(path + ".new", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="ascii") as f:
        f.write(line + "\n" + previous)
        f.flush()
        os.fsync(f.fileno())
    os.replace(path + ".new", path)


def cmd_master_key(args: argparse.Namespace) -> int:
    """``master-key new FILE`` (make, or rotate: the new key goes first), ``list FILE``, and
    ``rewrap FILE``: every session's data key wrapped again under the file's first key, so the
    older keys can then be removed (docs/privacy.md, "Rotating the master key")."""
    from duplex_es.store.datakeys import rewrap_all

    path = args.file
    if args.master_key_command == "rewrap":
        ring = MasterKeys.load(path)
        moved, kept = rewrap_all(_read_db(args), ring)
        console.print(
            f"rewrapped {moved} data key(s) under master key {ring.current_id} ({kept} already were); "
            + (
                "the other keys of the file can be removed once every serve and worker runs with this file "
                "(one still started with the old file wraps new sessions' keys under the old key: restart them, then rewrap again)"
                if len(ring.keys) > 1 else "the file holds no other key"
            ),
            highlight=False,
        )
        return 0
    return _key_file(
        args.master_key_command, path, MasterKeys.load, lambda r: r.current_id, "master key", "wraps new data keys", "unwrapping",
        f" (then `duplex-es master-key rewrap {path}`)",
    )


def cmd_erase(args: argparse.Namespace) -> int:
    """``erase SESSION``: destroy the session's data key (docs/privacy.md, "Erasure")."""
    from duplex_es.erasure import ErasureRefused, erase_session

    log = EventLog(_read_db(args))
    session_id = _resolve_session(log, args.session_id)
    try:
        done = erase_session(log, session_id, by="operator", reason=args.reason)
    except ErasureRefused as err:
        raise CliError(f"erase: refused ({err.code}): {err}") from None
    if done.already:
        console.print(f"session {session_id} was already erased (seq {done.seq}); nothing to do", highlight=False)
        return 0
    console.print(
        f"erased session {session_id}: data key destroyed ({done.sealed_events} sealed events unreadable), "
        f"{done.snapshots_deleted} snapshot(s) deleted, session.erased at seq {done.seq}",
        highlight=False,
    )
    return 0


def cmd_inspect(args: argparse.Namespace) -> int:
    keys = _chain_keys(args)  # the audit verifies keyed chains with it
    if args.out is None and not _loopback_only(args.host) and not args.allow_remote:
        raise CliError(
            f"--host {args.host} is reachable from other machines, and `inspect` has no authentication: anyone could read "
            "every session; use `serve` (its /inspect checks API keys), or --allow-remote if that is what you want"
        )
    if args.out is not None and not args.session_id and not args.archive:
        raise CliError("inspect --out FILE.html: name the session to export")
    with _reading(args, args.session_id, keys=keys) as reading:
        return _inspect(args, reading)


def _inspect(args: argparse.Namespace, reading: _Reading) -> int:
    from duplex_es.inspect import Inspector

    # Sessions archived from the log are opened from their files when asked for.
    inspector = Inspector(reading.log, archive_dirs=tuple(args.archive_dir or ()))
    try:
        return _inspect_with(args, reading, inspector)
    finally:
        inspector.close()


def _inspect_with(args: argparse.Namespace, reading: _Reading, inspector: Any) -> int:
    log, session_id = reading.log, reading.session_id
    if args.out is not None:
        from duplex_es.inspect.export import export_html

        assert session_id is not None
        html = export_html(inspector, session_id)
        with open(args.out, "w", encoding="utf-8") as out:
            out.write(html)
        console.print(f"wrote session {session_id} to {args.out} ({len(html.encode()) // 1024} KiB)", highlight=False)
        return 0
    import uvicorn

    from duplex_es.inspect.web import create_inspector_app

    path = ""
    if session_id:
        import time

        path = f"#/s/{session_id}"
        # Built before serving: the first look at a long session then costs no wait.
        started = time.perf_counter()
        head = inspector.timeline(session_id).head
        console.print(f"read session {session_id}: {head} events in {time.perf_counter() - started:.1f} s", highlight=False)
    source = f"archive {reading.archive.path}" if reading.archive is not None else log.db.describe()
    console.print(f"inspector on http://{args.host}:{args.port}/{path} ({source})", highlight=False)
    uvicorn.run(create_inspector_app(inspector), host=args.host, port=args.port, log_level=args.log_level.lower())
    return 0


def cmd_export(args: argparse.Namespace) -> int:
    with _reading(args, args.session_id) as reading:
        return _export(args, reading.log, reading.session_id)


def _export(args: argparse.Namespace, log: EventLog, session_id: Optional[str]) -> int:
    from duplex_es.export import write_jsonl

    if args.out in (None, "-"):
        write_jsonl(log, sys.stdout, session_id)
        return 0
    with open(args.out, "w", encoding="utf-8") as out:
        n = write_jsonl(log, out, session_id)
    console.print(f"wrote {n} events to {args.out}", highlight=False)
    return 0


def cmd_import(args: argparse.Namespace) -> int:
    from duplex_es.export import import_jsonl

    log = EventLog(_open_db(args), keys=_chain_keys(args), master_keys=_master_keys(args))
    for path in args.files:
        with open(path, encoding="utf-8") as f:
            counts = import_jsonl(log, f)
        console.print(f"{path}: {sum(counts.values())} events of {len(counts)} session(s): {', '.join(counts)}", highlight=False)
    return 0


# -------------------------------------------------------------------------------------- parser


def _owner_ttl_ms(text: str) -> int:
    from duplex_es.server.sessions import MAX_OWNER_TTL_MS, MIN_OWNER_TTL_MS

    value = int(text)
    if not MIN_OWNER_TTL_MS <= value <= MAX_OWNER_TTL_MS:
        raise argparse.ArgumentTypeError(f"an ownership lease is {MIN_OWNER_TTL_MS}..{MAX_OWNER_TTL_MS} ms, got {text}")
    return value


def _window_ms(text: str) -> float:
    value = float(text)
    if not 0 <= value <= 1000:
        raise argparse.ArgumentTypeError(f"a group-commit window is 0..1000 ms, got {text}")
    return value


def _retain_days(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"a number of days, got {text[:32]!r}") from None
    if not 0 < value <= 36_500:
        raise argparse.ArgumentTypeError(f"a retention is above 0 and at most 36500 days, got {text[:32]}")
    return value


def _ended_days(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"a number of days, got {text[:32]!r}") from None
    if not 0 <= value <= 36_500:
        raise argparse.ArgumentTypeError(f"days since a session ended are 0 to 36500, got {text[:32]}")
    return value


def _reason(text: str) -> str:
    if not text or len(text) > 200:
        raise argparse.ArgumentTypeError(f"a reason is 1 to 200 characters, got {len(text)}")
    return text


def _log_level(text: str) -> str:
    if text.upper() not in LOG_LEVELS:
        raise argparse.ArgumentTypeError(f"choose one of {', '.join(LOG_LEVELS)}")
    return text.upper()


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of ``duplex-es``."""
    parser = argparse.ArgumentParser(
        prog="duplex-es",
        description="Event-sourced session engine for full-duplex realtime sessions: the log is the truth.",
    )
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--db",
        default=None,
        metavar="URL",
        help="database URL: sqlite:///file.db or postgresql+psycopg://user@host/db "
        "(default: $DUPLEX_ES_DATABASE_URL, else sqlite:///duplex_es.db)",
    )
    common.add_argument(
        "--log-level",
        type=_log_level,
        default=os.environ.get("DUPLEX_ES_LOG_LEVEL", "INFO"),
        help="DEBUG, INFO, WARNING, ERROR or CRITICAL (default INFO, or $DUPLEX_ES_LOG_LEVEL)",
    )
    master_key = argparse.ArgumentParser(add_help=False)
    master_key.add_argument(
        "--master-key-file", default=os.environ.get("DUPLEX_ES_MASTER_KEY_FILE") or None, metavar="FILE",
        help="the master key ring (one 64-hex-digit key per line, the first wrapping new data keys; `duplex-es master-key "
        "new FILE`): sessions' content is stored sealed under per-session data keys it wraps, and read back with it "
        "(docs/privacy.md; or $DUPLEX_ES_MASTER_KEY_FILE)",
    )
    chain_key = argparse.ArgumentParser(add_help=False)
    chain_key.add_argument(
        "--chain-key-file", default=os.environ.get("DUPLEX_ES_CHAIN_KEY_FILE") or None, metavar="FILE",
        help="the chain key ring (one hex key per line, the first signing; `duplex-es chain-key new FILE`): events "
        "are signed and verified with it (default: $DUPLEX_ES_CHAIN_KEY_FILE; none: the unkeyed chain)",
    )
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("db", parents=[common], help="manage the database schema (Alembic migrations)")
    p.add_argument("db_command", choices=["upgrade", "current"])
    p.set_defaults(func=cmd_db)

    p = sub.add_parser("serve", parents=[common, chain_key, master_key], help="run the Realtime WebSocket server")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=port, default=8000)
    p.add_argument(
        "--api-key", default=os.environ.get("DUPLEX_ES_API_KEY"),
        help="require this bearer token ($DUPLEX_ES_API_KEY): one operator principal named 'default'",
    )
    p.add_argument(
        "--api-keys", metavar="FILE",
        help='JSON file of API keys, each a principal: [{"name": "alice", "key": "...", "role": "client"|"operator"}] '
        "(docs/security.md); restart to apply changes",
    )
    p.add_argument(
        "--allow-unauthenticated", action="store_true",
        help="serve without API keys on a --host other than loopback (default: refuse to start)",
    )
    p.add_argument(
        "--url-token-leeway-ms", type=non_negative_int, default=0,
        help="how long a resume token that came in a URL may still retry a lost session.resumed (ms; default 0: never, since a URL may sit in an access log; the openai SDK reconnects through the URL, so a server killed between logging its resume and replying leaves such a client out unless this is set)",
    )
    p.add_argument(
        "--resume-throttle-window-ms", type=positive_int, default=60_000,
        help="window of the failed-resume throttle (ms; default 60 s): 10 failures per session, 30 per key and client address",
    )
    p.add_argument("--poll-ms", type=positive_int, default=5, help="log polling interval while idle (ms)")
    p.add_argument("--idle-ttl-ms", type=positive_int, default=300_000, help="expire sessions idle this long (ms, default 300 s)")
    p.add_argument(
        "--disconnect-grace-ms", type=positive_int, default=30_000, help="expire detached sessions not resumed within this (ms, default 30 s)"
    )
    p.add_argument("--reaper-interval-ms", type=positive_int, default=1000, help="how often leases are checked (ms)")
    p.add_argument(
        "--snapshot-every", type=non_negative_int, default=1000, help="snapshot a session's state every N events (0: never; default 1000)"
    )
    p.add_argument(
        "--server-id",
        help="this server's name in the session ownership table (default HOST:PORT, so a server restarted "
        "on the same port takes its sessions up at once; give each server sharing a database its own)",
    )
    p.add_argument(
        "--owner-ttl-ms", type=_owner_ttl_ms, default=10_000,
        help="session ownership lease (ms): sessions of a server silent this long are taken up by another",
    )
    p.add_argument(
        "--group-commit-window-ms", type=_window_ms, default=0.0,
        help="how long the group-commit writer waits for more commands before a commit (ms; default 0: "
        "commit what is queued at once)",
    )
    p.add_argument(
        "--commit-timeout-ms", type=positive_int, default=2000,
        help="how long a command waits for the log (a write lock held elsewhere, a stuck statement) before it is "
        "refused with log_unavailable, nothing applied (ms; default 2000)",
    )
    p.add_argument(
        "--retain-days", type=_retain_days, default=None, metavar="DAYS",
        help="erase the content of sessions that ended more than DAYS ago (sealed sessions: --master-key-file), "
        "unless their principal's API key sets retain_days; each erasure logged as session.erased (docs/privacy.md; "
        "default: kept for ever)",
    )
    p.add_argument(
        "--retention-interval-ms", type=positive_int, default=3_600_000,
        help="how often the retention sweep runs (ms; default 3600000, an hour; the first right after start)",
    )
    p.add_argument(
        "--archive-dir", action="append", default=None, metavar="DIR",
        help="where the inspector finds archive files moved from where `duplex-es archive` wrote them (by name; repeatable)",
    )
    p.add_argument(
        "--model", action="append", metavar="NAME=ENGINE",
        help="serve client model NAME with ENGINE (repeatable; NAME '*' is any other name). Default: any model name, "
        "served by the one engine duplex-es-echo",
    )
    p.add_argument(
        "--sqlite-synchronous", choices=["FULL", "NORMAL", "OFF"], default="FULL",
        help="SQLite's PRAGMA synchronous (default FULL: an acknowledged append survives power loss; OFF is for "
        "measuring the cost of durability, e.g. with a database on /dev/shm)",
    )
    p.add_argument(
        "--handshake-timeout-ms", type=positive_int, default=10_000,
        help="close a connection that has not sent a complete HTTP request head (the WebSocket upgrade) within "
        "this (ms, default 10 s): a client trickling half a request cannot hold a connection",
    )
    p.add_argument(
        "--workers", type=positive_int, default=1, metavar="N",
        help="server processes on this port, one PostgreSQL database (default 1; refused on SQLite): one per core "
        "the machine can give; each is named SERVER_ID#i, and a session lives in the one that opened it "
        "(docs/scaling.md, \"Several processes on one port\")",
    )
    p.add_argument("--listen-fd", type=non_negative_int, default=None, help=argparse.SUPPRESS)  # a --workers child's socket
    p.set_defaults(func=cmd_serve)

    p = sub.add_parser("worker", parents=[common, chain_key, master_key], help="run a worker: claim ticks, run the engine, append outputs")
    p.add_argument("--engine", choices=["all", "speech", "world"], default="all", help="the reference engines to run (default: both)")
    p.add_argument(
        "--engine-plugin",
        action="append",
        default=[],
        metavar="MODULE:CLASS",
        help="load an engine class (e.g. a GPU model) that implements the engine protocol; it replaces the reference engine of its kinds",
    )
    p.add_argument("--claim-ttl-ms", type=positive_int, default=5000, help="tick claim lease (ms)")
    p.add_argument("--poll-ms", type=positive_int, default=10, help="idle polling interval (ms)")
    p.add_argument("--chunk-ms", type=positive_int, default=500, help="audio per tick (ms)")
    p.add_argument("--step-delay-ms", type=int, default=0, help="extra time per step, to stand in for a slower model (ms)")
    p.add_argument(
        "--batch-size", type=_batch_size, default=1, metavar="B",
        help="claim up to B ready ticks across sessions (one per session) and step them as one batch "
        "(an engine's step_batch, or tick by tick), committing all outputs in one transaction (default 1)",
    )
    p.add_argument(
        "--batch-wait-ms", type=non_negative_int, default=0, metavar="W",
        help="the longest wait for more ticks to fill a batch before stepping what was claimed (ms, default 0: never wait)",
    )
    p.add_argument("--worker-id", default=None)
    p.set_defaults(func=cmd_worker)

    p = sub.add_parser("sessions", parents=[common], help="list the sessions in the log")
    p.set_defaults(func=cmd_sessions)

    p = sub.add_parser("replay", parents=[common, master_key], help="rebuild a session from the log and show its timeline")
    p.add_argument("session_id", nargs="*", help="session id (a unique prefix is enough); with --recheck any number (none: every session)")
    p.add_argument("--at", type=int, default=None, metavar="SEQ", help="stop after this seq")
    p.add_argument("--json", action="store_true", help="print JSON instead of tables")
    p.add_argument(
        "--render",
        metavar="DIR",
        default=None,
        help="world sessions: re-render every chunk from its tick into DIR and compare with the recorded frame hashes (exit 1 on a difference)",
    )
    p.add_argument(
        "--recheck",
        action="store_true",
        help="re-decide every logged command with this code and report where it decides otherwise (exit 1 on a difference; docs/replay.md)",
    )
    _archive_options(p)
    p.set_defaults(func=cmd_replay)

    p = sub.add_parser("audit", parents=[common, chain_key, master_key], help="check hash chains, seqs, ticks and outputs; exit 1 on any violation")
    p.add_argument("session_id", nargs="?", default=None, help="one session (default: all)")
    p.add_argument("--json", action="store_true")
    p.add_argument(
        "--checkpoint", default=os.environ.get("DUPLEX_ES_CHECKPOINTS") or None, metavar="FILE|DIR",
        help="also check the log against the signed checkpoints in FILE|DIR (default: $DUPLEX_ES_CHECKPOINTS): "
        "detects cut tails and deleted sessions up to the latest checkpoint",
    )
    _archive_options(p)
    p.set_defaults(func=cmd_audit)

    p = sub.add_parser(
        "checkpoint", parents=[common, chain_key],
        help="append a signed checkpoint of every session's head to FILE|DIR, kept outside the database",
    )
    p.add_argument(
        "--out", default=os.environ.get("DUPLEX_ES_CHECKPOINTS") or None, metavar="FILE|DIR",
        help="the JSON-lines file to append to, or a directory for checkpoints.jsonl (default: $DUPLEX_ES_CHECKPOINTS)",
    )
    p.set_defaults(func=cmd_checkpoint)

    p = sub.add_parser("master-key", parents=[common], help="make or rotate a master key file (new), list its key ids (list), or rewrap every data key under its first key (rewrap)")
    p.add_argument("master_key_command", choices=["new", "list", "rewrap"])
    p.add_argument("file", metavar="FILE")
    p.set_defaults(func=cmd_master_key)

    p = sub.add_parser("erase", parents=[common], help="erase a session's content: destroy its data key and snapshots, log session.erased (docs/privacy.md)")
    p.add_argument("session_id", metavar="SESSION")
    p.add_argument("--reason", default="request", type=_reason, help="why, logged with the erasure (up to 200 characters; default: request)")
    p.set_defaults(func=cmd_erase)

    p = sub.add_parser("chain-key", parents=[common], help="make or rotate a chain key file (new), or list its key ids (list)")
    p.add_argument("chain_key_command", choices=["new", "list"])
    p.add_argument("file", help="the key file: new creates it (mode 0600) or puts a new signing key before the old ones")
    p.set_defaults(func=cmd_chain_key)

    p = sub.add_parser(
        "inspect", parents=[common, chain_key, master_key],
        help="serve the session inspector (timeline, audio, state at any event) on a local web page, or export one session as a single HTML file",
    )
    p.add_argument("session_id", nargs="?", default=None, help="open this session (a unique prefix is enough); required with --out")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=port, default=8100)
    p.add_argument("--allow-remote", action="store_true", help="serve on a --host other machines can reach (no authentication: they read every session)")
    p.add_argument("--out", default=None, metavar="FILE.html", help="write the session's view as one self-contained HTML file instead of serving")
    _archive_options(p)
    p.set_defaults(func=cmd_inspect)

    p = sub.add_parser("export", parents=[common, master_key], help="write events as JSON Lines, each in its current schema version")
    p.add_argument("session_id", nargs="?", default=None, help="one session (default: the whole log, in position order)")
    p.add_argument("--out", default=None, metavar="FILE", help="write to FILE (default: standard output)")
    _archive_options(p)
    p.set_defaults(func=cmd_export)

    p = sub.add_parser(
        "archive", parents=[common],
        help="move ended sessions out of the database into compressed files that replay, audit and inspect read (docs/privacy.md)",
    )
    p.add_argument("session_id", nargs="*", metavar="SESSION", help="the ended sessions to archive (or --ended-days)")
    p.add_argument("--to", required=True, metavar="DIR", help="the directory the files are written to (SESSION.dxa)")
    p.add_argument("--ended-days", type=_ended_days, default=None, metavar="N", help="archive every session that ended N days ago or more (0: every ended session)")
    p.add_argument(
        "--compact", action="store_true",
        help="then give the freed space back (SQLite VACUUM; PostgreSQL VACUUM FULL, which makes appends wait while it runs)",
    )
    p.set_defaults(func=cmd_archive)

    p = sub.add_parser("import", parents=[common, chain_key, master_key], help="append the sessions of JSON-lines exports to the log (e.g. to recheck them)")
    p.add_argument("files", nargs="+", metavar="FILE", help="a file `duplex-es export` wrote; its sessions must not be in the log yet")
    p.set_defaults(func=cmd_import)

    # demo, chaos, bench, loadgen and any other package's commands: found by entry point, so
    # the runtime imports none of them (duplex_es.cli.discovery).
    add_tool_commands(sub, [common], console, taken=set(sub.choices))
    return parser


def _archive_options(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--archive", default=None, metavar="FILE",
        help="read the session from this archive file (`duplex-es archive`); --db, if it exists, brings its key and erasure",
    )
    p.add_argument(
        "--archive-dir", action="append", default=None, metavar="DIR",
        help="where archive files moved from where they were written may be found (by name; repeatable)",
    )


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Entry point of the ``duplex-es`` console script."""
    parser = build_parser()
    # parse_args, except that a command that cannot run (its extra is not installed) takes any
    # arguments, to answer with what to install instead of an error about an option it never got.
    args, unknown = parser.parse_known_args(argv)
    args.argv = list(sys.argv[1:] if argv is None else argv)  # `serve --workers` passes it on to its children
    if unknown and not getattr(args, "unavailable", False):
        parser.error(f"unrecognized arguments: {' '.join(unknown)}")
    try:
        args.log_level = _log_level(str(args.log_level))
    except argparse.ArgumentTypeError as exc:
        parser.error(f"--log-level: {exc}")
    logging.basicConfig(level=getattr(logging, args.log_level), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        return args.func(args)
    except KeyboardInterrupt:
        return 130
    except (DuplexError, ValueError, OSError) as exc:
        # One line, unwrapped, for whoever greps it; escaped, as a message may hold brackets (an
        # extra's name, a path) that are not markup.
        errors.print(f"[red]duplex-es {args.command}:[/] {escape(str(exc))}", highlight=False, soft_wrap=True)
        return 2
    except sa.exc.DBAPIError as exc:
        reason = str(exc.orig).strip().splitlines()[0] if exc.orig is not None else str(exc)
        errors.print(f"[red]duplex-es {args.command}:[/] database error: {escape(reason)}", highlight=False, soft_wrap=True)
        return 2


if __name__ == "__main__":
    sys.exit(main())
