"""A session once open: its team, its runs (one at a time) and its saves.

    result = await s.run("My router keeps dropping")   # s: an open Session (teamstore.runtime.session)
    async for item in s.run_stream("And now?"):        # the same, item by item
        ...
    if s.interrupted:                                  # a run stopped mid-run: continue or abandon it
        result = await s.continue_run()                # or: await s.abandon_run()
    await s.save()                                     # the pending snapshot now, keeping the lease

:class:`SessionRuns` is what a :class:`~teamstore.runtime.session.Session` does between opening and closing;
the session adds how it opens and closes (its lease, its row judged, the user's memory). Each run is a
:class:`~teamstore.runtime.runs.Run`, which streams it; this module holds what comes around the runs, and a
:class:`~teamstore.runtime.session_writes.SessionWrites` writes the session's row (saves, checkpoints).

``run()`` and ``run_stream()`` snapshot the opted-in participants' states right after the run completes
(never while AutoGen's run is in flight) and check them (plain JSON, under the byte cap). The snapshot is
written when the block exits, together with the lease release, or earlier with ``await s.save()``. A run
that raises or is cancelled leaves nothing to save: the stored state stays as it was, and the session goes on
from the state it had before that run. A team with per-turn checkpoints (docs/checkpoints.md) also makes each
completed turn durable while it runs; a run that stops mid-run after one (it raised, or was cancelled) can then
be continued or abandoned.

``s.team`` is the team itself, with its ``run`` and ``run_stream`` routed through the session: called
there, they are the session's own, with the same checks, audit and checkpoints.
"""

from __future__ import annotations

import asyncio
import contextlib
import weakref
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Sequence
from contextlib import AbstractContextManager
from datetime import datetime
from typing import Any, Literal

from autogen_agentchat.base import TaskResult
from autogen_agentchat.messages import BaseChatMessage
from autogen_core import CancellationToken

from config_registry.types import BuiltTeam
from teamstore.errors import (
    NoInterruptedRun,
    Refusal,
    RunInProgress,
    RunInterrupted,
    SessionNotOpen,
    StateRejected,
)
from teamstore.events import RunContext, RunObserver, RunOutcome
from teamstore.memory.writer import Said
from teamstore.runtime import interruptions
from teamstore.runtime.checkpoints import (
    Checkpoint,
    InterruptedRun,
    apply_checkpoint,
    set_aside_run,
)
from teamstore.runtime.deps import LeaseKeeper, SessionDeps
from teamstore.runtime.memory import MemoryBinding, rebind_memory
from teamstore.runtime.resume import ResumeOutcome, apply_states, snapshot
from teamstore.runtime.runs import Run, TakenUp, Task, TeamRoute, final_result
from teamstore.runtime.session_writes import SessionWrites
from teamstore.runtime.tasks import as_run_takes, check_task
from teamstore.runtime.turns import StreamItem
from teamstore.state.base import SessionKey
from teamstore.state.cancellation import to_the_end

AUDIT_HEAD_START = 4
"""Turns of the event loop a completed run's audit is given before the session snapshots the team: its observers'
tasks start, the end-of-run fence's task starts and its statement is sent, so the database works on it while the
snapshot's CPU work runs. Nothing else can touch the team meanwhile (the session's run is not over: a second run
is refused)."""


async def _head_start() -> None:
    """Let the event loop turn :data:`AUDIT_HEAD_START` times."""
    for _ in range(AUDIT_HEAD_START):
        await asyncio.sleep(0)


Phase = Literal["new", "open", "closed"]
"""Where a session is: not entered yet, inside its ``async with`` block, or done (it is used once)."""


