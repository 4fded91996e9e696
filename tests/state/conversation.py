"""Conversations for the bounded-context suites, and the invariants every kept or sent list must meet.

    from tests.state.conversation import exchange, text, assert_kept

    conversation = [text(0), *exchange(1, calls=2), text(2)]
    assert_kept(await context.get_messages(), conversation, max_messages=5, keep_first=1)

Every message carries its position in its content, so equal messages are the same message.
"""

from __future__ import annotations

from collections.abc import Sequence

from autogen_core import FunctionCall
from autogen_core.models import (
    AssistantMessage,
    FunctionExecutionResult,
    FunctionExecutionResultMessage,
    LLMMessage,
    SystemMessage,
    UserMessage,
)


def user(i: int) -> UserMessage:
    return UserMessage(content=f"u{i}", source="user")


def call(i: int, calls: int = 1) -> AssistantMessage:
    """A tool call message with ``calls`` parallel calls, as AssistantAgent stores one."""
    return AssistantMessage(
        content=[FunctionCall(id=f"c{i}.{j}", name="lookup", arguments=f'{{"q": {j}}}') for j in range(calls)],
        source="agent",
    )


def result(i: int, calls: int = 1) -> FunctionExecutionResultMessage:
    """The one message that answers every call of :func:`call` (AutoGen writes them together)."""
    return FunctionExecutionResultMessage(
        content=[
            FunctionExecutionResult(call_id=f"c{i}.{j}", content=f"r{i}.{j}", name="lookup", is_error=False)
            for j in range(calls)
        ]
    )


def exchange(i: int, calls: int = 1) -> list[LLMMessage]:
    return [call(i, calls), result(i, calls)]


def text(i: int) -> LLMMessage:
    """A plain message: a user's, the agent's own reply, or a memory's system message, by position."""
    if i % 5 == 3:
        return AssistantMessage(content=f"a{i}", source="agent")
    if i % 7 == 6:
        return SystemMessage(content=f"s{i}")
    return user(i)


def conversation(steps: Sequence[int]) -> list[LLMMessage]:
    """A conversation from steps: 0 is a plain message, 1-3 a tool exchange with that many parallel calls."""
    messages: list[LLMMessage] = []
    for i, step in enumerate(steps):
        messages += exchange(i, step) if step else [text(i)]
    return messages


def is_call(message: LLMMessage) -> bool:
    return isinstance(message, AssistantMessage) and isinstance(message.content, list)


def is_result(message: LLMMessage) -> bool:
    return isinstance(message, FunctionExecutionResultMessage)


def label(message: LLMMessage) -> str:
    """``u0``, ``a3``, ``C4`` (a call), ``R4`` (its result): for readable failures. A call's label is its
    first call id without its last part."""
    if isinstance(message, AssistantMessage) and isinstance(message.content, list):
        return "C" + message.content[0].id.removeprefix("c").rpartition(".")[0]
    if isinstance(message, FunctionExecutionResultMessage):
        return "R" + message.content[0].call_id.removeprefix("c").rpartition(".")[0]
    return str(message.content)


def labels(messages: Sequence[LLMMessage]) -> list[str]:
    return [label(m) for m in messages]


def pinned(conversation: Sequence[LLMMessage], keep_first: int) -> int:
    """How many opening messages the docs promise to keep: the first ``keep_first``, with the results
    of a call they end on."""
    end = min(keep_first, len(conversation))
    if end and is_call(conversation[end - 1]) and end < len(conversation):
        end += 1
    return end


def assert_whole_exchanges(kept: Sequence[LLMMessage]) -> None:
    """No result without its call right before it; no call without its results, but the newest."""
    for i, message in enumerate(kept):
        if is_result(message):
            assert i > 0 and is_call(kept[i - 1]), f"result without its call: {labels(kept)}"
        if is_call(message) and i + 1 < len(kept):
            assert is_result(kept[i + 1]), f"call without its results: {labels(kept)}"


def assert_kept(kept: Sequence[LLMMessage], conversation: Sequence[LLMMessage], max_messages: int,
                keep_first: int) -> None:
    """Every promise about what a context keeps of a (well-formed) ``conversation`` so far.

    At most ``max_messages``; whole exchanges only; the pinned opening messages; then a run of the newest
    messages, as many as fit (the next older message or exchange would not), ending with the newest
    message and, when that is a result, its call.
    """
    shown = f"kept {labels(kept)} of {labels(conversation)} (max_messages={max_messages}, keep_first={keep_first})"
    assert len(kept) <= max_messages, shown
    assert_whole_exchanges(kept)
    if len(conversation) <= max_messages:
        assert list(kept) == list(conversation), shown
        return
    head = pinned(conversation, keep_first)
    assert list(kept[:head]) == list(conversation[:head]), f"pinned messages lost or drifted: {shown}"
    tail = list(kept[head:])
    start = len(conversation) - len(tail)
    assert tail == list(conversation[start:]), f"not the newest messages: {shown}"
    assert kept[-1] == conversation[-1], f"newest message dropped: {shown}"
    if is_result(conversation[-1]):
        assert kept[-2] == conversation[-2], f"newest exchange split: {shown}"
    older = start - 1
    while older > head and is_result(conversation[older]):
        older -= 1
    if start > head:
        assert start - older > max_messages - len(kept), f"dropped more than needed: {shown}"
