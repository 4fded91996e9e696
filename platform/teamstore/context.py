"""A chat-completion context that bounds what an agent *stores*, not only what it sends.

AutoGen's ``BufferedChatCompletionContext(buffer_size=N)`` sends the last N messages to the model but keeps
every message in ``save_state()``: stored state grows linearly with the conversation. This context drops old
messages for real, so the saved state stays flat.

    from autogen_agentchat.agents import AssistantAgent
    from teamstore.context import BoundedChatCompletionContext

    agent = AssistantAgent(
        "researcher",
        model_client=client,
        model_context=BoundedChatCompletionContext(max_messages=20, keep_first=1),
    )
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Self

from autogen_core import Component
from autogen_core.model_context import ChatCompletionContext, ChatCompletionContextState
from autogen_core.models import AssistantMessage, FunctionExecutionResultMessage, LLMMessage
from pydantic import BaseModel, Field, model_validator

from config_registry.bounds import register_bounding_context

PROVIDER = "teamstore.context.BoundedChatCompletionContext"


class BoundedChatCompletionContextConfig(BaseModel):
    """Configuration of :class:`BoundedChatCompletionContext`."""

    max_messages: int = Field(gt=0, description="Most messages kept, in what is stored and what is sent.")
    keep_first: int = Field(default=0, ge=0, description="Keep the first K messages (e.g. the task).")
    initial_messages: list[LLMMessage] | None = None

    @model_validator(mode="after")
    def _first_fits(self) -> Self:
        if self.keep_first >= self.max_messages:
            raise ValueError("keep_first must be smaller than max_messages")
        return self


def _is_tool_call(message: LLMMessage) -> bool:
    return isinstance(message, AssistantMessage) and isinstance(message.content, list)


def bound_messages(messages: Sequence[LLMMessage], max_messages: int, keep_first: int) -> list[LLMMessage]:
    """Keep at most ``max_messages``: the first ``keep_first`` and the most recent rest.

    A tool call is never split from its results: a head that ends in a call keeps its results (or, when
    they would leave no room for the newest message, leaves the call to the tail), and a tail that would
    open with orphaned results drops them.

    Args:
        messages: The messages in order.
        max_messages: The bound.
        keep_first: How many leading messages to keep.

    Returns:
        A new list, never longer than ``max_messages``.
    """
    if len(messages) <= max_messages:
        return list(messages)
    head_end = keep_first
    if head_end and _is_tool_call(messages[head_end - 1]):
        end = head_end
        while end < len(messages) and isinstance(messages[end], FunctionExecutionResultMessage):
            end += 1
        head_end = end if end < max_messages else head_end - 1
    head = list(messages[:head_end])
    room = max_messages - len(head)
    tail = list(messages[head_end:])[-room:] if room > 0 else []
    while tail and isinstance(tail[0], FunctionExecutionResultMessage):
        tail.pop(0)
    return head + tail


class BoundedChatCompletionContext(ChatCompletionContext, Component[BoundedChatCompletionContextConfig]):
    """Keeps at most ``max_messages`` messages in what it stores and what it sends.

    Args:
        max_messages: The bound, in messages.
        keep_first: Keep this many of the first messages (the original task, say) forever.
        initial_messages: Messages to start with; bounded like the rest.
    """

    component_type = "chat_completion_context"
    component_config_schema = BoundedChatCompletionContextConfig
    component_provider_override = PROVIDER
    component_version = 1

    def __init__(
        self, max_messages: int, keep_first: int = 0, initial_messages: list[LLMMessage] | None = None
    ) -> None:
        BoundedChatCompletionContextConfig(max_messages=max_messages, keep_first=keep_first)
        super().__init__(initial_messages)
        self._max_messages = max_messages
        self._keep_first = keep_first
        self._messages = bound_messages(self._messages, max_messages, keep_first)

    async def add_message(self, message: LLMMessage) -> None:
        """Add a message, dropping the oldest (after the kept head) once over the bound."""
        self._messages.append(message)
        if len(self._messages) > self._max_messages:
            self._messages = bound_messages(self._messages, self._max_messages, self._keep_first)

    async def get_messages(self) -> list[LLMMessage]:
        """Every stored message: storage and the model's view are the same bounded list."""
        return list(self._messages)

    async def load_state(self, state: Mapping[str, Any]) -> None:
        """Load and bound: a state saved under a larger bound is cut down, never kept whole."""
        messages = ChatCompletionContextState.model_validate(state).messages
        self._messages = bound_messages(messages, self._max_messages, self._keep_first)

    def _to_config(self) -> BoundedChatCompletionContextConfig:
        return BoundedChatCompletionContextConfig(
            max_messages=self._max_messages, keep_first=self._keep_first, initial_messages=self._initial_messages
        )

    @classmethod
    def _from_config(cls, config: BoundedChatCompletionContextConfig) -> Self:
        return cls(
            max_messages=config.max_messages, keep_first=config.keep_first, initial_messages=config.initial_messages
        )


register_bounding_context(PROVIDER, ("max_messages", "keep_first"))
