"""A run's pseudonymous keys (subject and session), looked up once and shared by the audit observers of one
platform, and the end-of-run fence against an erasure.

    from teamstore.audit.pseudonyms import Pseudonyms

    pseudonyms = Pseudonyms(engine)
    pseudonyms.prefetch(ctx)                 # as the run starts, while its lease is held
    keys = await pseudonyms.writable(ctx)    # as it ends: raises ErasureInProgress if an erasure holds the user
    await pseudonyms.aclose()                # before the engine is disposed

The subject key stands for the user in the ledger, the transcript's object key and the spans; the user's id,
and the session secret the session keys are keyed by, are written only to ``ts_subjects``, which an erasure
deletes.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

from sqlalchemy.ext.asyncio import AsyncEngine

from teamstore.audit.run_writes import RunWrites, SqliteRunWrites
from teamstore.audit.subjects import Subject, ensure_subject, session_key
from teamstore.audit.transcripts.record import RunKeys
from teamstore.errors import ErasureInProgress
from teamstore.events import RunContext


def run_writes(engine: AsyncEngine, pool_size: int = 20) -> RunWrites:
    """The audit's per-run statements on ``engine``'s database (the caller owns the engine).

    Args:
        engine: The state database.
        pool_size: On Postgres, the most connections the audit opens at once (each is held for one statement).
    """
    if engine.dialect.name == "postgresql":  # psycopg is the `postgres` extra: imported when chosen
        from teamstore.audit.run_writes_postgres import PostgresRunWrites

        return PostgresRunWrites(engine, pool_size)
    return SqliteRunWrites(engine)


LOOKUP_WAIT_SECONDS = 5.0
"""The longest :meth:`Pseudonyms.aclose` waits for key lookups under way (one round trip each) before it
cancels them."""


class Pseudonyms:
    """Resolves a run's subject and session keys once, shared by the observers of one platform.

    It also remembers each user's subject (a bounded LRU) for the ledger, whose insert checks in its own
    ``WHERE`` that the user still has that subject and no erasure holds them: a subject remembered from
    before an erasure (which deletes the mapping) writes nothing, and the insert then looks the subject up
    again. What the lookup is the fence of (the transcript's upload, the spans) never uses the remembered key.

    Args:
        engine: The state database (``ts_subjects``, ``ts_user_holds``).
        cache_size: How many runs' keys, and how many users' subject keys, are kept.
        pool_size: On Postgres, the most connections the audit's statements open at once.
    """

    def __init__(self, engine: AsyncEngine, cache_size: int = 1024, *, pool_size: int = 20) -> None:
        self.engine = engine
        self.writes = run_writes(engine, pool_size)
        self._runs: OrderedDict[str, asyncio.Task[RunKeys]] = OrderedDict()  # as each run started
        self._fences: OrderedDict[str, asyncio.Task[RunKeys]] = OrderedDict()  # as each run ended
        self._subjects: OrderedDict[str, Subject] = OrderedDict()
        self._cache_size = cache_size

    def prefetch(self, ctx: RunContext) -> None:
        """Start resolving the run's keys (once per run; every observer shares the lookup). Called as the run
        starts, while the session's lease is held: an erasure waits for the lease before it deletes the
        user's subject, so the keys found then stay the user's until the run's writes are done."""
        if ctx.run_id not in self._runs:
            self._runs[ctx.run_id] = asyncio.get_running_loop().create_task(self._resolve(ctx))
            _bound(self._runs, self._cache_size)

    async def run_keys(self, ctx: RunContext) -> RunKeys:
        """The run's keys as looked up when it started (see :meth:`prefetch`), for a write that
        :meth:`writable` fences beside it.

        Raises:
            ErasureInProgress: The user was fenced when the run's keys were looked up.
            StoreUnavailable: The database could not be reached.
        """
        self.prefetch(ctx)
        return await asyncio.shield(self._runs[ctx.run_id])

    async def writable(self, ctx: RunContext) -> RunKeys:
        """The run's keys, once it is known that no erasure holds the user now; creates the subject on first use.

        Observers call this when the run has ended, so the lookup (subject and ``EXISTS`` on the hold, one
        round trip, shared by the observers) is the end-of-run fence: an erasure that opened while the run was
        in flight is seen here. Keys looked up as the run started are checked again; keys not looked up yet
        are looked up once, which is the fence itself.

        Raises:
            ErasureInProgress: The user is fenced: nothing may be written for them.
            StoreUnavailable: The database could not be reached.
        """
        fence = self._fences.get(ctx.run_id)
        if fence is None:
            started = self._runs.get(ctx.run_id)
            if started is None:
                self.prefetch(ctx)
                fence = self._runs[ctx.run_id]
            else:
                fence = asyncio.get_running_loop().create_task(self._check_again(ctx, started))
            self._fences[ctx.run_id] = fence
            _bound(self._fences, self._cache_size)
        return await asyncio.shield(fence)

    async def after_run(self, ctx: RunContext) -> RunKeys:
        """The keys of a run that has ended, for work done on its behalf afterwards (the memory writer's), once
        it is known that the user still has the run's subject and no erasure holds them. Never creates the
        subject: the run made it, and one missing now was erased since (with the run's keys dropped from this
        process's memory, the subject is looked up, and found gone).

        Raises:
            ErasureInProgress: The user is fenced, or was erased since the run: nothing may be written for them.
            StoreUnavailable: The database could not be reached.
        """
        if ctx.run_id in self._runs or ctx.run_id in self._fences:
            return await self.writable(ctx)
        subject, fenced = await self.writes.subject(ctx.user_id)
        if fenced or subject is None:
            self.forget_subject(ctx.user_id)
            raise _fenced()
        return _keys(subject, ctx)

    async def record_usage(self, ctx: RunContext, rows_for: Callable[[RunKeys], list[dict[str, Any]]]) -> tuple[RunKeys, bool]:
        """The end-of-run fence (as :meth:`writable`) with the run's ledger rows written in the same statement
        where the fence is not checked yet; the keys, and whether all the rows were written (if not, the
        caller writes them with those keys).

        Raises:
            ErasureInProgress: The user is fenced: nothing was written.
            StoreUnavailable: The database could not be reached.
        """
        started = self._runs.get(ctx.run_id)
        if ctx.run_id in self._fences or started is None:
            return await self.writable(ctx), False
        written: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        self._fences[ctx.run_id] = asyncio.get_running_loop().create_task(
            self._check_again(ctx, started, rows_for, written))
        _bound(self._fences, self._cache_size)
        keys = await asyncio.shield(self._fences[ctx.run_id])
        return keys, written.result()

    async def _check_again(
        self, ctx: RunContext, started: asyncio.Task[RunKeys],
        rows_for: Callable[[RunKeys], list[dict[str, Any]]] | None = None, written: asyncio.Future[bool] | None = None,
    ) -> RunKeys:
        keys = await asyncio.shield(started)
        rows = rows_for(keys) if rows_for is not None else []
        added = 0
        try:
            if rows:
                subject, fenced, added = await self.writes.end_of_run(rows, user_id=ctx.user_id,
                                                                       subject_key=keys.subject_key)
            else:
                subject, fenced = await self.writes.subject(ctx.user_id)
        finally:
            if written is not None and not written.done():
                written.set_result(bool(rows) and added == len(rows))
        if fenced or subject is None or subject.key != keys.subject_key:
            self.forget_subject(ctx.user_id)
            raise _fenced()
        return keys

    def looked_up(self, ctx: RunContext) -> bool:
        """Whether the run's keys were looked up as it started (:meth:`prefetch`)."""
        return ctx.run_id in self._runs

    def remembered(self, ctx: RunContext) -> RunKeys | None:
        """The keys of the user's subject as last looked up in this process, if any: only for a write that
        checks the subject and the fence itself (the ledger's insert)."""
        subject = self._subjects.get(ctx.user_id)
        return None if subject is None else _keys(subject, ctx)

    def forget_subject(self, user_id: str) -> None:
        """Stop using the remembered subject of ``user_id`` (a write found it is no longer the user's)."""
        self._subjects.pop(user_id, None)

    async def _resolve(self, ctx: RunContext) -> RunKeys:
        subject = await self._subject(ctx.user_id)
        self._subjects[ctx.user_id] = subject
        self._subjects.move_to_end(ctx.user_id)
        while len(self._subjects) > self._cache_size:
            self._subjects.popitem(last=False)
        return _keys(subject, ctx)

    async def _subject(self, user_id: str) -> Subject:
        # One round trip for the common case: the subject exists and no erasure fences the user.
        subject, fenced = await self.writes.subject(user_id)
        if fenced:
            self.forget_subject(user_id)
            raise _fenced()
        return subject if subject is not None else await ensure_subject(self.engine, user_id)

    def forget(self, run_id: str) -> None:
        """Drop a finished run's cached keys."""
        for tasks in (self._runs, self._fences):
            task = tasks.pop(run_id, None)
            if task is not None and not task.done():
                task.cancel()

    async def aclose(self, wait_seconds: float = LOOKUP_WAIT_SECONDS) -> None:
        """Wait for the key lookups still under way (a run's that was cut off before its end never awaits its own),
        cancelling those still running after ``wait_seconds``, so that their connections are back in the pool
        before the engine is disposed; then close the connections the audit's statements opened (they open again
        if needed)."""
        pending = [task for tasks in (self._runs, self._fences) for task in tasks.values() if not task.done()]
        if pending:
            _, late = await asyncio.wait(pending, timeout=wait_seconds)
            for task in late:
                task.cancel()
            if late:
                await asyncio.wait(late)
        await self.writes.aclose()


def _keys(subject: Subject, ctx: RunContext) -> RunKeys:
    return RunKeys(subject.key, session_key(subject.session_secret, ctx.session_id))


def _bound(tasks: OrderedDict[str, asyncio.Task[RunKeys]], size: int) -> None:
    # Dropped, never cancelled: a lookup still in flight has observers awaiting it, and a cancel would reach
    # the user's session as CancelledError. It ends on its own.
    while len(tasks) > size:
        tasks.popitem(last=False)


def _fenced() -> ErasureInProgress:
    return ErasureInProgress(
        "an erasure is open for this user: no transcript, ledger row or span is written",
        hint="wait for `teamstore erase` to finish",
    )
