"""The prices the ``session_costs`` view reads (``ts_prices``), kept in step with the price table.

    from teamstore.audit.price_sync import PriceSync, sync_prices

    await sync_prices(engine, load_prices())            # `teamstore prices sync`: replace this version's rows
    sync = PriceSync(lambda: load_prices(path))         # the ledger's writer holds one
    await sync.ensure(engine, {"gpt-4o-2024-08-06"})    # after a run: its models priced in ts_prices

The view joins each ledger row to ``ts_prices`` by the model's exact name, so a pattern of the table
(``gpt-4o-2024-*``) is written out once per model name the ledger holds that it prices. Nobody has to
remember a sync: ``teamstore db upgrade`` and the first run a process records write the table's version
if the database holds none as new, and each model a process records for the first time gets its rows.
The database keeps the greatest version it was given: a process with an older table writes nothing.

Only ``db upgrade`` and ``prices sync`` read the ledger's model names (one pass over every row). A run writes
a new version for the models ``ts_prices`` already names and its own, so no run waits on that pass: every
model an earlier version priced stays priced, and a model no earlier version priced is priced once it is
recorded again or by the next ``db upgrade`` or ``prices sync``.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable
from typing import Any

from sqlalchemy import delete, func, insert, select
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from teamstore.audit.prices import PriceTable
from teamstore.audit.schema import prices, usage
from teamstore.db.statements import insert_new
from teamstore.errors import ConfigurationError

log = logging.getLogger(__name__)


def price_rows(table: PriceTable, models: Iterable[str]) -> list[dict[str, Any]]:
    """``ts_prices`` rows for each of ``models`` the table prices, under the model's own name.

    Args:
        table: The price table.
        models: Model names as the ledger stores them.

    Returns:
        One row per entry of each priced model's history, with the day its successor takes over.
    """
    rows = []
    for model in sorted(set(models)):
        history = table.history(model) or ()
        for index, price in enumerate(history):
            rows.append({
                "version": table.version,
                "model": model,
                "effective_from": price.effective_from,
                "effective_to": history[index + 1].effective_from if index + 1 < len(history) else None,
                # The column is a float (migration 0002); the view casts it back to the exact decimal on
                # Postgres (0007), and SQLite has no exact type to keep it in.
                "input_per_million": float(price.input_per_million),
                "output_per_million": float(price.output_per_million),
                "currency": table.currency,
            })
    return rows


async def _ledger_models(conn: AsyncConnection) -> list[str]:
    return [str(m) for m in (await conn.execute(select(usage.c.model).distinct())).scalars()]


async def _priced_models(conn: AsyncConnection) -> list[str]:
    # ts_prices holds a row per model and price entry: a few hundred rows, where the ledger may hold millions.
    return [str(m) for m in (await conn.execute(select(prices.c.model).distinct())).scalars()]


async def _newer_version(conn: AsyncConnection, version: str) -> str | None:
    # Compared in SQL, under the database's collation, as the view's MAX(version) compares.
    found = await conn.scalar(select(func.max(prices.c.version)).where(prices.c.version > version))
    return None if found is None else str(found)


async def sync_prices(engine: AsyncEngine, table: PriceTable) -> int:
    """Write a price table into ``ts_prices``: every exact name, and every ledger model a pattern prices.

    Replaces any rows of the same version; other versions stay (the view uses the greatest version).

    Returns:
        How many price rows were written.

    Raises:
        ConfigurationError: ``ts_prices`` already holds a version that sorts after this table's: the view
            would go on pricing with that one while ``teamstore cost`` used this one.
    """
    async with engine.begin() as conn:
        newer = await _newer_version(conn, table.version)
        if newer is not None:
            raise ConfigurationError(
                f"the database already holds prices version {newer!r}, which sorts after {table.version!r}; "
                "the session_costs view prices with the greatest version, so it would ignore this table",
                hint=f"give the price table a version that sorts after {newer!r} (dates do), or delete the "
                f"newer rows first: DELETE FROM ts_prices WHERE version = '{newer}'",
            )
        rows = price_rows(table, {*table.prices, *await _ledger_models(conn)})
        await conn.execute(delete(prices).where(prices.c.version == table.version))
        if rows:
            await conn.execute(insert(prices), rows)
    return len(rows)


class PriceSync:
    """Keeps ``ts_prices`` pricing every model a process records, with no manual step.

    One per process (the ledger's writer holds it): it asks the database once whether it holds the
    table's version, and each model once whether it is priced there.

    Args:
        load: Returns the price table (read when first needed: a malformed file fails no run).
        whole_ledger: Write a new version for every model the ledger names (``db upgrade``), which reads
            every ledger row once; else for the models ``ts_prices`` names (a run's path).
    """

    def __init__(self, load: Callable[[], PriceTable], *, whole_ledger: bool = False) -> None:
        self._load = load
        self._whole_ledger = whole_ledger
        self._table: PriceTable | None = None
        self._newer: str | None = None  # the database prices with a later version than ours: leave it
        self._known: set[str] = set()
        self._lock = asyncio.Lock()

    async def ensure(self, engine: AsyncEngine, models: Iterable[str]) -> None:
        """Make ``ts_prices`` price ``models`` under the table's version, writing only what is missing.

        Rows already there are kept (``ON CONFLICT DO NOTHING``): processes doing this at once agree.

        Raises:
            ConfigurationError: The price table could not be read.
            SQLAlchemyError: The database failed (the caller logs it; the next run tries again).
        """
        wanted = set(models) - self._known
        if self._table is not None and not wanted:
            return
        async with self._lock:
            table = self._table or self._load()
            async with engine.begin() as conn:
                if self._table is None:
                    wanted |= await self._first(conn, table)
                if self._newer is None and wanted:
                    rows = price_rows(table, wanted)
                    if rows:
                        await conn.execute(insert_new(engine.dialect.name, prices), rows)
            self._table = table
            self._known |= wanted

    async def _first(self, conn: AsyncConnection, table: PriceTable) -> set[str]:
        """What the first call writes: nothing if the database holds this version or a later one, else the
        whole table, its patterns written out for the models an earlier version priced (or, with
        ``whole_ledger``, the ledger holds)."""
        self._newer = await _newer_version(conn, table.version)
        if self._newer is not None:
            log.warning("ts_prices holds price version %s, later than this process's %s: the session_costs "
                        "view prices with it", self._newer, table.version)
            return set()
        held = await conn.scalar(select(func.count()).select_from(prices).where(prices.c.version == table.version))
        if held:
            return set()
        models = await (_ledger_models(conn) if self._whole_ledger else _priced_models(conn))
        return {*table.prices, *models}
