"""Teams the canary suite registers beside the example support team.

``order_desk``: one agent whose model (AutoGen's ``ReplayChatCompletionClient``) calls a tool; the tool
reads the order system, here the ``CANARY_ORDER_STATUS`` variable of the process that runs the team, so
the canary enters through the tool's output and appears nowhere in the definition.

``relay_desk``: a round robin with per-turn checkpoints, an offline agent and then an agent on a gateway
that does not answer: its runs stop after their first turn, and a checkpoint holding the user's words waits
in the session row to be continued or abandoned.

``note_taker``: an agent of a platform team's own (a component outside AutoGen) that notes when each topic was
raised, keyed by the user's words, as datetimes: a state that is not JSON, refused when the session saves.

``gateway_desk``: one agent on ``OpenAIChatCompletionClient`` behind a gateway that wants its key in
``api_key`` and in headers (``x-functions-key``, ``X-Auth-Key``, ``api-key``); every secret is left
empty here and registered as a reference to the environment. Its model is the local model server
(``tests.canary.model_server``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from autogen_agentchat.agents import AssistantAgent, BaseChatAgent
from autogen_agentchat.base import Response
from autogen_agentchat.messages import BaseChatMessage, TextMessage
from autogen_core import CancellationToken, Component, ComponentModel, FunctionCall
from autogen_core.models import CreateResult, ModelFamily, ModelInfo, RequestUsage
from autogen_core.tools import FunctionTool
from pydantic import BaseModel

from teamstore.context import BoundedChatCompletionContext

if TYPE_CHECKING:
    from autogen_agentchat.teams import RoundRobinGroupChat

GATEWAY_HEADERS = ("x-functions-key", "X-Auth-Key", "api-key")
"""Headers the gateway reads a key from: Azure Functions', a common API gateway's, Azure OpenAI's."""
CLIENT = "model_client.config"
"""Where the agent's model client keeps its settings, as a registry path."""


def gateway_secrets() -> dict[str, str]:
    """``--secret`` declarations of the gateway desk: path -> environment variable."""
    paths = {f"{CLIENT}.api_key": "GATEWAY_API_KEY"}
    paths.update({f"{CLIENT}.default_headers.{h}": f"GATEWAY_{h.upper().replace('-', '_')}" for h in GATEWAY_HEADERS})
    return paths


def order_status() -> str:
    """Look up the customer's order."""
    import os

    return os.environ.get("CANARY_ORDER_STATUS", "unknown")


def order_desk() -> AssistantAgent:
    """An agent whose one model call asks for the order tool; its reply is the tool's output."""
    from autogen_ext.models.replay import ReplayChatCompletionClient

    call = CreateResult(
        finish_reason="function_calls",
        content=[FunctionCall(id="call-1", name="order_status", arguments="{}")],
        usage=RequestUsage(prompt_tokens=40, completion_tokens=8),
        cached=False,
    )
    info = ModelInfo(vision=False, function_calling=True, json_output=False, family=ModelFamily.UNKNOWN,
                     structured_output=False)
    return AssistantAgent(
        "desk",
        model_client=ReplayChatCompletionClient([call], model_info=info),
        tools=[FunctionTool(order_status, description="Look up the customer's order.")],
        model_context=BoundedChatCompletionContext(max_messages=20),
        system_message="You are desk. Look the order up.",
    )


def gateway_desk(base_url: str = "http://127.0.0.1:9/v1", headers: dict[str, str] | None = None) -> AssistantAgent:
    """An agent on an OpenAI-compatible gateway at ``base_url``; its header secrets are empty placeholders
    unless given (a careless author pasting them), its key is masked by ``dump_component()``."""
    from autogen_ext.models.openai import OpenAIChatCompletionClient

    client = OpenAIChatCompletionClient(
        model="gpt-4o-mini",
        api_key="placeholder",
        base_url=base_url,
        default_headers=headers if headers is not None else dict.fromkeys(GATEWAY_HEADERS, ""),
        max_retries=0,
    )
    return AssistantAgent("desk", model_client=client, model_context=BoundedChatCompletionContext(max_messages=20),
                          system_message="You are desk. Answer the customer.")


def relay_desk() -> RoundRobinGroupChat:
    """``triage`` (offline) hands over to ``desk``, whose gateway (a closed port) never answers."""
    from autogen_agentchat.conditions import MaxMessageTermination
    from autogen_agentchat.teams import RoundRobinGroupChat as Team

    from teamstore.offline import OfflineChatCompletionClient

    triage = AssistantAgent("triage", model_client=OfflineChatCompletionClient(),
                            model_context=BoundedChatCompletionContext(max_messages=20),
                            system_message="You are triage. Say what the problem is.")
    return Team([triage, gateway_desk(base_url="http://127.0.0.1:9/v1")], termination_condition=MaxMessageTermination(4))


class NoteTakerConfig(BaseModel):
    """The note taker's settings: its name and its (bounded) model context."""

    name: str
    model_context: ComponentModel


class NoteTaker(BaseChatAgent, Component[NoteTakerConfig]):
    """Notes when each topic the user raised was raised, keyed by the user's words; its ``save_state`` returns
    the datetimes themselves, which are no JSON: the kind of bug a team's own agent ships with."""

    component_type = "agent"
    component_config_schema = NoteTakerConfig
    component_provider_override = "tests.canary.teams.NoteTaker"

    def __init__(self, name: str, model_context: BoundedChatCompletionContext | None = None) -> None:
        super().__init__(name, "Takes notes.")
        self._context = model_context or BoundedChatCompletionContext(max_messages=20)
        self._notes: dict[str, datetime] = {}

    @property
    def produced_message_types(self) -> Sequence[type[BaseChatMessage]]:
        return (TextMessage,)

    async def on_messages(self, messages: Sequence[BaseChatMessage], cancellation_token: CancellationToken) -> Response:
        for message in messages:
            if isinstance(message, TextMessage):
                self._notes[message.content] = datetime.now(UTC)
        return Response(chat_message=TextMessage(content="Noted.", source=self.name))

    async def on_reset(self, cancellation_token: CancellationToken) -> None:
        self._notes.clear()

    async def save_state(self) -> Mapping[str, Any]:
        return {"type": "NoteTakerState", "notes": dict(self._notes)}

    def _to_config(self) -> NoteTakerConfig:
        return NoteTakerConfig(name=self.name, model_context=self._context.dump_component())

    @classmethod
    def _from_config(cls, config: NoteTakerConfig) -> NoteTaker:
        return cls(config.name, BoundedChatCompletionContext.load_component(config.model_context))


def note_taker() -> NoteTaker:
    """The note desk's one agent (persisted, with a bounded context as teamstore asks)."""
    return NoteTaker("notes", BoundedChatCompletionContext(max_messages=20))
