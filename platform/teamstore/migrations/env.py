"""Alembic environment: runs on the connection handed over by ``teamstore.db.migrate``."""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any

from alembic import context
from alembic.runtime.migration import MigrationContext, MigrationInfo

from teamstore.db.metadata import metadata

connection = context.config.attributes.get("connection")
if connection is None:
    raise RuntimeError("run migrations through `teamstore db upgrade`, which supplies the connection")

applied: list[str] | None = context.config.attributes.get("applied")


def _applied(ctx: MigrationContext, step: MigrationInfo, heads: Collection[Any], run_args: Mapping[str, Any]) -> None:
    """Note each migration as it is applied: ``teamstore.db.migrate`` names the one that fails after them."""
    if applied is not None and step.up_revision_id is not None:
        applied.append(step.up_revision_id)


context.configure(connection=connection, target_metadata=metadata, render_as_batch=True, on_version_apply=_applied)
with context.begin_transaction():
    context.run_migrations()
