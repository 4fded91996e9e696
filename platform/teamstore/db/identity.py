"""The database's own id: random, made the first time it is asked for and kept in the database itself
(``ts_store_settings``, ``database_id``). A backup restored keeps it; any other database has its own.

    from teamstore.db.identity import database_id

    ours = await database_id(engine)   # the same for this database, and for every restore of it

The local key file marks the keys a rotation makes with it (:mod:`teamstore.keys.unrecorded`): ``keys retire``
destroys a key the database does not record only if this database made it, which is the case after a restore
and never for the keys of another database that shares the file.
"""

from __future__ import annotations

import secrets

from sqlalchemy import DateTime, String, column, select, table
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.ext.asyncio import AsyncEngine

from teamstore.db.clock import shared_now
from teamstore.db.engine import describe_failure
from teamstore.db.statements import dialect_insert
from teamstore.errors import StoreUnavailable

NAME = "database_id"

# The state store's settings table (migration 0005), named here as a statement needs it: db/ is below state/.
_settings = table("ts_store_settings", column("name", String), column("value", String),
                  column("updated_at", DateTime(timezone=True)))


async def database_id(engine: AsyncEngine) -> str:
    """This database's id (32 hex characters), made now if it has none yet (two workers asking at once get the
    one that was stored first).

    Raises:
        StoreUnavailable: The database failed (or is not at head: run ``teamstore db upgrade``).
    """
    dialect = engine.dialect.name
    stored = select(_settings.c.value).where(_settings.c.name == NAME)
    made = dialect_insert(dialect)(_settings).values(name=NAME, value=secrets.token_hex(16),
                                                     updated_at=shared_now(dialect))
    try:
        async with engine.connect() as conn:  # read first: a status check writes nothing (migration 0023 made it)
            if (found := (await conn.execute(stored)).scalar_one_or_none()) is not None:
                return str(found)
        async with engine.begin() as conn:
            await conn.execute(made.on_conflict_do_nothing(index_elements=["name"]))
            return str((await conn.execute(stored)).scalar_one())
    except SQLAlchemyError as exc:
        raise StoreUnavailable(f"could not read the database's id: {describe_failure(exc)}",
                               hint="check the database, and run `teamstore db upgrade`") from exc
