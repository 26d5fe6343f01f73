"""Alembic environment: runs on the connection `registry_server.migrate` hands over."""

from __future__ import annotations

from alembic import context

from registry_server.db import make_engine
from registry_server.models import Base

config = context.config


def run(connection) -> None:
    # Batch mode lets later migrations alter SQLite tables (copy-and-move).
    context.configure(connection=connection, target_metadata=Base.metadata,
                      render_as_batch=True, compare_type=True)
    with context.begin_transaction():
        context.run_migrations()


connection = config.attributes.get("connection")
if connection is not None:
    run(connection)
else:  # the plain `alembic` command, e.g. `alembic revision --autogenerate`
    with make_engine(config.get_main_option("sqlalchemy.url")).connect() as conn:
        run(conn)
