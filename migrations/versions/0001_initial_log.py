"""The event log, idempotency keys, the tick queue, and immutability triggers.

Revision ID: 0001
Revises:
Create Date: 2026-11-30
"""

from alembic import op
import sqlalchemy as sa

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None

POSITION = sa.BigInteger().with_variant(sa.Integer(), "sqlite")

SQLITE_TRIGGERS = [
    """CREATE TRIGGER events_refuse_update BEFORE UPDATE ON events
       BEGIN SELECT RAISE(ABORT, 'duplex_es: events are immutable (UPDATE refused)'); END""",
    # SQLite has no TRUNCATE; "DELETE FROM events" with no WHERE fires this trigger too because
    # SQLite turns off its truncate optimization when a delete trigger exists.
    """CREATE TRIGGER events_refuse_delete BEFORE DELETE ON events
       BEGIN SELECT RAISE(ABORT, 'duplex_es: events are immutable (DELETE refused)'); END""",
]

PG_TRIGGERS = [
    """CREATE FUNCTION duplex_es_refuse_event_change() RETURNS trigger LANGUAGE plpgsql AS $$
       BEGIN
         RAISE EXCEPTION 'duplex_es: events are immutable (% refused)', TG_OP
           USING ERRCODE = 'restrict_violation';
       END $$""",
    """CREATE TRIGGER events_refuse_update_delete BEFORE UPDATE OR DELETE ON events
       FOR EACH ROW EXECUTE FUNCTION duplex_es_refuse_event_change()""",
    """CREATE TRIGGER events_refuse_truncate BEFORE TRUNCATE ON events
       FOR EACH STATEMENT EXECUTE FUNCTION duplex_es_refuse_event_change()""",
]


def upgrade() -> None:
    op.create_table(
        "events",
        sa.Column("position", POSITION, primary_key=True, autoincrement=True),
        sa.Column("session_id", sa.String(128), nullable=False),
        sa.Column("seq", sa.BigInteger(), nullable=False),
        sa.Column("type", sa.String(128), nullable=False),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.Column("data", sa.Text(), nullable=False),
        sa.Column("recorded_at_us", sa.BigInteger(), nullable=False),
        sa.Column("prev_hash", sa.String(64), nullable=False),
        sa.Column("hash", sa.String(64), nullable=False),
        sa.UniqueConstraint("session_id", "seq", name="uq_events_session_seq"),
        sqlite_autoincrement=True,
    )
    op.create_table(
        "idempotency",
        sa.Column("session_id", sa.String(128), primary_key=True),
        sa.Column("key", sa.String(256), primary_key=True),
        sa.Column("first_seq", sa.BigInteger(), nullable=False),
        sa.Column("last_seq", sa.BigInteger(), nullable=False),
    )
    op.create_table(
        "ticks",
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
    )
    op.create_index("ix_ticks_status_position", "ticks", ["status", "position"])
    dialect = op.get_bind().dialect.name
    for ddl in SQLITE_TRIGGERS if dialect == "sqlite" else PG_TRIGGERS:
        op.execute(ddl)


def downgrade() -> None:
    dialect = op.get_bind().dialect.name
    if dialect == "sqlite":
        op.execute("DROP TRIGGER IF EXISTS events_refuse_update")
        op.execute("DROP TRIGGER IF EXISTS events_refuse_delete")
    else:
        op.execute("DROP TRIGGER IF EXISTS events_refuse_truncate ON events")
        op.execute("DROP TRIGGER IF EXISTS events_refuse_update_delete ON events")
        op.execute("DROP FUNCTION IF EXISTS duplex_es_refuse_event_change()")
    op.drop_index("ix_ticks_status_position", table_name="ticks")
    op.drop_table("ticks")
    op.drop_table("idempotency")
    op.drop_table("events")