class SessionRuns:
    """An open session's team, runs and saves. :class:`~teamstore.runtime.session.Session` builds on it.

    Args:
        deps: What the platform gives its sessions.
        key: The session's (checked) user and session ids.
        owner: The lease owner the session's writes go under.
    """

    def __init__(self, deps: SessionDeps, key: SessionKey, owner: str) -> None:
        self._deps = deps
        self.key = key
        self._owner = owner
        self._built: BuiltTeam  # set when the session is entered; used only while it is open
        self._team_run_stream: Callable[..., AsyncIterator[Any]]  # AutoGen's own, before s.team was routed
        self._writes = SessionWrites(deps, key, owner)  # the row's version, the snapshot to save, the saves
        self._stale = False  # a run failed or was cancelled mid-turn: the team is built again before the next
        self._running = False
        self._run: Run | None = None
        self._open: weakref.ref[AsyncGenerator[Any, None]] | None = None  # the stream whose run is in flight
        self._interrupted: InterruptedRun | None = None
        self._checkpoint: Checkpoint | None = None  # the interrupted run's, judged (read again if None)
        self._stopped_by_cancel = False  # the interrupted run stopped in this block because it was cancelled
        self._given_up = False  # the session opened on a run that could not wait (set aside, expired): ended there
        self._phase: Phase = "new"
        self.resume: ResumeOutcome | None = None
        self._audit: asyncio.Future[None] | None = None
        self.last_run_id: str | None = None
        self._memory: MemoryBinding | None = None
        self._said_after: datetime | None = None  # no message the memory writer is given was said before it
        self._said: list[Said] = []  # what the completed runs said since the memory was last written
        self._last_run: tuple[RunContext, RunOutcome] | None = None
        self._keeper: LeaseKeeper | None = None  # renews the lease while the session is open

    # --- what a run needs of its session (teamstore.runtime.runs.RunHost) ----------------------------------
    @property
    def built(self) -> BuiltTeam:
        """The team that runs."""
        try:
            return self._built
        except AttributeError:  # set as the session opens, and kept once it closed
            raise SessionNotOpen(
                f"this session {'is not open yet' if self._phase == 'new' else 'did not open'}: its team is built "
                "as it opens", hint="read s.team inside `async with platform.session(...) as s:`",
            ) from None

    @property
    def observers(self) -> Sequence[RunObserver]:
        """The audit observers every run streams into."""
        return self._deps.observers

    @property
    def opening(self) -> str:
        """This opening of the session (its lease owner), as the observers were told of it as it opened."""
        return self._owner

    @property
    def said_after(self) -> datetime | None:
        """The memory writer's bound: the database's clock as the session opened, or the bound an interrupted run it
        found kept from the session that run started in, if earlier (``None``: its team keeps no memory)."""
        return self._said_after

    def autogen_spans(self) -> AbstractContextManager[None]:
        """The block in which AutoGen's spans go where the platform sends them."""
        return self._deps.autogen_spans()

    def team_run_stream(self, task: Task, token: CancellationToken) -> AsyncIterator[Any]:
        """AutoGen's own ``run_stream`` of the team."""
        return self._team_run_stream(task=task, cancellation_token=token)

    async def write_checkpoint(self, text: str | None, *, last: bool = False) -> None:
        """Write (``None``: clear) the run's checkpoint under the lease and row version, in one statement
        (:meth:`SessionWrites.checkpoint <teamstore.runtime.session_writes.SessionWrites.checkpoint>`, where
        ``last`` is told).

        Raises:
            PlatformClosed: The platform closed while the session was open; nothing was written.
        """
        await self._writes.checkpoint(self._built, text, last=last)

    async def checkpoint_landed(self, run_id: str, turn: int) -> bool:
        """Whether the session's row holds run ``run_id``'s checkpoint of ``turn`` once no write of the session's
        can still land (:meth:`teamstore.state.base.StateStore.settle`): a write left unanswered
        (``StoreUnavailable``) that landed. The session goes on from the version the row was read back at, as the
        write's answer would have had it: a continuation in the same block writes on it, where the version the
        session held would find the row changed under it.

        Raises:
            StoreUnavailable: The row could not be read, or a write still running did not end in time.
        """
        row = await self._writes.settle()
        found = set_aside_run(row) if row is not None else None
        return found is not None and (found.run.run_id, found.run.last_turn) == (run_id, turn)

    async def _check_lease(self) -> None:
        """Refuse to go on once the session's lease is lost: a run started then (or a memory write handed on)
        could write the user back after an erasure that took the session meanwhile.

        Raises:
            StaleStateVersion: The lease was lost; nothing was run or written.
            StoreUnavailable: Whether the lease is still held could not be learned.
        """
        if self._keeper is not None:
            await self._keeper.check()

    def _require_open(self) -> None:
        if self._phase != "open":
            raise SessionNotOpen(
                f"this session is {'not open yet' if self._phase == 'new' else 'closed'}",
                hint="use it inside `async with platform.session(...) as s:`; a closed one cannot be reopened",
            )

    # --- runs --------------------------------------------------------------------------------------------
    async def run(self, task: Task) -> TaskResult:
        """Run the team on ``task``, streaming every item to the audit observers.

        Args:
            task: The user's text; or, as AutoGen takes them, an AgentChat message, a list of them, or
                ``None`` to continue without a new one. Checked before the team runs
                (:mod:`teamstore.runtime.tasks`).

        Returns:
            AutoGen's ``TaskResult``.

        Raises:
            SessionNotOpen: Called outside the session's ``async with`` block.
            InvalidTask: ``task`` is not one of the above, text that is empty or only whitespace, not valid
                Unicode, or over ``task_max_bytes``; nothing ran and the session stays usable.
            RunInProgress: Another run of this session is in flight.
            RunInterrupted: The session's last run stopped mid-run: continue or abandon it first.
            StateNotSerializable: A persisted participant's state holds a non-JSON value (names the path).
            StateTooLarge: The persisted state is over ``state_max_bytes``; the previous state is kept.
            StoreUnavailable, StaleStateVersion, ErasureInProgress: A checkpoint could not be written; the run
                stopped there, and the last one written stays (a team with checkpoints only).
            StaleStateVersion: The session's lease was lost before the run (its worker paused past
                ``lease_ttl_seconds``): nothing ran; open the session again.
        """
        return await final_result(self.run_stream(task))

    def run_stream(self, task: Task) -> AsyncGenerator[StreamItem | TaskResult, None]:
        """Run the team on ``task`` and yield what AutoGen's ``run_stream`` yields: every message and event
        as it comes, then the ``TaskResult``. The same checks, audit, checkpoints and snapshot as :meth:`run`
        (and its errors, raised while iterating). A consumer that stops early (closes the stream, or is
        cancelled) stops the team at once, and nothing of the run is saved; leaving the loop does not close it
        (``contextlib.aclosing`` does: docs/checkpoints.md). Once the ``TaskResult`` is yielded the run is over (its
        snapshot held): a consumer may leave the loop there, and the session's next step goes on at once. Without a
        checkpoint of the run (a team without checkpoints, or stopped in its first turn), the run is recorded as it
        went and the session goes on from the state it had before it; after one, the run is interrupted, as if its
        worker had died (:attr:`interrupted`: continue or abandon it). So does one that leaves the stream suspended
        at an item and starts another run of the session, or leaves its block: the first stream then ends where it
        was (its iteration yields nothing more, no ``TaskResult``)."""
        return self._streamed(task)

    async def continue_run(self) -> TaskResult:
        """Continue the interrupted run (:attr:`interrupted`) from its last completed turn, to its end.

        The turns it completed are not run again and make no model call; the turn that was in flight when it
        stopped runs again (tools see the same :func:`teamstore.runtime.turns.current_turn` key). The
        ``TaskResult`` holds the whole run, its earlier turns first. Cancelled (its stream closed early, its task
        cancelled), it stays interrupted, from the last turn it completed: continue it again, or abandon it.

        Raises:
            NoInterruptedRun: The session has no interrupted run.
            StateRejected: AutoGen refused the checkpoint's states after all (``corrupt``): it is set aside,
                and the session goes on from the state before the run.
            StoreUnavailable, StaleStateVersion, ErasureInProgress: The checkpoint could not be written back with
                this take-up counted: nothing ran, and the run is still interrupted.
            Otherwise as :meth:`run`.
        """
        return await final_result(self.continue_run_stream())

    def continue_run_stream(self) -> AsyncGenerator[StreamItem | TaskResult, None]:
        """:meth:`continue_run`, item by item: the run's earlier messages first (as it had streamed them, bar
        token chunks), then the rest as it comes, then the ``TaskResult`` of the whole run."""
        return self._streamed(None, continuing=True)

    async def abandon_run(self) -> None:
        """Give the interrupted run up: its checkpoint is cleared (one write) and the session goes on from the
        state it had before that run. The run's completed turns go to its transcript, and the model calls it
        paid for to the ledger, as a run that failed. Cancelled once the clearing has begun, it still finishes.
        A run the session's opening already ended (its checkpoint set aside: it does not fit the team, a label
        moved since the run; or the session had expired) is given up already: the first call then returns.

        Raises:
            NoInterruptedRun: The session has no interrupted run.
            RunInProgress: A run of this session is in flight.
        """
        self._require_open()
        await self._settle(in_flight=False)
        if self._running:
            raise RunInProgress("this session is running a task", hint="await it before abandoning a run")
        if self._interrupted is None and self._given_up:  # what RunCannotContinue's "or abandon it" leads to
            self._given_up = False
            return
        checkpoint = await self._interrupted_checkpoint()
        # Cancelled from here (a request timeout), it finishes: a checkpoint cleared without its run recorded
        # would leave the run's turns and paid calls on no record at all.
        await to_the_end(self._abandon(checkpoint))

    async def _abandon(self, checkpoint: Checkpoint) -> None:
        async with self._writes.lock:
            await self.write_checkpoint(None)
        self._interrupted = self._checkpoint = None
        self._run_ended("abandoned")
        await interruptions.report_abandoned(self, checkpoint, resumed=bool(self.resume and self.resume.applied))

    def routed_stream(
        self, task: Task, linked: CancellationToken | None, skip: int
    ) -> AsyncGenerator[StreamItem | TaskResult, None]:
        """A run started through the team (``s.team.run_stream``), as the session runs it."""
        return self._streamed(task, linked=linked, skip=skip)

    def _streamed(self, task: Task, **how: Any) -> AsyncGenerator[StreamItem | TaskResult, None]:
        # The stream knows itself (weakly: a caller that leaves it lets Python close it, which stops the team),
        # so that the session's next step can close it if the caller left it open mid-run.
        me: list[weakref.ref[AsyncGenerator[Any, None]]] = []
        stream = self._stream(task, me=me, **how)
        me.append(weakref.ref(stream))
        return stream

    async def _stream(
        self, task: Task, *, me: list[weakref.ref[AsyncGenerator[Any, None]]], continuing: bool = False,
        linked: CancellationToken | None = None, skip: int = 0,
    ) -> AsyncGenerator[StreamItem | TaskResult, None]:
        self._require_open()
        await self._settle(in_flight=False)
        if not continuing:
            check_task(task, self._deps.limits.task_max_bytes)
            task = as_run_takes(task)
        if self._running:
            raise RunInProgress("this session is already running a task", hint="await the first run before the next")
        self._running, self._open = True, me[0]  # before the first await: a second run meanwhile is refused
        run: Run | None = None
        try:
            run = await self._start(task, continuing, linked)
            async with contextlib.aclosing(run.stream()) as items:
                async for item in items:
                    if isinstance(item, TaskResult):
                        # The run is on record as completed: a cancel landing here (a request's timeout, a client
                        # gone) waits for its snapshot, which the block's exit then saves, and goes through after.
                        await to_the_end(self._completed(run, item))
                    elif skip:
                        skip -= 1
                        continue
                    yield item
        except BaseException:
            if run is not None and self._in_flight(me[0]):  # not once its snapshot is held: the run is over
                self._after_failure(run)
            raise
        finally:
            if self._in_flight(me[0]):
                self._running = False

    def _in_flight(self, stream: weakref.ref[AsyncGenerator[Any, None]]) -> bool:
        """Whether ``stream``'s run is the session's run in flight: a completed run's is over once its snapshot is
        held, and whatever becomes of its stream after (its caller leaves it at the ``TaskResult``, and Python
        closes it later, when the session's next run may be under way) is nothing to the session."""
        return self._running and self._open is stream

    async def _start(self, task: Task, continuing: bool, linked: CancellationToken | None) -> Run:
        """What comes before a run: the team as it should be, the last run's audit written, and, with
        checkpoints on, the last completed run saved (a checkpoint's run then starts from it)."""
        self._deps.sessions.check()  # cut off: no run starts
        self._given_up = False  # a run of the block's own: an abandonment after it is about that run
        taken: TakenUp | None = None
        if continuing:
            taken = await self._take_up()
        elif self._interrupted is not None:
            how = "was cancelled" if self._stopped_by_cancel else "stopped"
            raise RunInterrupted(
                f"this session's run {self._interrupted.run_id[:12]} {how} after turn "
                f"{self._interrupted.last_turn} and can be continued",
                hint="continue it (s.continue_run(), `teamstore run --continue`) or abandon it "
                "(s.abandon_run(), `teamstore run --abandon`) before a new run",
            )
        elif self._stale:
            await self._rebuild()
        await self.flush_audit()
        if not continuing and self._built.manifest.checkpoints != "off" and (self._writes.pending or self._writes.drop_checkpoint):
            await self.save()  # the checkpoints of this run then build on the last completed one
        self._deps.sessions.check()  # cut off while it got ready
        await self._check_lease()  # last: what the run's audit looks up as it starts is looked up under the lease
        run = Run(self, task, resumed=bool(self.resume and self.resume.applied), taken_up=taken, linked=linked)
        self._run, self.last_run_id = run, run.ctx.run_id
        return run

    async def _take_up(self) -> TakenUp:
        """The interrupted run's checkpoint, applied to a clean team; one AutoGen refuses is set aside."""
        checkpoint = await self._interrupted_checkpoint()
        if self._stale:
            await self._rebuild()
        # From here until the take-up is written, the team holds the checkpoint, or part of it: stopped anywhere
        # in between (cancelled, say), it is built again before what comes next (an abandonment, a new run).
        self._stale = True
        try:
            so_far = await apply_checkpoint(self._built, checkpoint)
        except Exception as exc:
            detail = (exc.detail if isinstance(exc, StateRejected)
                      else f"AutoGen could not load the checkpoint ({type(exc).__name__})")
            await to_the_end(interruptions.set_aside(self._deps.store, self.key, self._owner, checkpoint,
                                                     self._built.name, detail, self._deps.observers))
            self._interrupted = self._checkpoint = None
            self._run_ended("set aside", refused="corrupt")
            await self._rebuild()
            raise StateRejected("corrupt", f"interrupted run {checkpoint.run.run_id[:12]} cannot continue: {detail}; "
                                           "its checkpoint was set aside") from exc
        if self._memory is not None and self._deps.memory is not None:  # every participant's context as it was
            await self._deps.memory.withdraw_forgotten(self._memory, self.key.user_id,
                                                       restored=self._memory.declaration.participants)
        try:
            await self._writes.count_take_up(self._built, checkpoint)
        except BaseException:
            self._checkpoint = None  # it may have landed: the next take-up or abandonment reads back the row's
            raise
        self._stale = False  # the continuation runs on the team as the checkpoint left it
        self._interrupted = self._checkpoint = None  # in flight again: a new stop sets it again
        self._run_ended("continued")
        return TakenUp(checkpoint, so_far)

    def _run_ended(self, how: str, *, refused: Refusal | None = None) -> None:
        """The interrupted run the session opened with no longer waits: :attr:`resume` says so."""
        if self.resume is not None:
            self.resume = self.resume.run_ended(how, refused=refused)

    async def _interrupted_checkpoint(self) -> Checkpoint:
        if self._interrupted is None:
            raise NoInterruptedRun("this session has no interrupted run",
                                   hint="check s.interrupted (or s.resume.interrupted) first")
        if self._checkpoint is None:  # the run stopped in this block, or a take-up's write failed: read back
            # once nothing written since can still land, and gone on from the version it was read at (a write left
            # unanswered may have landed: a take-up counted, a run's last calls carried)
            row = await self._writes.settle()
            self._checkpoint = interruptions.read_back(row, self._built)
        return self._checkpoint

    def _after_failure(self, run: Run) -> None:
        """A run raised or was cancelled: the team may be mid-turn, so it is built again before the next run;
        one that can be continued (a checkpoint of it is written) waits for a decision, and the checkpoint of one
        that cannot (it completed, then failed its snapshot) is cleared."""
        self._stale = True
        if run.interrupted:
            self._interrupted = interruptions.stopped(run)
            self._stopped_by_cancel = run.cancelled
            self._checkpoint = None
            if run.continues and self.resume is not None:  # the run it said was continued waits again
                self.resume = self.resume.run_stopped(self._interrupted)
        elif run.durable_turn:
            self._writes.drop_checkpoint = True

    async def _settle(self, *, in_flight: bool = True) -> None:
        """Close a stream the caller left open mid-run (it stops the team), and wait for one Python is closing;
        and for a run in flight in another task unless ``in_flight`` is false (a second run or an abandonment
        is then refused at once with ``RunInProgress``, rather than waiting for the first to end)."""
        stream = self._open() if self._open is not None and self._running else None
        running = stream is not None and getattr(stream, "ag_running", True)
        if stream is not None and not running:  # suspended at an item: its caller left it
            await stream.aclose()
        run = self._run
        if run is not None and self._running and not run.finished.is_set() and (in_flight or not running):
            await run.finished.wait()

    async def flush_audit(self) -> None:
        """Wait until the last run's transcript, ledger rows and spans are written (or queued)."""
        task = self._audit
        if task is not None:
            # Shielded: a request cancelled while it waits here must not cancel the writes half-way (the
            # transcript would be neither uploaded nor queued). They stay pending; the block's exit awaits them.
            future = asyncio.ensure_future(task)
            try:
                await asyncio.shield(future)
            finally:
                if future.done():
                    self._audit = None

    async def _completed(self, run: Run, result: TaskResult) -> None:
        """A run completed: its audit given a head start, then the team's snapshot held for the next save."""
        self._audit = run.audit
        await _head_start()  # the audit's statement goes out before the snapshot's work
        await self._snapshot()
        self._remember(run, result)
        self._running = False  # over: the session's next step need not wait for the stream to be closed

    async def _snapshot(self) -> None:
        taken = await snapshot(self._built, self._deps.limits.state_max_bytes)
        if taken is not None:  # a refused one raised: the last snapshot that fit (if any) still saves
            self._writes.hold(taken)

    def _remember(self, run: Run, result: TaskResult) -> None:
        """A run completed: what it said joins what the memory writer reads once the block has saved."""
        if self._memory is None or run.outcome is None:
            return
        self._said += [Said(m.source, m.to_model_text()) for m in result.messages if isinstance(m, BaseChatMessage)]
        self._last_run = (run.ctx, run.outcome)

    # --- the team between runs, and its saves ------------------------------------------------------------
    def _use(self, built: BuiltTeam) -> None:
        """Take ``built`` as the session's team, its ``run`` and ``run_stream`` routed through the session."""
        self._built = built
        self._team_run_stream = built.team.run_stream
        route = TeamRoute(self)
        built.team.run_stream = route.run_stream  # type: ignore[method-assign]
        built.team.run = route.run  # type: ignore[method-assign]

    async def _rebuild(self) -> None:
        """A run failed or was cancelled mid-turn: build the team again, with the state it had before that run."""
        built = self._built
        self._use(await self._deps.build_team(f"{built.name}@{built.version}"))
        if self._memory is not None:  # the new team's participants are given what the old one's were
            self._memory = await rebind_memory(self._memory, self._built)
        if self._writes.good_states:
            await apply_states(self._built, self._writes.good_states)
        if self._memory is not None and self._deps.memory is not None:  # what was forgotten stays withdrawn
            await self._deps.memory.withdraw_forgotten(self._memory, self.key.user_id, restored=self._built.persisted)
        self._stale = False

    async def save(self) -> int:
        """Write the pending snapshot now (after the last run's audit), keeping the lease; returns the row version.

        Cancelled while it writes, it still finishes the write, and the session goes on from it. Saves wait for
        one another (two at once write once), and the block's exit waits for a save under way.
        """
        self._require_open()
        await self.flush_audit()
        await self._writes.save_pending(self._built)
        return self._writes.row_version
