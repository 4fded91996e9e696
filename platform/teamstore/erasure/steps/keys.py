"""The key step: destroy the user's data key first, so whatever a later step cannot delete is beyond use.

    from teamstore.erasure.steps.keys import KeyStep

    result = await KeyStep().erase(ctx, prior=None)     # delete + step record: one transaction

It runs right after the fence and before every delete (on Postgres first waiting for the user's memory writes
under way: :func:`teamstore.memory.statements.writes_lock`): once it is done, every copy of the user's sealed data
(transcript versions under Object Lock or a legal hold, backups of the database once the key-encryption key of
their time is destroyed) is unreadable, whatever the later steps manage. The row is deleted in the same
transaction as the step's record, so a kill leaves both or neither; a rerun finds nothing more and carries the
count. Other workers may still hold the key in memory for ``key_cache_seconds`` (and the user's subject, looked
up before the fence went up: :class:`teamstore.audit.pseudonyms.Pseudonyms`): the step waits that long after the
delete before it is done, so the fence (which refuses every write for the user) outlasts every cached copy, and
no worker seals under a destroyed key, or opens a session with the erased subject, after the request completes.

The wait is counted from a moment recorded after the delete has committed, on the database's clock
(:func:`teamstore.erasure.record.start_wait`): a rerun of a request stopped during the wait (Ctrl-C, a kill)
waits only what is left of it, measured on that same clock whichever host it runs on, so it ends no earlier
than the wait the first attempt began would have. A rerun that deletes a key again, or finds no moment
recorded (stopped between the delete and the record, or before migration 0021), waits the whole time from
now: later, never sooner.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta

from sqlalchemy import delete, func, select
from sqlalchemy.exc import SQLAlchemyError

from teamstore.db.clock import database_now
from teamstore.db.engine import describe_failure
from teamstore.erasure.receipt import Counts, StepStatus, StoreResult
from teamstore.erasure.record import start_wait, wait_started, write_step
from teamstore.erasure.steps.base import StepContext, seconds
from teamstore.errors import StoreUnavailable
from teamstore.keys.schema import data_keys
from teamstore.memory.statements import writes_lock


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
            StoreUnavailable: The database failed (if before the delete committed, nothing of this step was).
            ErasureConflict: Another coordinator took the request over.
        """
        found = Counts()
        if ctx.user_id is not None:
            try:
                async with ctx.engine.begin() as conn:
                    if conn.dialect.name == "postgresql":
                        # Memory writes under way (they passed the fence's check before it went up) finish
                        # first: the rows a first write inserts are then there for the memory step to delete.
                        await conn.execute(writes_lock(ctx.user_id, shared=False))
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
            # the fleet's caches: one setting, the same everywhere
            await self._outwait(ctx, ctx.keys.cache_seconds, resumed=not found.rows)
        ctx.progress(self.name, found.rows, found.rows)
        return StoreResult(status=StepStatus.DELETED, counts=counts)

    async def _outwait(self, ctx: StepContext, cache: float, *, resumed: bool) -> None:
        """Wait until ``cache`` seconds have passed since the wait began: from now, recorded, unless this attempt
        deleted nothing (``resumed``) and an earlier one recorded when it began, then only what is left of it.

        Raises:
            ErasureConflict: Another coordinator took the request over.
            StoreUnavailable: The database failed.
        """
        began = await wait_started(ctx.engine, ctx.request_id, self.name) if resumed else None
        if began is None:
            ctx.notice(f"data key destroyed; waiting {seconds(cache)} for workers' cached data keys to expire "
                       "(TEAMSTORE_KEY_CACHE_SECONDS)")
            await start_wait(ctx.engine, ctx.request_id, self.name, ctx.owner)
            await asyncio.sleep(cache)
            return
        # At most the whole time: a database clock set back since must not stretch it.
        left = min(cache, (began + timedelta(seconds=cache) - await database_now(ctx.engine)).total_seconds())
        if left > 0:
            ctx.notice(f"data key destroyed by an earlier attempt; waiting the {seconds(left)} left of "
                       f"{seconds(cache)} for workers' cached data keys to expire (TEAMSTORE_KEY_CACHE_SECONDS)")
            await asyncio.sleep(left)

    async def remaining(self, ctx: StepContext) -> Counts:
        """Re-count on a fresh connection."""
        return await self.enumerate(ctx)
