"""The usage ledger: token counts per run, agent, model and purpose, for cost queries.

    from teamstore.audit.ledger import usage_insert, usage_params, usage_rows

    rows = usage_rows(ctx, outcome, keys)    # pure: one row per (agent, model, purpose)
    stmt = usage_insert("postgresql", len(rows))   # one INSERT, fenced; a repeated run id is ignored
    added = (await conn.execute(stmt, usage_params(rows, user_id, keys.subject_key))).rowcount

The insert is made by the audit's run writes (:mod:`teamstore.audit.run_writes`), one statement in its own
transaction: it writes only while the user's subject is still the one the rows are keyed by and no erasure
holds the user, both checked in its own ``WHERE``.

Token counts are the record; cost is derived at query time (``teamstore.audit.cost``). Every model call
the metering wrapper saw is counted, SelectorGroupChat's speaker selection included.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import delete, exists, func, insert, select, union_all
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine
from sqlalchemy.sql.dml import Insert

from teamstore.audit.prices import PriceTable
from teamstore.audit.schema import ledger_name, prices, subjects, usage
from teamstore.audit.subjects import SUBJECT, USER
from teamstore.audit.transcripts.record import RunKeys
from teamstore.db.engine import describe_failure
from teamstore.db.fence import held
from teamstore.db.statements import insert_new
from teamstore.errors import ConfigurationError, StoreUnavailable
from teamstore.events import RunContext, RunOutcome
from teamstore.state.statements import Param

LEDGER_COLUMNS = tuple(c.name for c in usage.c if c.name != "id")
"""What a run's ledger row holds (``id`` is the database's)."""


def usage_rows(ctx: RunContext, outcome: RunOutcome, keys: RunKeys) -> list[dict[str, Any]]:
    """Aggregate a run's model calls into ledger rows.

    Args:
        ctx: The run.
        outcome: How it ended, with every metered call.
        keys: Pseudonymous keys (the raw user and session ids are never stored here).

    Returns:
        One row per (agent, model, purpose); empty when the run made no model call.
    """
    totals: dict[tuple[str, str, str], list[int]] = {}
    for call in outcome.model_calls:
        entry = totals.setdefault((ledger_name(call.agent), ledger_name(call.model), call.purpose), [0, 0, 0, 0])
        entry[0] += 1
        entry[1] += 1 if call.error else 0
        entry[2] += call.input_tokens
        entry[3] += call.output_tokens
    common = {
        "run_id": ctx.run_id,
        "team": ctx.team,
        "team_version": ctx.team_version,
        "session_key": keys.session_key,
        "subject_key": keys.subject_key,
        "stop_reason": outcome.stop_reason[:256] if outcome.stop_reason else None,
        "ended_by_limit": outcome.ended_by_limit,
        "run_failed": outcome.error is not None,
        "started_at": ctx.started_at,
        "finished_at": outcome.finished_at,
        "day": ctx.started_at.date(),
    }
    return [
        {
            **common,
            "agent": a,
            "model": m,
            "purpose": p,
            "calls": c,
            "failed_calls": f,
            "input_tokens": i,
            "output_tokens": o,
        }
        for (a, m, p), (c, f, i, o) in totals.items()
    ]


def usage_insert(dialect: str, count: int) -> Insert:
    """The INSERT of ``count`` ledger rows, fenced in its own ``WHERE``.

    The rows (parameters ``<column>_<i>``, :func:`usage_params`) are written only while the user ``u`` still
    has the subject ``subject`` they are keyed by (an erasure deletes the mapping, and a user who comes back
    gets a new subject) and no erasure holds ``u``: so rows keyed by a subject remembered from an earlier run
    are checked in the write itself, and ``0`` rows written says to look the subject up again. The same run
    reported twice is skipped rather than refused (a refusal is an error the server logs, with the key).

    Args:
        dialect: ``postgresql`` or ``sqlite``.
        count: How many rows (one per agent, model and purpose of the run).
    """
    selects = [select(*(Param(f"{name}_{i}", usage.c[name].type).label(name) for name in LEDGER_COLUMNS))
               for i in range(count)]
    source = (selects[0] if count == 1 else union_all(*selects)).subquery("v")
    mapped = exists().where(subjects.c.user_id == USER, subjects.c.subject_key == SUBJECT)
    insert_: Insert = insert_new(dialect, usage).from_select(
        LEDGER_COLUMNS, select(*source.c).where(mapped, ~held(USER)))
    return insert_


def usage_params(rows: list[dict[str, Any]], user_id: str, subject_key: str) -> dict[str, Any]:
    """The parameters of :func:`usage_insert` for ``rows`` of ``user_id``, keyed by ``subject_key``."""
    params = {f"{name}_{i}": row[name] for i, row in enumerate(rows) for name in LEDGER_COLUMNS}
    return {**params, "u": user_id, "subject": subject_key}


async def sweep_ledger(engine: AsyncEngine, older_than: datetime, batch_size: int = 5000) -> int:
    """Delete ledger rows of runs that finished before ``older_than``, in batches.

    Returns:
        How many rows were deleted.

    Raises:
        StoreUnavailable: The database failed; the batches deleted before it stay deleted.
    """
    removed = 0
    while True:
        try:
            async with engine.begin() as conn:
                ids = select(usage.c.id).where(usage.c.finished_at < older_than).limit(batch_size)
                result = await conn.execute(delete(usage).where(usage.c.id.in_(ids.scalar_subquery())))
        except SQLAlchemyError as exc:
            raise StoreUnavailable(
                f"could not sweep the usage ledger after removing {removed} rows: {describe_failure(exc)}",
                hint="check the database (a lock_timeout or statement_timeout on the role can refuse the "
                "delete) and run `teamstore retention sweep` again",
            ) from exc
        removed += result.rowcount or 0
        if (result.rowcount or 0) < batch_size:
            return removed


async def _refuse_older_version(conn: AsyncConnection, version: str) -> None:
    # Compared in SQL, under the database's collation, as the view's MAX(version) compares.
    newer = (
        await conn.execute(select(func.max(prices.c.version)).where(prices.c.version > version))
    ).scalar()
    if newer is not None:
        raise ConfigurationError(
            f"the database already holds prices version {newer!r}, which sorts after {version!r}; the "
            "session_costs view prices with the greatest version, so it would ignore this table",
            hint=f"give the price table a version that sorts after {newer!r} (dates do), or delete the newer "
            f"rows first: DELETE FROM ts_prices WHERE version = '{newer}'",
        )


async def sync_prices(engine: AsyncEngine, table: PriceTable) -> int:
    """Copy a price table into ``ts_prices`` so the ``session_costs`` view can price rows in SQL.

    Replaces any rows of the same version; other versions stay (the view uses the greatest version).

    Returns:
        How many price rows were written.

    Raises:
        ConfigurationError: ``ts_prices`` already holds a version that sorts after this table's: the view
            would go on pricing with that one while ``teamstore cost`` used this one.
    """
    rows = []
    for model, history in table.prices.items():
        for index, price in enumerate(history):
            until = history[index + 1].effective_from if index + 1 < len(history) else None
            rows.append(
                {
                    "version": table.version,
                    "model": model,
                    "effective_from": price.effective_from,
                    "effective_to": until,
                    "input_per_million": price.input_per_million,
                    "output_per_million": price.output_per_million,
                    "currency": table.currency,
                }
            )
    async with engine.begin() as conn:
        await _refuse_older_version(conn, table.version)
        await conn.execute(delete(prices).where(prices.c.version == table.version))
        if rows:
            await conn.execute(insert(prices), rows)
    return len(rows)
