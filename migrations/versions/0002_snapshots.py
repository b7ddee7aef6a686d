"""Snapshots of folded session state (issue 5).

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-30
"""

from alembic import op
import sqlalchemy as sa

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "snapshots",
        sa.Column("session_id", sa.String(128), primary_key=True),
        sa.Column("seq", sa.BigInteger(), primary_key=True),
        sa.Column("reducer_version", sa.Integer(), primary_key=True),
        sa.Column("data", sa.Text(), nullable=False),
        sa.Column("digest", sa.String(64), nullable=False),
        sa.Column("created_at_us", sa.BigInteger(), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("snapshots")
