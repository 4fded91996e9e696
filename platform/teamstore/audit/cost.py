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
application's ids. What a report holds is :mod:`teamstore.audit.cost_report`'s; how the ledger's records are
priced and counted into its groups, :mod:`teamstore.audit.cost_sums`'s.
"""

from __future__ import annotations

import difflib
from collections.abc import AsyncIterator, Sequence
from typing import Any, Protocol

from sqlalchemy import ColumnElement, FromClause, Select, Subquery, select
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from teamstore.audit.cost_groups import group_fields
from teamstore.audit.cost_report import CostReport, CostRow, costliest
from teamstore.audit.cost_sql import (
    DIMENSIONS,
    ERASED,
    RUNS,
    SPANS,
    TIME,
    CostFilter,
    Label,
    columns,
    group_count,
    group_rows,
    key_labels,
    key_order,
    price_period,
    token_sums,
)
from teamstore.audit.cost_sums import (
    BEFORE_ANY_PRICE,
    GroupSums,
    add_runs,
    priced_ledger,
    settle,
    sum_runs,
    total_runs,
)
from teamstore.audit.prices import PriceTable
from teamstore.db.snapshot import reading
from teamstore.errors import ConfigurationError, refused_value

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
        raise ConfigurationError(refused_value("--by", takes=f"one or two of {', '.join(DIMENSIONS)}"),
                                 hint=(f"did you mean {' and '.join(map(repr, near))}? " if near else "")
                                 + "give one dimension, or two separated by a comma, e.g. --by team,model")
    if len(names) > MAX_DIMENSIONS or len(set(names)) < len(names):
        raise ConfigurationError(refused_value("--by", takes=f"one or two different ones of {', '.join(DIMENSIONS)}"),
                                 hint="give one dimension or two different ones, e.g. --by team,model")
    if sum(n in TIME for n in names) > 1:
        raise ConfigurationError(refused_value("--by", takes="one or two dimensions, at most one of them a time scale"),
                                 hint="give at most one of day, week, month or year, e.g. --by team,week")
    return names


def _group_order(dims: Sequence[str]) -> list[str]:
    """The ledger columns that bring each group's records together when read in their order. The days of a
    week, a month or a year follow one another, so reading by day within the other dimension's values does it."""
    if not set(SPANS) & set(dims):
        return columns(dims)
    return columns([d for d in dims if d not in TIME], "day")


STREAM_ROWS = 5_000
"""Ledger groups read at a time: a few megabytes, however many groups there are."""


async def _token_query(conn: AsyncConnection, rows: GroupSums, where: CostFilter) -> tuple[Select[Any], list[str]]:
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


async def _sum_top(conn: AsyncConnection, rows: GroupSums, where: CostFilter, top: int) -> int:
    """The groups' sums, keeping only the ``top`` costliest groups: the ledger's tokens are read in the groups'
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
            rows.add_tokens(values, (record[-4], record[-3], record[-2], record[-1]))
    rows.keep(top)
    await sum_runs(conn, rows, where, [rows.matches(raw) for raw in rows.groups])
    return groups


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
            rows = GroupSums(dims, prices)
            groups = await _sum_top(conn, rows, where, top)
            ordered, total = sorted(rows.groups.values(), key=costliest)[:top], rows.total
            for row in (*ordered, total):
                settle(row)
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
        self._rows = GroupSums(dims, prices)
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
        width = len(self._group) + 9  # the group's columns, the kind and the eight figures; then the names
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
        await total_runs(self.conn, self.total, self.where)
        settle(self.total)

    def _add(self, record: Any) -> dict[str, Any]:
        """Add a record of :func:`~teamstore.audit.cost_sql.group_rows` to its group and the total."""
        values = dict(zip(self._group, record, strict=False))
        kind, model, day, limited, failed, a, b, c, d = record[len(self._group):len(self._group) + 9]
        if kind == RUNS:
            add_runs(self._rows.row(values), bool(limited), bool(failed), int(a), int(b))
            return values
        values |= {"model": model, "day": BEFORE_ANY_PRICE if day is None else day, "ended_by_limit": limited}
        self._rows.add_tokens(values, (a, b, c, d))
        return values

    def _done(self, raw: tuple[tuple[Any, ...], ...], names: Sequence[Any]) -> CostRow:
        row = self._rows.groups.pop(raw)
        settle(row)
        if self.naming is not None:
            self.naming.name(row, names)
        return row
