"""Session ownership: which server may append a session's commands, fenced by a generation;
and, on PostgreSQL, NOTIFY wake-ups for new events and new ticks (issue 6).

The notifications are hints to re-read (never the data): statement-level triggers send one per
inserting statement with an empty payload, which PostgreSQL delivers at commit only and folds
into one per transaction, so a writer pays no extra round trip.

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-30
"""

from alembic import op
import sqlalchemy as sa

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


PG_NOTIFY = [
    """CREATE FUNCTION duplex_es_notify_events() RETURNS trigger LANGUAGE plpgsql AS $$
       BEGIN PERFORM pg_notify('duplex_es_events', ''); RETURN NULL; END $$""",
    """CREATE TRIGGER events_notify AFTER INSERT ON events
       FOR EACH STATEMENT EXECUTE FUNCTION duplex_es_notify_events()""",
    """CREATE FUNCTION duplex_es_notify_ticks() RETURNS trigger LANGUAGE plpgsql AS $$
       BEGIN PERFORM pg_notify('duplex_es_ticks', ''); RETURN NULL; END $$""",
    """CREATE TRIGGER ticks_notify AFTER INSERT ON ticks
       FOR EACH STATEMENT EXECUTE FUNCTION duplex_es_notify_ticks()""",
]


def upgrade() -> None:
    op.create_table(
        "session_owners",
        sa.Column("session_id", sa.String(128), primary_key=True),
        sa.Column("owner_id", sa.String(128), nullable=False),
        sa.Column("generation", sa.BigInteger(), nullable=False),
        sa.Column("expires_at_us", sa.BigInteger(), nullable=False),
    )
    op.create_index("ix_session_owners_expires", "session_owners", ["expires_at_us"])
    op.create_index("ix_session_owners_owner", "session_owners", ["owner_id"])
    if op.get_bind().dialect.name == "postgresql":
        for ddl in PG_NOTIFY:
            op.execute(ddl)


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute("DROP TRIGGER ticks_notify ON ticks")
        op.execute("DROP TRIGGER events_notify ON events")
        op.execute("DROP FUNCTION duplex_es_notify_ticks()")
        op.execute("DROP FUNCTION duplex_es_notify_events()")
    op.drop_table("session_owners")
