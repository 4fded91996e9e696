"""OpenTelemetry metrics: the GenAI client metrics of every metered model call, and the outbox's depth.

    from teamstore.audit.metrics import setup_metrics, MetricsObserver

    provider = setup_metrics(Settings())   # None unless OTEL_EXPORTER_OTLP_(METRICS_)ENDPOINT is set
    observers.append(MetricsObserver(provider))

Per model call (speaker selection included), as the GenAI semantic conventions define them:
``gen_ai.client.operation.duration`` (seconds) and ``gen_ai.client.token.usage`` (one record per token
type, ``input`` and ``output``; none for a failed call, whose usage is unknown), with
``gen_ai.operation.name``, ``gen_ai.provider.name``, ``gen_ai.request.model``, ``gen_ai.response.model``
when the client reports it, ``error.type`` on a failure, and ``teamstore.team``. No attribute names a user,
a session or anything they wrote. The provider is teamstore's own, never the global one (unless asked),
and exports over OTLP (``http/protobuf`` or ``grpc``) every ``OTEL_METRIC_EXPORT_INTERVAL`` milliseconds
(60 s by default) and when it shuts down.
"""

from __future__ import annotations

import logging
import time
import weakref
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime
from typing import Any

from opentelemetry import metrics
from opentelemetry.metrics import CallbackOptions, Meter, MeterProvider, Observation
from opentelemetry.sdk.metrics import MeterProvider as SdkMeterProvider
from opentelemetry.sdk.metrics.export import MetricReader, PeriodicExportingMetricReader
from sqlalchemy import func, select
from sqlalchemy.engine import Engine
from sqlalchemy.exc import SQLAlchemyError

from teamstore.audit.otlp import (
    EXPORT_TIMEOUT_S,
    metric_exporter,
    positive_number,
    refused_settings,
    resource,
)
from teamstore.audit.schema import outbox
from teamstore.audit.telemetry import genai_call_attributes
from teamstore.events import LaterCalls, ModelCall, RunContext, RunOutcome, StreamItem
from teamstore.settings import Settings

log = logging.getLogger(__name__)
METER = "teamstore"
TOKEN_BUCKETS = (1, 4, 16, 64, 256, 1024, 4096, 16384, 65536, 262144, 1048576, 4194304, 16777216, 67108864)
"""``gen_ai.client.token.usage``'s bucket boundaries, as the conventions give them."""
DURATION_BUCKETS = (0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92)
"""``gen_ai.client.operation.duration``'s bucket boundaries (seconds), as the conventions give them."""
QUIET_AFTER_FAILURE_S = 1.0
"""How long after a gauge's failed read the others skip theirs: longer than one collection's reads take."""
_failed_at: weakref.WeakKeyDictionary[Engine, float] = weakref.WeakKeyDictionary()


def setup_metrics(
    settings: Settings, *, readers: Sequence[MetricReader] | None = None, install_global: bool = False
) -> SdkMeterProvider | None:
    """Build teamstore's meter provider, or ``None`` when no OTLP endpoint is configured for metrics.

    Args:
        settings: Read for ``otlp_metrics_configured``.
        readers: Other readers (tests, an in-memory reader); ``None`` for a periodic OTLP exporter.
        install_global: Also make it the global provider. Off by default: a service's own meter provider
            keeps its own metrics, and teamstore's go where teamstore's settings send them.

    Raises:
        ConfigurationError: OTLP is configured over a protocol teamstore cannot export over, or with an
            ``OTEL_METRIC_EXPORT_INTERVAL`` the SDK refuses or a timeout that is no number above 0.
        MissingExtra: OTLP is configured but the exporter package is missing.
    """
    if readers is None:
        if not settings.otlp_metrics_configured:
            return None
        # The interval comes from OTEL_METRIC_EXPORT_INTERVAL (the reader reads it); an export gets the
        # exporters' short deadline unless OTEL_METRIC_EXPORT_TIMEOUT says otherwise.
        timeout = positive_number("OTEL_METRIC_EXPORT_TIMEOUT", "milliseconds") or EXPORT_TIMEOUT_S * 1000
        exporter = metric_exporter()
        try:
            readers = [PeriodicExportingMetricReader(exporter, export_timeout_millis=timeout)]
        except ValueError as exc:  # an interval the SDK read from OTEL_METRIC_EXPORT_INTERVAL and will not take
            raise refused_settings("metric reader", ("OTEL_METRIC_EXPORT_INTERVAL",), "milliseconds above 0", exc) from None
    provider = SdkMeterProvider(metric_readers=list(readers), resource=resource())
    if install_global:
        metrics.set_meter_provider(provider)
    return provider


