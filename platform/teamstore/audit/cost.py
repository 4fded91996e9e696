"""Cost grouped by one or two dimensions (session, user, team, version, model, agent, purpose, day, week,
month, year), derived from the ledger at query time, in exact decimals.

    from teamstore.audit.cost import CostFilter, query_costs

    report = await query_costs(engine, load_prices(), by="team,model", where=CostFilter(since=start))
    for row in report.rows:
        print(row.group, row.runs_completed, row.runs_limited, row.runs_interrupted, row.cost, report.price_version)

Tokens are summed in SQL (using the ledger's indexes when a filter names a session, user or team) per group,
model and price period: the days on which one price of the model was in force (a run belongs to the day it
started). Python then prices those sums exactly, so a price change mid-group is honoured and the rows read
are groups x models x prices, however many runs and days there are; weeks, months and years are rolled up
from days. A model missing from the price table leaves
its tokens counted and its cost unknown (``unpriced_tokens``); every report names the price version it
used. Users and sessions are pseudonymous keys here: :mod:`teamstore.analytics` reads them as the
application's ids.
"""

from __future__ import annotations

import difflib
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from datetime import date
from decimal import Decimal
from typing import Any, ClassVar, Protocol

from sqlalchemy import ColumnElement, FromClause, Select, Subquery, and_, false, or_, select
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from teamstore.audit.cost_groups import as_date, days_of, dim_value, group_fields, pseudonymous_group
from teamstore.audit.cost_sql import (
    DIMENSIONS,
    ERASED,
    RUNS,
    SPANS,
    TIME,
    CostFilter,
    Label,
    columns,
    filtered,
    group_count,
    group_rows,
    key_labels,
    key_order,
    price_period,
    run_counts,
    token_sums,
)
from teamstore.audit.price_periods import price_periods
from teamstore.audit.prices import PriceTable
from teamstore.audit.schema import usage
from teamstore.db.snapshot import reading
from teamstore.errors import ConfigurationError, MissingExtra

__all__ = ["DIMENSIONS", "ERASED", "TIME", "CostFilter", "CostReport", "CostRow", "CostStream", "price_period",
           "query_costs"]
MAX_DIMENSIONS = 2


def parse_by(by: str | Sequence[str]) -> tuple[str, ...]:
    """The dimensions of ``by``: one name, ``"team,model"``, or a sequence of names.

    Raises:
        ConfigurationError: An unknown or repeated dimension, more than two, or two times (day and week).
    """
    names = tuple(n.strip() for n in (by.split(",") if isinstance(by, str) else by) if n.strip())
    unknown = [n for n in names if n not in DIMENSIONS]
    if unknown or not names:
        near = [m for n in unknown for m in difflib.get_close_matches(n, DIMENSIONS, n=1)]
        raise ConfigurationError(f"cannot group costs by {','.join(unknown) or 'nothing'!r}",
                                 hint=(f"did you mean {' and '.join(map(repr, near))}? " if near else "")
                                 + f"use one or two of {', '.join(DIMENSIONS)}, e.g. --by team,model")
    if len(names) > MAX_DIMENSIONS or len(set(names)) < len(names):
        raise ConfigurationError(f"cannot group costs by {','.join(names)!r}",
                                 hint="give one dimension or two different ones, e.g. --by team,model")
    if sum(n in TIME for n in names) > 1:
        raise ConfigurationError(f"cannot group costs by {','.join(names)!r}: two time scales",
                                 hint="use one of day, week, month or year")
    return names


