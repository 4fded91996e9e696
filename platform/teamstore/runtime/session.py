"""One user's session: take the lease, resume, run, save, release.

    async with platform.session("user-1", "session-1", team="support_triage") as s:
        print(s.resume)                      # "resumed", "new", "interrupted: ...", "definition_changed: ...", ...
        if s.interrupted:                    # the last run stopped mid-run (its worker died): decide
            result = await s.continue_run()  # or: await s.abandon_run()
        result = await s.run("The technician came; still not working")
        async for item in s.run_stream("And now?"):   # the same, item by item
            ...
    # leaving the block saves the persisted participants and releases the lease, in one statement

This module holds how a session opens and closes. Entering the block builds the team, has the observers make
what its runs will need of the user (:func:`teamstore.events.notify_opening`), takes the lease, loads
and judges the row (:mod:`teamstore.runtime.opening`) and recalls the user's memory; leaving it waits for the
last run's audit, then writes the pending snapshot together with the lease release; the platform's close cuts
off a session still open. What the session does while open (its runs, the snapshot after each, an interrupted
run continued or abandoned, ``s.save()``) is :mod:`teamstore.runtime.session_runs`, and what it writes to its row
:mod:`teamstore.runtime.session_writes`.

A team that keeps user memory gives it to the participants its manifest names as the session opens
(``s.memory`` says what was given), and the memory writer updates it from what the completed runs said once
the block has saved (:mod:`teamstore.runtime.memory`).
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from types import TracebackType
from typing import TYPE_CHECKING

from teamstore.errors import ErasureInProgress, SessionNotOpen, StaleStateVersion, StorageError
from teamstore.events import notify_opening
from teamstore.ids import check_id
from teamstore.keys.service import DataKey
from teamstore.runtime import interruptions
from teamstore.runtime.checkpoints import InterruptedRun
from teamstore.runtime.deps import (
    AGENTCHAT_VERSION,
    CUT_OFF_AUDIT_WAIT,
    EXPIRY_SLACK,
    LeaseKeeper,
    SessionDeps,
    SessionLimits,
    check_wait,
)
from teamstore.runtime.memory import MemoryRecall, bind_memory
from teamstore.runtime.opening import open_row
from teamstore.runtime.resume import SCHEMA_VERSION, Verdict, ready_team
from teamstore.runtime.runs import ended_by_limit
from teamstore.runtime.session_runs import SessionRuns
from teamstore.state.base import Claim, SessionKey, StoredSession
from teamstore.state.cancellation import to_the_end

if TYPE_CHECKING:
    from config_registry.types import TeamOrAgent

__all__ = ["EXPIRY_SLACK", "Session", "SessionDeps", "SessionLimits", "ended_by_limit"]

log = logging.getLogger("teamstore.session")
FORGETTING_WAIT = 60.0
"""Seconds an opening refused by the retention sweep's hold waits for it past the workers' key caches (which the
sweep outwaits before it forgets the user): its fence grace and the forgetting itself take a few."""
FORGETTING_POLL = 0.5


class Session(SessionRuns):
    """A leased, resumed session. Build it with :meth:`Platform.session`; use it as ``async with``.

    Its runs and saves, once it is open, come from :class:`~teamstore.runtime.session_runs.SessionRuns`."""

    def __init__(self, deps: SessionDeps, user_id: str, session_id: str, team: str, lease_timeout: float,
                 continuing: bool = False) -> None:
        super().__init__(deps, SessionKey(check_id("user_id", user_id), check_id("session_id", session_id)),
                         owner=f"{deps.worker_id}:{uuid.uuid4().hex[:12]}")
        self._continuing = continuing
        self._team_ref = team
        self._lease_timeout = check_wait(lease_timeout, "lease_timeout",
                                         "pass how long to wait, in seconds, for a session another request holds")
        self._acquiring: asyncio.Future[StoredSession] | None = None  # the lease asked for, once it is
        self.memory: MemoryRecall | None = None
        self._memory_key: DataKey | None = None  # the user's, as the session opened: the memory writer's

    @property
    def team(self) -> TeamOrAgent:
        """The team (or agent) built for this session alone. Its ``run`` and ``run_stream`` are the session's:
        called there, a run goes through the same checks, audit and checkpoints as ``s.run()``.

        Raises:
            SessionNotOpen: The session has not opened (its team is built as it opens)."""
        return self.built.team

    @property
    def team_version(self) -> str:
        """The registry version the team was built from.

        Raises:
            SessionNotOpen: The session has not opened (its team is built as it opens)."""
        return str(self.built.version)

    @property
    def row_version(self) -> int:
        """The stored row's version as of the last load or write."""
        return self._writes.row_version

    @property
    def interrupted(self) -> InterruptedRun | None:
        """The session's run that stopped mid-run and waits to be continued or abandoned, if any."""
        return self._interrupted

    # --- opening -----------------------------------------------------------------------------------------
    def __enter__(self) -> Session:
        raise SessionNotOpen("a Session is opened with `async with`, not `with`: it takes its lease and loads "
                             "its state over the network", hint="write `async with platform.session(...) as s:`")

    def __exit__(self, *exc: object) -> None:
        """Never reached: :meth:`__enter__` refuses (Python asks for both before it enters)."""

    async def __aenter__(self) -> Session:
        if self._phase != "new":
            raise SessionNotOpen(
                f"this session object is {'already open' if self._phase == 'open' else 'closed'}: "
                "a Session is entered once",
                hint="open another with platform.session(...); two at once for the same ids wait on the lease",
            )
        self._phase = "closed"  # until the lease is held: a failed entry is not retried on this object
        self._deps.sessions.enter(self, self._cut_off)  # from here the platform's close waits for it
        try:
            await self._enter()
        except BaseException:
            self._deps.sessions.leave(self)
            raise
        return self

    async def _enter(self) -> None:
        """Build the team, have the observers ready the user's audit, take the lease, load and judge the row,
        recall the user's memory."""
        self._use(await self._deps.build_team(self._team_ref))
        built, store, limits = self._built, self._deps.store, self._deps.limits
        claim = Claim(built.name, built.version, SCHEMA_VERSION, AGENTCHAT_VERSION, built.fingerprints)
        ready = asyncio.ensure_future(ready_team(built))  # CPU work the round trips below can hold
        try:
            row, asked_at = await self._lease(claim)
        except BaseException:
            ready.cancel()  # the team is dropped with the session
            raise
        self._writes.row_version, self._writes.holds_state = row.row_version, not row.is_new
        self._keeper = LeaseKeeper(store, self.key, self._owner, limits.lease_ttl_seconds, since=asked_at)
        try:
            await ready
            if self._continuing:
                interruptions.refuse_to_continue(row, built, AGENTCHAT_VERSION)
            verdict = await self._judge(row)
            await self._recall(fresh=not verdict.outcome.applied)
            self._deps.sessions.check(opening=True)  # cut off while opening: its lease was given back
        except BaseException:
            await self._stop_keeping()
            await self._release()
            raise
        self.resume = verdict.outcome
        self._deps.metrics.resumed(verdict.outcome.outcome)
        self._phase = "open"
        log.info("session opened: team=%s version=%s resume=%s", built.name, built.version[:12], verdict.outcome.outcome)

    async def _lease(self, claim: Claim) -> tuple[StoredSession, float]:
        """Ready the user's audit, take the lease and load the row; the row, and when the lease was asked for.
        Refused by the retention sweep forgetting the user (nothing of theirs was left), it waits for the sweep
        to end and opens again: the user starts afresh, with a new subject and data key."""
        retried = False
        while True:
            try:
                await self._before_lease()
                asked, asked_at = time.perf_counter(), asyncio.get_running_loop().time()
                try:
                    row = await self._acquire(claim)
                except Exception as exc:
                    self._deps.metrics.lease_waited(time.perf_counter() - asked, exc)
                    raise
                self._deps.metrics.lease_waited(time.perf_counter() - asked)
                return row, asked_at
            except ErasureInProgress:
                if retried or not await self._forgotten():
                    raise
                retried = True

    async def _forgotten(self) -> bool:
        """Whether the opening's refusal was the retention sweep's, now ended (it was waited for: as long as the
        sweep outwaits the workers' key caches, and a minute more)."""
        forgetting = self._deps.forgetting
        if forgetting is None or not await forgetting(self.key.user_id):
            return False
        until = time.monotonic() + self._deps.limits.key_cache_seconds + FORGETTING_WAIT
        while await forgetting(self.key.user_id):
            if time.monotonic() > until:
                return False
            await asyncio.sleep(FORGETTING_POLL)
            self._deps.sessions.check(opening=True)  # the platform closing ends the wait
        return True

    async def _before_lease(self) -> None:
        """Have the observers make what the session's runs will need of the user (the audit's subject and data
        key; one round trip when the user has them). Before the lease, never after it: a worker that hangs past
        its lease once it holds one, while the user is erased, makes nothing of the user when it wakes; its runs
        never make any of it, and write nothing once it is gone."""
        self._deps.sessions.check(opening=True)
        # A database a newer release migrated (or restored from an older backup) since the last check refuses
        # here, before the audit makes anything of the user; between two checks this is a clock reading.
        await self._deps.store.check_lease_mode()
        await notify_opening(self._deps.observers, self.key.user_id, self.key.session_id, self._owner)

    async def _acquire(self, claim: Claim) -> StoredSession:
        """Take the lease and load the row. The platform's close stops a wait for the lease (and gives back one
        taken as it closed: :meth:`_cut_off`), so the store never closes under it: ``PlatformClosed``."""
        sessions, limits = self._deps.sessions, self._deps.limits
        sessions.check(opening=True)
        self._acquiring = acquiring = asyncio.ensure_future(self._deps.store.acquire(
            self.key, claim, owner=self._owner, lease_ttl=limits.lease_ttl_seconds,
            wait_seconds=self._lease_timeout, max_sessions=limits.max_sessions_per_user,
        ))
        try:
            row = await acquiring
        except asyncio.CancelledError:
            task = asyncio.current_task()
            if sessions.closed and task is not None and not task.cancelling():  # the close's, not the caller's
                raise sessions.closed_under(opening=True) from None
            raise
        except (StorageError, StaleStateVersion) as exc:
            if sessions.closed:
                raise sessions.closed_under(opening=True) from exc
            raise
        sessions.check(opening=True)  # taken as the platform closed: the close gave it back
        return row

    async def _judge(self, row: StoredSession) -> Verdict:
        """Judge the stored state (and an interrupted run's checkpoint) and load what passes."""
        opened = await open_row(row, self._built, self._deps, self._owner)
        expired = opened.verdict.outcome.outcome == "expired"
        # An expired state is gone for good: the session's first checkpoint write clears it (a save replaces it).
        self._writes.holds_state = not (row.is_new or opened.state_set_aside or expired)
        self._writes.state_expired = expired and row.state is not None
        if opened.built is not self._built:  # AutoGen refused a state teamstore passed: built afresh
            self._use(opened.built)
        self._writes.good_states = dict(opened.verdict.states)
        self._checkpoint = opened.checkpoint
        self._interrupted = opened.checkpoint.run if opened.checkpoint else None
        self._given_up = row.checkpoint is not None and opened.checkpoint is None
        if row.checkpoint is not None and expired:
            # Its run cannot continue past the session's TTL: it ends here, recorded as a sweep would record it.
            await to_the_end(self._end_expired(row))
        return opened.verdict

    async def _end_expired(self, row: StoredSession) -> None:
        """Clear the expired row's checkpoint, then record its interrupted run as ended (once: cleared first)."""
        await self.write_checkpoint(None)
        await interruptions.report_gone(self._deps.observers, row, "expired", self._owner)

    async def _recall(self, *, fresh: bool) -> None:
        """Give the user's memory to the receiving participants whose contexts start empty."""
        service = self._deps.memory
        self._memory = bind_memory(self._built) if service is not None else None
        if service is not None and self._memory is not None:
            # Before anything is said in it (nor recalled), and once a forget under way has committed: a forget
            # since then stops its writer, and the recall below reads what one before it left.
            self._said_after = await service.said_after(self.key.user_id, self._interrupted)
            self.memory = await service.recall(self._memory, self.key.user_id, fresh=fresh,
                                               persisted=self._built.persisted)
            # Taken under the lease, never made (the opening made it, before the lease): neither this session nor
            # the writer it starts brings back a key of a user an erasure removed after the lease was lost.
            self._memory_key = await service.writer_key(self.key.user_id)

    # --- closing -----------------------------------------------------------------------------------------
    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._phase = "closed"
        # Cancelled while closing (a request timeout), it finishes anyway: the last run's audit is written
        # and its state saved, and the lease never outlives the request.
        try:
            await to_the_end(self._close())
        finally:
            self._deps.sessions.leave(self)

    async def _close(self) -> None:
        lost: StaleStateVersion | None = None
        try:
            await self._settle()
            await self.flush_audit()
            if self._said:  # the memory writer is handed what the runs said only while the lease is held
                lost = await self._lost_lease()
        finally:
            await self._stop_keeping()
        if not self._deps.sessions.closing:  # no next request on a closing platform
            self._deps.build_ahead(self._team_ref)  # the next request's team, built while the save is on its way
        async with self._writes.lock:  # after a save still under way (one the caller did not await)
            try:
                if self._writes.pending:
                    await self._writes.save(self._built, release=True)
                else:
                    if self._writes.drop_checkpoint:
                        await self.write_checkpoint(None)
                    await self._release()
            except BaseException:  # whatever failed, the lease is given back
                await self._release_quietly()
                raise
        if lost is not None:  # saved before the lease was lost (s.save()): the memory is not written
            raise lost
        if not self._deps.sessions.closed:
            self._write_memory()  # after the save: memory follows what was saved

    async def _cut_off(self) -> None:
        """The platform closed with this session still open: stop a wait for its lease, stop its run in flight (a
        run with checkpoints writes its last one), stop renewing the lease and give it back (after a save under
        way); the session writes nothing more (``PlatformClosed``)."""
        acquiring = self._acquiring
        if acquiring is None:  # not asking for its lease yet: it never will (PlatformClosed)
            return
        acquiring.cancel()  # a lease it was taking, the store gives back (done: no effect)
        await asyncio.wait([acquiring])
        if acquiring.cancelled() or acquiring.exception() is not None:
            return  # no lease taken
        await self._stop_running()
        await self._stop_keeping()
        try:
            await self._writes.give_back()  # after a save under way
        except StorageError as exc:  # it expires at its TTL: no keeper renews it any more
            log.warning("could not give back the lease of a session open as its platform closed: %s", exc.message)

    async def _stop_running(self) -> None:
        """Cut off: stop the run in flight at once, and give its audit (or the last completed run's) a while to
        be written, so that it is written before the platform's observers drain and its store closes. A run with
        checkpoints stopped mid-run writes its last one meanwhile, with the model calls paid since the one before
        (:meth:`write_checkpoint`), while the lease is still held."""
        if self._run is not None and self._running:
            self._run.stop(self._deps.sessions.closed_under())

        async def audited() -> None:
            if self._phase == "open":  # its block's exit settles the run itself
                await self._settle()
            elif self._run is not None and self._running:  # the exit waits for it: so does the lease's release
                await self._run.finished.wait()
            await self.flush_audit()

        try:
            await asyncio.wait_for(audited(), CUT_OFF_AUDIT_WAIT)
        except TimeoutError:
            log.warning("a session cut off as its platform closed had its run's audit unwritten after %gs",
                        CUT_OFF_AUDIT_WAIT)

    async def _lost_lease(self) -> StaleStateVersion | None:
        """Why the memory writer may not start: the lease was lost (``None``: it is held). A store that cannot say
        is logged, and the memory waits for the user's next session."""
        try:
            await self._check_lease()
        except StaleStateVersion as exc:
            return exc
        except StorageError as exc:
            log.warning("could not learn whether the session still holds its lease (%s); its memory is not "
                        "written now", exc.message)
            self._said = []
        return None

    async def _stop_keeping(self) -> None:
        if self._keeper is not None:
            await self._keeper.stop()
            self._keeper = None

    def _write_memory(self) -> None:
        """Once the block saved: have the memory writer update the user's memory from what the runs said."""
        service, binding, said, last = self._deps.memory, self._memory, self._said, self._last_run
        self._said = []
        if service is None or binding is None or not said or last is None or self._said_after is None:
            return
        service.schedule(binding, *last, said, self._memory_key, observers=self._deps.observers,
                         limits=self._deps.limits, said_after=self._said_after)

    async def _release(self) -> None:
        if self._deps.sessions.closed:  # the platform gave the lease back as it closed (_cut_off)
            return
        # A row left holding nothing (no state saved or kept, and no checkpoint: a first run cancelled before its
        # first checkpoint, or abandoned, a refusal set aside) goes with the lease: nothing is stored, so nothing
        # is left for the per-user bound.
        await self._writes.release()

    async def _release_quietly(self) -> None:
        try:
            await self._release()
        except StorageError as exc:
            # The save error being raised matters more; an unreleased lease expires on its own.
            log.warning("could not release the session lease after a failed save: %s", exc.message)
