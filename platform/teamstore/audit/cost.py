"""Cost per session, user, team, version, model, agent or day, derived from the ledger at query time.

    from teamstore.audit.cost import CostFilter, query_costs

    report = await query_costs(engine, load_prices(), by="session", where=CostFilter(team="support_triage"))
    for row in report.rows:
        print(row.key, row.runs_completed, row.runs_limited, row.runs_interrupted, row.cost, report.price_version)

Tokens are summed in SQL (using the ledger's indexes when a filter names a session, user or team); prices
are applied per (model, day) in Python so a price change mid-period is honoured. A model missing from the
price table leaves its tokens counted and its cost unknown (``unpriced_tokens``); every report names the
price version it used.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from datetime import UTC, date, datetime
from typing import Any, Literal

from sqlalchemy import ColumnElement, Select, and_, case, func, select
from sqlalchemy.ext.asyncio import AsyncEngine

from teamstore.audit.prices import PriceTable
from teamstore.audit.schema import usage
from teamstore.errors import ConfigurationError

Dimension = Literal["session", "user", "team", "version", "model", "agent", "day"]
DIMENSIONS: dict[str, tuple[str, ...]] = {
    "session": ("session_key",),
    "user": ("subject_key",),
    "team": ("team",),
    "version": ("team", "team_version"),
    "model": ("model",),
    "agent": ("agent",),
    "day": ("day",),
}


@dataclass(frozen=True)
class CostFilter:
    """Which ledger rows a query covers; ``None`` means any."""

    session_key: str | None = None
    subject_key: str | None = None
    team: str | None = None
    since: datetime | None = None
    until: datetime | None = None

    def clauses(self) -> list[ColumnElement[bool]]:
        """SQL conditions for the set fields."""
        pairs = [
            (self.session_key, usage.c.session_key),
            (self.subject_key, usage.c.subject_key),
            (self.team, usage.c.team),
        ]
        found: list[ColumnElement[bool]] = [col == value for value, col in pairs if value is not None]
        if self.since is not None:
            found.append(usage.c.started_at >= _as_utc(self.since))
        if self.until is not None:
            found.append(usage.c.started_at < _as_utc(self.until))
        return found


def _as_utc(moment: datetime) -> datetime:
    """The same instant in UTC (a naive time is taken as UTC): SQLite compares the wall-clock text it
    stores, and every stored time is UTC, so an offset like +02:00 must be applied before comparing."""
    return moment.astimezone(UTC) if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


@dataclass
class CostRow:
    """One group of the report."""

    key: str
    runs_completed: int = 0
    runs_limited: int = 0
    runs_failed: int = 0
    runs_interrupted: int = 0
    """Runs continued (or abandoned) after they stopped mid-run; each also counts as it ended."""
    calls: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cost: float | None = None
    limited_cost: float | None = None
    unpriced_tokens: int = 0
    unpriced_models: list[str] = field(default_factory=list)


@dataclass
class CostReport:
    """A cost report: its rows, its totals and the prices it used."""

    by: str
    price_version: str
    currency: str
    rows: list[CostRow]
    total: CostRow

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dictionary."""
        return {
            "by": self.by,
            "price_version": self.price_version,
            "currency": self.currency,
            "rows": [asdict(r) for r in self.rows],
            "total": asdict(self.total),
        }


_COST_DECIMALS = 9


def _key(values: tuple[Any, ...]) -> str:
    return "@".join("(erased)" if v is None else str(v) for v in values)


def _filtered(query: Select[Any], where: CostFilter) -> Select[Any]:
    clauses = where.clauses()
    return query.where(and_(*clauses)) if clauses else query


async def _token_groups(engine: AsyncEngine, cols: list[Any], where: CostFilter) -> list[Any]:
    sums = [func.sum(usage.c.calls), func.sum(usage.c.input_tokens), func.sum(usage.c.output_tokens)]
    extra = [usage.c.model, usage.c.day, usage.c.ended_by_limit]
    query = _filtered(select(*cols, *extra, *sums), where).group_by(*cols, *extra)
    async with engine.connect() as conn:
        return list((await conn.execute(query)).all())


