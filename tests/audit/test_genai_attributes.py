"""The GenAI attributes a metered call carries: the provider as the conventions name it, the model that
answered (read from AutoGen's own call event, which never reaches a log handler that did not ask for it)
and the finish reason; spans and metrics carry them to a real OTLP receiver, over both protocols."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
from autogen_agentchat.agents import AssistantAgent
from autogen_agentchat.conditions import MaxMessageTermination
from autogen_agentchat.teams import RoundRobinGroupChat
from autogen_core import EVENT_LOGGER_NAME
from autogen_core.logging import DeliveryStage, MessageEvent, MessageKind
from autogen_core.models import UserMessage
from autogen_ext.models.openai import AzureOpenAIChatCompletionClient, OpenAIChatCompletionClient

from config_registry import Manifest, Registry
from teamstore.app import open_platform
from teamstore.audit.telemetry import TRACER, call_attributes
from teamstore.audit.transcripts.record import RunKeys
from teamstore.context import BoundedChatCompletionContext
from teamstore.events import ModelCall
from teamstore.metering import MeteredChatCompletionClient, metered_run, provider_name
from teamstore.offline import OfflineChatCompletionClient
from teamstore.settings import Settings
from tests.canary.model_server import ModelServer
from tests.otlp_receiver import GrpcOtlpReceiver, OtlpReceiver

ANSWERING = "gpt-4o-2024-08-06"
WORDS = "CANARY-words-of-the-user"


@pytest.fixture
def server() -> Iterator[ModelServer]:
    found = ModelServer(model=ANSWERING)
    yield found
    found.stop()


class _Kept(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@pytest.fixture
def root_at_debug() -> Iterator[_Kept]:
    """A host logging everything at DEBUG, with AutoGen's loggers at WARNING as a Platform leaves them."""
    root, autogen = logging.getLogger(), logging.getLogger("autogen_core")
    before = root.level, autogen.level
    kept = _Kept()
    root.addHandler(kept)
    root.setLevel(logging.DEBUG)
    autogen.setLevel(logging.WARNING)
    yield kept
    root.removeHandler(kept)
    root.setLevel(before[0])
    autogen.setLevel(before[1])


def _openai(server: ModelServer) -> OpenAIChatCompletionClient:
    return OpenAIChatCompletionClient(model="gpt-4o", api_key="test-key", base_url=server.base_url)


@pytest.mark.parametrize(("client", "provider"), [
    (lambda: OpenAIChatCompletionClient(model="gpt-4o", api_key="k"), "openai"),
    (lambda: OpenAIChatCompletionClient(model="gemini-1.5-flash", api_key="k"), "gcp.gemini"),
    (lambda: OpenAIChatCompletionClient(model="gpt-4o", api_key="k", base_url="https://api.groq.com/openai/v1"),
     "groq"),
    (lambda: AzureOpenAIChatCompletionClient(model="gpt-4o", api_key="k", azure_endpoint="https://x.openai.azure.com",
                                             azure_deployment="d", api_version="2024-06-01"), "azure.ai.openai"),
    (lambda: OfflineChatCompletionClient(), "offline"),
])
def test_each_client_is_named_by_the_provider_the_conventions_give_it(client: object, provider: str) -> None:
    assert provider_name(client()) == provider  # type: ignore[operator]


async def test_a_call_records_the_model_that_answered_and_why_it_stopped_without_logging_autogens_event(
    server: ModelServer, root_at_debug: _Kept
) -> None:
    client = MeteredChatCompletionClient(_openai(server), "triage")
    with metered_run() as meter:
        await client.create([UserMessage(content=WORDS, source="user")])
    (call,) = meter.calls
    assert (call.provider, call.model, call.response_model, call.finish_reason) == (
        "openai", "gpt-4o", ANSWERING, "stop")
    assert [r for r in root_at_debug.records if r.name.startswith("autogen_core")] == []
    assert not any(WORDS in r.getMessage() for r in root_at_debug.records)


@pytest.mark.parametrize("level", [logging.DEBUG, logging.INFO], ids=["debug", "info"])
async def test_a_host_that_logs_autogens_events_still_gets_them(
    server: ModelServer, root_at_debug: _Kept, level: int
) -> None:
    # INFO too, as AutoGen's documentation suggests: it was taken for the level the tap had set for itself.
    with metered_run():  # the tap is in place
        await MeteredChatCompletionClient(_openai(server), "triage").create([UserMessage(content="hi", source="u")])
    events = logging.getLogger(EVENT_LOGGER_NAME)
    before = events.level
    events.setLevel(level)  # the host asked for AutoGen's events
    try:
        with metered_run() as meter:
            await MeteredChatCompletionClient(_openai(server), "triage").create([UserMessage(content="hi", source="u")])
    finally:
        events.setLevel(before)
    assert meter.calls[0].response_model == ANSWERING
    assert any(r.name == EVENT_LOGGER_NAME for r in root_at_debug.records)


