"""Ordered schema migrations (Alembic), applied by an explicit command.

    teamstore db upgrade            # production: the only way tables are created or changed
    teamstore db current

    from teamstore.db.migrate import upgrade
    await upgrade(engine)           # the embedded SQLite default does this on open

The migration scripts ship inside the package (``teamstore/migrations``), so an installed wheel can
migrate without a checkout.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy.engine import Connection
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.ext.asyncio import AsyncEngine

from teamstore.db.engine import describe_failure, failure_hint
from teamstore.errors import SchemaNotReady, StoreUnavailable

MIGRATIONS = Path(__file__).resolve().parent.parent / "migrations"


def alembic_config(connection: Connection | None = None) -> Config:
    """An Alembic config pointing at the packaged migrations, optionally bound to a connection."""
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    if connection is not None:
        config.attributes["connection"] = connection
    return config


def head_revision() -> str:
    """The newest migration this code ships."""
    head = ScriptDirectory.from_config(alembic_config()).get_current_head()
    assert head is not None
    return head


def _upgrade(connection: Connection, target: str) -> None:
    command.upgrade(alembic_config(connection), target)


def _current(connection: Connection) -> str | None:
    return MigrationContext.configure(connection).get_current_revision()


async def _run(engine: AsyncEngine, fn: Any, *args: Any) -> Any:
    try:
        async with engine.begin() as conn:
            return await conn.run_sync(fn, *args)
    except SQLAlchemyError as exc:
        raise StoreUnavailable(describe_failure(exc), hint=failure_hint(exc)) from exc


async def upgrade(engine: AsyncEngine, target: str = "head") -> str | None:
    """Apply every migration up to ``target``; returns the revision the database is then at."""
    await _run(engine, _upgrade, target)
    current: str | None = await _run(engine, _current)
    return current


async def current_revision(engine: AsyncEngine) -> str | None:
    """The revision the database is at, ``None`` for an empty database."""
    result: str | None = await _run(engine, _current)
    return result


async def require_current(engine: AsyncEngine) -> None:
    """Raise :class:`SchemaNotReady` unless the database is at this code's head revision."""
    current = await current_revision(engine)
    if current != head_revision():
        raise SchemaNotReady(
            f"the database is at migration {current or 'none'}, this code needs {head_revision()}",
            hint="run `teamstore db upgrade` (production databases are never migrated implicitly)",
        )
