"""BoundedChatCompletionContext: bounds what is stored and sent, never splits a tool call from its result."""

from __future__ import annotations

import pytest
from autogen_core import ComponentLoader, FunctionCall
from autogen_core.model_context import BufferedChatCompletionContext, ChatCompletionContext
from autogen_core.models import (
    AssistantMessage,
    FunctionExecutionResult,
    FunctionExecutionResultMessage,
    LLMMessage,
    UserMessage,
)

from config_registry.bounds import bound_of, is_bounding_context
from teamstore.context import PROVIDER, BoundedChatCompletionContext


def user(i: int) -> UserMessage:
    return UserMessage(content=f"m{i}", source="user")


def call(i: int) -> AssistantMessage:
    return AssistantMessage(content=[FunctionCall(id=f"c{i}", name="lookup", arguments="{}")], source="agent")


def result(i: int) -> FunctionExecutionResultMessage:
    return FunctionExecutionResultMessage(
        content=[FunctionExecutionResult(call_id=f"c{i}", content="ok", name="lookup", is_error=False)]
    )


async def fill(ctx: ChatCompletionContext, messages: list[LLMMessage]) -> None:
    for m in messages:
        await ctx.add_message(m)


async def test_keeps_at_most_n_in_saved_state_unlike_buffered() -> None:
    ours, theirs = BoundedChatCompletionContext(max_messages=4), BufferedChatCompletionContext(buffer_size=4)
    for ctx in (ours, theirs):
        await fill(ctx, [user(i) for i in range(10)])
    assert [m.content for m in await ours.get_messages()] == ["m6", "m7", "m8", "m9"]
    assert len((await ours.save_state())["messages"]) == 4
    assert len((await theirs.save_state())["messages"]) == 10  # AutoGen's buffer keeps everything stored


async def test_keep_first_pins_the_opening_messages() -> None:
    ctx = BoundedChatCompletionContext(max_messages=4, keep_first=1)
    await fill(ctx, [user(i) for i in range(10)])
    assert [m.content for m in await ctx.get_messages()] == ["m0", "m7", "m8", "m9"]


async def test_never_opens_with_an_orphaned_tool_result() -> None:
    ctx = BoundedChatCompletionContext(max_messages=3)
    await fill(ctx, [user(0), call(1), result(1), user(2), call(3), result(3)])
    kept = await ctx.get_messages()
    assert not isinstance(kept[0], FunctionExecutionResultMessage)
    assert len(kept) <= 3
    for i, m in enumerate(kept):
        if isinstance(m, FunctionExecutionResultMessage):
            assert isinstance(kept[i - 1], AssistantMessage)


async def test_head_that_ends_in_a_call_keeps_its_result() -> None:
    ctx = BoundedChatCompletionContext(max_messages=4, keep_first=2)
    await fill(ctx, [user(0), call(1), result(1), user(2), user(3), user(4), user(5)])
    kept = await ctx.get_messages()
    assert isinstance(kept[1], AssistantMessage) and isinstance(kept[2], FunctionExecutionResultMessage)
    assert len(kept) == 4


async def test_a_head_call_with_no_room_left_never_crowds_out_the_newest_message() -> None:
    ctx = BoundedChatCompletionContext(max_messages=3, keep_first=2)
    await fill(ctx, [user(0), call(1), result(1), user(2), user(3)])
    kept = await ctx.get_messages()
    assert kept[-1] == user(3) and len(kept) <= 3  # the message just added is what the model must answer
    for i, m in enumerate(kept):
        if isinstance(m, FunctionExecutionResultMessage):
            assert i > 0 and isinstance(kept[i - 1], AssistantMessage)
        if i + 1 < len(kept) and isinstance(m, AssistantMessage) and isinstance(m.content, list):
            assert isinstance(kept[i + 1], FunctionExecutionResultMessage)


async def test_loading_a_larger_state_bounds_it() -> None:
    big = BoundedChatCompletionContext(max_messages=50)
    await fill(big, [user(i) for i in range(40)])
    small = BoundedChatCompletionContext(max_messages=5)
    await small.load_state(await big.save_state())
    assert len(await small.get_messages()) == 5


def test_is_a_real_component_that_round_trips() -> None:
    ctx = BoundedChatCompletionContext(max_messages=20, keep_first=1)
    dumped = ctx.dump_component()
    assert dumped.provider == PROVIDER
    loaded = ComponentLoader.load_component(dumped, ChatCompletionContext)
    assert isinstance(loaded, BoundedChatCompletionContext)
    assert loaded.dump_component() == dumped


def test_is_registered_as_a_bounding_context() -> None:
    dumped = BoundedChatCompletionContext(max_messages=20, keep_first=1).dump_component().model_dump()
    assert is_bounding_context(PROVIDER)
    assert bound_of(dumped) == {"provider": PROVIDER, "max_messages": 20, "keep_first": 1}
    buffered = BufferedChatCompletionContext(buffer_size=4).dump_component().model_dump()
    assert bound_of(buffered) is None


@pytest.mark.parametrize(("n", "k"), [(0, 0), (3, 3), (-1, 0)])
def test_rejects_bounds_that_cannot_hold(n: int, k: int) -> None:
    with pytest.raises(ValueError):
        BoundedChatCompletionContext(max_messages=n, keep_first=k)
