"""What a run tells the audit trail: the contract between the session runtime and its observers.

A session calls every observer at the start of a run, for each streamed message or event, and once at
the end (also when the run raised). Observers must never make a run fail: the runtime logs and
continues if one raises, so an observer that must not lose data keeps its own outbox.

    class Printer:
        async def run_started(self, ctx: RunContext) -> None:
            print("run", ctx.run_id)

        async def on_item(self, ctx: RunContext, item: StreamItem) -> None:
            print(type(item).__name__)

        async def run_finished(self, ctx: RunContext, outcome: RunOutcome) -> None:
            print(outcome.stop_reason, len(outcome.model_calls))
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Protocol, runtime_checkable

from autogen_agentchat.base import TaskResult
from autogen_agentchat.messages import BaseAgentEvent, BaseChatMessage

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
