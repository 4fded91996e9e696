"""Alembic environment: runs on the connection handed over by ``teamstore.db.migrate``."""

from __future__ import annotations

from alembic import context

from teamstore.db.metadata import metadata

connection = context.config.attributes.get("connection")
if connection is None:
    raise RuntimeError("run migrations through `teamstore db upgrade`, which supplies the connection")

context.configure(connection=connection, target_metadata=metadata, render_as_batch=True)
with context.begin_transaction():
    context.run_migrations()
