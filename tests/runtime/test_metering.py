"""Metering at the model-client boundary counts calls TaskResult never reports (speaker selection), and
every model client, whatever ``component_type`` it dumps."""

from __future__ import annotations

import asyncio
import json
import logging
from pathlib import Path
from typing import Any

import pytest
from autogen_agentchat.agents import AssistantAgent
from autogen_agentchat.conditions import MaxMessageTermination
from autogen_agentchat.teams import RoundRobinGroupChat, SelectorGroupChat
from autogen_core import InMemoryStore
from autogen_core.models import ChatCompletionClient, UserMessage
from autogen_ext.models.cache import ChatCompletionCache
from autogen_ext.models.openai import OpenAIChatCompletionClient
from autogen_ext.models.replay import ReplayChatCompletionClient
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncEngine
from typer.testing import CliRunner

from config_registry import Manifest, Registry
from teamstore.audit.ledger_observer import LedgerObserver
from teamstore.audit.pseudonyms import Pseudonyms
from teamstore.audit.schema import usage
from teamstore.cli import app
from teamstore.errors import ConfigurationError
from teamstore.events import ModelCall
from teamstore.metering import (
    PROVIDER,
    MeteredChatCompletionClient,
    is_model_client,
    metered_run,
    wrap_model_clients,
)
from teamstore.offline import OfflineChatCompletionClient
from teamstore.settings import Settings
from tests.audit.teams import context as audit_context
from tests.audit.teams import observe_run
from tests.conftest import prepare
from tests.openai_endpoint import OpenAIEndpoint
from tests.otlp_receiver import OtlpReceiver


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


def replayed_team() -> RoundRobinGroupChat:
    """Two agents on AutoGen's ReplayChatCompletionClient, which dumps component_type
    'replay_chat_completion_client', not 'model'."""
    agents = [
        AssistantAgent(name, model_client=ReplayChatCompletionClient([f"{name} answers the router question"]))
        for name in ("triage", "researcher")
    ]
    return RoundRobinGroupChat(agents, termination_condition=MaxMessageTermination(3))


async def test_a_client_is_metered_by_what_it_is_not_by_the_component_type_it_dumps() -> None:
    dumped = replayed_team().dump_component().model_dump()
    assert {p["config"]["model_client"]["component_type"] for p in dumped["config"]["participants"]} == {
        "replay_chat_completion_client"
    }
    team = RoundRobinGroupChat.load_component(wrap_model_clients(dumped))
    with metered_run() as meter:
        result = await team.run(task="router down")
    reported = sum(m.models_usage.prompt_tokens for m in result.messages if m.models_usage)
    assert [c.agent for c in meter.calls] == ["triage", "researcher"]
    assert sum(c.input_tokens for c in meter.calls) == reported > 0


async def test_a_cache_is_metered_at_the_client_it_holds_so_each_call_to_a_model_counts_once() -> None:
    cached = ChatCompletionCache(OfflineChatCompletionClient(), store=InMemoryStore())
    agent = AssistantAgent("triage", model_client=cached)
    wrapped = wrap_model_clients(agent.dump_component().model_dump())
    client = wrapped["config"]["model_client"]
    assert client["provider"] != PROVIDER and client["config"]["client"]["provider"] == PROVIDER
    built = ChatCompletionClient.load_component(client)
    with metered_run() as meter:
        for _ in range(2):
            await built.create([UserMessage(content="router down", source="user")])
    assert len(meter.calls) == 1  # the second answer came from the cache: no model was called


class _SlowClient(OfflineChatCompletionClient):
    """Answers once ``answer`` is set, as a remote model answers late; streams one chunk, then the result."""

    def __init__(self) -> None:
        super().__init__()
        self.asked, self.answer = asyncio.Event(), asyncio.Event()

    async def create(self, messages, **kwargs):  # type: ignore[no-untyped-def]
        self.asked.set()
        await self.answer.wait()
        return await super().create(messages, **kwargs)

    async def create_stream(self, messages, **kwargs):  # type: ignore[no-untyped-def]
        yield "router"
        self.asked.set()
        await self.answer.wait()
        yield await super().create(messages, **kwargs)


async def test_a_call_cancelled_while_it_waits_for_its_answer_is_on_record_as_made_and_unanswered() -> None:
    # A stopped run's call went out to the model: it used to leave no trace, as if it was never made.
    slow = _SlowClient()
    client = MeteredChatCompletionClient(slow, agent="triage")
    with metered_run() as meter:
        waiting = asyncio.ensure_future(client.create([UserMessage(content="router down", source="user")]))
        await asyncio.wait_for(slow.asked.wait(), 5)
        waiting.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiting
    [call] = meter.calls
    assert call.error == "CancelledError" and call.agent == "triage"
    assert (call.input_tokens, call.output_tokens, call.finish_reason) == (0, 0, None)  # its usage is unknown


