"""Retention for resume state: delete expired sessions, and quarantined states past retention, in batches.

    from teamstore.state.sweep import sweep_expired_sessions, sweep_quarantine

    deleted = await sweep_expired_sessions(engine, batch_size=500, keys=keys, ending=record_run)
    deleted = await sweep_quarantine(engine, cutoff, batch_size=500)
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import delete, select
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.ext.asyncio import AsyncEngine

from teamstore.errors import ConfigurationError
from teamstore.keys.service import KeyService
from teamstore.state.base import Ending
from teamstore.state.factory import store_for
from teamstore.state.failures import unavailable
from teamstore.state.lease_mode import lease_mode
from teamstore.state.schema import quarantine


async def sweep_expired_sessions(
    engine: AsyncEngine, batch_size: int = 500, *, keys: KeyService | None = None, ending: Ending | None = None
) -> int:
    """Delete every expired session row that no worker holds; returns how many were deleted.

    Args:
        engine: The state database.
        batch_size: Rows per delete statement, to keep transactions short on big tables.
        keys: Users' data keys, which open the checkpoints handed to ``ending``.
        ending: Handed each expired row that holds an interrupted run's checkpoint, under its lease, before it
            is deleted (:meth:`teamstore.state.base.StateStore.sweep_expired`).
    """
    for attempt in (1, 2):
        # Whichever kind of lease the database serves.
        store = store_for(engine, pool_size=1, lease=await lease_mode(engine), keys=keys)
        try:
            return await store.sweep_expired(batch_size=batch_size, ending=ending)
        except ConfigurationError:
            if attempt == 2:
                raise
            # `teamstore db lease-mode` switched between reading the mode and sweeping: read it again.
        finally:
            await store.aclose()
    raise AssertionError("unreachable")


async def sweep_quarantine(engine: AsyncEngine, cutoff: datetime, batch_size: int = 500) -> int:
    """Delete quarantined states set aside before ``cutoff``; returns how many were deleted.

    Raises:
        StoreUnavailable: The database failed.
    """
    total = 0
    while True:
        victims = select(quarantine.c.id).where(quarantine.c.quarantined_at < cutoff).limit(batch_size)
        try:
            async with engine.begin() as conn:
                count = int((await conn.execute(delete(quarantine).where(quarantine.c.id.in_(victims)))).rowcount or 0)
        except SQLAlchemyError as exc:
            raise unavailable(exc, "sweep the quarantine") from exc
        total += count
        if count < batch_size:
            return total
