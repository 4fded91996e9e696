"""A host service with its own global tracer provider: AutoGen's spans of teamstore's teams never reach it.

The host installs an ordinary global ``TracerProvider`` (as a FastAPI service with its own exporter does),
then runs sessions through a Platform. The team's tool is called with the user's words and fails quoting
them, so AutoGen's runtime spans (``message``), its tool span (exception event, status text) and its agent
spans all have content to leak. The host's own spans, one around the session and one inside the tool,
must still be exported, in one trace.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from autogen_agentchat.agents import AssistantAgent, SocietyOfMindAgent
from autogen_agentchat.conditions import MaxMessageTermination, TextMentionTermination
from autogen_agentchat.teams import RoundRobinGroupChat
from autogen_core import FunctionCall
from autogen_core.code_executor import ImportFromModule
from autogen_core.models import CreateResult, RequestUsage
from autogen_core.tools import FunctionTool
from autogen_ext.models.replay import ReplayChatCompletionClient
from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.util._once import Once

from config_registry import Manifest, Registry
from teamstore.app import open_platform
from teamstore.errors import ConfigurationError
from teamstore.runtime import autogen_spans
from teamstore.runtime.platform import Platform
from teamstore.settings import Settings
from tests.otlp_receiver import OtlpReceiver
from tests.services import Services

WORDS = "CANARY-host-tracing-my-landlord-is-Jane-Doe"
HOST_SCOPE = "host.service"


async def lookup(query: str) -> str:
    """Look a support ticket up."""
    with trace.get_tracer("host.service").start_as_current_span("host lookup"):
        pass  # the host's own span, made inside AutoGen's tool span
    raise ValueError(f"no ticket matches {query}")


def _replay(*replies: str | CreateResult) -> ReplayChatCompletionClient:
    return ReplayChatCompletionClient(
        list(replies),
        model_info={"vision": False, "function_calling": True, "json_output": False, "family": "unknown",
                    "structured_output": False},
    )


def _helper() -> AssistantAgent:
    call = FunctionCall(id="call-1", name="lookup", arguments=json.dumps({"query": WORDS}))
    client = _replay(
        CreateResult(finish_reason="function_calls", content=[call], cached=False,
                     usage=RequestUsage(prompt_tokens=12, completion_tokens=5)),
        "I could not find that ticket. TERMINATE",
    )
    tool = FunctionTool(lookup, description="Look a ticket up.",
                        global_imports=[ImportFromModule("opentelemetry", ("trace",))])
    return AssistantAgent("helper", model_client=client, tools=[tool])


def _stop() -> Any:
    return TextMentionTermination("TERMINATE") | MaxMessageTermination(6)


def flat_team() -> RoundRobinGroupChat:
    """One agent whose tool gets the user's words and fails quoting them."""
    return RoundRobinGroupChat([_helper()], termination_condition=_stop())


def nested_team() -> RoundRobinGroupChat:
    """The same agent inside a SocietyOfMindAgent's inner team: AutoGen builds a second runtime for it."""
    inner = RoundRobinGroupChat([_helper()], termination_condition=_stop())
    desk = SocietyOfMindAgent("desk", team=inner, model_client=_replay("Summary: no ticket found."))
    return RoundRobinGroupChat([desk], termination_condition=MaxMessageTermination(2))


@pytest.fixture
def registry(tmp_path: Path) -> Registry:
    reg = Registry(tmp_path / "registry", create=True)
    for name, team in (("flat", flat_team()), ("nested", nested_team())):
        reg.add(name, team.dump_component(), Manifest(name=name, allow_source_code_tools=True), "v1")
    return reg


def _install_global(provider: TracerProvider | None) -> None:
    # OpenTelemetry lets a process set its global provider once; a test sets and clears its own.
    trace._TRACER_PROVIDER_SET_ONCE = Once()
    trace._TRACER_PROVIDER = None
    if provider is not None:
        trace.set_tracer_provider(provider)


@pytest.fixture
def host_provider() -> Iterator[Any]:
    """Installs a host's global provider exporting to the given exporter; clears it afterwards."""
    made: list[TracerProvider] = []

    def install(exporter: SpanExporter) -> TracerProvider:
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(exporter))
        _install_global(provider)
        made.append(provider)
        return provider

    yield install
    for provider in made:
        provider.shutdown()
    _install_global(None)


@pytest.fixture
async def platform_for(registry: Registry, tmp_path: Path) -> AsyncIterator[Any]:
    """Builds a Platform from settings, as a service does (OTLP or not, content capture or not)."""
    made: list[Platform] = []

    def build() -> Platform:
        platform = open_platform(Settings(
            home=tmp_path / "home", registry_path=registry.path, auto_migrate=True, registry_refresh_seconds=0,
        ))
        made.append(platform)
        return platform

    yield build
    for platform in made:
        await platform.aclose()


async def _serve_one_request(platform: Platform, team: str) -> None:
    """What the host's request handler does: its own span around one teamstore session."""
    async with platform:
        with trace.get_tracer(HOST_SCOPE).start_as_current_span("host request"):
            async with platform.session("alice", "s1", team=team) as session:
                result = await session.run(f"please find my ticket: {WORDS}")
    assert any(WORDS in str(getattr(m, "content", "")) for m in result.messages)  # the words were there


