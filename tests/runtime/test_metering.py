"""Metering at the model-client boundary counts calls TaskResult never reports (speaker selection)."""

from __future__ import annotations

from autogen_agentchat.agents import AssistantAgent
from autogen_agentchat.conditions import MaxMessageTermination
from autogen_agentchat.teams import SelectorGroupChat
from autogen_core.models import ChatCompletionClient

from teamstore.metering import PROVIDER, MeteredChatCompletionClient, metered_run, wrap_model_clients
from teamstore.offline import OfflineChatCompletionClient


def selector_team() -> SelectorGroupChat:
    client = OfflineChatCompletionClient()
    agents = [AssistantAgent(n, model_client=client) for n in ("triage", "researcher", "critic")]
    return SelectorGroupChat(agents, model_client=client, termination_condition=MaxMessageTermination(5))


async def test_speaker_selection_calls_are_metered_beyond_task_result() -> None:
    team = SelectorGroupChat.load_component(wrap_model_clients(selector_team().dump_component().model_dump()))
    with metered_run() as meter:
        result = await team.run(task="router down")
    reported = sum(m.models_usage.prompt_tokens for m in result.messages if m.models_usage)
    agent_calls = [c for c in meter.calls if c.purpose == "agent"]
    selection = [c for c in meter.calls if c.purpose == "speaker_selection"]
    assert len(agent_calls) == 4 and len(selection) >= 1
    assert sum(c.input_tokens for c in agent_calls) == reported  # agents' own calls match TaskResult
    assert sum(c.input_tokens for c in meter.calls) > reported  # and selection is counted on top
    assert {c.agent for c in agent_calls} <= {"triage", "researcher", "critic"}
    assert all(c.model == "offline-small" for c in meter.calls)


async def test_calls_outside_a_metered_run_are_not_recorded_anywhere() -> None:
    team = SelectorGroupChat.load_component(wrap_model_clients(selector_team().dump_component().model_dump()))
    await team.run(task="unmetered")
    with metered_run() as meter:
        pass
    assert meter.calls == []


def test_wrapping_is_idempotent_and_round_trips() -> None:
    once = wrap_model_clients(selector_team().dump_component().model_dump())
    assert wrap_model_clients(once) == once
    client = MeteredChatCompletionClient(OfflineChatCompletionClient(), agent="triage")
    dumped = client.dump_component()
    assert dumped.provider == PROVIDER
    loaded = ChatCompletionClient.load_component(dumped)
    assert isinstance(loaded, MeteredChatCompletionClient) and loaded.dump_component() == dumped


async def test_agents_nested_in_other_components_are_metered_under_their_own_names() -> None:
    from autogen_agentchat.agents import SocietyOfMindAgent
    from autogen_agentchat.teams import RoundRobinGroupChat

    client = OfflineChatCompletionClient()
    inner = RoundRobinGroupChat([AssistantAgent("drafter", model_client=client)],
                                termination_condition=MaxMessageTermination(2))
    mind = SocietyOfMindAgent("mind", team=inner, model_client=client)
    outer = RoundRobinGroupChat([mind], termination_condition=MaxMessageTermination(2))
    team = RoundRobinGroupChat.load_component(wrap_model_clients(outer.dump_component().model_dump()))
    with metered_run() as meter:
        await team.run(task="router down")
    # The inner team's agent used to run on an unwrapped client: its calls reached no ledger.
    assert {c.agent for c in meter.calls} == {"drafter", "mind"}
    assert all(c.purpose == "agent" for c in meter.calls)
