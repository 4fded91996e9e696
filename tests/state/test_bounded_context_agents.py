"""AssistantAgent tool loops over a scripted model: what the model client is sent on every call.

The same script runs twice: once with an unbounded context, whose every request is the whole conversation
so far, and once with BoundedChatCompletionContext. Each request the bounded agent sends must be what the
context promises to keep of that conversation (``tests.state.conversation.assert_kept``), with
reflection on and off, one or several tool iterations, and one to three parallel calls.
"""

from __future__ import annotations

import pytest
from autogen_agentchat.agents import AssistantAgent
from autogen_core import FunctionCall
from autogen_core.model_context import ChatCompletionContext, UnboundedChatCompletionContext
from autogen_core.models import CreateResult, LLMMessage, RequestUsage, SystemMessage
from autogen_ext.models.replay import ReplayChatCompletionClient

from teamstore.context import BoundedChatCompletionContext
from tests.state.conversation import assert_kept, labels

TASKS = ["t1", "t2", "t3"]


def lookup(q: str) -> str:
    """Look something up."""
    return f"found {q}"


def _calls(turn: int, step: int, parallel: int) -> CreateResult:
    calls = [FunctionCall(id=f"{turn}.{step}.{j}", name="lookup", arguments=f'{{"q": "{turn}.{step}.{j}"}}')
             for j in range(parallel)]
    return CreateResult(content=calls, finish_reason="function_calls",
                        usage=RequestUsage(prompt_tokens=1, completion_tokens=1), cached=False)


def _script(iterations: int, reflect: bool) -> list[str | CreateResult]:
    """Per task, tool calls in every iteration (1, 2, then 3 parallel calls). The first and last tasks run
    out of iterations: the answer is the reflection's, or without reflection the agent's summary of the
    results (no model call). The second task's loop ends early, on a text answer."""
    script: list[str | CreateResult] = []
    for turn in range(len(TASKS)):
        steps = iterations - 1 if turn == 1 else iterations
        script += [_calls(turn, step, step % 3 + 1) for step in range(steps)]
        if turn == 1 or reflect:
            script.append(f"answer {turn}")
    return script


def _client(script: list[str | CreateResult]) -> ReplayChatCompletionClient:
    return ReplayChatCompletionClient(
        script, model_info={"vision": False, "function_calling": True, "json_output": False, "family": "unknown",
                            "structured_output": False})


async def _requests(context: ChatCompletionContext, iterations: int, reflect: bool) -> list[list[LLMMessage]]:
    client = _client(_script(iterations, reflect))
    agent = AssistantAgent("agent", model_client=client, tools=[lookup], model_context=context,
                           reflect_on_tool_use=reflect, max_tool_iterations=iterations)
    for task in TASKS:
        await agent.run(task=task)
    return [list(call["messages"]) for call in client.create_calls]


SIZES = [(2, 0), (3, 0), (4, 1), (5, 1), (5, 2), (6, 2), (7, 3), (9, 6), (12, 2)]


@pytest.mark.parametrize("reflect", [True, False], ids=["reflect", "no-reflect"])
@pytest.mark.parametrize("iterations", [1, 3])
@pytest.mark.parametrize(("n", "k"), SIZES, ids=[f"max{n}-keep{k}" for n, k in SIZES])
async def test_every_request_of_a_tool_loop_is_what_the_context_keeps(n: int, k: int, iterations: int,
                                                                      reflect: bool) -> None:
    whole = await _requests(UnboundedChatCompletionContext(), iterations, reflect)
    context = BoundedChatCompletionContext(max_messages=n, keep_first=k)
    bounded = await _requests(context, iterations, reflect)
    assert len(bounded) == len(whole)
    for sent, conversation in zip(bounded, whole, strict=True):
        assert isinstance(sent[0], SystemMessage) and isinstance(conversation[0], SystemMessage)
        assert_kept(sent[1:], conversation[1:], n, k)
    assert len((await context.save_state())["messages"]) <= n


async def test_the_reflection_is_sent_the_current_task_and_its_calls_behind_a_pinned_exchange() -> None:
    client = _client([_calls(0, 0, 2), "a0", _calls(1, 0, 1), "a1"])
    agent = AssistantAgent("agent", model_client=client, tools=[lookup], reflect_on_tool_use=True,
                           model_context=BoundedChatCompletionContext(6, keep_first=2))
    await agent.run(task="t1")  # two parallel calls, then the reflection: the pinned second message is a call
    await agent.run(task="t2")  # one call, then the reflection
    sent = [labels(call["messages"][1:]) for call in client.create_calls]
    assert sent == [
        ["t1"],
        ["t1", "C0.0", "R0.0"],
        ["t1", "C0.0", "R0.0", "a0", "t2"],
        ["t1", "C0.0", "R0.0", "t2", "C1.0", "R1.0"],  # the pinned exchange, the current task and its calls
    ]
    assert labels(await agent.model_context.get_messages()) == ["t1", "C0.0", "R0.0", "C1.0", "R1.0", "a1"]
