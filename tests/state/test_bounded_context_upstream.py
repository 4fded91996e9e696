"""AutoGen's own tests of its chat-completion contexts, adapted to BoundedChatCompletionContext.

Upstream files (github.com/microsoft/autogen, ``python/packages/``), read at the versions our code index
holds (it does not hold the ``python-v0.7.5`` tag, so every behaviour they assert of AutoGen's contexts is
run here side by side against the installed autogen-core / autogen-agentchat 0.7.5):

- ``autogen-core/tests/test_model_context.py``: buffered, head-and-tail and unbounded contexts, save/load
  of their state, and the token-limited context dropping a leading function result;
- ``autogen-agentchat/tests/test_assistant_agent.py``: ``test_model_context`` (what the model client is
  sent), ``test_model_client_stream_with_tool_calls`` (parallel calls with reflection) and
  ``test_assistant_agent_declarative``;
- ``autogen-agentchat/tests/test_declarative_components.py``: ``test_chat_completion_context_declarative``;
- ``autogen-agentchat/tests/test_group_chat.py``: ``test_selector_group_chat_with_model_context`` and
  ``test_selector_group_chat_state`` (participants' contexts equal after a team's state round trip).

Where AutoGen's context only trims the *view* (and keeps every message in ``save_state()``), ours keeps
the same messages in both; where its head-and-tail context inserts a "Skipped N messages" placeholder, ours
invents no message.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Sequence
from typing import Any

from autogen_agentchat.agents import AssistantAgent
from autogen_agentchat.base import TaskResult
from autogen_agentchat.conditions import TextMentionTermination
from autogen_agentchat.messages import ModelClientStreamingChunkEvent, TextMessage
from autogen_agentchat.teams import SelectorGroupChat
from autogen_core import ComponentLoader, FunctionCall
from autogen_core.model_context import (
    BufferedChatCompletionContext,
    ChatCompletionContext,
    HeadAndTailChatCompletionContext,
    UnboundedChatCompletionContext,
)
from autogen_core.models import (
    AssistantMessage,
    CreateResult,
    FunctionExecutionResultMessage,
    LLMMessage,
    RequestUsage,
    SystemMessage,
    UserMessage,
)
from autogen_ext.models.replay import ReplayChatCompletionClient

from teamstore.context import PROVIDER, BoundedChatCompletionContext
from tests.state.conversation import assert_whole_exchanges

CHAT: list[LLMMessage] = [
    UserMessage(content="Hello!", source="user"),
    AssistantMessage(content="What can I do for you?", source="assistant"),
    UserMessage(content="Tell what are some fun things to do in seattle.", source="user"),
    AssistantMessage(content="Pike place, space needle, mt rainer", source="assistant"),
    UserMessage(content="More places?", source="user"),
]


async def _filled(context: ChatCompletionContext, messages: list[LLMMessage]) -> ChatCompletionContext:
    for message in messages:
        await context.add_message(message)
    return context


# --- autogen-core: test_model_context.py ---------------------------------------------------------------------
async def test_like_the_buffered_context_it_sends_the_newest_and_its_state_round_trips() -> None:
    ours = await _filled(BoundedChatCompletionContext(max_messages=2), CHAT[:3])
    theirs = await _filled(BufferedChatCompletionContext(buffer_size=2), CHAT[:3])
    assert await ours.get_messages() == await theirs.get_messages() == CHAT[1:3]
    assert len((await ours.save_state())["messages"]) == 2  # theirs stores all 3
    await ours.clear()
    assert await ours.get_messages() == []
    await _filled(ours, CHAT[:2])
    state = await ours.save_state()
    await ours.clear()
    await ours.load_state(state)
    assert await ours.get_messages() == CHAT[:2]


async def test_like_the_head_and_tail_context_it_keeps_the_first_and_the_newest_without_a_placeholder() -> None:
    ours = await _filled(BoundedChatCompletionContext(max_messages=4, keep_first=1), CHAT)
    theirs = await _filled(HeadAndTailChatCompletionContext(head_size=1, tail_size=1), CHAT)
    kept, viewed = await ours.get_messages(), await theirs.get_messages()
    assert kept[0] == viewed[0] == CHAT[0] and kept[-1] == viewed[-1] == CHAT[-1]
    assert viewed[1] == UserMessage(content="Skipped 3 messages.", source="System")
    assert kept == [CHAT[0], *CHAT[2:]]  # the room its placeholder takes holds real messages here
    state = await ours.save_state()
    await ours.clear()
    assert await ours.get_messages() == []
    await ours.load_state(state)
    assert await ours.get_messages() == kept


async def test_like_the_unbounded_context_it_keeps_everything_under_its_bound() -> None:
    ours = await _filled(BoundedChatCompletionContext(max_messages=20), CHAT[:3])
    theirs = await _filled(UnboundedChatCompletionContext(), CHAT[:3])
    assert await ours.get_messages() == await theirs.get_messages() == CHAT[:3]
    state = await ours.save_state()
    await ours.clear()
    await ours.load_state(state)
    assert await ours.get_messages() == CHAT[:3]


async def test_like_autogens_contexts_it_never_sends_a_leading_function_result() -> None:
    orphan: list[LLMMessage] = [FunctionExecutionResultMessage(content=[]), *CHAT[:3]]
    ours = await _filled(BoundedChatCompletionContext(max_messages=4), orphan)  # under its bound
    theirs = await _filled(BufferedChatCompletionContext(buffer_size=4), orphan)
    assert await ours.get_messages() == await theirs.get_messages() == CHAT[:3]
    assert [type(m) for m in await ours.get_messages()] == [UserMessage, AssistantMessage, UserMessage]


# --- autogen-agentchat: test_assistant_agent.py --------------------------------------------------------------
async def test_the_agent_sends_only_what_the_context_keeps() -> None:
    model_client = ReplayChatCompletionClient(["Response to message 3"])
    model_context = BoundedChatCompletionContext(max_messages=2)
    agent = AssistantAgent("test_agent", model_client=model_client, model_context=model_context)
    await agent.run(task=[TextMessage(content=f"Message {i}", source="user") for i in (1, 2, 3)])
    assert agent.model_context == model_context
    (only,) = model_client.create_calls
    assert [m.content for m in only["messages"][1:]] == ["Message 2", "Message 3"]  # 2 kept + the system message
    assert len((await model_context.save_state())["messages"]) == 2  # the reply pushed "Message 2" out


class _StreamRecordingClient(ReplayChatCompletionClient):
    """The replay client, also recording what each streamed request is sent (it records only ``create``)."""

    def __init__(self, completions: list[str | CreateResult]) -> None:
        super().__init__(completions, model_info={"vision": False, "function_calling": True, "json_output": False,
                                                  "family": "unknown", "structured_output": False})
        self.streamed: list[list[LLMMessage]] = []

    async def create_stream(self, messages: Sequence[LLMMessage], **kwargs: Any) -> AsyncGenerator[Any, None]:
        self.streamed.append(list(messages))
        async for chunk in super().create_stream(messages, **kwargs):
            yield chunk


def _tool_model_client(*completions: str | CreateResult) -> _StreamRecordingClient:
    return _StreamRecordingClient(list(completions))


def _pass_function(input: str) -> str:
    return "pass"


async def _echo_function(input: str) -> str:
    return input


async def test_streamed_parallel_calls_reach_the_reflection_whole() -> None:
    calls = [FunctionCall(id="1", name="_pass_function", arguments=r'{"input": "task"}'),
             FunctionCall(id="3", name="_echo_function", arguments=r'{"input": "task"}')]
    client = _tool_model_client(
        CreateResult(content=calls, finish_reason="function_calls", usage=RequestUsage(prompt_tokens=10, completion_tokens=5),
                     cached=False),
        "Example response 2 to task",
    )
    agent = AssistantAgent("test_agent", model_client=client, model_client_stream=True, reflect_on_tool_use=True,
                           tools=[_pass_function, _echo_function],
                           model_context=BoundedChatCompletionContext(max_messages=3))
    chunks: list[str] = []
    async for message in agent.run_stream(task="task"):
        if isinstance(message, ModelClientStreamingChunkEvent):
            chunks.append(message.content)
        elif isinstance(message, TaskResult):
            assert message.messages[-1].to_text() == "Example response 2 to task"
    assert "".join(chunks) == "Example response 2 to task"
    assert len(client.streamed) == 2
    reflection = client.streamed[-1]
    assert isinstance(reflection[0], SystemMessage)
    assert [type(m) for m in reflection[1:]] == [UserMessage, AssistantMessage, FunctionExecutionResultMessage]
    assert reflection[2].content == calls and [r.call_id for r in reflection[3].content] == ["1", "3"]


async def test_an_agent_with_the_context_round_trips_as_a_component() -> None:
    agent = AssistantAgent("test_agent", model_client=_tool_model_client("Response to message 3"),
                           model_context=BoundedChatCompletionContext(max_messages=20, keep_first=1))
    config = agent.dump_component()
    assert config.config["model_context"]["provider"] == PROVIDER
    agent2 = AssistantAgent.load_component(config)
    assert agent2.name == agent.name
    assert isinstance(agent2.model_context, BoundedChatCompletionContext)
    assert agent2.dump_component().config["model_context"] == config.config["model_context"]


# --- autogen-agentchat: test_declarative_components.py -------------------------------------------------------
async def test_the_context_is_declarative_like_autogens() -> None:
    config = BoundedChatCompletionContext(max_messages=5, keep_first=2).dump_component()
    assert config.provider == PROVIDER
    assert config.config["max_messages"] == 5 and config.config["keep_first"] == 2
    loaded = ComponentLoader.load_component(config, ChatCompletionContext)
    assert isinstance(loaded, BoundedChatCompletionContext)
    assert loaded.dump_component() == config


# --- autogen-agentchat: test_group_chat.py -------------------------------------------------------------------
async def test_a_selector_with_the_context_sees_a_window_of_the_newest_messages() -> None:
    context = BoundedChatCompletionContext(max_messages=5)
    await context.add_message(UserMessage(content="[User] Prefilled message", source="user"))
    selector = ReplayChatCompletionClient(["agent2", "agent1", "agent1", "agent2", "agent1", "agent2", "agent1"])
    agent1 = AssistantAgent("agent1", description="Assistant agent 1", model_client=ReplayChatCompletionClient(
        ["[Agent One] First generation", "[Agent One] Second generation", "[Agent One] Third generation", "TERMINATE"]))
    agent2 = AssistantAgent("agent2", description="Assistant agent 2", model_client=ReplayChatCompletionClient(
        ["[Agent Two] First generation", "[Agent Two] Second generation", "[Agent Two] Third generation"]))
    team = SelectorGroupChat([agent1, agent2], model_client=selector, model_context=context,
                             termination_condition=TextMentionTermination("TERMINATE"), allow_repeated_speaker=True)
    await team.run(task="[GroupChat] Task")
    said = ["user: [User] Prefilled message", "user: [GroupChat] Task", "agent2: [Agent Two] First generation",
            "agent1: [Agent One] First generation", "agent1: [Agent One] Second generation",
            "agent2: [Agent Two] Second generation", "agent1: [Agent One] Third generation",
            "agent2: [Agent Two] Third generation"]
    for index, create in enumerate(selector.create_calls):
        prompt_lines = [line.strip() for line in create["messages"][0].content.split("\n")]
        assert all(line in prompt_lines for line in said[max(0, index - 3) : index + 2])
    assert len(await context.get_messages()) <= 5


async def test_participants_contexts_survive_a_team_state_round_trip() -> None:
    def team() -> tuple[SelectorGroupChat, AssistantAgent, AssistantAgent]:
        client = ReplayChatCompletionClient(
            ["agent1", "No facts", "agent2", "No plan", "agent1", "print('Hello, world!')", "agent2", "TERMINATE"])
        one = AssistantAgent("agent1", model_client=client, model_context=BoundedChatCompletionContext(4, keep_first=1))
        two = AssistantAgent("agent2", model_client=client, model_context=BoundedChatCompletionContext(4, keep_first=1))
        return SelectorGroupChat([one, two], model_client=client,
                                 termination_condition=TextMentionTermination("TERMINATE")), one, two

    team1, agent1, agent2 = team()
    await team1.run(task="Write a program that prints 'Hello, world!'")
    state: dict[str, Any] = dict(await team1.save_state())
    team2, agent3, agent4 = team()
    await team2.load_state(state)
    assert await team2.save_state() == state
    for before, after in ((agent1, agent3), (agent2, agent4)):
        kept = await after.model_context.get_messages()
        assert kept == await before.model_context.get_messages() and len(kept) <= 4
        assert_whole_exchanges(kept)