@dataclass(slots=True)  # a full listing holds one per group: hundreds of thousands
class CostRow:
    """One group of the report (or its total).

    Attributes:
        key: The group's values joined for display (``support_triage / gpt-4o``); ``total`` for the total.
        group: Each column of the group and its value: ``{"team": ..., "model": ...}``; a session reads
            as ``user`` and ``session`` in a readable report, ``session_key`` in a pseudonymous one.
        cost: Exact, in the report's currency; ``None`` when none of the tokens has a price.
        limited_cost: The part of ``cost`` spent in runs ended by a limit (``None`` when ``cost`` is).
        limited_unpriced_tokens: Of ``unpriced_tokens``, those spent in runs ended by a limit: when any, the
            limited cost is ``limited_cost`` plus an unknown part.
        raw: The ledger's values per dimension (keys, not ids), for the readable names.
    """

    key: str
    group: dict[str, str] = field(default_factory=dict)
    runs_completed: int = 0
    runs_limited: int = 0
    runs_failed: int = 0
    runs_interrupted: int = 0
    """Runs continued (or abandoned) after they stopped mid-run; each also counts as it ended."""
    calls: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cost: Decimal | None = None
    limited_cost: Decimal | None = None
    unpriced_tokens: int = 0
    unpriced_models: list[str] = field(default_factory=list)
    limited_unpriced_tokens: int = 0
    raw: tuple[tuple[Any, ...], ...] = field(default=(), repr=False, compare=False)

    FIGURES: ClassVar[tuple[str, ...]] = (
        "runs_completed", "runs_limited", "runs_failed", "runs_interrupted", "calls", "input_tokens", "output_tokens", "cost",
        "limited_cost", "unpriced_tokens", "unpriced_models", "limited_unpriced_tokens")

    @property
    def runs(self) -> int:
        """Every run of the group: completed, ended by a limit, or failed."""
        return self.runs_completed + self.runs_limited + self.runs_failed

    @property
    def tokens(self) -> int:
        """Input and output tokens."""
        return self.input_tokens + self.output_tokens

    def figures(self) -> dict[str, Any]:
        """The row's figures, money as exact decimal text (JSON and CSV carry these)."""
        found: dict[str, Any] = {name: getattr(self, name) for name in self.FIGURES}
        found.update(cost=money(self.cost), limited_cost=money(self.limited_cost),
                     unpriced_models=list(self.unpriced_models))
        return found


def money(value: Decimal | None) -> str | None:
    """An exact amount as plain decimal text (``0.000075``, never ``7.5E-5``); ``None`` stays ``None``."""
    if value is None:
        return None
    text = format(value, "f")
    return text.rstrip("0").rstrip(".") if "." in text else text


@dataclass
class CostReport:
    """A cost report: its rows, its total and the prices it used.

    Attributes:
        by: The dimensions, comma-separated as given (``team,model``).
        fields: The group's columns, in order (a readable session is two: ``user``, ``session``).
        readable: Users and sessions read as the application's ids (else pseudonymous keys).
        groups: How many groups matched (more than ``rows`` when ``top`` cut the list).
        top: The ``--top`` the rows were cut to, if any; the total always counts every group.
        filters: The filters as given, for the reader (ids only in a readable report).
    """

    by: str
    price_version: str
    currency: str
    rows: list[CostRow]
    total: CostRow
    fields: tuple[str, ...] = ()
    readable: bool = False
    groups: int = 0
    top: int | None = None
    filters: dict[str, str] = field(default_factory=dict)

    def to_pandas(self) -> Any:
        """The rows as a pandas DataFrame: the group's columns, then the figures (money as exact
        :class:`~decimal.Decimal`; ``.astype(float)`` to plot). The total is not a row of it.

        Raises:
            MissingExtra: pandas is not installed (``pip install 'teamstore[analytics]'``).
        """
        try:
            import pandas
        except ImportError as exc:
            raise MissingExtra("a DataFrame of a cost report", "analytics", "pandas") from exc
        figures = list(CostRow.FIGURES)
        records = [[*(r.group.get(f) for f in self.fields), *(getattr(r, f) for f in figures)] for r in self.rows]
        return pandas.DataFrame(records, columns=[*self.fields, *figures])

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dictionary: each row its group's columns, ``key`` and figures; money as strings."""
        return {
            "by": self.by, "fields": list(self.fields), "readable": self.readable,
            "price_version": self.price_version, "currency": self.currency,
            "groups": self.groups, "top": self.top, "filters": dict(self.filters),
            "rows": [{**r.group, "key": r.key, **r.figures()} for r in self.rows],
            "total": {"key": self.total.key, **self.total.figures()},
        }


async def _run_groups(conn: AsyncConnection, names: list[str], where: CostFilter,
                      among: ColumnElement[bool] | None = None) -> list[Any]:
    """:func:`~teamstore.audit.cost_sql.run_counts` of the groups ``among`` picks, if given."""
    query = run_counts(names, where)
    return list((await conn.execute(query if among is None else query.where(among))).all())