async def _run_groups(engine: AsyncEngine, cols: list[Any], where: CostFilter) -> list[Any]:
    flags = [usage.c.ended_by_limit, usage.c.run_failed]
    interrupted = func.count(func.distinct(case((usage.c.interruptions > 0, usage.c.run_id))))
    query = _filtered(select(*cols, *flags, func.count(func.distinct(usage.c.run_id)), interrupted), where)
    async with engine.connect() as conn:
        return list((await conn.execute(query.group_by(*cols, *flags))).all())


def _add_tokens(
    row: CostRow, model: str, day: date, limited: bool, sums: tuple[int, int, int], prices: PriceTable
) -> None:
    calls, tokens_in, tokens_out = (int(v or 0) for v in sums)
    row.calls += calls
    row.input_tokens += tokens_in
    row.output_tokens += tokens_out
    price = prices.lookup(model, day if isinstance(day, date) else date.fromisoformat(str(day)))
    if price is None:
        row.unpriced_tokens += tokens_in + tokens_out
        if model not in row.unpriced_models:
            row.unpriced_models.append(model)
        return
    amount = price.cost(tokens_in, tokens_out)
    row.cost = (row.cost or 0.0) + amount
    if limited:
        row.limited_cost = (row.limited_cost or 0.0) + amount


def _add_runs(row: CostRow, limited: bool, failed: bool, runs: int, interrupted: int) -> None:
    row.runs_interrupted += interrupted
    if limited:
        row.runs_limited += runs
    elif failed:
        row.runs_failed += runs
    else:
        row.runs_completed += runs


async def query_costs(
    engine: AsyncEngine, prices: PriceTable, by: str = "session", where: CostFilter | None = None
) -> CostReport:
    """Token usage and cost grouped by one dimension.

    Args:
        engine: The state database.
        prices: The price table to apply.
        by: One of session, user, team, version, model, agent, day.
        where: Filters; ``None`` for the whole ledger.

    Returns:
        Rows sorted by key, plus a total row; runs ended by a limit are counted apart from completed ones.

    Raises:
        ConfigurationError: ``by`` is not a known dimension.
    """
    if by not in DIMENSIONS:
        raise ConfigurationError(f"cannot group costs by {by!r}", hint=f"use one of {', '.join(DIMENSIONS)}")
    where = where or CostFilter()
    width = len(DIMENSIONS[by])
    cols = [usage.c[name] for name in DIMENSIONS[by]]
    rows: dict[str, CostRow] = {}
    total = CostRow(key="total")
    for record in await _token_groups(engine, cols, where):
        key = _key(tuple(record[:width]))
        model, day, limited, *sums = record[width:]
        for target in (rows.setdefault(key, CostRow(key=key)), total):
            _add_tokens(target, model, day, bool(limited), (sums[0], sums[1], sums[2]), prices)
    for record in await _run_groups(engine, cols, where):
        key = _key(tuple(record[:width]))
        limited, failed, runs, interrupted = record[width:]
        _add_runs(rows.setdefault(key, CostRow(key=key)), bool(limited), bool(failed), int(runs), int(interrupted))
    # Counted again without grouping: a run that used two models must count once in the total.
    for limited, failed, runs, interrupted in await _run_groups(engine, [], where):
        _add_runs(total, bool(limited), bool(failed), int(runs), int(interrupted))
    ordered = [rows[k] for k in sorted(rows)]
    for row in (*ordered, total):  # sums of per-group products: drop the binary noise past a nano-unit
        if row.cost is None and row.unpriced_tokens == 0:
            row.cost = 0.0  # no tokens at all (an empty report's total): nothing was spent, which is known
        row.cost = round(row.cost, _COST_DECIMALS) if row.cost is not None else None
        # Unknown when the cost is (no priced tokens at all), like the cost; else 0 when no limit spent any.
        row.limited_cost = None if row.cost is None else round(row.limited_cost or 0.0, _COST_DECIMALS)
    return CostReport(
        by=by, price_version=prices.version, currency=prices.currency, rows=ordered, total=total
    )
