"""The SQL of the cost reports, built and not run: filters, the ledger's token sums and run counts per group,
and the order of a report's groups by their keys. :mod:`teamstore.audit.cost` runs them.

    from teamstore.audit.cost_sql import CostFilter, group_rows

    groups = group_rows(("team",), CostFilter(team="support"), usage, usage.c.day)
    query = select(groups).order_by(*key_order("sqlite", ("team",), groups), groups.c.kind)

Each dimension names the ledger columns it groups by (:data:`DIMENSIONS`); a week, a month or a year groups
the days it holds.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import (
    ColumnElement,
    FromClause,
    Select,
    Subquery,
    and_,
    case,
    func,
    literal,
    literal_column,
    null,
    select,
    union_all,
)

from teamstore.audit.price_periods import PricePeriods
from teamstore.audit.schema import usage

DIMENSIONS: dict[str, tuple[str, ...]] = {
    "session": ("session_key", "subject_key"),  # a session's user comes with it, for readable reports
    "user": ("subject_key",),
    "team": ("team",),
    "version": ("team", "team_version"),
    "model": ("model",),
    "agent": ("agent",),
    "purpose": ("purpose",),  # agent, speaker_selection, memory_writer: what each kind of call costs
    "day": ("day",),
    "week": ("day",),
    "month": ("day",),
    "year": ("day",),
}
"""Each dimension and the ledger columns it groups by."""
TIME = ("day", "week", "month", "year")
SPANS = ("week", "month", "year")
"""The time scales whose groups span several days."""
ERASED = "erased"
"""How a user reads once erasure has de-linked the ledger rows (each of their sessions reads as ``erased-``
and the start of its key: :func:`teamstore.analytics.names.erased_session`)."""
TOKENS, RUNS = 0, 1
"""The two kinds of row :func:`group_rows` gives: a group's token sums, its run counts."""


@dataclass(frozen=True)
class CostFilter:
    """Which ledger rows a query covers; ``None`` means any."""

    session_key: str | None = None
    subject_key: str | None = None
    team: str | None = None
    model: str | None = None
    since: datetime | None = None
    until: datetime | None = None

    def clauses(self, dates: bool = True) -> list[ColumnElement[bool]]:
        """SQL conditions for the set fields (without the time window unless ``dates``)."""
        pairs = [
            (self.session_key, usage.c.session_key),
            (self.subject_key, usage.c.subject_key),
            (self.team, usage.c.team),
            (self.model, usage.c.model),
        ]
        found: list[ColumnElement[bool]] = [col == value for value, col in pairs if value is not None]
        if dates and self.since is not None:
            found.append(usage.c.started_at >= _as_utc(self.since))
        if dates and self.until is not None:
            found.append(usage.c.started_at < _as_utc(self.until))
        return found


def _as_utc(moment: datetime) -> datetime:
    """The same instant in UTC (a naive time is taken as UTC): SQLite compares the wall-clock text it
    stores, and every stored time is UTC, so an offset like +02:00 must be applied before comparing."""
    return moment.astimezone(UTC) if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


def filtered(query: Select[Any], where: CostFilter) -> Select[Any]:
    """``query`` restricted to the ledger rows ``where`` picks."""
    clauses = where.clauses()
    return query.where(and_(*clauses)) if clauses else query


def columns(dims: Sequence[str], *extra: str) -> list[str]:
    """The ledger columns of ``dims``, then ``extra``, each once."""
    return list(dict.fromkeys([c for d in dims for c in DIMENSIONS[d]] + list(extra)))


def run_counts(names: list[str], where: CostFilter) -> Select[Any]:
    """Distinct runs per group of the ledger columns ``names`` (``runs``), then how many of them were
    interrupted (``interrupted``: continued or abandoned from a checkpoint)."""
    cols = [usage.c[n] for n in names]
    interrupted = func.count(func.distinct(case((usage.c.interruptions > 0, usage.c.run_id))))
    query = select(*cols, func.count(func.distinct(usage.c.run_id)).label("runs"), interrupted.label("interrupted"))
    return filtered(query, where).group_by(*cols)


def price_period(periods: PricePeriods | None) -> tuple[FromClause, ColumnElement[Any]]:
    """The ledger joined to the price ``periods``, and the first day of the price in force for a row's model
    on the row's day (``NULL`` before the model's first entry, or for a model the table does not price).
    Tokens summed by it are priced as the rows' days would price them, one sum per price instead of one per
    day."""
    if periods is None:
        return usage, null()
    return usage.outerjoin(periods.table, periods.matches), periods.first


def token_sums(dims: Sequence[str], where: CostFilter, ledger: FromClause,
               period: ColumnElement[Any]) -> tuple[Select[Any], list[str]]:
    """The ledger's tokens summed per group of ``dims``, model, price day and whether a limit ended the run: a
    report's time dimension sums them per day, any other per price ``period`` of the joined ``ledger`` (a few
    rows per group and model, however many days its runs span). Returns the query (its sums named ``calls``,
    ``input_tokens``, ``output_tokens``, then ``failed_calls``: its calls of unknown usage) and its group's
    columns."""
    token_cols = columns(dims, "model", "day", "ended_by_limit")
    day = usage.c.day if set(TIME) & set(dims) else period
    # A subquery, so that GROUP BY names the period's column, not the expression that finds it.
    picked = [usage.c[n] for n in token_cols if n != "day"]
    rows = filtered(select(*picked, day.label("day"), usage.c.calls, usage.c.input_tokens,
                           usage.c.output_tokens, usage.c.failed_calls).select_from(ledger), where).subquery()
    cols = [rows.c[n] for n in token_cols]
    sums = [func.sum(rows.c[n]).label(n) for n in ("calls", "input_tokens", "output_tokens", "failed_calls")]
    return select(*cols, *sums).group_by(*cols), token_cols