class _Rows:
    """The report's groups being summed: each group by its raw values, and the total."""

    def __init__(self, dims: Sequence[str], prices: PriceTable) -> None:
        self.dims, self.prices = tuple(dims), prices
        self.groups: dict[tuple[tuple[Any, ...], ...], CostRow] = {}
        self.total = CostRow(key="total")

    def raw(self, values: dict[str, Any]) -> tuple[tuple[Any, ...], ...]:
        """The group of a ledger record's ``values``."""
        return tuple([dim_value(d, values) for d in self.dims])

    def keep(self, top: int) -> None:
        """Forget all but the ``top`` costliest groups."""
        self.groups = dict(sorted(self.groups.items(), key=lambda item: costliest(item[1]))[:top])

    def matches(self, raw: tuple[tuple[Any, ...], ...]) -> ColumnElement[bool]:
        """The ledger rows of the group ``raw`` (a week, a month or a year as the range of its days)."""
        clauses = []
        for dim, values in zip(self.dims, raw, strict=True):
            if dim in SPANS:
                first, after = days_of(values[0], dim)
                clauses += [usage.c.day >= first, usage.c.day < after]
                continue
            for name, value in zip(DIMENSIONS[dim], values, strict=True):
                column = usage.c[name]
                value = as_date(value) if dim == "day" else value
                clauses.append(column.is_(None) if value is None else column == value)
        return and_(*clauses)

    def row(self, values: dict[str, Any]) -> CostRow:
        raw = self.raw(values)
        if raw not in self.groups:
            group = pseudonymous_group(self.dims, raw)
            self.groups[raw] = CostRow(key=" / ".join(group.values()), group=group, raw=raw)
        return self.groups[raw]

    def add_tokens(self, values: dict[str, Any], sums: tuple[Any, Any, Any]) -> None:
        calls, tokens_in, tokens_out = (int(v or 0) for v in sums)
        price = self.prices.lookup(values["model"], as_date(values["day"]))
        amount = None if price is None else price.cost(tokens_in, tokens_out)
        for row in (self.row(values), self.total):
            row.calls += calls
            row.input_tokens += tokens_in
            row.output_tokens += tokens_out
            if amount is None:
                row.unpriced_tokens += tokens_in + tokens_out
                if values["ended_by_limit"]:
                    row.limited_unpriced_tokens += tokens_in + tokens_out
                if values["model"] not in row.unpriced_models:
                    row.unpriced_models.append(values["model"])
                continue
            row.cost = (row.cost or Decimal(0)) + amount
            if values["ended_by_limit"]:
                row.limited_cost = (row.limited_cost or Decimal(0)) + amount


def _add_runs(row: CostRow, limited: bool, failed: bool, runs: int, interrupted: int) -> None:
    row.runs_interrupted += interrupted
    if limited:
        row.runs_limited += runs
    elif failed:
        row.runs_failed += runs
    else:
        row.runs_completed += runs


def _group_order(dims: Sequence[str]) -> list[str]:
    """The ledger columns that bring each group's records together when read in their order. The days of a
    week, a month or a year follow one another, so reading by day within the other dimension's values does it."""
    if not set(SPANS) & set(dims):
        return columns(dims)
    return columns([d for d in dims if d not in TIME], "day")


STREAM_ROWS = 5_000
"""Ledger groups read at a time: a few megabytes, however many groups there are."""
BEFORE_ANY_PRICE = date.min
"""The price day of tokens no entry prices: :meth:`PriceTable.lookup` has no price on it."""


async def ledger_models(conn: AsyncConnection, where: CostFilter) -> list[str]:
    """The model names of the ledger rows ``where`` picks."""
    return [str(m) for m in (await conn.execute(filtered(select(usage.c.model).distinct(), where))).scalars()]


async def priced_ledger(conn: AsyncConnection, dims: Sequence[str], prices: PriceTable,
                        where: CostFilter) -> tuple[FromClause, ColumnElement[Any]]:
    """The ledger and its price day for :func:`~teamstore.audit.cost_sql.token_sums`: joined to the price
    periods of the models ``where`` picks, unless a time dimension sums the tokens per day."""
    if set(TIME) & set(dims):
        return usage, usage.c.day
    return price_period(await price_periods(conn, prices, await ledger_models(conn, where)))


async def _token_query(conn: AsyncConnection, rows: _Rows, where: CostFilter) -> tuple[Select[Any], list[str]]:
    """:func:`token_sums` of ``rows``' groups, in the groups' order."""
    query, token_cols = token_sums(rows.dims, where, *await priced_ledger(conn, rows.dims, rows.prices, where))
    order = _group_order(rows.dims)
    subquery = query.subquery()
    return select(subquery).order_by(*(subquery.c[n] for n in order)), token_cols


def _values(token_cols: list[str], record: Any) -> dict[str, Any]:
    values = dict(zip(token_cols, record, strict=False))
    if values["day"] is None:
        values["day"] = BEFORE_ANY_PRICE
    return values


