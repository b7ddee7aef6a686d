"""Alembic environment for duplex_es.

Run through ``duplex-es db upgrade`` (or automatically by ``serve``, ``worker`` and ``demo``),
which passes an open connection in ``config.attributes["connection"]``; the plain ``alembic``
command works too and reads the URL from ``sqlalchemy.url`` or ``DUPLEX_ES_DATABASE_URL``.
"""

from alembic import context
import sqlalchemy as sa

from duplex_es.store.database import resolve_url
from duplex_es.store.schema import metadata

config = context.config


def run() -> None:
    connection = config.attributes.get("connection")
    if connection is not None:
        context.configure(connection=connection, target_metadata=metadata, render_as_batch=True)
        with context.begin_transaction():
            context.run_migrations()
        return
    url = resolve_url(config.get_main_option("sqlalchemy.url") or None)
    engine = sa.create_engine(url)
    with engine.connect() as conn:
        context.configure(connection=conn, target_metadata=metadata, render_as_batch=True)
        with context.begin_transaction():
            context.run_migrations()


run()
