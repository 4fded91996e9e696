"""The database's own id: random, made the first time it is asked for and kept in the database itself
(``ts_store_settings``, ``database_id``). A backup restored keeps it; any other database has its own.

    from teamstore.db.identity import database_id

    ours = await database_id(engine)   # the same for this database, and for every restore of it

The local key file marks the keys a rotation makes with it (:mod:`teamstore.keys.unrecorded`): ``keys retire``
destroys a key the database does not record only if this database made it, which is the case after a restore
and never for the keys of another database that shares the file.

Beside it, made the same way, the key of how log lines name a request (:func:`log_name_key`): the id is no
secret, that key is.
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
LOG_NAME_KEY = "log_name_key"

# The state store's settings table (migration 0005), named here as a statement needs it: db/ is below state/.
_settings = table("ts_store_settings", column("name", String), column("value", String),
                  column("updated_at", DateTime(timezone=True)))


async def database_id(engine: AsyncEngine) -> str:
    """This database's id (32 hex characters), made now if it has none yet (two workers asking at once get the
    one that was stored first).

    Raises:
        StoreUnavailable: The database failed (or is not at head: run ``teamstore db upgrade``).
    """
    return await _made_once(engine, NAME, "the database's id")


async def log_name_key(engine: AsyncEngine) -> str:
    """The key of :func:`teamstore.ids.log_name` (32 hex characters): random, made once for this database as its
    id is, kept beside it, and never printed nor written anywhere else. Not the database's id, which is no
    secret (a transcript folder's marker, every KMS key's tag, a command's refusal name it): keyed by that, a
    guessed request id could be tested against a log line.

    Raises:
        StoreUnavailable: The database failed (or is not at head: run ``teamstore db upgrade``).
    """
    return await _made_once(engine, LOG_NAME_KEY, "the key that names requests in log lines")


async def _made_once(engine: AsyncEngine, name: str, what: str) -> str:
    """The setting ``name``, a random value made now if it has none yet (inserted if absent: two workers asking
    at once get the one that was stored first)."""
    dialect = engine.dialect.name
    stored = select(_settings.c.value).where(_settings.c.name == name)
    made = dialect_insert(dialect)(_settings).values(name=name, value=secrets.token_hex(16),
                                                     updated_at=shared_now(dialect))
    try:
        async with engine.connect() as conn:  # read first: a status check writes nothing (migrations make them)
            if (found := (await conn.execute(stored)).scalar_one_or_none()) is not None:
                return str(found)
        async with engine.begin() as conn:
            await conn.execute(made.on_conflict_do_nothing(index_elements=["name"]))
            return str((await conn.execute(stored)).scalar_one())
    except SQLAlchemyError as exc:
        raise StoreUnavailable(f"could not read {what}: {describe_failure(exc)}",
                               hint="check the database, and run `teamstore db upgrade`") from exc