def call_attributes(call: ModelCall, team: str) -> dict[str, Any]:
    """The GenAI client metrics' attributes of one call: no user, session or content."""
    return {**genai_call_attributes(call), "teamstore.team": team}


class MetricsObserver:
    """Records the GenAI client metrics of a run's model calls when the run ends, and of the calls made for it
    later (the memory writer's).

    Args:
        meter_provider: teamstore's provider (:func:`setup_metrics`).
    """

    def __init__(self, meter_provider: MeterProvider) -> None:
        meter = meter_provider.get_meter(METER)
        self.duration = meter.create_histogram(
            "gen_ai.client.operation.duration", unit="s", description="GenAI operation duration.",
            explicit_bucket_boundaries_advisory=DURATION_BUCKETS,
        )
        self.tokens = meter.create_histogram(
            "gen_ai.client.token.usage", unit="{token}", description="Number of input and output tokens used.",
            explicit_bucket_boundaries_advisory=TOKEN_BUCKETS,
        )

    async def run_started(self, ctx: RunContext) -> None:
        """Nothing before the run."""

    async def on_item(self, ctx: RunContext, item: StreamItem) -> None:
        """Metrics come from the metered calls, not the stream."""

    async def run_finished(self, ctx: RunContext, outcome: RunOutcome) -> None:
        """Record each call's duration, and its tokens when they are known (a fenced user's too: nothing in a
        metric identifies anyone)."""
        self._record(ctx, outcome.model_calls)

    async def later_calls(self, ctx: RunContext, later: LaterCalls) -> None:
        """The memory writer's calls, recorded as the run's are: every model call counts."""
        self._record(ctx, later.calls)

    def _record(self, ctx: RunContext, calls: Sequence[ModelCall]) -> None:
        for call in calls:
            attributes = call_attributes(call, ctx.team)
            self.duration.record(call.duration_s, attributes)
            if call.usage_known:  # a call of unknown usage has no tokens to record, not 0
                self.tokens.record(call.input_tokens, {**attributes, "gen_ai.token.type": "input"})
                self.tokens.record(call.output_tokens, {**attributes, "gen_ai.token.type": "output"})


def observe_outbox(meter: Meter, reader: Engine) -> None:
    """Report the transcript outbox as gauges read from the database at each collection: how many
    transcripts wait (``teamstore.outbox.depth``) and how long the oldest has waited
    (``teamstore.outbox.oldest_age``, seconds). One small query each; every worker reports the same
    database-wide value (aggregate with max, not sum)."""

    def read() -> tuple[int, datetime | None]:
        query = select(func.count(), func.min(outbox.c.created_at)).where(outbox.c.body.is_not(None))
        with reader.connect() as conn:
            count, oldest = conn.execute(query).one()
        return int(count or 0), oldest

    def depth(_options: CallbackOptions) -> Iterable[Observation]:
        found = read_quietly(read, "outbox depth", reader)
        return [] if found is None else [Observation(found[0])]

    def oldest_age(_options: CallbackOptions) -> Iterable[Observation]:
        found = read_quietly(read, "outbox age", reader)
        if found is None:
            return []
        oldest = found[1]
        if oldest is None:
            return [Observation(0.0)]
        oldest = oldest if oldest.tzinfo else oldest.replace(tzinfo=UTC)
        return [Observation(max(0.0, (datetime.now(UTC) - oldest).total_seconds()))]

    meter.create_observable_gauge("teamstore.outbox.depth", [depth], unit="{transcript}",
                                  description="Transcripts waiting in the outbox for their store.")
    meter.create_observable_gauge("teamstore.outbox.oldest_age", [oldest_age], unit="s",
                                  description="How long the oldest transcript in the outbox has waited.")


def read_quietly(read: Any, what: str, reader: Engine) -> Any:
    """``read()``, or ``None`` when the database does not answer: a collection reports what it can, and
    the failure is logged (without the statement's values), never raised into the metrics reader.

    Once a read through ``reader`` has failed, the reads that follow within :data:`QUIET_AFTER_FAILURE_S` (the
    rest of that collection's gauges) are not tried: each would wait for the same database, and log the same
    failure again (five warnings ahead of a command's own error saying the database is down).
    """
    failed = _failed_at.get(reader)
    if failed is not None and time.monotonic() - failed < QUIET_AFTER_FAILURE_S:
        return None
    try:
        found = read()
    except SQLAlchemyError as exc:
        _failed_at[reader] = time.monotonic()
        log.warning("metrics: could not read the %s from the database: %s; the database gauges report nothing "
                    "this collection", what, type(exc).__name__)
        return None
    _failed_at.pop(reader, None)
    return found
