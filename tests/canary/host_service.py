"""A host service in this process, as a FastAPI app that embeds teamstore is: its own global OpenTelemetry
tracer and meter providers (exporting to a real OTLP receiver and kept in memory), and a Platform whose
sessions it runs.

    with host_telemetry(deployment, host_receiver):  # adds the host's spans and metrics to the sinks
        async with open_platform() as platform:
            ...
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from opentelemetry import metrics, trace
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.metrics import _internal as metrics_state
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.util._once import Once

from tests.canary.deployment import Deployment
from tests.canary.receiver import CanaryReceiver
from tests.canary.sinks import HOST_SPANS, MemoryMetrics, MemorySpans, OtlpWire


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


@contextmanager
def host_telemetry(deployment: Deployment, receiver: CanaryReceiver) -> Iterator[InMemorySpanExporter]:
    """The host's global providers for the length of the block; their spans (over OTLP to ``receiver``, the
    host's own collector, and in memory) and metrics become sinks of ``deployment``."""
    memory = InMemorySpanExporter()
    tracer_provider = TracerProvider(resource=Resource.create({"service.name": "host-service"}))
    tracer_provider.add_span_processor(SimpleSpanProcessor(memory))
    tracer_provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=f"{receiver.endpoint}/v1/traces")))
    reader = InMemoryMetricReader()
    meter_provider = MeterProvider(metric_readers=[reader])
    before = _set_globals(tracer_provider, meter_provider)
    deployment.extra_sinks += [MemorySpans(HOST_SPANS, memory), OtlpWire(HOST_SPANS, receiver, tracer_provider.force_flush),
                              MemoryMetrics(reader)]
    try:
        yield memory
    finally:
        tracer_provider.force_flush()
        _set_globals(*before)
        tracer_provider.shutdown()
        meter_provider.shutdown()
