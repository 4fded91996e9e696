"""The time axis of the HTML report's charts: every period from the first with runs to the last, and the time
scale a span is drawn at so that each of its periods keeps a legible bar. Pure: nothing here reads the ledger.

    from teamstore.analytics.periods import drawn_scale, periods

    periods(["2026-W52", "2027-W02"], "week")            # ["2026-W52", "2026-W53", "2027-W01", "2027-W02"]
    drawn_scale(["2023-01-01", "2026-12-31"], "day", 104)  # "month": 1,461 days, 210 weeks, 48 months
"""

from __future__ import annotations

from datetime import date, timedelta

from teamstore.audit.cost_groups import bucket, days_of
from teamstore.audit.cost_sql import TIME

MOST_PERIODS = 1_000
"""The most periods a time axis lays out, idle ones included (past it, only those with runs)."""


def first_and_last_day(keys: list[str], every: str) -> tuple[date, date] | None:
    """The first day of the earliest period of ``keys`` (labels of ``every``, as
    :func:`~teamstore.audit.cost_groups.bucket` gives them) and the last day of the latest; ``None`` when there
    are none or they do not read as periods of ``every``."""
    if not keys:
        return None
    try:
        if every == "day":
            return date.fromisoformat(min(keys)), date.fromisoformat(max(keys))
        return days_of(min(keys), every)[0], days_of(max(keys), every)[1] - timedelta(days=1)
    except ValueError:
        return None


def count(first: date, last: date, scale: str) -> int:
    """How many periods of ``scale`` hold the days from ``first`` to ``last``, idle ones included."""
    if scale == "day":
        return (last - first).days + 1
    if scale == "week":
        return ((last - timedelta(days=last.weekday())) - (first - timedelta(days=first.weekday()))).days // 7 + 1
    if scale == "month":
        return (last.year - first.year) * 12 + last.month - first.month + 1
    return last.year - first.year + 1


def drawn_scale(keys: list[str], every: str, most: int) -> str:
    """The time scale the periods ``keys`` of ``every`` are drawn at: ``every`` itself when the span from the
    first to the last is at most ``most`` periods of it, else the first coarser scale (week, month, year) it is
    at most ``most`` of (a year however long the span: the coarsest there is).

    Raises:
        ValueError: ``every`` is not a time scale.
    """
    scales = TIME[TIME.index(every):]
    span = first_and_last_day(keys, every)
    if span is None:
        return every
    return next((scale for scale in scales if count(*span, scale) <= most), scales[-1])


def periods(keys: list[str], every: str) -> list[str] | None:
    """Every period from the first of ``keys`` to the last (``2026-11-02``, ``2026-W45``, ``2026-11`` or
    ``2026``), so a period without runs is an empty place on the axis, not left out; ``None`` when they do not
    read as periods of ``every`` or span more than :data:`MOST_PERIODS`."""
    span = first_and_last_day(keys, every)
    if span is None or count(*span, every) > MOST_PERIODS:
        return None
    first, last = span
    step = timedelta(days=1 if every == "day" else 7 if every == "week" else 28)  # no month or year skipped
    found = list(dict.fromkeys(bucket(first + step * n, every) for n in range((last - first) // step + 1)))
    found = found if found[-1] == bucket(last, every) else [*found, bucket(last, every)]
    return found if set(keys) <= set(found) else None