def test_a_model_call_span_carries_provider_response_model_and_finish_reasons() -> None:
    call = ModelCall("triage", "gpt-4o", 3, 4, datetime.now(UTC), 0.2, provider="openai", response_model=ANSWERING,
                     finish_reason="stop")
    attributes = call_attributes(call, RunKeys("subject", "session"))
    assert attributes["gen_ai.provider.name"] == "openai"
    assert attributes["gen_ai.response.model"] == ANSWERING
    assert attributes["gen_ai.response.finish_reasons"] == ["stop"]
    failed = call_attributes(ModelCall("triage", "gpt-4o", 0, 0, datetime.now(UTC), 0.2, error="APIError"),
                             RunKeys("subject", "session"))
    assert "gen_ai.response.model" not in failed and "gen_ai.response.finish_reasons" not in failed
    assert failed["error.type"] == "APIError"


@pytest.mark.otlp
async def test_a_teams_openai_calls_reach_the_receiver_with_provider_answering_model_and_finish_reason(
    server: ModelServer, otlp_protocol_env: OtlpReceiver | GrpcOtlpReceiver, tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    registry = Registry(tmp_path / "registry", create=True)
    monkeypatch.setenv("MODEL_KEY", "test-key")
    key = {"participants.0.config.model_client.config.api_key": "env:MODEL_KEY"}
    client = OpenAIChatCompletionClient(model="gpt-4o", api_key="test-key", base_url=server.base_url, max_retries=0)
    agent = AssistantAgent("desk", model_client=client, model_context=BoundedChatCompletionContext(max_messages=20))
    team = RoundRobinGroupChat([agent], termination_condition=MaxMessageTermination(2))
    manifest = Manifest(name="desk", persist=["desk"], context_bound=20, secrets=key)
    registry.add("desk", team.dump_component(), manifest, "v1", label="production")
    settings = Settings(home=tmp_path / "home", registry_path=registry.path, auto_migrate=True)
    async with open_platform(settings) as platform, platform.session("u", "s", team="desk") as session:
        await session.run(WORDS)
    expected = {"gen_ai.provider.name": "openai", "gen_ai.request.model": "gpt-4o",
                "gen_ai.response.model": ANSWERING}
    spans = otlp_protocol_env.wait_for(lambda found: any(s["name"] == "chat gpt-4o" for s in found))
    (chat,) = [s for s in spans if s["name"] == "chat gpt-4o"]
    assert {k: chat["attributes"][k] for k in expected} == expected
    assert chat["attributes"]["gen_ai.response.finish_reasons"] == ["stop"]
    (run,) = [s for s in spans if s["name"] == "invoke_agent desk" and s["scope"] == TRACER]  # not AutoGen's
    assert run["attributes"]["gen_ai.provider.name"] == "openai"
    points = otlp_protocol_env.wait_for_metrics(lambda found: any(p["name"] == "gen_ai.client.token.usage"
                                                                  for p in found))
    for point in (p for p in points if p["name"].startswith("gen_ai.client.")):
        assert {k: point["attributes"][k] for k in expected} == expected


async def test_autogens_message_events_make_no_log_record_where_only_the_tap_reads_the_events_logger(
    server: ModelServer, root_at_debug: _Kept, monkeypatch: pytest.MonkeyPatch
) -> None:
    # AutoGen logs an event for every message it delivers (tens per run); with INFO on for the tap alone, each
    # was a record made only to be dropped (~9 µs each), in every run of the process, bare AutoGen ones too.
    with metered_run():
        await MeteredChatCompletionClient(_openai(server), "triage").create([UserMessage(content="hi", source="u")])
    events = logging.getLogger(EVENT_LOGGER_NAME)
    made: list[object] = []
    record = logging.Logger.makeRecord

    def counted(self: logging.Logger, *args: object, **kwargs: object) -> logging.LogRecord:
        if self.name == EVENT_LOGGER_NAME:
            made.append(args[3])
        return record(self, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(logging.Logger, "makeRecord", counted)
    event = MessageEvent(payload="{}", sender=None, receiver=None, kind=MessageKind.PUBLISH,
                         delivery_stage=DeliveryStage.SEND)
    events.info(event)
    assert made == []
    with metered_run() as meter:  # a model call is still read
        await MeteredChatCompletionClient(_openai(server), "triage").create([UserMessage(content="hi", source="u")])
    assert meter.calls[0].response_model == ANSWERING
    assert len(made) == 1
    root_at_debug.records.clear()
    logging.getLogger("autogen_core").setLevel(logging.NOTSET)  # a host that logs everything at DEBUG, AutoGen too
    events.info(event)
    assert [r.msg for r in root_at_debug.records if r.name == EVENT_LOGGER_NAME] == [event]
