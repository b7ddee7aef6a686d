"""Archives: ``archived_sessions``, and the one DELETE the log's triggers allow (issue 17,
docs/privacy.md "Archives").

``duplex-es archive`` moves an ended session's events, as written, into a compressed file and
records it here (the file, its digest, the session's last seq and head hash, so the file is
bound to this database). Only then may the session's rows up to that seq be deleted: the
immutability triggers of 0001 refuse every other DELETE, every UPDATE and TRUNCATE, as before.

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-07
"""

from alembic import op
import sqlalchemy as sa

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None

_SQLITE_REFUSE_DELETE = """CREATE TRIGGER events_refuse_delete BEFORE DELETE ON events
   WHEN NOT EXISTS (SELECT 1 FROM archived_sessions a WHERE a.session_id = OLD.session_id AND OLD.seq <= a.last_seq)
   BEGIN SELECT RAISE(ABORT, 'duplex_es: events are immutable (DELETE refused)'); END"""

_SQLITE_REFUSE_DELETE_0001 = """CREATE TRIGGER events_refuse_delete BEFORE DELETE ON events
   BEGIN SELECT RAISE(ABORT, 'duplex_es: events are immutable (DELETE refused)'); END"""

# The row trigger of 0001 calls this function for UPDATE and DELETE; TRUNCATE keeps refusing
# (its statement trigger has no OLD row, and an archive never truncates).
_PG_REFUSE = """CREATE OR REPLACE FUNCTION duplex_es_refuse_event_change() RETURNS trigger LANGUAGE plpgsql AS $$
   BEGIN
     IF TG_OP = 'DELETE' AND TG_LEVEL = 'ROW' AND EXISTS (
         SELECT 1 FROM archived_sessions a WHERE a.session_id = OLD.session_id AND OLD.seq <= a.last_seq) THEN
       RETURN OLD;
     END IF;
     RAISE EXCEPTION 'duplex_es: events are immutable (% refused)', TG_OP
       USING ERRCODE = 'restrict_violation';
   END $$"""

_PG_REFUSE_0001 = """CREATE OR REPLACE FUNCTION duplex_es_refuse_event_change() RETURNS trigger LANGUAGE plpgsql AS $$
   BEGIN
     RAISE EXCEPTION 'duplex_es: events are immutable (% refused)', TG_OP
       USING ERRCODE = 'restrict_violation';
   END $$"""


def upgrade() -> None:
    op.create_table(
        "archived_sessions",
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
    if op.get_bind().dialect.name == "sqlite":
        op.execute("DROP TRIGGER events_refuse_delete")
        op.execute(_SQLITE_REFUSE_DELETE)
    else:
        op.execute(_PG_REFUSE)


def downgrade() -> None:
    bind = op.get_bind()
    # Older code would read an archived session as one that never existed, and let its id start
    # a new chain: refuse while any session is archived.
    if bind.execute(sa.text("SELECT 1 FROM archived_sessions LIMIT 1")).first() is not None:
        raise RuntimeError("cannot downgrade past 0007: sessions are archived (older code cannot see them)")
    if bind.dialect.name == "sqlite":
        op.execute("DROP TRIGGER events_refuse_delete")
        op.execute(_SQLITE_REFUSE_DELETE_0001)
    else:
        op.execute(_PG_REFUSE_0001)
    op.drop_table("archived_sessions")
