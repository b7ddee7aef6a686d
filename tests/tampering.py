"""Tampering with a log as someone with write access to its database would (tests of audit)."""

from __future__ import annotations

from duplex_es.store import Database


def attack(db: Database, *statements: str) -> None:
    """Remove the append-only guard (as a database owner can) and run ``statements``."""
    guard = (
        ("DROP TRIGGER IF EXISTS events_refuse_update", "DROP TRIGGER IF EXISTS events_refuse_delete")
        if db.backend.name == "sqlite"
        else ("ALTER TABLE events DISABLE TRIGGER USER",)
    )
    with db.write() as conn:
        for stmt in (*guard, *statements):
            conn.exec_driver_sql(stmt)