def _texts(span: ReadableSpan) -> str:
    events = [(e.name, dict(e.attributes or {})) for e in span.events]
    return f"{span.name} {dict(span.attributes or {})} {events} {span.status.description}"


def _assert_host_spans_intact(spans: list[ReadableSpan]) -> None:
    request = next(s for s in spans if s.name == "host request")
    inside = next(s for s in spans if s.name == "host lookup")
    assert request.context is not None and inside.context is not None and inside.parent is not None
    assert inside.context.trace_id == request.context.trace_id  # one trace, through AutoGen's work


@pytest.mark.parametrize("team", ["flat", "nested"])
async def test_a_host_global_provider_gets_no_autogen_span_and_no_words_when_teamstore_exports_nothing(
    host_provider: Any, platform_for: Any, team: str
) -> None:
    memory = InMemorySpanExporter()
    host_provider(memory)
    await _serve_one_request(platform_for(), team)
    spans = list(memory.get_finished_spans())
    assert not [s.name for s in spans if WORDS in _texts(s)]
    assert {s.instrumentation_scope.name for s in spans if s.instrumentation_scope} == {HOST_SCOPE}
    _assert_host_spans_intact(spans)
    request = next(s for s in spans if s.name == "host request")
    inside = next(s for s in spans if s.name == "host lookup")
    assert inside.parent is not None and request.context is not None
    assert inside.parent.span_id == request.context.span_id  # AutoGen's unrecorded spans pass their parent on


@pytest.mark.otlp
async def test_over_otlp_autogen_spans_go_scrubbed_to_teamstore_and_the_host_keeps_its_own(
    host_provider: Any, platform_for: Any, otlp_env: OtlpReceiver, services: Services
) -> None:
    with services.otlp(OtlpReceiver) as host_receiver:  # the host's own collector, beside teamstore's
        host_provider(OTLPSpanExporter(endpoint=f"{host_receiver.endpoint}/v1/traces"))
        platform = platform_for()
        await _serve_one_request(platform, "nested")

        host_spans = host_receiver.wait_for(lambda s: {"host request", "host lookup"} <= {x["name"] for x in s})
        host_wire = host_receiver.wire()
    ours = otlp_env.wait_for(lambda s: any(x["name"].startswith("execute_tool") for x in s))
    assert WORDS.encode() not in host_wire and WORDS.encode() not in otlp_env.wire()
    assert {s["scope"] for s in host_spans} == {HOST_SCOPE}
    autogen = [s for s in ours if s["scope"].startswith("autogen")]
    assert any(s["scope"] == "autogen SingleThreadedAgentRuntime" for s in autogen)
    tool = next(s for s in autogen if s["name"] == "execute_tool lookup")
    assert [e["attributes"].get("exception.type") for e in tool["events"]][:1] == ["ValueError"]
    assert not tool["status_message"]
    (request,) = [s for s in host_spans if s["name"] == "host request"]
    assert {s["trace_id"] for s in host_spans + autogen} == {request["trace_id"]}


@pytest.mark.otlp
async def test_opting_in_to_content_capture_still_sends_autogen_spans_with_the_words_to_teamstore(
    host_provider: Any, platform_for: Any, otlp_env: OtlpReceiver, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", "true")
    memory = InMemorySpanExporter()
    host_provider(memory)
    platform = platform_for()
    await _serve_one_request(platform, "flat")

    otlp_env.wait_for(lambda s: any(x["name"].startswith("execute_tool") for x in s))
    assert WORDS.encode() in otlp_env.wire()  # the operator's opt-in: see docs/operations.md on erasure
    assert {s.instrumentation_scope.name for s in memory.get_finished_spans() if s.instrumentation_scope} == {
        HOST_SCOPE
    }


async def test_autogen_the_host_runs_itself_keeps_using_the_host_provider(
    host_provider: Any, platform_for: Any
) -> None:
    memory = InMemorySpanExporter()
    host_provider(memory)
    await _serve_one_request(platform_for(), "flat")
    await RoundRobinGroupChat([AssistantAgent("own", model_client=_replay("hi"))],
                              termination_condition=MaxMessageTermination(2)).run(task="the host's own")
    scopes = {s.instrumentation_scope.name for s in memory.get_finished_spans() if s.instrumentation_scope}
    assert "autogen SingleThreadedAgentRuntime" in scopes  # teamstore routes only its own teams' spans


def test_an_autogen_that_looks_its_tracer_up_elsewhere_is_refused_when_the_platform_is_made(
    platform_for: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(autogen_spans, "_installed", False)
    monkeypatch.setattr(autogen_spans, "_SPAN_HELPER_SEAM", ("autogen_core._telemetry._genai", "moved"))
    with pytest.raises(ConfigurationError, match="no longer looks its tracer up") as refused:
        platform_for()
    assert refused.value.hint is not None and "0.7" in refused.value.hint
