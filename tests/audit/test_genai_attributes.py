"""The GenAI attributes a metered call carries: the provider as the conventions name it, the model that
answered (read from AutoGen's own call event, which never reaches a log handler that did not ask for it)
and the finish reason; spans carry them."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from datetime import UTC, datetime

import pytest
from autogen_core import EVENT_LOGGER_NAME
from autogen_core.models import UserMessage
from autogen_ext.models.openai import AzureOpenAIChatCompletionClient, OpenAIChatCompletionClient

from teamstore.audit.telemetry import call_attributes
from teamstore.audit.transcripts.record import RunKeys
from teamstore.events import ModelCall
from teamstore.metering import MeteredChatCompletionClient, metered_run, provider_name
from teamstore.offline import OfflineChatCompletionClient
from tests.canary.model_server import ModelServer

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


async def test_a_host_that_logs_autogens_events_still_gets_them(server: ModelServer, root_at_debug: _Kept) -> None:
    events = logging.getLogger(EVENT_LOGGER_NAME)
    before = events.level
    events.setLevel(logging.DEBUG)  # the host asked for AutoGen's events
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
