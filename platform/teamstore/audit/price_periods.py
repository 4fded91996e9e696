"""The price periods of a cost query's models, handed to the database as one bound parameter however many
models there are.

    from teamstore.audit.price_periods import price_periods

    periods = await price_periods(conn, prices, ["gpt-4o", "gpt-4o-2024-08-06"])   # None: nothing priced
    ledger = usage.outerjoin(periods.table, periods.matches)
    await conn.execute(select(usage.c.model, periods.first).select_from(ledger))    # NULL: no price that day

A period is the days one price of a model is in force, from its entry's ``effective_from`` to the next
entry's. The periods travel as one JSON array: Postgres reads it as a table (``jsonb_to_recordset``) and
hashes it for the join; SQLite copies it (``json_each``) into a temporary table of the connection, whose
key the join searches (it would scan ``json_each`` once per ledger row), emptied by the next query that
needs it. A bound parameter per model, as a
``CASE`` or an ``IN`` list takes, ran into the drivers' limits (SQLite's bound parameters, 32,766 in most
builds; Postgres's 65,535 per statement) once a ledger named some thousands of models.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import (
    Column,
    ColumnElement,
    Date,
    FromClause,
    MetaData,
    String,
    Table,
    and_,
    bindparam,
    column,
    delete,
    func,
    insert,
    literal_column,
    or_,
    select,
)
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.ext.asyncio import AsyncConnection

from teamstore.audit.prices import PriceTable
from teamstore.audit.schema import usage

Period = dict[str, str | None]

# The connection's own (TEMP): nothing of it is in the database's schema, and no other connection sees it.
_sqlite_periods = Table(
    "ts_cost_price_periods", MetaData(),
    Column("model", String, primary_key=True), Column("first", Date, primary_key=True), Column("after", Date),
    prefixes=["TEMPORARY"],
)


def period_rows(prices: PriceTable, models: Sequence[str]) -> list[Period]:
    """Each price period of ``models``: the model, the first day of its price, and the first day of the next
    price (``None`` for the price in force today), days as ISO text."""
    rows: list[Period] = []
    for model in sorted(set(models)):
        history = prices.history(model) or ()
        for index, price in enumerate(history):
            after = history[index + 1].effective_from.isoformat() if index + 1 < len(history) else None
            rows.append({"model": model, "first": price.effective_from.isoformat(), "after": after})
    return rows


@dataclass(frozen=True)
class PricePeriods:
    """The periods as a table to join the ledger to.

    Attributes:
        table: One row per period: ``model``, ``first``, ``after``.
        matches: The join condition: the ledger row's model, on a day of the period.
        first: The first day of the period a ledger row falls in (``NULL`` for a row no price covers).
    """

    table: FromClause
    matches: ColumnElement[bool]
    first: ColumnElement[Any]

    @classmethod
    def of(cls, table: FromClause) -> PricePeriods:
        # The day compared as the ledger holds it: a date on Postgres, ISO text on SQLite; both in day order.
        matches = and_(table.c.model == usage.c.model, usage.c.day >= table.c.first,
                       or_(table.c.after.is_(None), usage.c.day < table.c.after))
        return cls(table, matches, table.c.first)


def _postgres_table(rows: list[Period]) -> FromClause:
    records = func.jsonb_to_recordset(bindparam("price_periods", rows, type_=JSONB))
    return records.table_valued(column("model", String), column("first", Date), column("after", Date)) \
        .render_derived(name="price_periods", with_types=True)


async def _sqlite_table(conn: AsyncConnection, rows: list[Period]) -> FromClause:
    await conn.run_sync(lambda sync: _sqlite_periods.create(sync, checkfirst=True))
    await conn.execute(delete(_sqlite_periods))  # one a stream left behind on this pooled connection
    each = func.json_each(bindparam("price_periods", json.dumps(rows), type_=String)).table_valued("value")
    fields = [func.json_extract(each.c.value, literal_column(f"'$.{name}'")) for name in ("model", "first", "after")]
    await conn.execute(insert(_sqlite_periods).from_select(["model", "first", "after"], select(*fields)))
    return _sqlite_periods


async def price_periods(conn: AsyncConnection, prices: PriceTable, models: Sequence[str]) -> PricePeriods | None:
    """The price periods of ``models``, for queries on ``conn`` (until the next call on it, on SQLite).

    Args:
        conn: The connection the queries run on (on SQLite the periods are a temporary table of it).
        prices: The price table.
        models: The ledger's model names the queries read.

    Returns:
        The periods, or ``None`` when the table prices none of ``models``.
    """
    rows = period_rows(prices, models)
    if not rows:
        return None
    if conn.dialect.name == "postgresql":
        return PricePeriods.of(_postgres_table(rows))
    return PricePeriods.of(await _sqlite_table(conn, rows))
