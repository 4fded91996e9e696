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

The rule, in one line: it keeps the conversation's first ``keep_first`` messages (with the results of a tool
call they end on) and after them as many of the newest messages as fit in ``max_messages``, a tool call and
its results kept or dropped together.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Self

from autogen_core import Component
from autogen_core.model_context import ChatCompletionContext, ChatCompletionContextState
from autogen_core.models import AssistantMessage, FunctionExecutionResultMessage, LLMMessage
from pydantic import BaseModel, Field, model_validator

from config_registry.bounds import BoundingContext, BoundProblem, register_bounding_context
from teamstore.errors import ContextBoundInvalid
from teamstore.limits import BOUND_FIELDS, BOUNDING_PROVIDER

PROVIDER = BOUNDING_PROVIDER  # registered by the package root, before this module loads
# AutoGen writes a tool call's results as one message, so a whole exchange is two messages.
EXCHANGE = 2


def smallest_max_messages(keep_first: int) -> int:
    """The least ``max_messages`` that keeps ``keep_first`` pinned messages and the newest exchange whole.

    The pinned messages may end on a tool call, whose results are pinned with it (one more message), and
    a whole tool exchange must fit after them.
    """
    return keep_first + 1 + EXCHANGE if keep_first else EXCHANGE


def size_problem(max_messages: object, keep_first: object) -> BoundProblem | None:
    """Why a context of these sizes could not hold its newest tool exchange, or ``None`` if it can.

    Args:
        max_messages: The bound, as declared (hand-edited JSON may hold anything).
        keep_first: The pinned count, as declared.

    Returns:
        The config field to change, what is wrong, and how to fix it; ``None`` for sizes that work.
    """
    if not isinstance(keep_first, int) or isinstance(keep_first, bool) or keep_first < 0:
        return BoundProblem("keep_first", f"keep_first={keep_first!r} is not a whole number >= 0", "set it to 0 or more")
    if not isinstance(max_messages, int) or isinstance(max_messages, bool) or max_messages < 1:
        return BoundProblem(
            "max_messages", f"max_messages={max_messages!r} is not a whole number >= 1", "set it to 20, say"
        )
    return None if max_messages >= smallest_max_messages(keep_first) else _too_small(max_messages, keep_first)


def _too_small(max_messages: int, keep_first: int) -> BoundProblem:
    pinned = (
        f"the {keep_first} pinned message(s) and the results of a tool call they may end on" if keep_first else "nothing"
    )
    hint = f"raise max_messages to {smallest_max_messages(keep_first)}"
    if keep_first and max_messages >= EXCHANGE:
        hint += f", or lower keep_first to {max(max_messages - 1 - EXCHANGE, 0)}"
    return BoundProblem(
        "max_messages",
        f"max_messages={max_messages} with keep_first={keep_first} leaves no room for a whole tool exchange "
        f"(a call and its results, {EXCHANGE} messages) after {pinned}: it would be dropped as its results arrive",
        hint,
    )


class BoundedChatCompletionContextConfig(BaseModel):
    """Configuration of :class:`BoundedChatCompletionContext`."""

    max_messages: int = Field(gt=0, description="Most messages kept, in what is stored and what is sent.")
    keep_first: int = Field(default=0, ge=0, description="Keep the first K messages (e.g. the task).")
    initial_messages: list[LLMMessage] | None = None

    @model_validator(mode="after")
    def _newest_exchange_fits(self) -> Self:
        problem = size_problem(self.max_messages, self.keep_first)
        if problem is not None:
            raise ValueError(f"{problem.message} (fix: {problem.hint})")
        return self


def _is_call(message: LLMMessage) -> bool:
    return isinstance(message, AssistantMessage) and isinstance(message.content, list)


def _is_result(message: LLMMessage) -> bool:
    return isinstance(message, FunctionExecutionResultMessage)


def whole_exchanges(messages: Sequence[LLMMessage]) -> list[LLMMessage]:
    """The messages without those no model API accepts.

    A result whose call is not right before it is dropped, and so is a call that a later message cut
    from its results (a cancelled tool run); the newest call stays, its results still to come.

    Args:
        messages: The messages in order.

    Returns:
        A new list.
    """
    kept: list[LLMMessage] = []
    for message in messages:
        _append_whole(kept, message)
    return kept


def _append_whole(kept: list[LLMMessage], message: LLMMessage) -> None:
    """Append ``message`` to a list that passed :func:`whole_exchanges`, keeping it so."""
    if _is_result(message):
        if kept and (_is_call(kept[-1]) or _is_result(kept[-1])):
            kept.append(message)
        return
    if kept and _is_call(kept[-1]):
        kept.pop()
    kept.append(message)