def group_rows(dims: Sequence[str], where: CostFilter, ledger: FromClause, period: ColumnElement[Any]) -> Subquery:
    """Every group's token sums and run counts as the rows of one table, so that one ordered read brings each
    group's rows together: the group's ledger columns (:func:`columns`), ``kind`` (:data:`TOKENS` or
    :data:`RUNS`), then ``priced_model``, ``price_day``, ``limited``, ``failed``, ``a``, ``b``, ``c``, ``d``: a
    token row's model, price day, whether a limit ended its runs, and calls, input and output tokens, and calls of
    unknown usage; a run row's ended-by-limit and failed, then runs and interrupted runs."""
    group = columns(dims)
    tokens = token_sums(dims, where, ledger, period)[0].subquery()
    runs = run_counts(columns(dims, "ended_by_limit", "run_failed"), where).subquery()
    return union_all(
        select(*(tokens.c[n] for n in group), literal_column(str(TOKENS)).label("kind"),
               tokens.c.model.label("priced_model"), tokens.c.day.label("price_day"),
               tokens.c.ended_by_limit.label("limited"), null().label("failed"), tokens.c.calls.label("a"),
               tokens.c.input_tokens.label("b"), tokens.c.output_tokens.label("c"),
               tokens.c.failed_calls.label("d")),
        select(*(runs.c[n] for n in group), literal_column(str(RUNS)), null(), null(), runs.c.ended_by_limit,
               runs.c.run_failed, runs.c.runs, runs.c.interrupted, null(), null()),
    ).subquery("groups")


Label = tuple[str, ColumnElement[Any]]
"""A column of a group as the report shows it, and the SQL that gives its text."""


def key_labels(dim: str, groups: FromClause) -> list[Label]:
    """The SQL of a dimension's columns as a pseudonymous report shows them (:func:`pseudonymous_group`);
    empty for a time scale, ordered by :func:`period_start` instead."""
    c = groups.c
    if dim == "session":
        return [("session_key", c.session_key)]
    if dim == "user":
        return [("subject_key", func.coalesce(c.subject_key, literal(ERASED)))]
    if dim == "version":
        return [("version", c.team + literal("@") + c.team_version)]
    return [] if dim in TIME else [(dim, c[dim])]


def period_start(dialect: str, dim: str, day: ColumnElement[Any]) -> ColumnElement[Any]:
    """The first day of the ``day``, ``week`` (ISO: Mondays), ``month`` or ``year`` holding ``day``: in the order
    of their labels (``2026-W48``, ``2026-11``, ``2026``)."""
    if dim == "day":
        return day
    if dialect == "postgresql":
        return func.date_trunc(literal_column(f"'{dim}'"), day)
    # SQLite holds days as ISO text: to the next Sunday (the day itself if one), back six; or the month's or
    # the year's text.
    if dim == "week":
        return func.date(day, literal_column("'weekday 0'"), literal_column("'-6 days'"))
    return func.substr(day, 1, 7 if dim == "month" else 4)


def key_order(dialect: str, dims: Sequence[str], groups: FromClause,
              labels: Callable[[str, FromClause], list[Label]] = key_labels) -> list[ColumnElement[Any]]:
    """ORDER BY terms that put the groups in the order of their keys (their columns' text joined by
    ``" / "``), as Python sorts the keys: by code point (``COLLATE "C"`` on Postgres).

    Text columns are ordered as their joined text; a time scale, whose labels all have one length, by its
    first day. ``labels`` gives each dimension's text columns (a readable report's names)."""
    parts: dict[str, ColumnElement[Any] | None] = {}
    for dim in dims:
        shown: list[tuple[str, ColumnElement[Any] | None]] = [*labels(dim, groups)] or [(dim, None)]
        for name, label in shown:
            parts.setdefault(name, label)  # a column once, where it is first shown (a session's user)
    terms: list[ColumnElement[Any]] = []
    text: ColumnElement[Any] | None = None
    for index, (name, expr) in enumerate(parts.items()):
        if expr is None:
            if text is not None:
                terms.append(_collated(dialect, text))
                text = None
            terms.append(period_start(dialect, name, groups.c.day))
            continue
        piece = expr + literal(" / ") if index < len(parts) - 1 else expr
        text = piece if text is None else text + piece
    if text is not None:
        terms.append(_collated(dialect, text))
    return terms


def _collated(dialect: str, text: ColumnElement[Any]) -> ColumnElement[Any]:
    # SQLite compares text by its UTF-8 bytes (code point order) already; Postgres by the database's locale.
    return text.collate("C") if dialect == "postgresql" else text


def group_count(dialect: str, dims: Sequence[str], where: CostFilter) -> Select[Any]:
    """How many groups of ``dims`` the ledger rows ``where`` picks make."""
    cols: list[ColumnElement[Any]] = [usage.c[n] for n in columns([d for d in dims if d not in TIME])]
    cols += [period_start(dialect, d, usage.c.day).label(d) for d in dims if d in TIME]
    return select(func.count()).select_from(filtered(select(*cols), where).group_by(*cols).subquery())
