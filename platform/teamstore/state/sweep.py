"""Retention for resume state: delete expired sessions in batches.

    from teamstore.state.sweep import sweep_expired_sessions

    deleted = await sweep_expired_sessions(engine, batch_size=500)
"""

from __future__ import annotations

from sqlalchemy.ext.asyncio import AsyncEngine

from teamstore.state.sql import lease_mode, store_for


async def sweep_expired_sessions(engine: AsyncEngine, batch_size: int = 500) -> int:
    """Delete every expired session row that no worker holds; returns how many were deleted.

    Args:
        engine: The state database.
        batch_size: Rows per delete statement, to keep transactions short on big tables.
    """
    store = store_for(engine, pool_size=1, lease=await lease_mode(engine))  # whichever leases the database serves
    try:
        return await store.sweep_expired(batch_size=batch_size)
    finally:
        await store.aclose()
