"""The usage ledger: token counts per run, agent, model and purpose, for cost queries.

    from teamstore.audit.ledger import usage_rows, record_usage

    rows = usage_rows(ctx, outcome, keys)    # pure: one row per (agent, model, purpose)
    await record_usage(engine, rows, ctx.session_id)   # one transaction; a repeated run id is ignored

Token counts are the record; cost is derived at query time (``teamstore.audit.cost``). Every model call
the metering wrapper saw is counted, SelectorGroupChat's speaker selection included.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from sqlalchemy import delete, exists, select
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.ext.asyncio import AsyncEngine

from teamstore.audit.schema import ledger_name, subject_sessions, usage
from teamstore.audit.transcripts.record import RunKeys
from teamstore.db.engine import describe_failure
from teamstore.db.statements import insert_new
from teamstore.errors import StoreUnavailable
from teamstore.events import RunContext, RunOutcome


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
        "interruptions": ctx.interruptions,
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


async def record_usage(engine: AsyncEngine, rows: list[dict[str, Any]], session_id: str | None = None) -> None:
    """Insert a run's rows in one transaction; a run already recorded is left as it is.

    Args:
        engine: The state database.
        rows: From :func:`usage_rows`.
        session_id: The run's raw session id, recorded once beside its session key (``ts_subject_sessions``)
            so that reports can name the session; ``None`` records nothing.

    Raises:
        StoreUnavailable: The database could not be written.
    """
    if not rows:
        return
    try:
        async with engine.begin() as conn:
            # The same run reported twice: the first record stands, and the second is skipped rather than
            # refused (a refusal is an error the server logs, with the key).
            await conn.execute(insert_new(engine.dialect.name, usage), rows)
            if session_id is not None and rows[0]["subject_key"] is not None:
                # In the run's own transaction: under the erasure fence exactly as its ledger rows are.
                await conn.execute(insert_new(engine.dialect.name, subject_sessions).values(
                    session_key=rows[0]["session_key"], subject_key=rows[0]["subject_key"],
                    session_id=session_id, created_at=datetime.now(UTC)))
    except SQLAlchemyError as exc:
        raise StoreUnavailable(
            f"could not write the usage ledger for run {rows[0]['run_id']}: {describe_failure(exc)}",
            hint="check the database; run `teamstore db upgrade` if ts_usage is missing",
        ) from exc


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


async def sweep_session_ids(engine: AsyncEngine, older_than: datetime) -> int:
    """Delete the session ids recorded before ``older_than`` whose session has no ledger row left.

    Returns:
        How many were deleted.

    Raises:
        StoreUnavailable: The database failed.
    """
    c = subject_sessions.c
    gone = ~exists().where(usage.c.session_key == c.session_key)
    try:
        async with engine.begin() as conn:
            result = await conn.execute(delete(subject_sessions).where(c.created_at < older_than, gone))
    except SQLAlchemyError as exc:
        raise StoreUnavailable(
            f"could not sweep the recorded session ids: {describe_failure(exc)}",
            hint="check the database and run `teamstore retention sweep` again",
        ) from exc
    return result.rowcount or 0
