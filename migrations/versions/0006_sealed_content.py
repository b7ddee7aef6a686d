"""Sealed content: ``events.sealed`` and the ``session_keys`` table (issue 17, docs/privacy.md).

With a master key configured, an event's content (what was said, typed, prompted, answered) is
stored in its ``payload`` as AES-256-GCM ciphertext under its session's data key, and
``sealed`` says so (1: the format of duplex_es.store.datakeys). ``session_keys`` holds each
session's data key wrapped by the master key; erasing a session destroys it there.

Rows written before this revision have ``sealed`` NULL and read as they always did.

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-07
"""

from alembic import op
import sqlalchemy as sa

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # A nullable ADD COLUMN, as 0004 and 0005: in place, SQLite's immutability triggers untouched.
    op.add_column("events", sa.Column("sealed", sa.SmallInteger(), nullable=True))
    op.create_table(
        "session_keys",
        sa.Column("session_id", sa.String(128), primary_key=True),
        sa.Column("master_key_id", sa.String(16), nullable=True),
        sa.Column("wrapped", sa.LargeBinary(), nullable=True),
        sa.Column("created_at_us", sa.BigInteger(), nullable=False),
        sa.Column("erased_at_us", sa.BigInteger(), nullable=True),
    )


def downgrade() -> None:
    # Sealed rows cannot be read by older code (it would take the ciphertext for audio): refuse.
    bind = op.get_bind()
    if bind.execute(sa.text("SELECT 1 FROM events WHERE sealed IS NOT NULL LIMIT 1")).first() is not None:
        raise RuntimeError("cannot downgrade past 0006: events hold sealed content (older code cannot read it)")
    op.drop_table("session_keys")
    op.execute("ALTER TABLE events DROP COLUMN sealed")
