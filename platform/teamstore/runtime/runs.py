"""One run of a session's team, streamed: its items to the audit observers, its model calls metered, its
turns counted (and, for a team with checkpoints, each completed one made durable before the next), its
result last.

    run = Run(host, "My router keeps dropping")                  # host: the open Session
    async for item in run.stream():                              # what AutoGen's run_stream yields
        ...                                                      # TaskResult last

A :class:`Session` builds a ``Run`` for ``run()``, ``run_stream()`` and their ``continue_`` forms; nothing
else does. The team runs in a task of its own (the producer), so its meter, its turn tracker and its span
route live in that task's context, which the team's AutoGen runtime inherits, and so a consumer that stops
early, or is cancelled, stops the team at once: AutoGen's cancellation token ends the model calls in flight.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
import weakref
from collections.abc import AsyncGenerator, AsyncIterator, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Protocol

from autogen_agentchat.base import TaskResult
from autogen_agentchat.messages import BaseChatMessage, ModelClientStreamingChunkEvent
from autogen_agentchat.teams import BaseGroupChat
from autogen_core import CancellationToken

from config_registry.types import BuiltTeam
from teamstore.audit.stop_reasons import written_by_a_condition
from teamstore.errors import (
    ErasureInProgress,
    SessionNotOpen,
    StaleStateVersion,
    StoreUnavailable,
    TeamstoreError,
)
from teamstore.events import (
    ModelCall,
    RunContext,
    RunObserver,
    RunOutcome,
    notify_observers,
    notify_run_stopped,
)
from teamstore.metering import metered_run
from teamstore.runtime import turns
from teamstore.runtime.checkpoints import Checkpoint, Progress, encode_checkpoint
from teamstore.runtime.turns import StreamItem, TurnTracker
from teamstore.state.base import SessionKey
from teamstore.state.cancellation import to_the_end

log = logging.getLogger("teamstore.session")

Task = str | BaseChatMessage | Sequence[BaseChatMessage] | None
_END = object()  # the producer's last word on the queue
_LIMIT_MARKERS = ("maximum number of", "token usage limit", "timeout", "max_turns", "maximum turns",
                  "max rounds reached")  # the last MagenticOne's turn limit
# What AutoGen's completing conditions say (a text mentioned, a handoff, a stop message, a function run,
# an agent answering). Combined conditions join their reasons: a run that completed on the same message
# that reached a limit did complete.
_COMPLETION_MARKERS = (
    "' mentioned", "handoff to ", "stop message received", "' was executed", "' answered",
    "text message received from", "functional termination condition met",
)


def ended_by_limit(stop_reason: str | None) -> bool:
    """True when a run was stopped by a message, turn, token or time limit rather than by completing.

    Only what a termination condition writes is judged: a stop reason a model wrote (MagenticOne's reason for
    the request being satisfied) says it completed, whatever words it uses."""
    if not written_by_a_condition(stop_reason):
        return False
    text = (stop_reason or "").lower()
    return any(marker in text for marker in _LIMIT_MARKERS) and not any(
        marker in text for marker in _COMPLETION_MARKERS
    )


def _earliest(*times: datetime | None) -> datetime | None:
    """The earliest of ``times`` that are known (``None``: none is)."""
    known = [t for t in times if t is not None]
    return min(known) if known else None


def task_messages(task: Task) -> int:
    """How many messages ``task`` puts at the head of the run (AutoGen's own reading of it)."""
    if task is None:
        return 0
    return 1 if isinstance(task, str | BaseChatMessage) else len(task)


class RunHost(Protocol):
    """What a run needs from the session it runs in."""

    key: SessionKey

    @property
    def opening(self) -> str:
        """The session's opening, as the observers were told of it (:attr:`RunContext.opening`)."""
        ...

    @property
    def said_after(self) -> datetime | None:
        """The session's memory writer's bound, read as it opened (``None``: its team keeps no memory)."""
        ...

    @property
    def built(self) -> BuiltTeam:
        """The team that runs."""
        ...

    @property
    def observers(self) -> Sequence[RunObserver]:
        """The audit observers."""
        ...

    def autogen_spans(self) -> AbstractContextManager[None]:
        """The block in which AutoGen's spans go where the platform sends them."""
        ...

    def team_run_stream(self, task: Task, token: CancellationToken) -> AsyncIterator[Any]:
        """AutoGen's own ``run_stream`` of the team (the one the session routes ``s.team`` away from)."""
        ...

    async def write_checkpoint(self, text: str | None, *, last: bool = False) -> None:
        """Write the run's checkpoint under the session's lease and row version (``last``: the one a run stopped
        mid-run writes with the calls paid since its checkpoint, written even as the platform's close cuts the
        session off)."""
        ...

    async def checkpoint_landed(self, run_id: str, turn: int) -> bool:
        """Whether the session's row, read back once no write of the session's can still land, holds run
        ``run_id``'s checkpoint of ``turn`` (a write left unanswered that landed); the session goes on from the
        version it was read back at."""
        ...


@dataclass(frozen=True)
class TakenUp:
    """A checkpoint applied to the team, and the run's messages before it (the task first)."""

    checkpoint: Checkpoint
    so_far: list[StreamItem]


class Run:
    """One run (or the continuation of an interrupted one) of a session's team.

    Args:
        host: The open session.
        task: The task (``None`` for a continuation: the task is in its checkpoint).
        resumed: Whether the session resumed a stored state (the run's audit records it).
        taken_up: For a continuation, the checkpoint applied to the team and the messages before it.
        linked: A caller's cancellation token, which cancels this run too.
    """

    def __init__(self, host: RunHost, task: Task, *, resumed: bool, taken_up: TakenUp | None = None,
                 linked: CancellationToken | None = None) -> None:
        self._host, self._task, self._taken_up = host, task, taken_up
        self.progress = taken_up.checkpoint.progress if taken_up else Progress(uuid.uuid4().hex, datetime.now(UTC))
        # Kept in its checkpoints: a session that continues the run later bounds its writer by it, on the database's
        # clock, not by the run's start on this host's (which may run ahead of the clock a forget is dated by).
        self.progress.said_after = _earliest(self.progress.said_after, host.said_after)
        built, p = host.built, self.progress
        self.ctx = RunContext(run_id=p.run_id, user_id=host.key.user_id, session_id=host.key.session_id,
                              team=built.name, team_version=built.version, started_at=p.started_at, resumed=resumed,
                              interruptions=p.interruptions, opening=host.opening)
        self._token = CancellationToken()
        if linked is not None:
            linked.add_callback(self._token.cancel)
        self._queue: asyncio.Queue[Any] = asyncio.Queue()
        self._calls: list[ModelCall] = []  # the run's meter's list, once the producer has made it
        self._tracker: TurnTracker | None = None
        self.checkpointed = 0  # the last turn made durable by this process
        # The team state and turn of the checkpoint the row holds for this run, and how many of this process's
        # calls it carries: written again with the calls made since if the run stops mid-run here.
        self._durable: tuple[Mapping[str, Any], int, int] | None = (
            ({"agent_states": taken_up.checkpoint.agent_states}, taken_up.checkpoint.run.last_turn, 0)
            if taken_up else None)
        self._being_written: tuple[Mapping[str, Any], int, int] | None = None  # the checkpoint being written, likewise
        self._not_read_back = False  # that write was left unanswered, and whether it landed could not be learned
        self._stopped_by: TeamstoreError | None = None  # what the run ends with once stopped (:meth:`stop`)
        self.completed = False  # the TaskResult is out: whatever fails after it, the run did complete
        self.finished = asyncio.Event()
        self.cancelled = False
        self.audit: asyncio.Future[None] | None = None  # the end-of-run audit writes, once the run completed
        self.outcome: RunOutcome | None = None  # how the run completed, once it did

    @property
    def calls(self) -> list[ModelCall]:
        """Every model call of the run: those paid before it was continued, then this process's."""
        return [*self.progress.carried, *self._calls]

    async def stream(self) -> AsyncGenerator[StreamItem | TaskResult, None]:
        """The run's items as AutoGen's ``run_stream`` yields them (a continuation's earlier ones first), then
        the ``TaskResult`` of the whole run. Leaving early (``aclose``) or being cancelled stops the team.

        Raises:
            Exception: What the team raised, or the typed error that stopped it at a checkpoint.
        """
        observers = self._host.observers
        await notify_observers(observers, "run_started", self.ctx)
        so_far = self._taken_up.so_far if self._taken_up else []
        producer: asyncio.Future[TaskResult | None] | None = None
        try:
            for item in so_far:
                await notify_observers(observers, "on_item", self.ctx, item)
            producer = asyncio.ensure_future(self._produce())
            for item in so_far:
                yield item
            while (item := await self._queue.get()) is not _END:
                yield item
            result = await producer
        except BaseException as exc:
            # Carried through the caller's cancellations (anyio's come again at every turn of the event loop):
            # cut short, the team's runtime would be cancelled mid-message and the run, its paid calls, not recorded.
            try:
                await to_the_end(self._stop(producer, exc))
            finally:
                self.finished.set()  # here, not in the stop's own task: the session learns it once this stream ends
            reported = self._reported(exc)
            if reported is exc:
                raise
            raise reported from exc
        assert result is not None
        whole = TaskResult(messages=[*_kept(so_far), *result.messages], stop_reason=result.stop_reason)
        self._report(whole)
        self.completed = True
        yield whole

    def stop(self, reason: TeamstoreError) -> None:
        """Stop the team at once (its session's platform is closing): the model calls in flight end, the run is
        recorded as one that failed with ``reason`` (or, stopped mid-run with a checkpoint, stays interrupted),
        and its consumer gets ``reason``."""
        self._stopped_by = reason
        self._token.cancel()

    async def _produce(self) -> TaskResult | None:
        """Run the team in this task: its meter, its turn tracker and its span route are this task's."""
        host = self._host
        try:
            with metered_run(self.progress.interruptions) as meter, host.autogen_spans():
                self._calls = meter.calls
                team = host.built.team
                if isinstance(team, BaseGroupChat):
                    completed = self._taken_up.checkpoint.run.last_turn if self._taken_up else 0
                    self._tracker = TurnTracker(self.ctx.run_id, team, completed, self._between_turns)
                    turns.tracking(self._tracker)
                found: TaskResult | None = None
                async for item in host.team_run_stream(self._task, self._token):
                    if isinstance(item, TaskResult):
                        found = item
                        continue
                    await notify_observers(host.observers, "on_item", self.ctx, item)
                    self._queue.put_nowait(item)
                return found
        finally:
            self._queue.put_nowait(_END)

    async def _between_turns(self, completed: int, thread: int, first: bool) -> None:
        """Between two turns: note where the last one ended; with checkpoints on, make it durable."""
        progress, built = self.progress, self._host.built
        if first:
            if self._taken_up is None:  # a fresh run: its messages start with its task
                tasked = task_messages(self._task)
                progress.offset, progress.turn_ends = thread - tasked, [tasked]
            return
        progress.turn_ends.append(thread - progress.offset)
        if built.manifest.checkpoints == "off":
            return
        assert isinstance(built.team, BaseGroupChat)
        # Between two turns the team is consistent: every participant has the last answer in its buffer, and
        # the manager waits here before it picks the next speaker. AutoGen's save_state only warns about this.
        team_state = await built.team.save_state()
        text = encode_checkpoint(built, progress, team_state, completed, self._calls)
        self._being_written = (team_state, completed, len(self._calls))
        await self._host.write_checkpoint(text)
        self.checkpointed, self._durable, self._being_written = completed, self._being_written, None

    @property
    def continues(self) -> bool:
        """Whether the run is the continuation of an interrupted one."""
        return self._taken_up is not None

    @property
    def durable_turn(self) -> int:
        """The last turn of the run a checkpoint holds (0: none)."""
        return self.checkpointed or (self._taken_up.checkpoint.run.last_turn if self._taken_up else 0)

    @property
    def interrupted(self) -> bool:
        """Whether the run stopped mid-run with a checkpoint to continue from (it raised, was cancelled, or the
        platform's close stopped it): it is then recorded once, by the attempt that completes it or by its
        abandonment. A cancelled run is no different: its completed turns were paid for, and a client gone
        mid-stream (a phone's connection dropped) is no reason to give them up."""
        return not self.completed and self.durable_turn > 0

    async def _stop(self, producer: asyncio.Future[TaskResult | None] | None, exc: BaseException) -> None:
        """The run ends without a result: stop the team, let it finish stopping, and record the run unless
        it can be continued."""
        self.cancelled = isinstance(exc, asyncio.CancelledError | GeneratorExit) and self._stopped_by is None
        if producer is not None and not producer.done():
            # A consumer gone or cancelled: AutoGen would let the team finish its model calls before its
            # stream gives up. The token stops them now. A checkpoint write in flight is not cut short: AutoGen
            # stops its runtime once idle, so the producer ends only once the write has, and the turn it made
            # durable counts (never a checkpoint that may have landed taken as one that did not).
            self._token.cancel()
            with contextlib.suppress(BaseException):
                await producer
        await self._landed_after_all()
        if self.interrupted:
            await self._carry_calls()
            await notify_run_stopped(self._host.observers, self.ctx)
        else:
            outcome = RunOutcome(datetime.now(UTC), error=self._reported(exc), model_calls=self.calls)
            await notify_observers(self._host.observers, "run_finished", self.ctx, outcome)

    async def _landed_after_all(self) -> None:
        """A checkpoint write the database left unanswered (``StoreUnavailable``: its outcome unknown) may have
        landed: the row is read back, and this run's checkpoint found there counts as written, so the run waits to
        be continued and is recorded once, by the attempt that ends it (taken as one that did not land, the run
        would be recorded at this stop and again by its continuation). A row that cannot be read either leaves the
        run recorded here (were the write lost, nothing would ever record its paid calls), and its error says so."""
        failure = self._tracker.failure if self._tracker is not None else None
        if self._being_written is None or not isinstance(failure, StoreUnavailable):
            return
        try:
            landed = await self._host.checkpoint_landed(self.ctx.run_id, self._being_written[1])
        except TeamstoreError as exc:
            log.warning("could not read back whether the stopped run's last checkpoint was written: %s", exc.message)
            self._not_read_back = True
            return
        if landed:
            self.checkpointed, self._durable = self._being_written[1], self._being_written

    async def _carry_calls(self) -> None:
        """The run stopped mid-run in this process (its team raised, it was cancelled, or the platform's close
        stopped it): its checkpoint is written again with the model calls made since it was (a turn's paid speaker selection or
        tool-call round, the call that failed), so the attempt that ends the run records them with the rest.

        The ledger gets them only from there: a run is recorded once, by the attempt that ends it, its
        transcript, run span and ledger rows together (docs/checkpoints.md, "The audit side").
        """
        failure = self._tracker.failure if self._tracker is not None else None
        if self._durable is None or failure is not None or len(self._calls) == self._durable[2]:
            return  # a checkpoint write failed: the database is no better placed to take this one
        team_state, turn, _ = self._durable
        try:
            text = encode_checkpoint(self._host.built, self.progress, team_state, turn, self._calls)
            await to_the_end(self._host.write_checkpoint(text, last=True))
        except TeamstoreError as exc:  # the run's own error is the one raised; these calls stay unrecorded
            # (unless a write left unanswered landed: the next worker reads whichever checkpoint the row holds)
            log.warning("could not add the stopped run's last model calls to its checkpoint: %s", exc.message)

    def _reported(self, exc: BaseException) -> BaseException:
        """What the caller gets: the typed error that stopped the run at a checkpoint, rather than the
        ``RuntimeError`` AutoGen turns it into; anything else as it came."""
        if self._stopped_by is not None and not isinstance(exc, GeneratorExit) and not _caller_cancelled():
            return self._stopped_by  # what the stop made the team raise (CancelledError, mostly)
        failure = self._tracker.failure if self._tracker is not None else None
        if failure is None or exc is failure or isinstance(exc, asyncio.CancelledError | GeneratorExit):
            return exc
        if isinstance(failure, TeamstoreError):
            landed = self._being_written is not None and self.checkpointed == self._being_written[1]
            return _stopped(failure, self.durable_turn, landed=None if self._not_read_back else landed)
        return failure

    def _report(self, whole: TaskResult) -> None:
        """Hand the run's end to the observers (the session awaits it before the next run and the save)."""
        outcome = RunOutcome(datetime.now(UTC), result=whole, stop_reason=whole.stop_reason,
                             ended_by_limit=ended_by_limit(whole.stop_reason), model_calls=self.calls)
        self.outcome = outcome
        self.audit = asyncio.ensure_future(
            notify_observers(self._host.observers, "run_finished", self.ctx, outcome))
        self.audit.add_done_callback(lambda _: self.finished.set())


def _caller_cancelled() -> bool:
    """Whether the task consuming the run was itself cancelled (a request's timeout), not only its team."""
    task = asyncio.current_task()
    return task is not None and task.cancelling() > 0


def _kept(items: Sequence[StreamItem]) -> list[StreamItem]:
    """What a ``TaskResult`` keeps of streamed items: all but token chunks (as AutoGen's own)."""
    return [item for item in items if not isinstance(item, ModelClientStreamingChunkEvent)]


def _stopped(failure: TeamstoreError, durable_turn: int, *, landed: bool | None = False) -> TeamstoreError:
    """``failure`` (a checkpoint that could not be written) said as the stop of the run it was, whose last
    checkpoint (written by this process or by the one it continues) holds ``durable_turn`` (0: none); ``landed``:
    the write ``failure`` left unanswered was found in the row all the same (``None``: the row could not be read
    back to learn whether it was)."""
    if isinstance(failure, ErasureInProgress):  # the erasure deletes the checkpoints with the rest
        message = f"the run stopped between two turns: {failure.message}; nothing of it is kept"
        hint = failure.hint or "nothing to do: the user is being erased"
    elif landed is None:
        last = (f"turn {durable_turn}'s checkpoint stays, or the next one's if it landed" if durable_turn
                else "no checkpoint of this run was written, unless this one landed")
        message = (f"the run stopped between two turns: its checkpoint's write was left unanswered "
                   f"({failure.message}), and the row could not be read back to learn whether it landed; {last}")
        hint = ((failure.hint + "; ") if failure.hint else "") + (
            "open the session again: `s.interrupted` says whether its row holds a checkpoint of the run to continue")
    else:
        last = f"turn {durable_turn}'s checkpoint stays" if durable_turn else "no checkpoint of this run was written"
        written = "its checkpoint's write was left unanswered" if landed else "its checkpoint could not be written"
        landed_anyway = ", but it landed" if landed else ""
        message = f"the run stopped between two turns: {written} ({failure.message}){landed_anyway}; {last}"
        hint = _then(failure, durable_turn)
    try:
        stopped: TeamstoreError = type(failure)(message, hint=hint)
    except TypeError:  # an error class with a constructor of its own: as it is
        return failure
    stopped.__cause__ = failure
    return stopped


def _then(failure: TeamstoreError, durable_turn: int) -> str:
    """What to do about a run stopped by ``failure`` at a checkpoint, after the last one (``durable_turn``)."""
    if isinstance(failure, StaleStateVersion):
        # The row moved on under this worker: the store's hint is a save's ("reload the session and run again"),
        # and the worker that moved it may have taken the run over and continued it already.
        then = ("open the session again and continue the run if it is still interrupted (`s.interrupted`)"
                if durable_turn else
                "there is nothing of the run to continue: open the session again and run its task again")
        return f"{then}; raise lease_ttl_seconds if runs outlive the lease"
    then = ("open the session again and continue the run" if durable_turn
            else "there is nothing of the run to continue: run its task again")
    return (failure.hint or "") + ("; " if failure.hint else "") + then


class Routed(Protocol):
    """A session that runs its team's ``run`` and ``run_stream`` through itself."""

    def routed_stream(
        self, task: Task, linked: CancellationToken | None, skip: int
    ) -> AsyncGenerator[StreamItem | TaskResult, None]:
        """The session's own stream of a run (``skip``: task messages the caller does not want back)."""
        ...


class TeamRoute:
    """A team's ``run`` and ``run_stream``, as AutoGen names and calls them, going through its session: a
    service reaching around the session (``s.team.run_stream(...)``) gets the session's checks, audit and
    checkpoints all the same.

    Args:
        session: The session; held weakly, so the team does not keep a closed session alive.
    """

    def __init__(self, session: Routed) -> None:
        self._session = weakref.ref(session)

    def run_stream(
        self, *, task: Task = None, cancellation_token: CancellationToken | None = None,
        output_task_messages: bool = True,
    ) -> AsyncGenerator[StreamItem | TaskResult, None]:
        """AutoGen's ``run_stream``, through the session."""
        session = self._session()
        if session is None:
            raise SessionNotOpen("the session this team was built for is gone",
                                 hint="open a session and run its team through it")
        return session.routed_stream(task, cancellation_token, 0 if output_task_messages else task_messages(task))

    async def run(
        self, *, task: Task = None, cancellation_token: CancellationToken | None = None,
        output_task_messages: bool = True,
    ) -> TaskResult:
        """AutoGen's ``run``, through the session."""
        return await final_result(self.run_stream(task=task, cancellation_token=cancellation_token,
                                                  output_task_messages=output_task_messages))


async def final_result(stream: AsyncIterator[StreamItem | TaskResult]) -> TaskResult:
    """The ``TaskResult`` at the end of ``stream``, consumed whole."""
    found: TaskResult | None = None
    async for item in stream:
        if isinstance(item, TaskResult):
            found = item
    assert found is not None
    return found
