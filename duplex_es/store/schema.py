"""SQLAlchemy Core descriptions of the log's tables, used to build queries.

These objects never create anything: the schema is created and changed only by the Alembic
migrations in ``migrations/`` (``duplex-es db upgrade``). A test checks that the two agree.
"""

from __future__ import annotations

import sqlalchemy as sa

__all__ = ["metadata", "events", "idempotency", "ticks", "snapshots", "session_owners", "session_keys", "archived_sessions"]

metadata = sa.MetaData()

#: Position type: BIGINT on PostgreSQL, INTEGER on SQLite so it aliases the rowid.
Position = sa.BigInteger().with_variant(sa.Integer(), "sqlite")

#: The immutable log. ``position`` is the global order, ``seq`` the gapless per-session order;
#: ``hash`` chains each event to the previous event of its session; ``key_id`` names the chain
#: key whose HMAC ``hash`` is (NULL: the unkeyed chain; duplex_es.store.chain); ``payload`` holds
#: the audio of appends and engine outputs as bytes (NULL: everything is in ``data``;
#: duplex_es.events.codec.encode_row), or, when ``sealed`` is set, the event's content sealed
#: under its session's data key (duplex_es.store.datakeys; docs/privacy.md).
events = sa.Table(
    "events",
    metadata,
    sa.Column("position", Position, primary_key=True, autoincrement=True),
    sa.Column("session_id", sa.String(128), nullable=False),
    sa.Column("seq", sa.BigInteger(), nullable=False),
    sa.Column("type", sa.String(128), nullable=False),
    sa.Column("version", sa.Integer(), nullable=False),
    sa.Column("data", sa.Text(), nullable=False),
    sa.Column("recorded_at_us", sa.BigInteger(), nullable=False),
    sa.Column("prev_hash", sa.String(64), nullable=False),
    sa.Column("hash", sa.String(64), nullable=False),
    sa.Column("key_id", sa.String(16), nullable=True),
    sa.Column("payload", sa.LargeBinary(), nullable=True),
    sa.Column("sealed", sa.SmallInteger(), nullable=True),
    sa.UniqueConstraint("session_id", "seq", name="uq_events_session_seq"),
    sqlite_autoincrement=True,
)

#: Idempotency keys: a client's ``event_id`` within a session, or a tick's ``request_id``. A
#: key maps to the contiguous run of seqs its batch wrote.
idempotency = sa.Table(
    "idempotency",
    metadata,
    sa.Column("session_id", sa.String(128), primary_key=True),
    sa.Column("key", sa.String(256), primary_key=True),
    sa.Column("first_seq", sa.BigInteger(), nullable=False),
    sa.Column("last_seq", sa.BigInteger(), nullable=False),
)

#: The tick work queue, maintained in the same transaction as the ``tick.issued`` and
#: ``epoch.advanced`` events it mirrors. Rows are mutable (claims); the log is not.
ticks = sa.Table(
    "ticks",
    metadata,
    sa.Column("request_id", sa.String(128), primary_key=True),
    sa.Column("session_id", sa.String(128), nullable=False),
    sa.Column("seq", sa.BigInteger(), nullable=False),
    sa.Column("position", sa.BigInteger(), nullable=False),
    sa.Column("kind", sa.String(32), nullable=False),
    sa.Column("status", sa.String(16), nullable=False),
    sa.Column("claim_token", sa.String(64), nullable=True),
    sa.Column("claimed_by", sa.String(128), nullable=True),
    sa.Column("claimed_until_us", sa.BigInteger(), nullable=True),
    sa.Column("attempts", sa.Integer(), nullable=False, server_default="0"),
    sa.Index("ix_ticks_status_position", "status", "position"),
)

