"""A cost report's groups summed from the ledger: each record's tokens priced (for its model, on its price day)
into its group's row and the total, each group's runs counted, the total's runs counted once each, and a row
settled once every record of it is in. The order the ledger is read in, and which groups a report keeps, are
:mod:`teamstore.audit.cost`'s; the statements are :mod:`teamstore.audit.cost_sql`'s.

    from teamstore.audit.cost_sums import GroupSums, settle, sum_runs

    sums = GroupSums(("team", "model"), prices)
    sums.add_tokens(values, (calls, tokens_in, tokens_out, unknown))   # a record of cost_sql.token_sums
    await sum_runs(conn, sums, where, [sums.matches(raw) for raw in sums.groups])
    for row in (*sums.groups.values(), sums.total):
        settle(row)
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import date
from decimal import Decimal
from typing import Any

from sqlalchemy import ColumnElement, FromClause, and_, false, or_, select
from sqlalchemy.ext.asyncio import AsyncConnection

from teamstore.audit.cost_groups import as_date, days_of, dim_value, pseudonymous_group
from teamstore.audit.cost_report import CostRow, costliest
from teamstore.audit.cost_sql import (
    DIMENSIONS,
    SPANS,
    TIME,
    CostFilter,
    columns,
    filtered,
    price_period,
    run_counts,
)
from teamstore.audit.price_periods import price_periods
from teamstore.audit.prices import PriceTable
from teamstore.audit.schema import usage

BEFORE_ANY_PRICE = date.min
"""The price day of tokens no entry prices: :meth:`PriceTable.lookup` has no price on it."""
GROUPS_AT_ONCE = 200
"""The groups one query counts the runs of: SQLite refuses an expression more than 1,000 deep, which an ``OR`` of
1,000 groups is."""


class GroupSums:
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

    def add_tokens(self, values: dict[str, Any], sums: tuple[Any, Any, Any, Any]) -> None:
        calls, tokens_in, tokens_out, unknown = (int(v or 0) for v in sums)
        price = self.prices.lookup(values["model"], as_date(values["day"]))
        amount = None if price is None else price.cost(tokens_in, tokens_out)
        for row in (self.row(values), self.total):
            row.calls += calls
            row.unknown_usage_calls += unknown
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


def add_runs(row: CostRow, limited: bool, failed: bool, runs: int, interrupted: int) -> None:
    """Count ``runs`` (``interrupted`` of them continued or abandoned) as the way they ended."""
    row.runs_interrupted += interrupted
    if limited:
        row.runs_limited += runs
    elif failed:
        row.runs_failed += runs
    else:
        row.runs_completed += runs


def settle(row: CostRow) -> None:
    """A row once every record of it is in: its unpriced models in order, its costs known or unknown."""
    row.unpriced_models.sort()  # in the order the database gave, else
    if row.tokens == 0:
        # No tokens at all (an empty report's total): nothing was spent, which is known; unless a call's usage is
        # unknown (it failed, or was answered without its usage), which the provider may have billed.
        row.cost = None if row.unknown_usage_calls else Decimal(0)
    # Unknown when the cost is (no priced tokens at all), like the cost; else 0 when no limit spent any.
    row.limited_cost = None if row.cost is None else (row.limited_cost or Decimal(0))


async def run_groups(conn: AsyncConnection, names: list[str], where: CostFilter,
                     among: ColumnElement[bool] | None = None) -> list[Any]:
    """:func:`~teamstore.audit.cost_sql.run_counts` of the groups ``among`` picks, if given."""
    query = run_counts(names, where)
    return list((await conn.execute(query if among is None else query.where(among))).all())


async def sum_runs(conn: AsyncConnection, sums: GroupSums, where: CostFilter,
                   matches: list[ColumnElement[bool]]) -> None:
    """Add the runs of ``sums``' groups (each of ``matches`` picks one) and of the total."""
    run_cols = columns(sums.dims, "ended_by_limit", "run_failed")
    for start in range(0, len(matches), GROUPS_AT_ONCE):
        among = or_(false(), *matches[start:start + GROUPS_AT_ONCE])
        for record in await run_groups(conn, run_cols, where, among):
            values = dict(zip(run_cols, record, strict=False))
            add_runs(sums.row(values), bool(values["ended_by_limit"]), bool(values["run_failed"]),
                     int(record[-2]), int(record[-1]))
    await total_runs(conn, sums.total, where)


async def total_runs(conn: AsyncConnection, total: CostRow, where: CostFilter) -> None:
    """Add the runs ``where`` picks to the report's total."""
    # Counted again without grouping: a run that used two models must count once in the total.
    for limited, failed, runs, interrupted in await run_groups(conn, ["ended_by_limit", "run_failed"], where):
        add_runs(total, bool(limited), bool(failed), int(runs), int(interrupted))


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
