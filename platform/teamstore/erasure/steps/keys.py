"""The key step: destroy the user's data key first, so whatever a later step cannot delete is beyond use.

    from teamstore.erasure.steps.keys import KeyStep

    result = await KeyStep().erase(ctx, prior=None)     # delete + step record: one transaction

It runs right after the fence and before every delete: once it is done, every copy of the user's sealed data
(transcript versions under Object Lock or a legal hold, backups of the database once the key-encryption key of
their time is destroyed) is unreadable, whatever the later steps manage. The row is deleted in the same
transaction as the step's record, so a kill leaves both or neither; a rerun finds nothing more and carries the
count. Other workers may still hold the key in memory for ``key_cache_seconds``: the step waits that long
after the delete before it is done, so the fence (which refuses every write for the user) outlasts every
cached copy, and no worker seals under a destroyed key after the request completes.
"""

from __future__ import annotations

import asyncio

from sqlalchemy import delete, func, select
from sqlalchemy.exc import SQLAlchemyError

from teamstore.db.engine import describe_failure
from teamstore.erasure.receipt import Counts, StepStatus, StoreResult
from teamstore.erasure.record import write_step
from teamstore.erasure.steps.base import StepContext, seconds
from teamstore.errors import StoreUnavailable
from teamstore.keys.schema import data_keys


def _unavailable(exc: SQLAlchemyError) -> StoreUnavailable:
    return StoreUnavailable(f"erasure step 'keys' failed: {describe_failure(exc)}",
                            hint="fix the database, then rerun the same request id (it resumes where it stopped)")


class KeyStep:
    """Destroy the user's data key (``ts_data_keys``)."""

    name = "keys"

    async def enumerate(self, ctx: StepContext) -> Counts:
        """Whether the user has a data key (one row at most)."""
        if ctx.user_id is None:
            return Counts()
        try:
            async with ctx.engine.connect() as conn:
                found = await conn.scalar(select(func.count()).select_from(data_keys).where(
                    data_keys.c.user_id == ctx.user_id))
        except SQLAlchemyError as exc:
            raise _unavailable(exc) from exc
        return Counts(rows=int(found or 0))

    async def erase(self, ctx: StepContext, prior: StoreResult | None) -> StoreResult:
        """Delete the user's data key and record it, in one transaction; then outwait the workers' caches.

        Raises:
            StoreUnavailable: The database failed; nothing of this step was committed.
        """
        found = Counts()
        if ctx.user_id is not None:
            try:
                async with ctx.engine.begin() as conn:
                    result = await conn.execute(delete(data_keys).where(data_keys.c.user_id == ctx.user_id))
                    found = Counts(rows=int(result.rowcount or 0))
                    counts = found.plus(prior.counts) if prior is not None else found
                    await write_step(conn, ctx.request_id, self.name, StoreResult(status=StepStatus.DELETED,
                                                                                 counts=counts), ctx.owner)
            except SQLAlchemyError as exc:
                raise _unavailable(exc) from exc
        counts = found.plus(prior.counts) if prior is not None else found
        if ctx.keys is not None and ctx.user_id is not None:
            ctx.keys.forget(ctx.user_id)
        if counts.rows and ctx.keys is not None and ctx.keys.cache_seconds > 0:
            ctx.notice(f"data key destroyed; waiting {seconds(ctx.keys.cache_seconds)} for workers' cached data keys "
                       "to expire (TEAMSTORE_KEY_CACHE_SECONDS)")
            await asyncio.sleep(ctx.keys.cache_seconds)  # the fleet's caches: one setting, the same everywhere
        ctx.progress(self.name, found.rows, found.rows)
        return StoreResult(status=StepStatus.DELETED, counts=counts)

    async def remaining(self, ctx: StepContext) -> Counts:
        """Re-count on a fresh connection."""
        return await self.enumerate(ctx)
