"""The records of forgets and the retention sweep's forgetting of quiet users (teamstore.erasure.quiet): a writer of a
session opened before a forget never writes back what it removed, and no raw user id is left behind the sweep."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from sqlalchemy import delete, insert, select
from sqlalchemy.ext.asyncio import AsyncEngine

from teamstore.db.fence import RETENTION, user_holds
from teamstore.keys import KeyService
from teamstore.keys.schema import data_keys
from teamstore.memory.schema import forgets
from teamstore.memory.store import MemoryStore
from teamstore.settings import Settings


async def _ids(engine: AsyncEngine, column: Any) -> list[str]:
    async with engine.connect() as conn:
        return sorted((await conn.execute(select(column))).scalars().all())


def _keys(engine: AsyncEngine) -> KeyService:
    return KeyService.from_settings(engine, Settings(key_cache_seconds=0))


async def test_a_forget_once_the_sweep_destroyed_the_key_records_nothing_and_says_the_sweep_forgets_the_user(
    engine: AsyncEngine,
) -> None:
    """Not "erased": the sweep holds the user, and their key is gone (its cache wait follows)."""
    keys = _keys(engine)
    store = MemoryStore(engine, keys=keys)
    await keys.data_key("alice", create=True)
    async with engine.begin() as conn:
        await conn.execute(insert(user_holds).values(user_id="alice", reason=RETENTION, created_at=datetime.now(UTC)))
        await conn.execute(delete(data_keys).where(data_keys.c.user_id == "alice"))
    gone = await store.forget("alice")
    assert gone.unrecorded is not None and "erased" not in gone.unrecorded
    assert gone.unrecorded.startswith("nothing was recorded of the forget: the retention sweep is forgetting the user")
    assert await _ids(engine, forgets.c.user_id) == []
