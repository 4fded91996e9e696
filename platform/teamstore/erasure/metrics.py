"""Erasure requests as OpenTelemetry gauges, read from the database at each collection.

    from teamstore.erasure.metrics import observe_erasures

    observe_erasures(meter_provider.get_meter("teamstore"), create_reader(engine))

``teamstore.erasure.requests`` counts the requests still standing by ``teamstore.erasure.status`` (``open``,
``failed``, ``retained_under_hold``); ``teamstore.erasure.requests.overdue`` counts the overdue ones (open
or failed past their due date in force: :func:`teamstore.erasure.desk.is_overdue`): the figure to alert on;
``teamstore.erasure.requests.completed`` counts those finished in the last day. Requests carry no user id into
a metric.

Each reads the requests of a few statuses through ``ix_ts_erasure_requests_status`` (migration 0020): every
request ever made stays in the table, and counting them all at each collection read all of them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from datetime import timedelta
from typing import Any

from opentelemetry.metrics import CallbackOptions, Meter, Observation
from sqlalchemy import Select, func, select
from sqlalchemy.engine import Engine

from teamstore.audit.metrics import read_quietly
from teamstore.db.clock import shared_now
from teamstore.erasure.desk import overdue_clause
from teamstore.erasure.receipt import FINISHED, RequestStatus
from teamstore.erasure.schema import erasure_requests

STATUSES = (RequestStatus.OPEN, RequestStatus.FAILED, RequestStatus.RETAINED_UNDER_HOLD)
"""The statuses of a request still standing; each is reported, 0 included. Finished ones (``completed``,
``no_match``) are counted over the last :data:`COMPLETED_WITHIN` only: they grow with every request ever made."""

COMPLETED_WITHIN = timedelta(days=1)


def standing_query() -> Select[Any]:
    """The requests still standing, counted by status."""
    r = erasure_requests.c
    return select(r.status, func.count()).where(r.status.in_([str(s) for s in STATUSES])).group_by(r.status)


def overdue_query(now: Any) -> Select[Any]:
    """The open and failed requests whose deadline in force (as ``erasure list`` shows it) was before ``now``."""
    return select(func.count()).select_from(erasure_requests).where(overdue_clause(now))


def completed_query(now: Any) -> Select[Any]:
    """The requests that finished in the :data:`COMPLETED_WITHIN` before ``now``."""
    r = erasure_requests.c
    return select(func.count()).where(r.status.in_([str(s) for s in FINISHED]), r.completed_at >= now - COMPLETED_WITHIN)


def observe_erasures(meter: Meter, reader: Engine) -> None:
    """Register the erasure gauges on ``meter``; each collection runs one small query per gauge."""

    def by_status(_options: CallbackOptions) -> Iterable[Observation]:
        found = read_quietly(lambda: _rows(reader, standing_query()), "erasure requests", reader)
        if found is None:
            return []
        counts = {str(status): int(count) for status, count in found}
        return [Observation(counts.get(str(s), 0), {"teamstore.erasure.status": str(s)}) for s in STATUSES]

    def count(query: Callable[[Any], Select[Any]], what: str) -> Callable[[CallbackOptions], list[Observation]]:
        def observe(_options: CallbackOptions) -> list[Observation]:
            # On the clock requests are received and fall due on (Postgres: the server's), not this host's.
            found = read_quietly(lambda: _rows(reader, query(shared_now(reader.dialect.name))), what, reader)
            return [] if found is None else [Observation(int(found[0][0] or 0))]
        return observe

    meter.create_observable_gauge("teamstore.erasure.requests", [by_status], unit="{request}",
                                  description="Erasure requests still standing, by status.")
    meter.create_observable_gauge("teamstore.erasure.requests.overdue",
                                  [count(overdue_query, "overdue erasure requests")], unit="{request}",
                                  description="Open and failed erasure requests whose deadline has passed.")
    meter.create_observable_gauge("teamstore.erasure.requests.completed",
                                  [count(completed_query, "completed erasure requests")], unit="{request}",
                                  description="Erasure requests finished in the last day.")


def _rows(reader: Engine, query: Select[Any]) -> list[tuple[Any, ...]]:
    with reader.connect() as conn:
        return [tuple(row) for row in conn.execute(query)]