async def test_a_stream_stopped_before_its_result_is_on_record_unanswered_and_one_read_to_its_result_answered(
) -> None:
    slow = _SlowClient()
    client = MeteredChatCompletionClient(slow, agent="triage")
    messages = [UserMessage(content="router down", source="user")]
    with metered_run() as meter:
        stream = client.create_stream(messages)
        assert await anext(stream) == "router"
        await stream.aclose()  # its reader stopped before the final result
        slow.answer.set()
        read = client.create_stream(messages)
        chunks = [await anext(read), await anext(read)]
        await read.aclose()  # left as soon as the result came: it was answered
    stopped, answered = meter.calls
    assert stopped.error == "GeneratorExit" and stopped.input_tokens == 0
    assert answered.error is None and answered.input_tokens == chunks[-1].usage.prompt_tokens > 0


async def test_a_stream_closed_from_another_run_is_on_record_with_the_run_that_asked_for_it() -> None:
    # A stream left unread is closed wherever it is collected: its call belongs to the run that made it.
    client = MeteredChatCompletionClient(_SlowClient(), agent="triage")
    with metered_run() as asking:
        stream = client.create_stream([UserMessage(content="router down", source="user")])
        await anext(stream)
    with metered_run() as other:
        await stream.aclose()
    assert [c.error for c in asking.calls] == ["GeneratorExit"] and other.calls == []


def test_a_provider_that_does_not_import_is_judged_by_its_component_type() -> None:
    assert is_model_client({"provider": "no_such_module.Client", "component_type": "model"})
    assert not is_model_client({"provider": "no_such_module.Tool", "component_type": "tool"})
    assert is_model_client({"provider": "autogen_ext.models.replay.ReplayChatCompletionClient",
                            "component_type": "replay_chat_completion_client"})
    assert not is_model_client({"provider": "autogen_agentchat.agents.AssistantAgent", "component_type": "model"})


@pytest.mark.otlp
def test_a_team_on_the_replay_client_has_ledger_rows_chat_spans_and_a_cost(
    backend: tuple[str, str], registry_path: Path, otlp_env: OtlpReceiver, monkeypatch: pytest.MonkeyPatch
) -> None:
    url, lease = backend
    asyncio.run(prepare(url, lease))
    monkeypatch.setenv("TEAMSTORE_DATABASE_URL", url)
    monkeypatch.setenv("TEAMSTORE_SESSION_LEASE", lease)
    Registry(registry_path, create=True).add("replayed", replayed_team().dump_component(), Manifest(name="replayed"), "v1")
    runner = CliRunner()
    ran = runner.invoke(app, ["run", "--team", "replayed", "--user", "alice", "--session", "s1", "hi", "--json"])
    assert ran.exit_code == 0, ran.output
    usage = json.loads(ran.stdout)["usage"]
    spans = otlp_env.wait_for(lambda s: len([x for x in s if x["name"].startswith("chat ")]) == 2)
    chats = [s["attributes"] for s in spans if s["name"].startswith("chat ")]
    assert sorted(a["gen_ai.agent.name"] for a in chats) == ["researcher", "triage"]
    assert sum(a["gen_ai.usage.input_tokens"] for a in chats) == usage["input_tokens"] > 0
    cost = runner.invoke(app, ["cost", "--user", "alice", "--by", "agent", "--format", "json"])
    assert cost.exit_code == 0, cost.output
    report = json.loads(cost.stdout)
    assert sorted(r["key"] for r in report["rows"]) == ["researcher", "triage"]
    assert report["total"]["runs_completed"] + report["total"]["runs_limited"] == 1
    assert (report["total"]["calls"], report["total"]["input_tokens"]) == (2, usage["input_tokens"])
    assert report["total"]["output_tokens"] == usage["output_tokens"]


HI = [UserMessage(content="CANARY-WORDS-4711 hi", source="user")]


async def _streamed(client: ChatCompletionClient, **kwargs: Any) -> ModelCall:
    with metered_run() as meter:
        chunks = [chunk async for chunk in client.create_stream(HI, **kwargs)]
    await client.close()
    assert chunks[0] == "Hello"
    (call,) = meter.calls
    return call


