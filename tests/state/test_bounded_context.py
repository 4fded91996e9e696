"""BoundedChatCompletionContext: bounds what is stored and sent, never splits a tool call from its result."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from autogen_agentchat.agents import AssistantAgent
from autogen_core import ComponentLoader, FunctionCall
from autogen_core.model_context import (
    BufferedChatCompletionContext,
    ChatCompletionContext,
    HeadAndTailChatCompletionContext,
)
from autogen_core.models import (
    AssistantMessage,
    FunctionExecutionResult,
    FunctionExecutionResultMessage,
    LLMMessage,
    UserMessage,
)
from autogen_ext.models.replay import ReplayChatCompletionClient
from pydantic import ValidationError

from config_registry.bounds import bound_of, bound_problem, is_bounding_context
from teamstore.context import PROVIDER, BoundedChatCompletionContext
from teamstore.errors import ContextBoundInvalid

DATA = Path(__file__).parent / "data"


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
    ctx = BoundedChatCompletionContext(max_messages=5, keep_first=2)
    await fill(ctx, [user(0), call(1), result(1), user(2), user(3), user(4), user(5)])
    assert await ctx.get_messages() == [user(0), call(1), result(1), user(4), user(5)]


async def test_a_pinned_call_that_would_crowd_out_the_newest_exchange_is_refused_and_room_keeps_it() -> None:
    # Defect: (4, 2) kept [u0, C1, R1] and dropped the exchange just made; the reflection saw a stale one.
    with pytest.raises(ContextBoundInvalid) as caught:
        BoundedChatCompletionContext(max_messages=4, keep_first=2)
    assert caught.value.hint == "raise max_messages to 5, or lower keep_first to 1"
    conversation = [user(0), call(1), result(1), user(2), user(3), call(4), result(4)]
    ctx = BoundedChatCompletionContext(max_messages=5, keep_first=2)
    await fill(ctx, conversation)
    assert await ctx.get_messages() == [user(0), call(1), result(1), call(4), result(4)]
    theirs = HeadAndTailChatCompletionContext(head_size=2, tail_size=2)  # AutoGen keeps the newest exchange too
    await fill(theirs, conversation)
    assert (await theirs.get_messages())[-2:] == [call(4), result(4)]


async def test_keep_first_pins_the_conversations_opening_messages_and_never_later_ones() -> None:
    # Defect: (3, 2) kept [u0, u2, u5] and pinned u2 for good. Such sizes are refused now; at sizes that
    # fit, the pinned messages are the conversation's first ones after every message.
    with pytest.raises(ContextBoundInvalid):
        BoundedChatCompletionContext(max_messages=3, keep_first=2)
    ctx = BoundedChatCompletionContext(max_messages=5, keep_first=2)
    await fill(ctx, [user(0), call(1), result(1)])
    for i in range(2, 12):
        await ctx.add_message(user(i))
        kept = await ctx.get_messages()
        assert kept[:3] == [user(0), call(1), result(1)] and kept[3:] == [user(i - 1), user(i)][-(len(kept) - 3):]


@pytest.mark.parametrize(("n", "k"), [(1, 0), (2, 1), (3, 2), (4, 3), (7, 6)])
def test_sizes_that_cannot_keep_a_whole_exchange_are_refused_with_the_reason(n: int, k: int) -> None:
    # Defect: with keep_first = max_messages - 1, or max_messages = 1, every tool exchange vanished as
    # soon as its result arrived.
    with pytest.raises(ContextBoundInvalid, match="leaves no room for a whole tool exchange") as caught:
        BoundedChatCompletionContext(max_messages=n, keep_first=k)
    assert caught.value.hint is not None and "raise max_messages to" in caught.value.hint
    dumped = BoundedChatCompletionContext(max_messages=20, keep_first=k).dump_component().model_dump(mode="json")
    dumped["config"]["max_messages"] = n
    with pytest.raises(ValidationError, match="leaves no room for a whole tool exchange"):
        ComponentLoader.load_component(dumped, ChatCompletionContext)


@pytest.mark.parametrize("way", ["initial_messages", "load_state", "add_message"])
async def test_a_leading_result_without_its_call_is_never_sent(way: str) -> None:
    # Defect: under the bound, [R, u0, u1] was sent as given, which OpenAI-style APIs reject.
    given: list[LLMMessage] = [result(9), user(0), user(1)]
    ctx = BoundedChatCompletionContext(max_messages=5, initial_messages=given if way == "initial_messages" else None)
    if way == "load_state":
        await ctx.load_state({"messages": [m.model_dump() for m in given]})
    elif way == "add_message":
        await fill(ctx, given)
    assert await ctx.get_messages() == [user(0), user(1)]
    assert (await ctx.save_state())["messages"] == [user(0).model_dump(), user(1).model_dump()]


async def test_a_call_cut_from_its_results_is_dropped_but_the_newest_waits_for_them() -> None:
    ctx = BoundedChatCompletionContext(max_messages=5)
    await fill(ctx, [user(0), call(1)])
    assert await ctx.get_messages() == [user(0), call(1)]  # its results are still being computed
    await ctx.add_message(user(2))  # the tool run was cancelled: no model API takes a call without results
    assert await ctx.get_messages() == [user(0), user(2)]


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
    assert bound_problem(dumped) is None and bound_problem(buffered) is None
    dumped["config"]["max_messages"] = 2
    problem = bound_problem(dumped)
    assert problem is not None and problem.field == "max_messages" and "raise max_messages to 4" in problem.hint


@pytest.mark.parametrize(("n", "k"), [(0, 0), (3, 3), (-1, 0), (5, -1), (True, 0)])
def test_rejects_bounds_that_cannot_hold(n: int, k: int) -> None:
    with pytest.raises(ValueError) as caught:  # a ValueError, as AutoGen's contexts raise, and typed
        BoundedChatCompletionContext(max_messages=n, keep_first=k)
    assert isinstance(caught.value, ContextBoundInvalid) and caught.value.hint


async def test_an_agent_state_saved_before_contexts_kept_whole_exchanges_loads_unchanged() -> None:
    # Written by an AssistantAgent with parallel tool calls and reflection, on the code before this rule.
    saved = json.loads((DATA / "assistant_state_saved_before_whole_exchanges.json").read_text())
    agent = AssistantAgent("researcher", model_client=ReplayChatCompletionClient(["ok"]),
                           model_context=BoundedChatCompletionContext(max_messages=8, keep_first=1))
    await agent.load_state(saved)
    assert json.loads(json.dumps(await agent.save_state())) == saved
    await agent.run(task="next")
    kept = (await agent.save_state())["llm_context"]["messages"]
    assert kept[0] == saved["llm_context"]["messages"][0] and len(kept) == 8
