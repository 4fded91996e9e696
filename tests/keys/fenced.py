"""Key services that meet an erasure: ``keys migrate`` racing one (under way, or ended), made to happen."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from sqlalchemy import insert, select
from sqlalchemy.ext.asyncio import AsyncEngine

from teamstore.audit.transcripts.base import TranscriptStore
from teamstore.db.fence import user_holds
from teamstore.erasure import RequestStatus
from teamstore.erasure.receipt import Receipt
from teamstore.keys import KeyService
from teamstore.keys.schema import data_keys
from teamstore.settings import Settings
from tests.erasure.conftest import coordinator


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



class ErasedOnFirstKey(KeyService):
    """A key service that asks for ``user``'s key only once an erasure of them has run to its end, their rows
    deleted and the fence lifted: ``keys migrate`` read a row of theirs just before the erasure began."""

    def __init__(self, engine: AsyncEngine, store: TranscriptStore, user: str) -> None:
        super().__init__(engine, KeyService.from_settings(engine, Settings()).ring)
        self.store, self.user = store, user
        self.receipt: Receipt | None = None

    async def data_key(self, user_id: str, *, create: bool = True) -> Any:
        if user_id == self.user and self.receipt is None:
            self.receipt = await coordinator(self.engine, self.store).run(user_id, request_id="req-migrate")
            assert self.receipt.status is RequestStatus.COMPLETED
        return await super().data_key(user_id, create=create)


async def data_key_users(engine: AsyncEngine) -> list[str]:
    """The users ``ts_data_keys`` holds a key of."""
    async with engine.connect() as conn:
        return sorted((await conn.scalars(select(data_keys.c.user_id))).all())