@pytest.mark.parametrize("kind", ["openai", "azure"])
async def test_a_streamed_openai_call_asks_for_its_usage_and_is_recorded_with_its_tokens(kind: str) -> None:
    # Unasked, AutoGen's OpenAI clients end a stream with 0 tokens, which used to be recorded as a free call.
    endpoint = OpenAIEndpoint()
    inner = endpoint.client() if kind == "openai" else endpoint.azure_client()
    call = await _streamed(MeteredChatCompletionClient(inner, agent="triage"))
    assert endpoint.requests[-1]["stream_options"] == {"include_usage": True}
    assert (call.input_tokens, call.output_tokens, call.error, call.finish_reason) == (12, 5, None, "stop")
    assert call.usage_known and call.model == "gpt-4o"
    assert call.response_model == "gpt-4o"  # a stream names no answering model: the one asked for stands in


@pytest.mark.parametrize("where", ["extra_create_args", "config"])
async def test_a_callers_choice_not_to_ask_for_stream_usage_stands_and_its_call_counts_as_of_unknown_usage(
    where: str, caplog: pytest.LogCaptureFixture
) -> None:
    endpoint = OpenAIEndpoint()
    choice = {"stream_options": {"include_usage": False}}
    inner = endpoint.client(**choice) if where == "config" else endpoint.client()
    client = MeteredChatCompletionClient(inner, agent="triage")
    with caplog.at_level(logging.WARNING, logger="teamstore.metering"):
        call = await _streamed(client, extra_create_args=choice if where == "extra_create_args" else {})
    assert endpoint.requests[-1]["stream_options"] == {"include_usage": False}
    assert (call.input_tokens, call.output_tokens, call.error, call.finish_reason) == (0, 0, None, "stop")
    assert not call.usage_known  # answered, but what it cost is not known: never a call that cost 0
    assert "without its token usage" in caplog.text and "gpt-4o" in caplog.text
    assert "CANARY-WORDS-4711" not in caplog.text


@pytest.mark.parametrize("kind", ["compatible", "azure-2024-06-01"])
async def test_an_endpoint_not_known_to_take_stream_options_is_not_asked_and_its_stream_counts_as_unknown(
    kind: str
) -> None:
    # An OpenAI-compatible server, or Azure before 2024-09-01, may refuse the field: every stream would fail.
    endpoint = OpenAIEndpoint()
    inner = (endpoint.client(base_url="http://127.0.0.1:11434/v1") if kind == "compatible"
             else endpoint.azure_client(api_version="2024-06-01"))
    call = await _streamed(MeteredChatCompletionClient(inner, agent="triage"))
    assert "stream_options" not in endpoint.requests[-1]
    assert (call.input_tokens, call.output_tokens, call.error, call.usage_known) == (0, 0, None, False)


async def test_other_stream_options_the_caller_set_are_kept_beside_the_usage_asked_for() -> None:
    endpoint = OpenAIEndpoint()
    client = MeteredChatCompletionClient(endpoint.client(), agent="triage")
    call = await _streamed(client, extra_create_args={"stream_options": {"include_obfuscation": False}})
    assert endpoint.requests[-1]["stream_options"] == {"include_obfuscation": False, "include_usage": True}
    assert call.usage_known



