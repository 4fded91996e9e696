"""OpenTelemetry spans for runs and model calls, with message content kept out of every exported span.

    from teamstore.audit.telemetry import setup_tracing

    provider = setup_tracing(Settings())   # None unless OTEL_EXPORTER_OTLP_(TRACES_)ENDPOINT is set
    runtime = SingleThreadedAgentRuntime(tracer_provider=provider)   # AutoGen's spans go through the scrubber
    observers = build_audit_observers(settings, engine, tracer_provider=provider)

Spans follow the GenAI semantic conventions: ``invoke_agent`` for a run, ``chat`` for each metered model
call (speaker selection included), with the provider, the model asked and the model that answered, the
finish reason, token usage, the pseudonymous session key as
``gen_ai.conversation.id`` and the subject key as ``teamstore.subject``. Every span the provider exports
passes through :class:`ScrubbingSpanExporter`, which drops content attributes (AutoGen's ``message``,
the GenAI prompt/completion attributes), user identifiers, event payloads and status descriptions, unless
the operator opted in with ``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

from opentelemetry import trace
from opentelemetry.sdk.trace import Event, ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult
from opentelemetry.trace import SpanKind, Status, StatusCode

from teamstore.audit.otlp import EXPORT_TIMEOUT_S, positive_number, refused_settings, resource, span_exporter
from teamstore.audit.stop_reasons import recordable
from teamstore.audit.transcripts.record import RunKeys
from teamstore.events import LaterCalls, ModelCall, RunContext, RunOutcome
from teamstore.settings import Settings

TRACER = "teamstore.audit"
CONTENT_KEYS = frozenset(
    {
        "message",  # AutoGen 0.7 runtime spans: the whole serialized message
        "gen_ai.prompt",
        "gen_ai.completion",
        "gen_ai.input.messages",
        "gen_ai.output.messages",
        "gen_ai.system_instructions",
        "gen_ai.tool.call.arguments",
        "gen_ai.tool.call.result",
        "exception.message",
        "exception.stacktrace",
    }
)
CONTENT_PREFIXES = ("gen_ai.prompt.", "gen_ai.completion.", "llm.prompts", "llm.completions")
IDENTITY_PREFIXES = ("user.", "enduser.", "session.")
BATCH_VARIABLES = ("OTEL_BSP_MAX_QUEUE_SIZE", "OTEL_BSP_MAX_EXPORT_BATCH_SIZE")
"""What the span batch processor reads from the environment (teamstore sets its delay and timeout itself)."""


def is_content_key(key: str) -> bool:
    """True for attributes that can hold message content or a user identifier."""
    return key in CONTENT_KEYS or key.startswith(CONTENT_PREFIXES) or key.startswith(IDENTITY_PREFIXES)


def _scrub_attributes(attributes: Mapping[str, Any] | None) -> dict[str, Any]:
    return {k: v for k, v in (attributes or {}).items() if not is_content_key(k)}


def scrub_span(span: ReadableSpan) -> ReadableSpan:
    """A copy of ``span`` without content: attributes filtered, events reduced to exception types.

    Args:
        span: A finished span.

    Returns:
        The same span (ids, times, links, kind) with content attributes removed, every event's payload
        dropped except ``exception.type``, and the status description (often an error text) cleared.
    """
    events = [
        Event(e.name, _scrub_attributes(e.attributes), e.timestamp)
        for e in span.events
        if e.name == "exception"
    ]
    return ReadableSpan(
        name=span.name,
        context=span.context,
        parent=span.parent,
        resource=span.resource,
        attributes=_scrub_attributes(span.attributes),
        events=events,
        links=span.links,
        kind=span.kind,
        status=Status(span.status.status_code),
        start_time=span.start_time,
        end_time=span.end_time,
        instrumentation_scope=span.instrumentation_scope,
    )


class ScrubbingSpanExporter(SpanExporter):
    """Wraps an exporter so nothing it sends carries message content (unless capture is on).

    Args:
        inner: The real exporter (OTLP over HTTP or gRPC in production).
        capture_content: The operator's opt-in; when true spans pass unchanged.
    """

    def __init__(self, inner: SpanExporter, capture_content: bool = False) -> None:
        self.inner = inner
        self.capture_content = capture_content

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        """Scrub, then delegate."""
        return self.inner.export(spans if self.capture_content else [scrub_span(s) for s in spans])

    def shutdown(self) -> None:
        """Shut the inner exporter down."""
        self.inner.shutdown()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        """Flush the inner exporter."""
        return self.inner.force_flush(timeout_millis)


def otlp_exporter() -> SpanExporter:
    """An OTLP span exporter configured by the standard ``OTEL_EXPORTER_OTLP_*`` variables, over
    ``http/protobuf`` or ``grpc`` as they say (:mod:`teamstore.audit.otlp`).

    Raises:
        ConfigurationError: The protocol is not one teamstore can export over.
        MissingExtra: ``opentelemetry-exporter-otlp`` is not installed.
    """
    return span_exporter()


def setup_tracing(
    settings: Settings, *, exporter: SpanExporter | None = None, install_global: bool = False
) -> TracerProvider | None:
    """Build teamstore's tracer provider, or ``None`` when no OTLP endpoint is configured.

    Args:
        settings: Read for ``otlp_configured`` and ``capture_message_content``.
        exporter: Another exporter (tests, console); ``None`` for OTLP from ``OTEL_*``.
        install_global: Also make it the global provider, so AutoGen's spans that use the global
            tracer (agent and tool spans) are scrubbed too. Only the first global install takes effect.

    Returns:
        A provider with a batch processor (short export timeout, exporting off the run's path) whose
        exporter is wrapped in :class:`ScrubbingSpanExporter`; ``None`` when nothing is to be exported.

    Raises:
        ConfigurationError: OTLP is configured over a protocol teamstore cannot export over, or
            ``OTEL_BSP_*`` sizes the SDK refuses or that are no whole numbers.
        MissingExtra: OTLP is configured but the exporter package is missing.
    """
    if exporter is None:
        if not settings.otlp_configured:
            return None
        exporter = otlp_exporter()
    scrubbing = ScrubbingSpanExporter(exporter, capture_content=settings.capture_message_content)
    for variable in BATCH_VARIABLES:  # the SDK logs a traceback for one that is no number, and takes its default
        positive_number(variable, "spans", whole=True)
    try:
        processor = BatchSpanProcessor(
            scrubbing, schedule_delay_millis=1000, export_timeout_millis=EXPORT_TIMEOUT_S * 1000
        )
    except ValueError as exc:  # a queue or batch size the SDK read from OTEL_BSP_* and will not take
        raise refused_settings("span batch processor", BATCH_VARIABLES,
                               "whole numbers above 0, the batch size at most the queue size (2048 unless set)",
                               exc) from None
    provider = TracerProvider(resource=resource())
    provider.add_span_processor(processor)
    if install_global:
        trace.set_tracer_provider(provider)
    return provider


def _ns(moment: datetime) -> int:
    return int(moment.timestamp() * 1_000_000_000)


def run_attributes(ctx: RunContext, outcome: RunOutcome, keys: RunKeys) -> dict[str, Any]:
    """The run span's attributes: GenAI conventions plus teamstore's, never the raw user id."""
    attributes: dict[str, Any] = {
        "gen_ai.operation.name": "invoke_agent",
        "gen_ai.agent.name": ctx.team,
        "gen_ai.conversation.id": keys.session_key,
        "gen_ai.usage.input_tokens": outcome.input_tokens,
        "gen_ai.usage.output_tokens": outcome.output_tokens,
        "teamstore.team": ctx.team,
        "teamstore.team_version": ctx.team_version,
        "teamstore.subject": keys.subject_key,
        "teamstore.run_id": ctx.run_id,
        "teamstore.ended_by_limit": outcome.ended_by_limit,
        "teamstore.model_calls": len(outcome.model_calls),
        "teamstore.resumed": ctx.resumed,
        "teamstore.interruptions": ctx.interruptions,
    }
    providers = {call.provider for call in outcome.model_calls}
    if len(providers) == 1:  # a team whose agents call several providers has no one provider
        attributes["gen_ai.provider.name"] = providers.pop()
    if outcome.stop_reason is not None:
        attributes["teamstore.stop_reason"] = recordable(outcome.stop_reason)
    if outcome.error is not None:
        attributes["error.type"] = type(outcome.error).__name__
    return attributes


def genai_call_attributes(call: ModelCall) -> dict[str, Any]:
    """The GenAI attributes a model call's span and its metrics both carry: the operation, the provider, the
    model asked for and the one that answered (when the client reports it), and a failed call's error type."""
    attributes: dict[str, Any] = {
        "gen_ai.operation.name": "chat",
        "gen_ai.provider.name": call.provider,
        "gen_ai.request.model": call.model,
    }
    if call.response_model is not None:
        attributes["gen_ai.response.model"] = call.response_model
    if call.error is not None:
        attributes["error.type"] = call.error
    return attributes


def call_attributes(call: ModelCall, keys: RunKeys, attempt: int = 0) -> dict[str, Any]:
    """A model-call span's attributes, in the record of attempt ``attempt`` at its run: the attempt that made the
    call (``teamstore.attempt``), and whether an earlier one did and the record carries it from the run's
    checkpoint (``teamstore.carried``; docs/checkpoints.md, "The audit side")."""
    attributes: dict[str, Any] = {
        **genai_call_attributes(call),
        "gen_ai.agent.name": call.agent,
        "gen_ai.usage.input_tokens": call.input_tokens,
        "gen_ai.usage.output_tokens": call.output_tokens,
        "gen_ai.conversation.id": keys.session_key,
        "teamstore.purpose": call.purpose,
        "teamstore.attempt": call.attempt,
        "teamstore.carried": call.attempt < attempt,
    }
    if call.finish_reason is not None:
        attributes["gen_ai.response.finish_reasons"] = [call.finish_reason]
    return attributes


def emit_run_spans(tracer: trace.Tracer, ctx: RunContext, outcome: RunOutcome, keys: RunKeys) -> None:
    """Record the run span and one child span per model call, with their measured start and end times.

    Args:
        tracer: From teamstore's provider.
        ctx: The run.
        outcome: How it ended, with its metered model calls.
        keys: The run's pseudonymous keys.
    """
    run_span = tracer.start_span(
        f"invoke_agent {ctx.team}",
        kind=SpanKind.INTERNAL,
        start_time=_ns(ctx.started_at),
        attributes=run_attributes(ctx, outcome, keys),
    )
    _emit_calls(tracer, run_span, outcome.model_calls, keys, ctx.interruptions)
    if outcome.error is not None:
        run_span.set_status(Status(StatusCode.ERROR))
    run_span.end(end_time=_ns(outcome.finished_at))


def _emit_calls(
    tracer: trace.Tracer, parent_span: trace.Span, calls: list[ModelCall], keys: RunKeys, attempt: int
) -> None:
    parent = trace.set_span_in_context(parent_span)
    for call in calls:
        span = tracer.start_span(
            f"chat {call.model}",
            context=parent,
            kind=SpanKind.CLIENT,
            start_time=_ns(call.started_at),
            attributes=call_attributes(call, keys, attempt),
        )
        if call.error is not None:
            span.set_status(Status(StatusCode.ERROR))
        span.end(end_time=_ns(call.started_at + timedelta(seconds=call.duration_s)))


def emit_later_spans(tracer: trace.Tracer, ctx: RunContext, later: LaterCalls, keys: RunKeys) -> None:
    """Record the span of work done after a run (``memory_writer {team}``) and one child span per model call.

    Its attributes name the run it served, its purpose and token usage; a failure sets ``error.type`` (the
    reason stays in the store and the log).
    """
    attributes: dict[str, Any] = {
        "gen_ai.operation.name": "invoke_agent",
        "gen_ai.agent.name": later.purpose,
        "gen_ai.conversation.id": keys.session_key,
        "gen_ai.usage.input_tokens": sum(c.input_tokens for c in later.calls),
        "gen_ai.usage.output_tokens": sum(c.output_tokens for c in later.calls),
        "teamstore.team": ctx.team,
        "teamstore.team_version": ctx.team_version,
        "teamstore.subject": keys.subject_key,
        "teamstore.run_id": ctx.run_id,
        "teamstore.purpose": later.purpose,
        "teamstore.model_calls": len(later.calls),
    }
    if later.error_type is not None:
        attributes["error.type"] = later.error_type
    span = tracer.start_span(f"{later.purpose} {ctx.team}", kind=SpanKind.INTERNAL,
                             start_time=_ns(later.started_at), attributes=attributes)
    _emit_calls(tracer, span, later.calls, keys, ctx.interruptions)
    if later.error_type is not None:
        span.set_status(Status(StatusCode.ERROR))
    span.end(end_time=_ns(later.finished_at))
