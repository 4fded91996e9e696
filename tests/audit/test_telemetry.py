"""Spans over real OTLP/HTTP: GenAI attributes, one per run and model call, and no content on the wire."""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest
from autogen_agentchat.agents import AssistantAgent
from autogen_agentchat.teams import MagenticOneGroupChat
from autogen_core import SingleThreadedAgentRuntime
from autogen_ext.models.replay import ReplayChatCompletionClient
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import Status, StatusCode
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncEngine

from teamstore.audit.ledger_observer import LedgerObserver
from teamstore.audit.pseudonyms import Pseudonyms
from teamstore.audit.schema import usage
from teamstore.audit.span_observer import SpanObserver
from teamstore.audit.stop_reasons import OTHER, recordable
from teamstore.audit.subjects import ensure_subject, session_key
from teamstore.audit.telemetry import ScrubbingSpanExporter, setup_tracing
from teamstore.events import RunOutcome
from teamstore.metering import MeteredChatCompletionClient
from teamstore.settings import Settings
from tests.audit.teams import CANARY, context, metered_round_robin, observe_run, selector_team
from tests.otlp_receiver import OtlpReceiver
from tests.services import free_port

pytestmark = pytest.mark.otlp
USER = "alice.raw-user-id@example.com"


@pytest.fixture
async def provider(otlp_env: OtlpReceiver) -> AsyncIterator[TracerProvider]:
    tracer_provider = setup_tracing(Settings())
    assert tracer_provider is not None
    yield tracer_provider
    tracer_provider.shutdown()


async def _run_on_runtime(provider: TracerProvider, engine: AsyncEngine, task: str) -> RunOutcome:
    """A team whose AutoGen runtime uses teamstore's provider, as the session runtime builds it."""
    runtime = SingleThreadedAgentRuntime(tracer_provider=provider)
    team = metered_round_robin(runtime=runtime)
    pseudonyms = Pseudonyms(engine)
    ledger = LedgerObserver(engine, pseudonyms)
    outcome = await observe_run(
        [ledger, SpanObserver(provider, pseudonyms)],
        team,
        context(user_id=USER, session_id="sess-1", team="support_triage"),
        task,
        runtime=runtime,
    )
    await ledger.drain()  # as a platform's close does: nothing holds a connection past the test's engine
    await pseudonyms.aclose()
    provider.force_flush()
    return outcome


def _by_name(spans: list[dict[str, Any]], prefix: str) -> list[dict[str, Any]]:
    return [s for s in spans if s["name"].startswith(prefix)]


def test_without_otel_variables_nothing_is_set_up() -> None:
    assert setup_tracing(Settings()) is None


async def test_one_span_per_run_and_per_model_call_with_genai_attributes(
    provider: TracerProvider, otlp_env: OtlpReceiver, sqlite_engine: AsyncEngine
) -> None:
    outcome = await _run_on_runtime(provider, sqlite_engine, "My router keeps dropping")
    assert len(outcome.model_calls) == 2
    spans = otlp_env.wait_for(
        lambda s: len(_by_name(s, "chat ")) == 2 and bool(_by_name(s, "invoke_agent support"))
    )
    (run,) = _by_name(spans, "invoke_agent support_triage")
    subject, secret = await ensure_subject(sqlite_engine, USER)
    attrs = run["attributes"]
    assert attrs["gen_ai.operation.name"] == "invoke_agent"
    assert attrs["gen_ai.conversation.id"] == session_key(secret, "sess-1")
    assert attrs["teamstore.subject"] == subject
    # The span publishes both keys: the session id must not be confirmable from them.
    assert attrs["gen_ai.conversation.id"] != session_key(subject, "sess-1")
    assert (attrs["teamstore.team"], attrs["teamstore.team_version"]) == ("support_triage", "v1")
    assert attrs["teamstore.ended_by_limit"] is False and "teamstore.stop_reason" in attrs
    assert attrs["gen_ai.usage.input_tokens"] == outcome.input_tokens
    calls = _by_name(spans, "chat ")
    assert {c["parent_span_id"] for c in calls} == {run["span_id"]}
    assert {c["trace_id"] for c in calls} == {run["trace_id"]}
    assert {c["attributes"]["gen_ai.request.model"] for c in calls} == {"offline-small"}
    assert {c["attributes"]["gen_ai.agent.name"] for c in calls} == {"triage", "researcher"}
    assert sum(c["attributes"]["gen_ai.usage.output_tokens"] for c in calls) == outcome.output_tokens


async def test_the_canary_and_the_raw_user_id_never_reach_the_wire_not_even_via_autogen_spans(
    provider: TracerProvider, otlp_env: OtlpReceiver, sqlite_engine: AsyncEngine
) -> None:
    await _run_on_runtime(provider, sqlite_engine, f"please fix my router {CANARY}")
    spans = otlp_env.wait_for(lambda s: bool(_by_name(s, "invoke_agent support")))
    autogen = [s for s in spans if s["scope"].startswith("autogen")]
    assert autogen, "AutoGen's runtime spans should be exported (scrubbed), proving they pass the scrubber"
    assert all("message" not in s["attributes"] for s in spans)
    wire = otlp_env.wire()
    assert CANARY.encode() not in wire
    assert USER.encode() not in wire and b"sess-1" not in wire
    assert (await ensure_subject(sqlite_engine, USER)).session_secret.encode() not in wire