@pytest.mark.parametrize(("listed", "base_url", "asked"), [
    ("http://VLLM.internal:8000/v1", "http://vllm.internal:8000/v1", True),
    ("vllm.internal", "http://vllm.internal:8000/v1", True),  # a host without a port: any port
    ("vllm.internal:8001", "http://vllm.internal:8000/v1", False),
    ("http://llm.internal:80/v1", "http://llm.internal/v1", True),  # a default port named on one side only
    ("llm.internal:443", "https://llm.internal/v1", True),
    ("llm.internal:80", "https://llm.internal/v1", False),
    ("llm.internal.", "http://llm.internal/v1", True),
    ("[::1]:8000", "http://[::1]:8000/v1", True),
    ("[::1:8000]", "http://[::1]:8000/v1", False),  # another address, not ::1's port 8000
    ("[::1]:8000", "http://[::1:8000]/v1", False),
    ("[fd00::5]", "http://[FD00::5]:8000/v1", True),
])
async def test_a_stream_to_a_host_said_to_take_stream_options_asks_for_its_usage_and_one_elsewhere_does_not(
    listed: str, base_url: str, asked: bool, monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("TEAMSTORE_STREAM_USAGE_URLS", listed)
    endpoint = OpenAIEndpoint()
    inner = endpoint.client(base_url=base_url)
    call = await _streamed(MeteredChatCompletionClient(inner, "vllm", stream_usage_hosts=Settings().stream_usage_hosts))
    assert endpoint.requests[-1].get("stream_options") == ({"include_usage": True} if asked else None)
    assert call.usage_known is asked


async def test_an_azure_resource_listed_by_its_endpoint_is_asked_whatever_its_api_version() -> None:
    endpoint = OpenAIEndpoint()
    inner = endpoint.azure_client(api_version="preview", azure_endpoint="https://My-Resource.openai.azure.com")
    call = await _streamed(MeteredChatCompletionClient(
        inner, "writer", stream_usage_hosts={"my-resource.openai.azure.com:443"}))
    assert endpoint.requests[-1]["stream_options"] == {"include_usage": True} and call.usage_known


async def test_a_base_url_the_openai_sdk_reads_from_its_environment_is_matched_against_the_hosts_listed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("OPENAI_BASE_URL", "http://vllm.internal:8000/v1")
    endpoint = OpenAIEndpoint()
    call = await _streamed(MeteredChatCompletionClient(
        endpoint.client(), "vllm", stream_usage_hosts={"vllm.internal:8000"}))
    assert endpoint.requests[-1]["stream_options"] == {"include_usage": True} and call.usage_known


@pytest.mark.parametrize("stream_usage", [None, False])
async def test_a_client_metered_in_its_definition_asks_on_a_listed_host_unless_it_said_either_way(
    stream_usage: bool | None,
) -> None:
    inner = OpenAIChatCompletionClient(model="gpt-4o", api_key="not-a-key", base_url="http://vllm.internal:8000/v1")
    metered = MeteredChatCompletionClient(inner, "vllm", stream_usage=stream_usage).dump_component().model_dump()
    agent = AssistantAgent("vllm", model_client=OfflineChatCompletionClient()).dump_component().model_dump()
    agent["config"]["model_client"] = metered
    wrapped = wrap_model_clients(agent, stream_usage_hosts={"vllm.internal:8000"})
    assert wrap_model_clients(wrapped, stream_usage_hosts={"vllm.internal:8000"}) == wrapped
    client = ChatCompletionClient.load_component(wrapped["config"]["model_client"])
    assert isinstance(client, MeteredChatCompletionClient)
    assert ChatCompletionClient.load_component(client.dump_component()).dump_component() == client.dump_component()
    endpoint = OpenAIEndpoint()
    endpoint.serve(client.inner)  # type: ignore[arg-type]
    call = await _streamed(client)
    assert ("stream_options" in endpoint.requests[-1]) is (stream_usage is None)
    assert call.usage_known is (stream_usage is None)


@pytest.mark.parametrize("kind", ["compatible", "azure-preview"])
async def test_an_endpoint_the_operator_says_takes_stream_options_is_asked_and_its_usage_reaches_the_ledger(
    kind: str, engine: AsyncEngine
) -> None:
    # Unknown to teamstore (a vLLM server, Azure's unnumbered API versions), so not asked unless the operator says.
    endpoint = OpenAIEndpoint()
    inner = (endpoint.client(base_url="http://127.0.0.1:8000/v1") if kind == "compatible"
             else endpoint.azure_client(api_version="preview"))
    writer = AssistantAgent("writer", model_client_stream=True,
                            model_client=MeteredChatCompletionClient(inner, "writer", stream_usage=True))
    team = RoundRobinGroupChat([writer], termination_condition=MaxMessageTermination(2))
    await observe_run([LedgerObserver(engine, Pseudonyms(engine))], team, audit_context())
    assert endpoint.requests[-1]["stream_options"] == {"include_usage": True}
    async with engine.connect() as conn:
        rows = (await conn.execute(select(usage.c.calls, usage.c.failed_calls, usage.c.input_tokens,
                                          usage.c.output_tokens))).all()
    assert [tuple(row) for row in rows] == [(1, 0, 12, 5)]


async def test_a_client_told_not_to_ask_for_stream_usage_never_asks_even_openai() -> None:
    endpoint = OpenAIEndpoint()
    call = await _streamed(MeteredChatCompletionClient(endpoint.client(), agent="triage", stream_usage=False))
    assert "stream_options" not in endpoint.requests[-1]
    assert not call.usage_known


def test_stream_usage_urls_are_read_as_hosts_and_an_entry_naming_none_is_refused_without_repeating_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("TEAMSTORE_STREAM_USAGE_URLS", " http://VLLM.internal:8000/v1 , llm.lan, 10.0.0.5:11434,")
    assert Settings().stream_usage_hosts == {"vllm.internal:8000", "llm.lan", "10.0.0.5:11434"}
    for bad in ("llm.lan/v1", "http://user:SECRET-4711@llm.lan/v1", "http:///v1?key=SECRET-4711"):
        monkeypatch.setenv("TEAMSTORE_STREAM_USAGE_URLS", f"llm.lan,{bad}")
        with pytest.raises(ConfigurationError, match="TEAMSTORE_STREAM_USAGE_URLS") as refused:
            Settings()
        assert "SECRET-4711" not in str(refused.value) + str(refused.value.hint)
