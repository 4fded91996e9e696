"""What a run tells the audit trail: the contract between the session runtime, its observers and metering.

A session calls every observer at the start of a run, for each streamed message or event, and once at
the end (also when the run raised), through :func:`notify_observers`. Observers must never make a run
fail: a failing one is logged and the run goes on, so an observer that must not lose data keeps its own
outbox. Model calls reach the run's outcome as :class:`ModelCall` records, made at the model-client
boundary (:mod:`teamstore.metering`).

An observer makes what a session's runs will need of the user (the audit's subject) as the session opens,
before it asks for its lease (:class:`OpeningObserver`, :func:`notify_opening`), never as a run starts: a
worker that hung past its lease while the user was erased would make it again after the erasure. A failure
there is raised, and the session does not open.

This module sits below ``runtime``, ``audit`` and ``metering``: each of them depends on it, none on
another through it.

    class Printer:
        async def run_started(self, ctx: RunContext) -> None:
            print("run", ctx.run_id)

        async def on_item(self, ctx: RunContext, item: StreamItem) -> None:
            print(type(item).__name__)

        async def run_finished(self, ctx: RunContext, outcome: RunOutcome) -> None:
            print(outcome.stop_reason, len(outcome.model_calls))

        async def later_calls(self, ctx: RunContext, later: LaterCalls) -> None:   # optional
            print(later.purpose, len(later.calls))

        async def run_stopped(self, ctx: RunContext) -> None:   # optional: stopped mid-run, to be continued
            print("stopped", ctx.run_id)

Work done on a run's behalf after it ended (the memory writer, once the session saved) reaches the
observers that take it through :func:`notify_later_calls`, as :class:`LaterCalls`: its model calls are
metered like the run's own, under the run's id.
"""

from __future__ import annotations

import asyncio
import logging
import os
import traceback
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Protocol, runtime_checkable

from autogen_agentchat.base import TaskResult
from autogen_agentchat.messages import BaseAgentEvent, BaseChatMessage

from teamstore.errors import ErasureInProgress, TeamstoreError

# Observer failures are logged where they always were: under the session's logger.
log = logging.getLogger("teamstore.session")

StreamItem = BaseAgentEvent | BaseChatMessage


@dataclass(frozen=True)
class ModelCall:
    """One model call, metered at the model-client boundary (speaker selection included)."""

    agent: str
    model: str
    input_tokens: int
    output_tokens: int
    started_at: datetime
    duration_s: float
    purpose: str = "agent"  # "agent" or "speaker_selection"
    error: str | None = None
    provider: str = "unknown"
    """The GenAI provider as the conventions name it (``openai``, ``azure.ai.openai``, ``anthropic``...)."""
    response_model: str | None = None
    """The model that answered, when the client reports it (``gpt-4o-2024-08-06`` for ``gpt-4o``)."""
    finish_reason: str | None = None
    """Why the model stopped (``stop``, ``length``, ``function_calls``...); ``None`` when the call failed."""
    attempt: int = 0
    """Which attempt at its run made it: 0 the first, ``n`` the run's ``n``-th continuation from a checkpoint. The
    ledger keys its rows by it, so a call recorded by an earlier attempt is never counted again by a later one."""

    @property
    def usage_known(self) -> bool:
        """Whether its tokens are what the provider counted: not for a call that failed or was cancelled, nor for
        one answered without usage (no tokens at all, as AutoGen's OpenAI client reports a stream whose request
        did not ask for usage: a real call always reads its prompt). Its tokens are then 0, and its cost unknown.
        """
        return self.error is None and (self.input_tokens > 0 or self.output_tokens > 0)


@dataclass(frozen=True)
class RunContext:
    """Who and what a run is. ``user_id`` is raw: observers must pseudonymise before writing anywhere."""

    run_id: str
    user_id: str
    session_id: str
    team: str
    team_version: str
    started_at: datetime
    resumed: bool = False
    interruptions: int = 0
    """How many times the run was continued from its checkpoint after it stopped mid-run (a worker died, the
    database failed at a checkpoint): such a run's record holds the turns of every attempt."""
    opening: str | None = None
    """The opening of the session the run belongs to, as :func:`notify_opening` named it (unique to it); ``None``
    for a run recorded outside an open session (the sweep's or a delete's of an interrupted run)."""


@dataclass
class RunOutcome:
    """How a run ended."""

    finished_at: datetime
    result: TaskResult | None = None
    error: BaseException | None = None
    stop_reason: str | None = None
    ended_by_limit: bool = False
    model_calls: list[ModelCall] = field(default_factory=list)

    @property
    def input_tokens(self) -> int:
        """Input tokens over every model call of the run."""
        return sum(c.input_tokens for c in self.model_calls)

    @property
    def output_tokens(self) -> int:
        """Output tokens over every model call of the run."""
        return sum(c.output_tokens for c in self.model_calls)


@runtime_checkable
class RunObserver(Protocol):
    """Receives a run's stream: transcripts, spans and the ledger each implement this."""

    async def run_started(self, ctx: RunContext) -> None:
        """Called before the team starts."""

    async def on_item(self, ctx: RunContext, item: StreamItem) -> None:
        """Called for every message and event the team streams, in order."""

    async def run_finished(self, ctx: RunContext, outcome: RunOutcome) -> None:
        """Called once after the run returned or raised."""