async def _sum_top(conn: AsyncConnection, rows: _Rows, where: CostFilter, top: int) -> int:
    """As :func:`_sum`, keeping only the ``top`` costliest groups: the ledger's tokens are read in the groups'
    order, each group priced whole before the next begins, so ``rows`` holds at most twice ``top`` of them
    however many there are. Returns how many groups there were."""
    query, token_cols = await _token_query(conn, rows, where)
    groups, current = 0, None
    result = await conn.stream(query)
    async for batch in result.partitions(STREAM_ROWS):  # a row at a time cost a trip to the driver's thread each
        for record in batch:
            values = _values(token_cols, record)
            raw = rows.raw(values)
            if raw != current:  # every group in rows is whole: the costliest may be kept
                groups, current = groups + 1, raw
                if len(rows.groups) >= 2 * top:
                    rows.keep(top)
            rows.add_tokens(values, (record[-3], record[-2], record[-1]))
    rows.keep(top)
    await _sum_runs(conn, rows, where, [rows.matches(raw) for raw in rows.groups])
    return groups


GROUPS_AT_ONCE = 200
"""The groups one query counts the runs of: SQLite refuses an expression more than 1,000 deep, which an ``OR`` of
1,000 groups is."""


async def _sum_runs(conn: AsyncConnection, rows: _Rows, where: CostFilter,
                    matches: list[ColumnElement[bool]]) -> None:
    """Add the runs of ``rows``' groups (each of ``matches`` picks one) and of the total."""
    run_cols = columns(rows.dims, "ended_by_limit", "run_failed")
    for start in range(0, len(matches), GROUPS_AT_ONCE):
        among = or_(false(), *matches[start:start + GROUPS_AT_ONCE])
        for record in await _run_groups(conn, run_cols, where, among):
            values = dict(zip(run_cols, record, strict=False))
            _add_runs(rows.row(values), bool(values["ended_by_limit"]), bool(values["run_failed"]),
                      int(record[-2]), int(record[-1]))
    await _total_runs(conn, rows.total, where)


async def _total_runs(conn: AsyncConnection, total: CostRow, where: CostFilter) -> None:
    # Counted again without grouping: a run that used two models must count once in the total.
    for limited, failed, runs, interrupted in await _run_groups(conn, ["ended_by_limit", "run_failed"], where):
        _add_runs(total, bool(limited), bool(failed), int(runs), int(interrupted))


def costliest(row: CostRow) -> tuple[Decimal, int, str]:
    """Sorts rows costliest first, ties by tokens, then by the ledger's key (an unknown cost as 0)."""
    return -(row.cost or Decimal(0)), -row.tokens, row.key


def _settle(row: CostRow) -> None:
    row.unpriced_models.sort()  # in the order the database gave, else
    if row.cost is None and row.unpriced_tokens == 0:
        row.cost = Decimal(0)  # no tokens at all (an empty report's total): nothing was spent, which is known
    # Unknown when the cost is (no priced tokens at all), like the cost; else 0 when no limit spent any.
    row.limited_cost = None if row.cost is None else (row.limited_cost or Decimal(0))


async def query_costs(
    source: AsyncEngine | AsyncConnection, prices: PriceTable, by: str | Sequence[str] = "session",
    where: CostFilter | None = None, top: int | None = None,
) -> CostReport:
    """Token usage and cost grouped by one or two dimensions, users and sessions as pseudonymous keys.

    Its queries read one snapshot of the ledger, so the rows and the total agree while runs are recorded.

    Args:
        source: The state database, or a connection of :func:`~teamstore.db.snapshot.read_snapshot` whose
            snapshot the report shares with the caller's other queries.
        prices: The price table to apply.
        by: One or two of session, user, team, version, model, agent, purpose, day, week, month, year
            (``"team,model"``).
        where: Filters; ``None`` for the whole ledger.
        top: Keep only the ``top`` costliest groups (ties by tokens, then by key), priced one group at a time
            so that a report of millions of sessions holds a few of them at once; ``None`` keeps every group.

    Returns:
        Rows sorted by key (the costliest first with ``top``), plus a total row that counts each run once; runs ended by a limit are counted
        apart from completed ones.

    Raises:
        ConfigurationError: ``by`` is not one or two known dimensions.
    """
    dims = parse_by(by)
    where = where or CostFilter()
    async with reading(source) as conn:
        if top is None:
            stream = CostStream(conn, prices, dims, where)
            ordered = [row async for row in stream]
            total, groups = stream.total, len(ordered)
        else:
            rows = _Rows(dims, prices)
            groups = await _sum_top(conn, rows, where, top)
            ordered, total = sorted(rows.groups.values(), key=costliest)[:top], rows.total
            for row in (*ordered, total):
                _settle(row)
    return CostReport(by=",".join(dims), price_version=prices.version, currency=prices.currency, rows=ordered,
                      total=total, fields=group_fields(dims), groups=groups)