def pinned_length(messages: Sequence[LLMMessage], keep_first: int) -> int:
    """How many leading messages are pinned: the first ``keep_first``, and the results of a call they
    end on (a pinned head never ends inside a tool exchange).

    ``messages`` must have passed :func:`whole_exchanges`. The head of a list this context keeps is the
    head of the conversation, so a kept list yields the same pinned messages again: they never drift.
    """
    end = min(keep_first, len(messages))
    while 0 < end < len(messages) and _is_result(messages[end]):
        end += 1
    return end


def _exchange_start(messages: Sequence[LLMMessage], index: int, floor: int) -> int:
    """The index of the message that opens the exchange ``messages[index]`` belongs to (itself if it is not
    a result)."""
    while index > floor and _is_result(messages[index]):
        index -= 1  # back to the call these results answer
    return index


def _newest_that_fit(messages: Sequence[LLMMessage], start: int, room: int) -> int:
    """Where the kept tail begins: the newest whole messages and exchanges after ``start`` that fit.

    In a list that passed :func:`whole_exchanges` every message but a result opens a message or an
    exchange, so the tail opens at the first such message among the newest ``room``.
    """
    begin = max(len(messages) - room, start)
    while begin < len(messages) and _is_result(messages[begin]):
        begin += 1  # its call did not fit: the exchange goes whole
    return begin


def bound_messages(messages: Sequence[LLMMessage], max_messages: int, keep_first: int) -> list[LLMMessage]:
    """Keep the first ``keep_first`` messages (with the results of a call they end on) and after them as
    many of the newest messages as fit in ``max_messages``, a tool call and its results kept or dropped
    together.

    Args:
        messages: The messages in order.
        max_messages: The bound.
        keep_first: How many leading messages to pin.

    Returns:
        A new list, never longer than ``max_messages``, with no result apart from its call and no call
        apart from its results (but the newest, whose results may still be coming).
    """
    return _bound_whole(whole_exchanges(messages), max_messages, keep_first)


def _bound_whole(whole: list[LLMMessage], max_messages: int, keep_first: int) -> list[LLMMessage]:
    """:func:`bound_messages` of a list that passed :func:`whole_exchanges`."""
    if len(whole) <= max_messages:
        return whole
    head = pinned_length(whole, keep_first)
    if head > max_messages - EXCHANGE:
        # Only a call answered by several result messages (AutoGen writes one) pins this much: leave
        # that exchange to the tail rather than keep more than max_messages.
        head = _exchange_start(whole, head - 1, 0)
    return whole[:head] + whole[_newest_that_fit(whole, head, max_messages - head) :]


class BoundedChatCompletionContext(ChatCompletionContext, Component[BoundedChatCompletionContextConfig]):
    """Keeps at most ``max_messages`` messages in what it stores and what it sends.

    It keeps the conversation's first ``keep_first`` messages (with the results of a tool call they end
    on) and after them as many of the newest messages as fit in ``max_messages``, a tool call and its
    results kept or dropped together. Sizes that could not keep the newest tool exchange whole are
    refused: ``max_messages`` must be at least ``keep_first + 3``, or 2 without ``keep_first``.

    Args:
        max_messages: The bound, in messages.
        keep_first: Keep this many of the first messages (the original task, say) forever.
        initial_messages: Messages to start with; bounded like the rest.

    Raises:
        ContextBoundInvalid: The sizes could not keep the newest tool exchange whole.
    """

    component_type = "chat_completion_context"
    component_config_schema = BoundedChatCompletionContextConfig
    component_provider_override = PROVIDER
    component_version = 1

    def __init__(
        self, max_messages: int, keep_first: int = 0, initial_messages: list[LLMMessage] | None = None
    ) -> None:
        problem = size_problem(max_messages, keep_first)
        if problem is not None:
            raise ContextBoundInvalid(f"BoundedChatCompletionContext: {problem.message}", hint=problem.hint)
        super().__init__(initial_messages)
        self._max_messages = max_messages
        self._keep_first = keep_first
        self._messages = bound_messages(self._messages, max_messages, keep_first)

    async def add_message(self, message: LLMMessage) -> None:
        """Add a message and bound again: the oldest unpinned messages make room for it."""
        _append_whole(self._messages, message)  # what it keeps is whole already: only the new end is checked
        if len(self._messages) > self._max_messages:
            self._messages = _bound_whole(self._messages, self._max_messages, self._keep_first)

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


def _registry_check(config: Mapping[str, Any]) -> BoundProblem | None:
    """What ``registry add`` tells a persisted participant whose context has sizes this class refuses."""
    return size_problem(config.get("max_messages"), config.get("keep_first", 0))


BOUNDING = BoundingContext(BOUND_FIELDS, check=_registry_check)
"""What the registry knows of this context: the ``config_registry.bounding_contexts`` entry point in
pyproject.toml points here, so a process using the registry alone loads it when a definition names it."""

# Registered on import as well: a process that runs teamstore from a source tree, without the installed
# package's entry points, still knows its own context.
register_bounding_context(PROVIDER, BOUNDING.bound_fields, BOUNDING.check)