@dataclass(frozen=True)
class LaterCalls:
    """Model calls made on a run's behalf after it ended (the memory writer's), metered like the run's own.

    Attributes:
        run: The run's own outcome (its stop reason and flags; its calls are not repeated here).
        calls: The later calls.
        purpose: What made them (``memory_writer``); each call's ``purpose`` says it too.
        started_at: When the work began. finished_at: When it ended.
        error_type: The type of the error the work failed with (``MemoryWriteRefused``), or ``None``.
    """

    run: RunOutcome
    calls: list[ModelCall]
    purpose: str
    started_at: datetime
    finished_at: datetime
    error_type: str | None = None

    def as_outcome(self) -> RunOutcome:
        """The run's outcome holding only the later calls: what a ledger row of them records."""
        return RunOutcome(self.run.finished_at, result=self.run.result, error=self.run.error,
                          stop_reason=self.run.stop_reason, ended_by_limit=self.run.ended_by_limit,
                          model_calls=list(self.calls))


@runtime_checkable
class LaterCallsObserver(Protocol):
    """An observer that also records work done on a run's behalf after it ended (the ledger and spans do)."""

    async def later_calls(self, ctx: RunContext, later: LaterCalls) -> None:
        """Called once the later work ended, with its model calls."""


async def notify_later_calls(observers: Sequence[RunObserver], ctx: RunContext, later: LaterCalls) -> None:
    """Tell every observer that takes them of ``later``'s calls, concurrently; a failing one is logged."""
    takers = [o for o in observers if isinstance(o, LaterCallsObserver)]
    await asyncio.gather(*(_call(o, "later_calls", ctx, later) for o in takers))


@runtime_checkable
class StoppedRunObserver(Protocol):
    """An observer that holds something of a run between its start and its end (the transcript's buffer), and
    lets it go when the run stops mid-run, to be continued: ``run_finished`` then comes only from the attempt
    that ends the run, perhaps in another process, and a continuation streams the earlier items again."""

    async def run_stopped(self, ctx: RunContext) -> None:
        """Called once when the run stopped mid-run with a checkpoint to continue from (no ``run_finished``)."""


async def notify_run_stopped(observers: Sequence[RunObserver], ctx: RunContext) -> None:
    """Tell every observer that takes it that the run stopped mid-run; a failing one is logged."""
    for observer in observers:
        if isinstance(observer, StoppedRunObserver):
            await _call(observer, "run_stopped", ctx)


@runtime_checkable
class OpeningObserver(Protocol):
    """An observer that makes what a session's runs will need of the user as the session opens (the audit's
    subject), so that a run never makes it."""

    async def session_opening(self, user_id: str, session_id: str, opening: str) -> None:
        """Called as a session opens, before it asks for its lease; ``opening`` is what its runs'
        :attr:`RunContext.opening` will be."""


async def notify_opening(observers: Sequence[RunObserver], user_id: str, session_id: str, opening: str) -> None:
    """Tell every observer that takes it that a session is opening, concurrently, before it asks for its lease.

    Raises:
        TeamstoreError: What the first failing observer raised (``ErasureInProgress``, ``StoreUnavailable``...),
            once all have ended: the session does not open, since its runs would not make what was missing.
    """
    takers = [o for o in observers if isinstance(o, OpeningObserver)]
    ended = await asyncio.gather(*(o.session_opening(user_id, session_id, opening) for o in takers),
                                 return_exceptions=True)
    for outcome in ended:
        if isinstance(outcome, BaseException):
            raise outcome


async def drain_observers(observers: Sequence[RunObserver]) -> None:
    """Let every observer that has one finish its background writes (a transcript's outbox delivery)."""
    for observer in observers:
        drain = getattr(observer, "drain", None)
        if drain is not None:
            await drain()


async def notify_observers(
    observers: Sequence[RunObserver], hook: str, ctx: RunContext, *args: StreamItem | RunOutcome
) -> None:
    """Call ``hook`` on every observer; a failing observer is logged and never fails the run."""
    if hook == "run_finished":
        # The end-of-run writes (transcript, ledger, spans) are independent: overlap their round trips.
        await asyncio.gather(*(_call(o, hook, ctx, *args) for o in observers))
        return
    for observer in observers:
        await _call(observer, hook, ctx, *args)


async def _call(
    observer: RunObserver, hook: str, ctx: RunContext, *args: StreamItem | RunOutcome | LaterCalls
) -> None:
    try:
        await getattr(observer, hook)(ctx, *args)
    except ErasureInProgress:
        log.info("observer %s wrote nothing: an erasure is open for this user", type(observer).__name__)
    except TeamstoreError as exc:
        # An audit observer must never fail a user's run; each one keeps its own outbox for retries. A
        # typed error's message names no user and no content; its chained cause might, so no traceback.
        log.error("observer %s.%s failed: %s", type(observer).__name__, hook, exc.message)
    except Exception as exc:
        # Not one of teamstore's typed errors: its message may quote the item or the ids it was handed (a
        # KeyError, a ValueError of an encoder), so the log says its type and where it was raised, not what.
        frame = traceback.extract_tb(exc.__traceback__)[-1]
        log.error("observer %s.%s failed: %s at %s:%s (its message and traceback are left out: they may quote "
                  "users' words)", type(observer).__name__, hook, type(exc).__name__,
                  os.path.basename(frame.filename), frame.lineno)