class Naming(Protocol):
    """How a :class:`CostStream` shows users and sessions other than as their keys (a readable report's ids):
    the SQL that orders the groups by those names and reads them, and the rows renamed with them."""

    def labels(self, dim: str, groups: FromClause) -> list[Label]:
        """Each column the dimension is shown in and the SQL of its text (as
        :func:`~teamstore.audit.cost_sql.key_labels`)."""

    def joined(self, groups: Subquery) -> tuple[FromClause, list[ColumnElement[Any]]]:
        """``groups`` joined to what holds the names, and the columns that read them."""

    def name(self, row: CostRow, names: Sequence[Any]) -> None:
        """Rewrite the row's ``group`` and ``key`` from the ``names`` its columns read."""


class CostStream:
    """Every group of a report, read and priced one at a time in the order of their keys: however many groups
    there are, it holds one of them (and a few thousand of the database's rows) at a time.

        stream = CostStream(conn, prices, ("session",), CostFilter(since=start))
        async for row in stream:        # settled rows, sorted by key
            print(row.key, row.cost)
        print(stream.total.cost)        # complete once every row has been read

    Each group's token sums and run counts come in one ordered read (a server-side cursor on Postgres), the
    total's runs in one more query at the end, on the caller's connection (one snapshot).

    Args:
        conn: A connection of :func:`~teamstore.db.snapshot.read_snapshot`.
        prices: The price table.
        dims: The dimensions (:func:`parse_by`).
        where: The filters.
        naming: Users and sessions by names other than their keys, the groups in the order of those.
    """

    def __init__(self, conn: AsyncConnection, prices: PriceTable, dims: Sequence[str], where: CostFilter,
                 naming: Naming | None = None) -> None:
        self.conn, self.where, self.naming = conn, where, naming
        self._rows = _Rows(dims, prices)
        self._group = columns(dims)
        self.total = self._rows.total
        """The total of every group; complete once the stream has been read to its end."""

    async def count(self) -> int:
        """How many groups the stream holds (one more query)."""
        return int(await self.conn.scalar(group_count(self.conn.dialect.name, self._rows.dims, self.where)) or 0)

    async def _query(self) -> Select[Any]:
        dims = self._rows.dims
        groups = group_rows(dims, self.where, *await priced_ledger(self.conn, dims, self._rows.prices, self.where))
        source, names = self.naming.joined(groups) if self.naming else (groups, [])
        keys = key_order(self.conn.dialect.name, dims, groups, self.naming.labels if self.naming else key_labels)
        # Then the group's own columns: two groups of one key (two erased sessions' labels) stay apart.
        own = [groups.c[n] for n in columns([d for d in dims if d not in TIME])]
        return select(groups, *names).select_from(source).order_by(*keys, *own, groups.c.kind)

    async def __aiter__(self) -> AsyncIterator[CostRow]:
        width = len(self._group) + 8  # the group's columns, the kind and the seven figures; then the names
        current: tuple[tuple[Any, ...], ...] | None = None
        names: Sequence[Any] = ()
        result = await self.conn.stream(await self._query())
        async for batch in result.partitions(STREAM_ROWS):  # a row at a time cost a trip to the driver's thread
            for record in batch:
                raw = self._rows.raw(self._add(record))
                if raw != current:
                    if current is not None:
                        yield self._done(current, names)
                    current, names = raw, tuple(record[width:])
        if current is not None:
            yield self._done(current, names)
        await _total_runs(self.conn, self.total, self.where)
        _settle(self.total)

    def _add(self, record: Any) -> dict[str, Any]:
        """Add a record of :func:`~teamstore.audit.cost_sql.group_rows` to its group and the total."""
        values = dict(zip(self._group, record, strict=False))
        kind, model, day, limited, failed, a, b, c = record[len(self._group):len(self._group) + 8]
        if kind == RUNS:
            _add_runs(self._rows.row(values), bool(limited), bool(failed), int(a), int(b))
            return values
        values |= {"model": model, "day": BEFORE_ANY_PRICE if day is None else day, "ended_by_limit": limited}
        self._rows.add_tokens(values, (a, b, c))
        return values

    def _done(self, raw: tuple[tuple[Any, ...], ...], names: Sequence[Any]) -> CostRow:
        row = self._rows.groups.pop(raw)
        _settle(row)
        if self.naming is not None:
            self.naming.name(row, names)
        return row
