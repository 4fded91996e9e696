"""Erasure requests as OpenTelemetry gauges, read from the database at each collection.

    from teamstore.erasure.metrics import observe_erasures

    observe_erasures(meter_provider.get_meter("teamstore"), create_reader(engine))

``teamstore.erasure.requests`` counts requests by ``teamstore.erasure.status`` (``open``, ``completed``,
``failed``, ``retained_under_hold``); ``teamstore.erasure.requests.overdue`` counts those not completed
whose deadline (``due_at``) has passed: the figure to alert on. Requests carry no user id into a metric.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC, datetime
from typing import Any

from opentelemetry.metrics import CallbackOptions, Meter, Observation
from sqlalchemy import Select, func, select
from sqlalchemy.engine import Engine

from teamstore.audit.metrics import read_quietly
from teamstore.erasure.receipt import RequestStatus
from teamstore.erasure.schema import erasure_requests

STATUSES = (RequestStatus.OPEN, RequestStatus.COMPLETED, RequestStatus.FAILED, RequestStatus.RETAINED_UNDER_HOLD)
"""Every status a stored request can have (a dry run stores none); each is reported, 0 included."""


def observe_erasures(meter: Meter, reader: Engine) -> None:
    """Register the two erasure gauges on ``meter``; each collection runs one small query per gauge."""

    def by_status(_options: CallbackOptions) -> Iterable[Observation]:
        query = select(erasure_requests.c.status, func.count()).group_by(erasure_requests.c.status)
        found = read_quietly(lambda: _rows(reader, query), "erasure requests")
        if found is None:
            return []
        counts = {str(status): int(count) for status, count in found}
        return [Observation(counts.get(str(s), 0), {"teamstore.erasure.status": str(s)}) for s in STATUSES]

    def overdue(_options: CallbackOptions) -> Iterable[Observation]:
        query = select(func.count()).where(
            erasure_requests.c.status != str(RequestStatus.COMPLETED), erasure_requests.c.due_at < datetime.now(UTC)
        )
        found = read_quietly(lambda: _rows(reader, query), "overdue erasure requests")
        return [] if found is None else [Observation(int(found[0][0] or 0))]

    meter.create_observable_gauge("teamstore.erasure.requests", [by_status], unit="{request}",
                                  description="Erasure requests by status.")
    meter.create_observable_gauge("teamstore.erasure.requests.overdue", [overdue], unit="{request}",
                                  description="Erasure requests not completed whose deadline has passed.")


def _rows(reader: Engine, query: Select[Any]) -> list[tuple[Any, ...]]:
    with reader.connect() as conn:
        return [tuple(row) for row in conn.execute(query)]
