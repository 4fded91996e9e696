"""Factories that misbehave, for ``add_from_factory`` tests: they fail, or build a team the registry must refuse."""

from __future__ import annotations

import json
from typing import Any

from autogen_agentchat.agents import AssistantAgent
from autogen_agentchat.conditions import MaxMessageTermination
from autogen_agentchat.teams import RoundRobinGroupChat, SelectorGroupChat
from autogen_core import Component
from autogen_core.model_context import ChatCompletionContext
from autogen_core.models import LLMMessage
from autogen_core.tools import FunctionTool
from pydantic import BaseModel

from teamstore.offline import OfflineChatCompletionClient


def raises() -> None:
    """A factory whose construction fails."""
    raise RuntimeError("the model catalogue is unreachable")


def exits() -> None:
    """A factory that calls sys.exit: the command line must not exit silently with its status."""
    raise SystemExit(3)


def not_a_team() -> dict[str, str]:
    """A factory that returns something that is not a team."""
    return {"provider": "autogen_agentchat.teams.RoundRobinGroupChat"}


async def built_later() -> RoundRobinGroupChat:
    """An async factory: calling it gives a coroutine, which the registry does not await."""
    return tool_with_a_closure()


def the_class_itself() -> type[RoundRobinGroupChat]:
    """A factory that returns the team's class rather than a team."""
    return RoundRobinGroupChat


class NotAComponent:
    """A class that an allow-listed provider may name but that is not an AutoGen component."""


class ResearchAgent(AssistantAgent):
    """An AssistantAgent under another provider: registering it in place of one is a retype."""

    component_provider_override = "tests.registry.factories.ResearchAgent"


class CountedContextConfig(BaseModel):
    """The config of :class:`CountedContext`: one size, with no rule of its own beyond being an int."""

    max_messages: int


class CountedContext(ChatCompletionContext, Component[CountedContextConfig]):
    """A bounding context that registers no check of its own sizes, as a third-party package's may not."""

    component_type = "chat_completion_context"
    component_config_schema = CountedContextConfig
    component_provider_override = "tests.registry.factories.CountedContext"

    def __init__(self, max_messages: int) -> None:
        super().__init__()
        self._max_messages = max_messages

    async def get_messages(self) -> list[LLMMessage]:
        """The newest ``max_messages`` messages."""
        return self._messages[-self._max_messages:]

    def _to_config(self) -> CountedContextConfig:
        return CountedContextConfig(max_messages=self._max_messages)

    @classmethod
    def _from_config(cls, config: CountedContextConfig) -> CountedContext:
        return cls(config.max_messages)


def azure_agent() -> AssistantAgent:
    """An agent on Azure OpenAI: dumping its model client imports the ``azure`` package (autogen-ext's
    ``azure`` extra)."""
    from autogen_ext.models.openai import AzureOpenAIChatCompletionClient

    client = AzureOpenAIChatCompletionClient(
        model="gpt-4o", azure_deployment="gpt-4o", api_version="2024-06-01",
        azure_endpoint="https://example.openai.azure.com", api_key="sk-live-123",
    )
    return AssistantAgent("researcher", model_client=client)


def _desk_agent(name: str, **kwargs: Any) -> AssistantAgent:
    return AssistantAgent(name, model_client=OfflineChatCompletionClient(), description=f"the {name}", **kwargs)


def selected_by_function() -> SelectorGroupChat:
    """A SelectorGroupChat whose speakers a function picks: always the planner."""
    return SelectorGroupChat([_desk_agent("accountant"), _desk_agent("planner")],
                             model_client=OfflineChatCompletionClient(), selector_func=lambda messages: "planner",
                             termination_condition=MaxMessageTermination(3))


def narrowed_by_function() -> SelectorGroupChat:
    """A SelectorGroupChat whose candidates a function narrows to the planner."""
    return SelectorGroupChat([_desk_agent("accountant"), _desk_agent("planner")],
                             model_client=OfflineChatCompletionClient(), candidate_func=lambda messages: ["planner"],
                             termination_condition=MaxMessageTermination(3))


def tool_with_a_closure() -> RoundRobinGroupChat:
    """An accountant whose conversion tool reads ``rate`` from the factory around it."""
    rate = 1.08

    def to_dollars(euros: float) -> float:
        """Euros in dollars."""
        return euros * rate

    accountant = _desk_agent("accountant", tools=[FunctionTool(to_dollars, description="convert")])
    return RoundRobinGroupChat([_desk_agent("planner"), accountant], termination_condition=MaxMessageTermination(3))



def _order_status(order_id: str) -> str:
    """The order's status, as JSON."""
    return json.dumps({"order": order_id, "status": "shipped"})


def _order_status_importing(order_id: str) -> str:
    """The order's status, as JSON, with json among the tool's global_imports."""
    return json.dumps({"order": order_id, "status": "shipped"})


def tool_reading_its_module() -> RoundRobinGroupChat:
    """A clerk whose tool reads ``json`` from this module without naming it in global_imports."""
    clerk = _desk_agent("clerk", tools=[FunctionTool(_order_status, description="status")])
    return RoundRobinGroupChat([clerk], termination_condition=MaxMessageTermination(3))


def tool_importing_what_it_reads() -> RoundRobinGroupChat:
    """The same clerk, its tool naming ``json`` in global_imports."""
    tool = FunctionTool(_order_status_importing, description="status", global_imports=["json"])
    return RoundRobinGroupChat([_desk_agent("clerk", tools=[tool])], termination_condition=MaxMessageTermination(3))
