"""A cost group's labels: the day, week, month or year a ledger day falls in, the days of a week, month or year, the columns
a group is shown in, and a group's pseudonymous values. Pure: nothing here reads the ledger.

    from teamstore.audit.cost_groups import bucket, days_of

    bucket("2026-11-30", "week")      # "2026-W49"
    days_of("2026-11", "month")       # (date(2026, 11, 1), date(2026, 12, 1))
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import date, timedelta
from typing import Any

from teamstore.audit.cost_sql import DIMENSIONS, ERASED, TIME


def as_date(day: Any) -> date:
    """A ledger ``day`` as a date (SQLite hands back its text)."""
    return day if isinstance(day, date) else date.fromisoformat(str(day))


def bucket(day: Any, scale: str) -> str:
    """The label of the ``day``, ``week`` (ISO, ``2026-W48``), ``month`` (``2026-11``) or ``year`` (``2026``)
    holding ``day``."""
    found = as_date(day)
    if scale == "week":
        year, week, _ = found.isocalendar()
        return f"{year}-W{week:02d}"
    if scale == "year":
        return str(found.year)
    return f"{found.year}-{found.month:02d}" if scale == "month" else found.isoformat()


def days_of(label: str, scale: str) -> tuple[date, date]:
    """The first day of the ``week``, ``month`` or ``year`` whose :func:`bucket` label is ``label``, and the day
    after its last."""
    if scale == "week":
        year, week = label.split("-W")
        first = date.fromisocalendar(int(year), int(week), 1)
        return first, first + timedelta(days=7)
    if scale == "year":
        return date(int(label), 1, 1), date(int(label) + 1, 1, 1)
    first = date.fromisoformat(f"{label}-01")
    return first, (first + timedelta(days=31)).replace(day=1)


def dim_value(dim: str, values: dict[str, Any]) -> tuple[Any, ...]:
    """The value of the group ``dim`` a ledger row of ``values`` falls in (a week or month as its label)."""
    if dim in TIME:
        return (bucket(values["day"], dim),)
    return tuple([values[c] for c in DIMENSIONS[dim]])  # a list first: a generator costs more, once per row


def group_fields(dims: Sequence[str], readable: bool = False) -> tuple[str, ...]:
    """The columns a group of ``dims`` is shown in: a session as ``user`` and ``session`` when readable,
    else ``session_key``; a user as ``user`` or ``subject_key``; any other dimension under its name."""
    names: list[str] = []
    for dim in dims:
        if dim == "session":
            names += ["user", "session"] if readable else ["session_key"]
        elif dim == "user":
            names.append("user" if readable else "subject_key")
        else:
            names.append(dim)
    return tuple(dict.fromkeys(names))


def pseudonymous_group(dims: Sequence[str], raw: tuple[tuple[Any, ...], ...]) -> dict[str, str]:
    """The group's columns with users and sessions as keys (``erased`` once de-linked)."""
    group: dict[str, str] = {}
    for dim, values in zip(dims, raw, strict=True):
        if dim == "session":
            group["session_key"] = str(values[0])
        elif dim == "user":
            group["subject_key"] = ERASED if values[0] is None else str(values[0])
        elif dim == "version":
            group["version"] = f"{values[0]}@{values[1]}"
        else:
            group[dim] = str(values[0])
    return group
