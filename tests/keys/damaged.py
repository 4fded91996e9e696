"""A user's data key row damaged by hand, as ``keys rotate`` and ``keys migrate`` meet it."""

from __future__ import annotations

from sqlalchemy import select, update
from sqlalchemy.ext.asyncio import AsyncEngine

from teamstore.keys import KeyService
from teamstore.keys.schema import data_keys
from teamstore.settings import Settings


async def damage_wrapped_key(engine: AsyncEngine, user: str) -> str:
    """Overwrite ``user``'s wrapped data key with bytes no key encryption key opens; its key id."""
    async with engine.begin() as conn:
        await conn.execute(update(data_keys).where(data_keys.c.user_id == user).values(wrapped=b"\x02" * 60))
        damaged: str = await conn.scalar(select(data_keys.c.key_id).where(data_keys.c.user_id == user))
    return damaged


async def with_damaged_key(engine: AsyncEngine, user: str) -> str:
    """Give ``user`` a data key, then damage its row; its key id."""
    await KeyService.from_settings(engine, Settings()).data_key(user)
    return await damage_wrapped_key(engine, user)
