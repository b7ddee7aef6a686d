"""Alembic environment for duplex_es.

Run through ``duplex-es db upgrade`` (or automatically by ``serve``, ``worker`` and ``demo``),
which passes an open connection in ``config.attributes["connection"]``; the plain ``alembic``
command works too and reads the URL from ``sqlalchemy.url`` or ``DUPLEX_ES_DATABASE_URL``.
"""

from alembic import context
import sqlalchemy as sa

from duplex_es.store.database import resolve_url
from duplex_es.store.registry import backend_class
from duplex_es.store.schema import metadata

config = context.config


def run() -> None:
    connection = config.attributes.get("connection")
    if connection is not None:
        _configure(connection)
        return
    url = resolve_url(config.get_main_option("sqlalchemy.url") or None)
    engine = sa.create_engine(url)
    with engine.connect() as conn:
        _configure(conn)


def _configure(connection: sa.engine.Connection) -> None:
    # The backend's Alembic options (SQLite: batch mode, since its ALTER TABLE is limited).
    options = backend_class(connection.dialect.name).migration_options
    context.configure(connection=connection, target_metadata=metadata, **options)
    with context.begin_transaction():
        context.run_migrations()


run()
