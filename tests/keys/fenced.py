"""A key service that meets an erasure's fence: ``keys migrate`` racing an erasure, made to happen."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from sqlalchemy import insert
from sqlalchemy.ext.asyncio import AsyncEngine

from teamstore.db.fence import user_holds
from teamstore.keys import KeyService
from teamstore.settings import Settings


class FencedOnFirstKey(KeyService):
    """A key service that sees ``user`` fenced by an erasure just as ``keys migrate`` asks for their key."""

    def __init__(self, engine: AsyncEngine, user: str) -> None:
        super().__init__(engine, KeyService.from_settings(engine, Settings()).ring)
        self.user = user

    async def data_key(self, user_id: str, *, create: bool = True) -> Any:
        if user_id == self.user:
            async with self.engine.begin() as conn:
                await conn.execute(insert(user_holds).values(user_id=user_id, reason="erasure",
                                                             created_at=datetime.now(UTC)))
        return await super().data_key(user_id, create=create)

