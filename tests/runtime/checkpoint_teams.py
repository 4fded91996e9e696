"""The team the checkpoint suites run: three offline agents taking turns until the seventh message (six turns),
and what makes its model calls fail or count, as a test needs."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from autogen_agentchat.agents import AssistantAgent
from autogen_agentchat.conditions import MaxMessageTermination
from autogen_agentchat.teams import RoundRobinGroupChat

from config_registry import Manifest, Registry
from teamstore.context import BoundedChatCompletionContext
from teamstore.offline import OfflineChatCompletionClient

TEAM = "long_triage"
TURNS = 6
AGENTS = ("triage", "researcher", "critic")


def long_triage() -> RoundRobinGroupChat:
    """Three agents that never close the run themselves: it stops at seven messages (the task and six turns),
    so its termination condition keeps count across the turns a checkpoint must carry."""
    agents = [
        AssistantAgent(
            name, model_client=OfflineChatCompletionClient(model="offline-small"),
            system_message=f"You are {name}. Help the customer with their line.",
            model_context=BoundedChatCompletionContext(max_messages=20, keep_first=1) if name == "researcher" else None,
        )
        for name in AGENTS
    ]
    return RoundRobinGroupChat(agents, termination_condition=MaxMessageTermination(TURNS + 1))


def manifest(checkpoints: str = "every_turn") -> Manifest:
    """``long_triage``'s manifest: ``researcher`` persisted, checkpoints as given."""
    return Manifest(name=TEAM, persist=["researcher"], context_bound=20, checkpoints=checkpoints)  # type: ignore[arg-type]


def register(registry: Registry, checkpoints: str = "every_turn", message: str = "long triage") -> str:
    """Register ``long_triage`` (labelled production); returns its version."""
    return registry.add(TEAM, long_triage().dump_component(), manifest(checkpoints), message, label="production")


class Calls:
    """Every model call the offline client is asked in this process, a call at which it fails instead, and one
    at which it waits for its answer until its run's cancellation token stops it (``holding`` is set then)."""

    def __init__(self) -> None:
        self.made = 0
        self.fail_at: int | None = None
        self.hold_at: int | None = None
        self.holding = asyncio.Event()
        self.seen: list[Any] = []
        self.on_call: Callable[[int], Any] | None = None


@contextmanager
def counted_calls(monkeypatch: Any) -> Iterator[Calls]:
    """Count (and on demand fail or hold) the offline client's calls; ``on_call`` runs before each one is answered.
    Like a real client's request, a call is cancelled by its run's cancellation token (the offline client answers
    at once, whatever the token says)."""
    calls = Calls()
    original = OfflineChatCompletionClient.create

    async def create(self: OfflineChatCompletionClient, messages: Any, **kwargs: Any) -> Any:
        calls.made += 1
        token = kwargs.get("cancellation_token")
        if token is not None and token.is_cancelled():
            raise asyncio.CancelledError
        if calls.on_call is not None:
            result = calls.on_call(calls.made)
            if hasattr(result, "__await__"):
                await result
        if calls.fail_at is not None and calls.made == calls.fail_at:
            raise ConnectionError("the model endpoint went away")
        if calls.hold_at is not None and calls.made == calls.hold_at:
            calls.holding.set()
            waiting = asyncio.ensure_future(asyncio.sleep(30))
            if token is not None:
                token.link_future(waiting)
            await waiting
        return await original(self, messages, **kwargs)

    monkeypatch.setattr(OfflineChatCompletionClient, "create", create)
    yield calls


def said(messages: Any) -> list[tuple[str, str, str]]:
    """What a run said: (type, source, text) of each message, in order."""
    return [(type(m).__name__, m.source, m.to_text()) for m in messages]