def _magentic_one_satisfied_by(reason: str) -> MagenticOneGroupChat:
    """A MagenticOne team whose orchestrator's model finds the request satisfied, for ``reason``."""
    ledger = {"is_request_satisfied": {"reason": reason, "answer": True},
              "is_in_loop": {"reason": "no", "answer": False},
              "is_progress_being_made": {"reason": "yes", "answer": True},
              "next_speaker": {"reason": "none", "answer": "helper"},
              "instruction_or_question": {"reason": "none", "answer": "none"}}
    orchestrator = ReplayChatCompletionClient(["facts", "plan", json.dumps(ledger), "final answer"])
    helper = AssistantAgent("helper", model_client=MeteredChatCompletionClient(ReplayChatCompletionClient(["hi"]), "helper"))
    return MagenticOneGroupChat([helper], model_client=MeteredChatCompletionClient(orchestrator, "orchestrator"))


async def test_a_stop_reason_a_model_wrote_stays_in_the_transcript_never_in_the_ledger_or_the_spans(
    provider: TracerProvider, otlp_env: OtlpReceiver, sqlite_engine: AsyncEngine
) -> None:
    # MagenticOne stops with its model's reason for the request being satisfied: the user's words, retold.
    pseudonyms = Pseudonyms(sqlite_engine)
    ctx = context(user_id=USER, session_id="sess-1", team="support_triage")
    outcome = await observe_run([LedgerObserver(sqlite_engine, pseudonyms), SpanObserver(provider, pseudonyms)],
                                _magentic_one_satisfied_by(f"the user's router {CANARY} works again"), ctx)
    assert CANARY in (outcome.stop_reason or "")
    provider.force_flush()
    (run,) = _by_name(otlp_env.wait_for(lambda s: bool(_by_name(s, "invoke_agent support"))), "invoke_agent support")
    assert run["attributes"]["teamstore.stop_reason"] == OTHER
    assert CANARY.encode() not in otlp_env.wire()
    async with sqlite_engine.connect() as conn:
        recorded = set((await conn.scalars(select(usage.c.stop_reason).where(usage.c.run_id == ctx.run_id))).all())
    assert recorded == {OTHER}


@pytest.mark.parametrize("reason", [
    "Text 'TERMINATE' mentioned", "Maximum number of messages 4 reached, current message count: 4",
    "Token usage limit reached, total token count: 120, prompt token count: 100, completion token count: 20.",
    "Handoff to user from triage detected.", "Function 'approve' was executed.", "'critic' answered",
    "Timeout of 30 seconds reached", "Maximum number of turns 3 reached.", "Max rounds reached.",
    "Text 'TERMINATE' mentioned, Maximum number of messages 4 reached, current message count: 4",
    "abandoned after turn 2",
])
def test_the_stop_reasons_autogens_conditions_write_are_recorded_as_they_are(reason: str) -> None:
    assert recordable(reason) == reason


@pytest.mark.parametrize("reason", ["Text 'STOP\x00' mentioned", "'crit\udcffic' answered"])
def test_a_stop_reason_no_database_keeps_as_text_is_recorded_as_other(reason: str) -> None:
    # NUL or a lone surrogate in a condition's sentence (its end word, say): Postgres would refuse the ledger row.
    assert recordable(reason) == OTHER


async def test_opting_in_to_content_capture_lets_autogen_message_attributes_through(
    otlp_env: OtlpReceiver, sqlite_engine: AsyncEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", "true")
    provider = setup_tracing(Settings())
    assert provider is not None
    try:
        await _run_on_runtime(provider, sqlite_engine, f"please fix my router {CANARY}")
        otlp_env.wait_for(lambda s: bool(_by_name(s, "invoke_agent support")))
    finally:
        provider.shutdown()
    assert CANARY.encode() in otlp_env.wire()  # the operator's opt-in: see docs/operations.md on erasure


async def test_a_down_otlp_endpoint_neither_blocks_nor_fails_a_run(
    sqlite_engine: AsyncEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", f"http://127.0.0.1:{free_port()}")
    provider = setup_tracing(Settings())
    assert provider is not None
    pseudonyms = Pseudonyms(sqlite_engine)
    started = time.monotonic()
    for _ in range(3):
        outcome = await observe_run([SpanObserver(provider, pseudonyms)], selector_team(), context())
        assert outcome.result is not None
    assert time.monotonic() - started < 3.0
    began = time.monotonic()
    provider.shutdown()  # flushes into the void: bounded by the short export timeout
    assert time.monotonic() - began < 10.0


def test_the_scrubber_drops_content_identity_events_and_status_text() -> None:
    memory = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(ScrubbingSpanExporter(memory)))
    with provider.get_tracer("t").start_as_current_span("s") as span:
        span.set_attributes(
            {
                "message": CANARY,
                "gen_ai.input.messages": CANARY,
                "user.id": "u",
                "enduser.id": "u",
                "gen_ai.prompt.0.content": CANARY,
                "messaging.operation": "publish",
            }
        )
        span.add_event("gen_ai.content.prompt", {"gen_ai.prompt": CANARY})
        span.record_exception(ValueError(CANARY))
        span.set_status(Status(StatusCode.ERROR, CANARY))
    (exported,) = memory.get_finished_spans()
    assert dict(exported.attributes or {}) == {"messaging.operation": "publish"}
    assert [(e.name, dict(e.attributes or {})) for e in exported.events] == [
        ("exception", {"exception.type": "ValueError", "exception.escaped": "False"})
    ]
    assert exported.status.status_code is StatusCode.ERROR and not exported.status.description
