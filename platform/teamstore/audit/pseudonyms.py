"""A run's pseudonymous keys (subject and session), looked up once and shared by the audit observers of one
platform, and the end-of-run fence against an erasure.

    from teamstore.audit.pseudonyms import Pseudonyms

    pseudonyms = Pseudonyms(engine)
    await pseudonyms.open_session("alice", opening)   # as the session opens, before its lease: made if new
    pseudonyms.prefetch(ctx)                 # as the run starts, while its lease is held
    keys = await pseudonyms.writable(ctx)    # as it ends: raises ErasureInProgress if an erasure holds the user
    await pseudonyms.aclose()                # before the engine is disposed

The subject key stands for the user in the ledger, the transcript's object key and the spans; the user's id,
and the session secret the session keys are keyed by, are written only to ``ts_subjects``, which an erasure
deletes. A subject is made only as a session opens, before the session asks for its lease; a run (and all that
is done on its behalf) never makes one, and finds the subject its session opened with or writes nothing: a worker
that hung past its lease while the user was erased brings no subject back when it wakes.
"""

from __future__ import annotations

import asyncio
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

from sqlalchemy.ext.asyncio import AsyncEngine

from teamstore.audit.run_writes import RunWrites, SqliteRunWrites
from teamstore.audit.subjects import Subject, ensure_subject, session_key
from teamstore.audit.transcripts.record import RunKeys
from teamstore.errors import ErasureInProgress
from teamstore.events import RunContext
from teamstore.state.failures import erasure_open


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

OPENINGS_KEPT = 10_000
"""The most session openings whose subject a :class:`Pseudonyms` keeps for their runs. A run of an opening
forgotten (this many sessions opened after it) still never makes a subject, but no longer tells a subject made
since its session opened (the user erased and back) from the one it opened with."""


