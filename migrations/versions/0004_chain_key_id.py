"""Keyed hash chain: which chain key signed each event (issue 12, tamper evidence).

``key_id`` names the key (the first 8 hex digits of its SHA-256, never the key) whose HMAC is
the event's ``hash``; NULL for the unkeyed chain, which every event written before this
revision uses, so old logs read and audit as before.

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-02
"""

from alembic import op
import sqlalchemy as sa

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # A plain ADD COLUMN of a nullable column: both databases do it in place (SQLite without
    # rebuilding the table, so its immutability triggers stay as they are).
    op.add_column("events", sa.Column("key_id", sa.String(16), nullable=True))


def downgrade() -> None:
    # Not batch mode: SQLite's batch mode copies the table, which would drop its immutability
    # triggers; a plain DROP COLUMN (SQLite 3.35+) keeps them. Keyed hashes stay keyed: a log
    # downgraded past this revision no longer audits its keyed events.
    op.execute("ALTER TABLE events DROP COLUMN key_id")
