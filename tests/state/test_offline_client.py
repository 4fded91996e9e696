"""The offline model client: deterministic, never runs out, reports usage, round-trips as a component."""

from __future__ import annotations

import itertools
import json
import logging

import pytest
from autogen_agentchat.agents import AssistantAgent
from autogen_agentchat.conditions import MaxMessageTermination
from autogen_agentchat.messages import HandoffMessage, TextMessage, ToolCallRequestEvent
from autogen_agentchat.teams import MagenticOneGroupChat, SelectorGroupChat, Swarm
from autogen_core.models import ChatCompletionClient, CreateResult, SystemMessage, UserMessage
from autogen_core.tools import FunctionTool

from teamstore.offline import PROVIDER, OfflineChatCompletionClient


async def test_same_messages_same_reply_and_usage() -> None:
    messages = [SystemMessage(content="You are triage."), UserMessage(content="router down", source="user")]
    a, b = OfflineChatCompletionClient(), OfflineChatCompletionClient()
    ra, rb = await a.create(messages), await b.create(messages)
    assert ra.content == rb.content and ra.usage == rb.usage
    assert "router down" in str(ra.content) and ra.usage.prompt_tokens > 0 and ra.usage.completion_tokens > 0


async def test_never_runs_out_and_totals_add_up() -> None:
    client = OfflineChatCompletionClient()
    for i in range(500):
        await client.create([UserMessage(content=f"q{i}", source="user")])
    assert client.total_usage().prompt_tokens > 500


async def test_picks_a_participant_when_asked_to_select_a_speaker() -> None:
    prompt = "Read the above conversation. Then select the next role from ['triage', 'critic'] to play. Only return the role."
    reply = await OfflineChatCompletionClient().create([UserMessage(content=prompt, source="user")])
    assert reply.content in {"triage", "critic"}


async def test_picks_every_speaker_of_a_selector_group_chat_with_a_selector_prompt_of_its_own(
    caplog: pytest.LogCaptureFixture,
) -> None:
    agents = [AssistantAgent(name, model_client=OfflineChatCompletionClient(), description=f"the {name}")
              for name in ("planner", "coder", "tester")]
    team = SelectorGroupChat(agents, model_client=OfflineChatCompletionClient(), max_selector_attempts=2,
                             selector_prompt="Choose who speaks next among {participants}.\n{roles}\n{history}",
                             allow_repeated_speaker=False, termination_condition=MaxMessageTermination(7))
    with caplog.at_level(logging.WARNING):
        result = await team.run(task="ship the release")
    speakers = [m.source for m in result.messages[1:]]
    assert len(speakers) == 6 and all(a != b for a, b in itertools.pairwise(speakers))
    assert "failed to select a speaker" not in caplog.text


async def test_stream_ends_with_the_same_result() -> None:
    client = OfflineChatCompletionClient()
    chunks = [c async for c in client.create_stream([UserMessage(content="hi", source="user")])]
    assert isinstance(chunks[-1], CreateResult)
    assert "".join(c for c in chunks[:-1] if isinstance(c, str)).strip() == chunks[-1].content


def test_round_trips_as_a_component() -> None:
    dumped = OfflineChatCompletionClient(model="offline-large").dump_component()
    assert dumped.provider == PROVIDER
    loaded = ChatCompletionClient.load_component(dumped)
    assert isinstance(loaded, OfflineChatCompletionClient) and loaded.model == "offline-large"
    assert loaded.dump_component() == dumped


def _look_up(order_id: str) -> str:
    """Look an order up."""
    return f"order {order_id}: shipped"


async def test_agents_with_tools_and_handoffs_build_and_run_on_it() -> None:
    # AssistantAgent refuses tools and handoffs on a client that does not declare function calling, so a
    # team with a FunctionTool or a Swarm could not be tried offline at all.
    clerk = AssistantAgent(
        "clerk", model_client=OfflineChatCompletionClient(), tools=[FunctionTool(_look_up, description="look up")]
    )
    result = await clerk.run(task="Where is order 42?")
    assert "Where is order 42?" in result.messages[-1].to_text()
    swarm = Swarm(
        [
            AssistantAgent("front", model_client=OfflineChatCompletionClient(), handoffs=["back"]),
            AssistantAgent("back", model_client=OfflineChatCompletionClient(), handoffs=["front"]),
        ],
        termination_condition=MaxMessageTermination(3),
    )
    ran = await swarm.run(task="hi")
    assert [m.source for m in ran.messages] == ["user", "front", "front"]  # not told to hand off: it answers


async def test_hands_off_when_its_system_message_says_so_in_its_first_reply_to_a_request() -> None:
    swarm = Swarm(
        [
            AssistantAgent("front", model_client=OfflineChatCompletionClient(), handoffs=["back"],
                           system_message="You are front. Greet the customer, then hand off to back."),
            AssistantAgent("back", model_client=OfflineChatCompletionClient(), handoffs=["front"],
                           system_message="You are back. Answer."),
        ],
        termination_condition=MaxMessageTermination(4),
    )
    ran = await swarm.run(task="hi")
    handoffs = [m for m in ran.messages if isinstance(m, HandoffMessage)]
    assert [(m.source, m.target) for m in handoffs] == [("front", "back")]
    assert [m.source for m in ran.messages if isinstance(m, TextMessage)] == ["user", "back", "back"]


async def test_calls_the_tool_its_system_message_names_once_per_request_with_the_request_s_number() -> None:
    clerk = AssistantAgent("clerk", model_client=OfflineChatCompletionClient(),
                           system_message="You are clerk. Call _look_up for the order.",
                           tools=[FunctionTool(_look_up, description="look up")])
    result = await clerk.run(task="Where is order A-42?")
    called = [m for m in result.messages if isinstance(m, ToolCallRequestEvent)]
    assert [json.loads(c.arguments) for m in called for c in m.content] == [{"order_id": "A-42"}]
    assert result.messages[-1].to_text() == "order A-42: shipped"
    again = await clerk.run(task="thanks")  # a request with no number: the request itself
    assert "order thanks: shipped" in again.messages[-1].to_text()


async def test_a_model_that_may_pick_the_same_speaker_again_still_picks_more_than_one() -> None:
    agents = [AssistantAgent(name, model_client=OfflineChatCompletionClient(), description=f"the {name}")
              for name in ("planner", "coder", "tester")]
    team = SelectorGroupChat(agents, model_client=OfflineChatCompletionClient(), allow_repeated_speaker=True,
                             selector_prompt="Pick who speaks next among {participants}.\n{roles}\n{history}",
                             termination_condition=MaxMessageTermination(7))
    result = await team.run(task="ship the release")
    assert len({m.source for m in result.messages[1:]}) > 1


async def test_answers_magentic_one_s_ledger_so_each_participant_speaks_once_then_the_run_ends() -> None:
    agents = [AssistantAgent(name, model_client=OfflineChatCompletionClient()) for name in ("researcher", "coder")]
    team = MagenticOneGroupChat(agents, model_client=OfflineChatCompletionClient(), max_turns=6)  # type: ignore[arg-type]
    result = await team.run(task="ship the release")
    assert [m.source for m in result.messages if m.source in ("researcher", "coder")] == ["researcher", "coder"]
    assert result.stop_reason is not None and "Max rounds" not in result.stop_reason