class Pseudonyms:
    """Resolves a run's subject and session keys once, shared by the observers of one platform.

    The subject is looked up, and made for a new user, as the session opens (:meth:`open_session`), and kept
    for the session's runs. A run's lookups never make one: a subject missing then, or not the one the session
    opened with, was erased since (``ErasureInProgress``, nothing written).

    It also remembers each user's subject (a bounded LRU) for the ledger, whose insert checks in its own
    ``WHERE`` that the user still has that subject and no erasure holds them: a subject remembered from
    before an erasure (which deletes the mapping) writes nothing, and the insert then looks the subject up
    again. What the lookup is the fence of (the transcript's upload, the spans) never uses the remembered key.

    Args:
        engine: The state database (``ts_subjects``, ``ts_user_holds``).
        cache_size: How many runs' keys, and how many users' subject keys, are kept.
        pool_size: On Postgres, the most connections the audit's statements open at once.
        fresh_seconds: How long a subject looked up in this process opens the user's next sessions without
            looking it up again (``TEAMSTORE_KEY_CACHE_SECONDS``, how long the user's data key stays in memory
            too); 0 looks it up at every opening. An erasure outlasts it: its key step waits that long after
            the fence, during which no lookup finds the subject, so no process opens a session with a subject
            from before an erasure once it has ended. A run still looks its subject up, and writes nothing when
            it is gone.
    """

    def __init__(self, engine: AsyncEngine, cache_size: int = 1024, *, pool_size: int = 20,
                 fresh_seconds: float = 0.0) -> None:
        self.engine = engine
        self._fresh_seconds = fresh_seconds
        self._looked_up: dict[str, float] = {}  # when each remembered subject was last looked up (monotonic)
        self.writes = run_writes(engine, pool_size)
        self._runs: OrderedDict[str, asyncio.Task[RunKeys]] = OrderedDict()  # as each run started
        self._fences: OrderedDict[str, asyncio.Task[RunKeys]] = OrderedDict()  # as each run ended
        self._subjects: OrderedDict[str, Subject] = OrderedDict()
        self._opening: dict[str, asyncio.Task[Subject]] = {}  # each opening's lookup, while it is under way
        self._opened: OrderedDict[str, Subject] = OrderedDict()  # each session opening's subject, for its runs
        self._cache_size = cache_size

    async def open_session(self, user_id: str, opening: str) -> Subject:
        """The user's subject as a session opens, before it asks for its lease: looked up (with whether an
        erasure holds the user: one round trip), and made for a user who has none; kept for the session's runs.
        The observers sharing this resolver each call it for one opening: it is looked up once.

        Made before the lease and never after it: a worker that hangs past its lease once it holds one makes
        nothing of the user when it wakes, after an erasure that took the session meanwhile.

        Args:
            user_id: The raw user id.
            opening: The opening's name (:attr:`RunContext.opening` of its runs).

        Raises:
            ErasureInProgress: An erasure holds the user: the session does not open.
            InvalidIdentifier: The id breaks the id rule (:mod:`teamstore.ids`).
            StoreUnavailable: The database could not be reached.
        """
        opened = self._opened.get(opening)
        if opened is not None:
            return opened
        task = self._opening.get(opening)
        if task is None:
            task = asyncio.get_running_loop().create_task(self._open(user_id, opening))
            self._opening[opening] = task
            task.add_done_callback(lambda _: self._opening.pop(opening, None))
        return await asyncio.shield(task)

    async def _open(self, user_id: str, opening: str) -> Subject:
        subject = self._fresh(user_id)
        if subject is None:  # the lease checks the fence too, so a fresh subject needs no round trip here
            subject, fenced = await self.writes.subject(user_id)
            if fenced:  # the lease would be refused too: refused before it is asked for
                self.forget_subject(user_id)
                raise erasure_open()
            if subject is None:
                subject = await ensure_subject(self.engine, user_id)
            self._remember(user_id, subject)
        self._opened[opening] = subject
        _bound(self._opened, OPENINGS_KEPT)
        return subject

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
        """The run's keys, once it is known that no erasure holds the user now and that the user still has the
        subject the run's session opened with.

        Observers call this when the run has ended, so the lookup (subject and ``EXISTS`` on the hold, one
        round trip, shared by the observers) is the end-of-run fence: an erasure that opened while the run was
        in flight is seen here. Keys looked up as the run started are checked again; keys not looked up yet
        are looked up once, which is the fence itself.

        Raises:
            ErasureInProgress: The user is fenced, or was erased since the session opened: nothing may be
                written for them.
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
        it is known that the user still has the run's subject and no erasure holds them. With the run's keys
        dropped from this process's memory, the subject is looked up, and one gone is not made again.

        Raises:
            ErasureInProgress: The user is fenced, or was erased since the run: nothing may be written for them.
            StoreUnavailable: The database could not be reached.
        """
        if ctx.run_id in self._runs or ctx.run_id in self._fences:
            return await self.writable(ctx)
        return _keys(await self._subject(ctx), ctx)

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
            raise _fenced() if fenced else _erased_since_opened()
        return keys

    def looked_up(self, ctx: RunContext) -> bool:
        """Whether the run's keys were looked up as it started (:meth:`prefetch`)."""
        return ctx.run_id in self._runs

    def remembered(self, ctx: RunContext) -> RunKeys | None:
        """The keys of the subject the run's session opened with, else of the user's subject as last looked up
        in this process, if any: only for a write that checks the subject and the fence itself (the ledger's
        insert)."""
        subject = self._opened_with(ctx) or self._subjects.get(ctx.user_id)
        return None if subject is None else _keys(subject, ctx)

    def forget_subject(self, user_id: str) -> None:
        """Stop using the remembered subject of ``user_id`` (a write found it is no longer the user's)."""
        self._subjects.pop(user_id, None)
        self._looked_up.pop(user_id, None)

    def _fresh(self, user_id: str) -> Subject | None:
        """The user's subject if this process looked it up less than ``fresh_seconds`` ago."""
        at = self._looked_up.get(user_id)
        if at is None or time.monotonic() - at >= self._fresh_seconds:
            return None
        return self._subjects.get(user_id)

    async def _resolve(self, ctx: RunContext) -> RunKeys:
        subject = await self._subject(ctx)
        self._remember(ctx.user_id, subject)
        return _keys(subject, ctx)

    def _remember(self, user_id: str, subject: Subject) -> None:
        self._subjects[user_id] = subject
        self._subjects.move_to_end(user_id)
        self._looked_up[user_id] = time.monotonic()
        while len(self._subjects) > self._cache_size:
            self._looked_up.pop(self._subjects.popitem(last=False)[0], None)

    def _opened_with(self, ctx: RunContext) -> Subject | None:
        """The subject the run's session opened with (``None``: not opened here, or forgotten)."""
        return None if ctx.opening is None else self._opened.get(ctx.opening)

    async def _subject(self, ctx: RunContext) -> Subject:
        """The user's subject for a run: never made here (its session made it as it opened)."""
        subject, fenced = await self.writes.subject(ctx.user_id)  # one round trip, the fence with it
        opened = self._opened_with(ctx)
        if fenced or subject is None or (opened is not None and subject.key != opened.key):
            self.forget_subject(ctx.user_id)
            raise _fenced() if fenced else _erased_since_opened()
        return subject

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
        pending = [task for tasks in (self._runs, self._fences, self._opening) for task in tasks.values()
                   if not task.done()]
        if pending:
            _, late = await asyncio.wait(pending, timeout=wait_seconds)
            for task in late:
                task.cancel()
            if late:
                await asyncio.wait(late)
        await self.writes.aclose()


def _keys(subject: Subject, ctx: RunContext) -> RunKeys:
    return RunKeys(subject.key, session_key(subject.session_secret, ctx.session_id))


def _bound(tasks: OrderedDict[str, Any], size: int) -> None:
    # Dropped, never cancelled: a lookup still in flight has observers awaiting it, and a cancel would reach
    # the user's session as CancelledError. It ends on its own.
    while len(tasks) > size:
        tasks.popitem(last=False)


def _fenced() -> ErasureInProgress:
    return ErasureInProgress(
        "an erasure is open for this user: no transcript, ledger row or span is written",
        hint="wait for `teamstore erase` to finish",
    )


def _erased_since_opened() -> ErasureInProgress:
    """The error for a run whose user no longer has the subject its session opened with: an erasure deleted it
    since (a worker that hung past its lease, woken after the erasure)."""
    return ErasureInProgress(
        "the user was erased while this session was open (the audit subject it opened with is gone): no "
        "transcript, ledger row or span is written",
        hint="nothing to fix: the erasure removed the session with the rest of the user's data",
    )
