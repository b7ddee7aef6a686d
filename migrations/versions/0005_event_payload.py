"""Audio as bytes: the ``payload`` column (issue 16, the codec; issue 17, the storage shape).

An append's audio and an engine's audio output are stored as their bytes in ``payload`` (BLOB on
SQLite, BYTEA on PostgreSQL), with ``"audio": ""`` in ``data``, instead of as base64 inside the
JSON: a quarter smaller, and nothing to parse or decode when the audio is read. The chain's hash
covers the payload after the JSON (duplex_es.store.chain.event_hash).

Rows written before this revision have no payload (NULL) and keep their audio in ``data``: they
are read and audited as they always were (the log is immutable: nothing is rewritten).

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-07
"""

from alembic import op
import sqlalchemy as sa

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # A plain ADD COLUMN of a nullable column (as 0004): in place on both databases, SQLite's
    # immutability triggers untouched.
    op.add_column("events", sa.Column("payload", sa.LargeBinary(), nullable=True))


def downgrade() -> None:
    # As 0004's: a plain DROP COLUMN keeps SQLite's triggers. The audio of rows written with a
    # payload is lost with it, so a downgrade refuses while any row has one.
    bind = op.get_bind()
    if bind.execute(sa.text("SELECT 1 FROM events WHERE payload IS NOT NULL LIMIT 1")).first() is not None:
        raise RuntimeError("cannot downgrade past 0005: events hold audio in their payload column (it would be lost)")
    op.execute("ALTER TABLE events DROP COLUMN payload")
