"""Drive audit observers with real team runs (offline model client, metered), without the session runtime."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from autogen_agentchat.agents import AssistantAgent
from autogen_agentchat.base import TaskResult, Team
from autogen_agentchat.conditions import MaxMessageTermination
from autogen_agentchat.teams import BaseGroupChat, RoundRobinGroupChat, SelectorGroupChat
from autogen_core import AgentRuntime, SingleThreadedAgentRuntime

from teamstore.events import RunContext, RunObserver, RunOutcome, notify_opening
from teamstore.examples import support_triage
from teamstore.metering import MeteredChatCompletionClient, metered_run, wrap_model_clients
from teamstore.offline import OfflineChatCompletionClient

CANARY = "CANARY-7f3a9c-secret-user-text"


def triage_team() -> Team:
    """The example support team, model clients metered through its component JSON."""
    component = wrap_model_clients(support_triage().dump_component().model_dump())
    return BaseGroupChat.load_component(component)


def metered_round_robin(runtime: AgentRuntime | None = None, model: str = "offline-small") -> Team:
    """Two agents with metered offline clients, optionally on a caller-owned runtime."""
    agents = [
        AssistantAgent(
            name, model_client=MeteredChatCompletionClient(OfflineChatCompletionClient(model=model), name)
        )
        for name in ("triage", "researcher")
    ]
    return RoundRobinGroupChat(agents, termination_condition=MaxMessageTermination(3), runtime=runtime)


def selector_team() -> Team:
    """A SelectorGroupChat: its speaker-selection calls are metered with purpose speaker_selection."""
    agents = [
        AssistantAgent(n, model_client=OfflineChatCompletionClient(), description=f"the {n}")
        for n in ("triage", "researcher")
    ]
    team = SelectorGroupChat(
        agents, model_client=OfflineChatCompletionClient(), termination_condition=MaxMessageTermination(3)
    )
    return BaseGroupChat.load_component(wrap_model_clients(team.dump_component().model_dump()))


NEW_OPENING = "new"
"""``context(opening=NEW_OPENING)``: a run of a session opening of its own (the default)."""


def context(
    user_id: str = "alice",
    session_id: str = "s1",
    run_id: str | None = None,
    team: str = "support_triage",
    team_version: str = "v1",
    opening: str | None = NEW_OPENING,
) -> RunContext:
    """A run context as the runtime would build it: by default, the one run of a session opening of its own
    (:func:`observe_run` opens it); ``opening=None`` for a run recorded outside an open session."""
    return RunContext(
        run_id=run_id or uuid.uuid4().hex,
        user_id=user_id,
        session_id=session_id,
        team=team,
        team_version=team_version,
        started_at=datetime.now(UTC),
        opening=uuid.uuid4().hex if opening == NEW_OPENING else opening,
    )


async def open_session(observers: Sequence[RunObserver], ctx: RunContext) -> None:
    """Tell ``observers`` that the session of ``ctx`` opens (as it opened), as the runtime does before the lease:
    the user's subject is made there, never by a run."""
    assert ctx.opening is not None, "a run recorded outside an open session has no opening to tell"
    await notify_opening(observers, ctx.user_id, ctx.session_id, ctx.opening)


async def observe_run(
    observers: Sequence[RunObserver],
    team: Team,
    ctx: RunContext,
    task: Any = "My router keeps dropping",
    ended_by_limit: bool = False,
    runtime: SingleThreadedAgentRuntime | None = None,
) -> RunOutcome:
    """Run ``team`` on ``task`` under a meter, feeding every streamed item to the observers like the runtime does;
    first, the run's session opening is told to them (which makes the user's subject), as a session's is.

    A caller-owned ``runtime`` is started inside the meter's context: its message loop is a task that copies
    the context it starts in, so a runtime started outside the meter would make its model calls unmetered.
    """
    if ctx.opening is not None:
        await open_session(observers, ctx)
    for observer in observers:
        await observer.run_started(ctx)
    result: TaskResult | None = None
    with metered_run() as meter:
        if runtime is not None:
            runtime.start()
        try:
            async for item in team.run_stream(task=task):
                if isinstance(item, TaskResult):
                    result = item
                    continue
                for observer in observers:
                    await observer.on_item(ctx, item)
        finally:
            if runtime is not None:
                await runtime.stop_when_idle()
    assert result is not None
    outcome = RunOutcome(
        finished_at=datetime.now(UTC),
        result=result,
        stop_reason=result.stop_reason,
        ended_by_limit=ended_by_limit,
        model_calls=list(meter.calls),
    )
    for observer in observers:
        await observer.run_finished(ctx, outcome)
    return outcome
