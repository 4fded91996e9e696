"""A host service in this process, as a FastAPI app that embeds teamstore is: its own global OpenTelemetry
tracer, meter and logger providers (spans and log records exported to a real OTLP receiver, spans and metrics
kept in memory too), the logger provider's handler on the root logger, and a Platform whose sessions it runs.

    with host_telemetry(deployment, host_receiver):  # adds the host's spans, metrics and logs to the sinks
        async with open_platform() as platform:
            ...
    with host_telemetry(deployment, host_receiver, scrubbed=True):  # its span exporter wrapped in teamstore's
        ...                                                          # scrubber, as docs/operations.md offers
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from opentelemetry import metrics, trace
from opentelemetry._logs import SeverityNumber
from opentelemetry.exporter.otlp.proto.http._log_exporter import OTLPLogExporter
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.metrics import _internal as metrics_state
from opentelemetry.sdk._logs import LoggerProvider
from opentelemetry.sdk._logs.export import BatchLogRecordProcessor
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.util._once import Once

from teamstore.audit.telemetry import ScrubbingSpanExporter
from tests.canary.deployment import Deployment
from tests.canary.receiver import CanaryReceiver
from tests.canary.sinks import HOST_LOGS, HOST_SPANS, CapturedText, MemoryMetrics, MemorySpans, OtlpWire


def _set_globals(tracer_provider: Any, meter_provider: Any) -> tuple[Any, Any]:
    """Install both providers as the process's globals, returning the ones they replace. OpenTelemetry
    lets a process set each global once; a test suite must put the old ones back, so the guard is reset
    (what OpenTelemetry's own tests do)."""
    before = trace._TRACER_PROVIDER, metrics_state._METER_PROVIDER
    trace._TRACER_PROVIDER_SET_ONCE = Once()
    trace._TRACER_PROVIDER = None
    metrics_state._METER_PROVIDER_SET_ONCE = Once()
    metrics_state._METER_PROVIDER = None
    if tracer_provider is not None:
        trace.set_tracer_provider(tracer_provider)
    if meter_provider is not None:
        metrics.set_meter_provider(meter_provider)
    return before


# What a record's own attributes are; any other is an ``extra`` the host's handler sends as an attribute.
_RECORD_FIELDS = frozenset((*vars(logging.makeLogRecord({})), "message", "asctime"))
_SEVERITIES = ((logging.CRITICAL, SeverityNumber.FATAL), (logging.ERROR, SeverityNumber.ERROR),
               (logging.WARNING, SeverityNumber.WARN), (logging.INFO, SeverityNumber.INFO))


class _HostLogs(logging.Handler):
    """A host's bridge from Python logging to its logger provider, on its root logger, built on the Logs API's
    ``Logger.emit`` as OpenTelemetry now has it (the SDK's own ``LoggingHandler`` is deprecated for the one in
    opentelemetry-instrumentation-logging, which is not installed here): each record's message as the body,
    its extra attributes as attributes, and its exception (``exc_info``) as the SDK records one: its type,
    message and stacktrace. Silent while the suite scans (its own reads log too, as :class:`CapturedText` is
    paused for)."""

    def __init__(self, provider: LoggerProvider, paused_with: CapturedText) -> None:
        super().__init__()
        self.provider, self.paused_with = provider, paused_with

    def emit(self, record: logging.LogRecord) -> None:
        if self.paused_with.paused:
            return
        try:
            severity = next((n for level, n in _SEVERITIES if record.levelno >= level), SeverityNumber.DEBUG)
            extra = {k: v for k, v in vars(record).items() if k not in _RECORD_FIELDS}
            self.provider.get_logger(record.name).emit(
                body=record.getMessage(), severity_number=severity, severity_text=record.levelname,
                attributes=extra, exception=record.exc_info[1] if record.exc_info else None)
        except Exception:
            self.handleError(record)


@contextmanager
def host_telemetry(deployment: Deployment, receiver: CanaryReceiver, *,
                   scrubbed: bool = False) -> Iterator[InMemorySpanExporter]:
    """The host's global providers for the length of the block, and its logger provider's handler on the root
    logger; their spans (over OTLP to ``receiver``, the host's own collector, and in memory), metrics and log
    records become sinks of ``deployment``. ``scrubbed``: the host's span exporters are wrapped in teamstore's
    :class:`ScrubbingSpanExporter`."""
    memory = InMemorySpanExporter()
    wire = OTLPSpanExporter(endpoint=f"{receiver.endpoint}/v1/traces")
    tracer_provider = TracerProvider(resource=Resource.create({"service.name": "host-service"}))
    tracer_provider.add_span_processor(SimpleSpanProcessor(ScrubbingSpanExporter(memory) if scrubbed else memory))
    tracer_provider.add_span_processor(BatchSpanProcessor(ScrubbingSpanExporter(wire) if scrubbed else wire))
    reader = InMemoryMetricReader()
    meter_provider = MeterProvider(metric_readers=[reader])
    logger_provider = LoggerProvider(resource=Resource.create({"service.name": "host-service"}))
    logger_provider.add_log_record_processor(
        BatchLogRecordProcessor(OTLPLogExporter(endpoint=f"{receiver.endpoint}/v1/logs")))
    handler = _HostLogs(logger_provider, deployment.log_records)
    logging.getLogger().addHandler(handler)
    before = _set_globals(tracer_provider, meter_provider)
    deployment.extra_sinks += [
        MemorySpans(HOST_SPANS, memory), OtlpWire(HOST_SPANS, receiver, tracer_provider.force_flush, ("/v1/traces",)),
        OtlpWire(HOST_LOGS, receiver, logger_provider.force_flush, ("/v1/logs",)), MemoryMetrics(reader)]
    try:
        yield memory
    finally:
        logging.getLogger().removeHandler(handler)
        tracer_provider.force_flush()
        _set_globals(*before)
        tracer_provider.shutdown()
        meter_provider.shutdown()
        logger_provider.shutdown()