#: Folded session states, a cache of the log (never its truth): ``data`` is the state's
#: canonical JSON as of ``seq`` under reducer ``reducer_version``, ``digest`` its SHA-256, so a
#: corrupted row is detected and ignored. Rows may be deleted (the newest few are kept).
snapshots = sa.Table(
    "snapshots",
    metadata,
    sa.Column("session_id", sa.String(128), primary_key=True),
    sa.Column("seq", sa.BigInteger(), primary_key=True),
    sa.Column("reducer_version", sa.Integer(), primary_key=True),
    sa.Column("data", sa.Text(), nullable=False),
    sa.Column("digest", sa.String(64), nullable=False),
    sa.Column("created_at_us", sa.BigInteger(), nullable=False),
)

#: Which server process may append a session's commands. ``generation`` is the fencing token:
#: it rises with every change of owner, and an append checks it in its own transaction, so a
#: former owner that has not noticed the move cannot write. ``expires_at_us`` is the lease the
#: owner renews while alive; after it another server may take the session up.
session_owners = sa.Table(
    "session_owners",
    metadata,
    sa.Column("session_id", sa.String(128), primary_key=True),
    sa.Column("owner_id", sa.String(128), nullable=False),
    sa.Column("generation", sa.BigInteger(), nullable=False),
    sa.Column("expires_at_us", sa.BigInteger(), nullable=False),
    sa.Index("ix_session_owners_expires", "expires_at_us"),
    sa.Index("ix_session_owners_owner", "owner_id"),
)

#: Each sealed session's data key, wrapped by a master key (duplex_es.store.datakeys,
#: docs/privacy.md): ``master_key_id`` names the master key, ``wrapped`` is the AES-GCM
#: ciphertext of the data key. An erasure sets both to NULL and ``erased_at_us``: the row stays,
#: a tombstone that refuses later content. Mutable (rotation rewraps), unlike the log.
session_keys = sa.Table(
    "session_keys",
    metadata,
    sa.Column("session_id", sa.String(128), primary_key=True),
    sa.Column("master_key_id", sa.String(16), nullable=True),
    sa.Column("wrapped", sa.LargeBinary(), nullable=True),
    sa.Column("created_at_us", sa.BigInteger(), nullable=False),
    sa.Column("erased_at_us", sa.BigInteger(), nullable=True),
)

#: Sessions moved out of the log into archive files (duplex_es.store.archives, docs/privacy.md
#: "Archives"): where the file was written (``location``), its SHA-256 and size, what the rows
#: took here (``stored_bytes``: data and payload lengths), and the session's ``events``,
#: ``last_seq``, ``head_hash``, ``last_position`` and ``head_key_id``, which bind the file to
#: this log (and let checkpoints pin an archived session's head without reading the file). While a row names a session,
#: the immutability trigger lets its events up to ``last_seq`` be deleted (migration 0007), and
#: appends refuse its id. ``principal``, ``sealed_events``, ``clear_content`` (events whose content is in
#: the clear) and ``ended_at_us`` are what ownership, erasure and retention need without the file.
archived_sessions = sa.Table(
    "archived_sessions",
    metadata,
    sa.Column("session_id", sa.String(128), primary_key=True),
    sa.Column("location", sa.Text(), nullable=False),
    sa.Column("file_sha256", sa.String(64), nullable=False),
    sa.Column("file_bytes", sa.BigInteger(), nullable=False),
    sa.Column("stored_bytes", sa.BigInteger(), nullable=False),
    sa.Column("events", sa.BigInteger(), nullable=False),
    sa.Column("last_seq", sa.BigInteger(), nullable=False),
    sa.Column("head_hash", sa.String(64), nullable=False),
    sa.Column("last_position", sa.BigInteger(), nullable=False),
    sa.Column("head_key_id", sa.String(16), nullable=True),
    sa.Column("principal", sa.String(128), nullable=True),
    sa.Column("sealed_events", sa.BigInteger(), nullable=False),
    sa.Column("clear_content", sa.BigInteger(), nullable=False),
    sa.Column("ended_at_us", sa.BigInteger(), nullable=False),
    sa.Column("archived_at_us", sa.BigInteger(), nullable=False),
)
