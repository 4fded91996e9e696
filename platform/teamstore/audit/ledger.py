"""The usage ledger: token counts per run, attempt, agent, model and purpose, for cost queries.

    from teamstore.audit.ledger import usage_insert, usage_params, usage_rows

    rows = usage_rows(ctx, outcome, keys)    # pure: one row per (attempt, agent, model, purpose)
    stmt = usage_insert("postgresql", len(rows))   # one INSERT, fenced; a row already recorded is skipped
    added = (await conn.execute(stmt, usage_params(rows, user_id, keys.subject_key))).rowcount
    await record_usage(engine, rows, ctx.session_id)   # rows as given, unfenced: seeding and backfills

A run's insert is made by the audit's run writes (:mod:`teamstore.audit.run_writes`), one statement in its
own transaction: it writes only while the user's subject is still the one the rows are keyed by and no
erasure holds the user, both checked in its own ``WHERE``. The session's id is recorded beside its key the
same way (:func:`session_name_insert`), once per session and process.

Token counts are the record; cost is derived at query time (``teamstore.audit.cost``). Every model call
the metering wrapper saw is counted, SelectorGroupChat's speaker selection included.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from sqlalchemy import ColumnElement, Select, and_, delete, exists, func, literal, select, tuple_, union_all
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.ext.asyncio import AsyncEngine
from sqlalchemy.sql.dml import Insert

from teamstore.audit.schema import ledger_name, subject_sessions, subjects, usage
from teamstore.audit.stop_reasons import recordable
from teamstore.audit.subjects import SUBJECT, USER
from teamstore.audit.transcripts.record import RunKeys
from teamstore.db.clock import shared_now
from teamstore.db.engine import describe_failure
from teamstore.db.fence import held
from teamstore.db.statements import insert_new
from teamstore.errors import StoreUnavailable
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
        One row per attempt at the run that made calls (``attempt``: 0 the first, ``n`` its ``n``-th continuation
        from a checkpoint), agent, model and purpose; empty when the run made no model call. A continued run's
        record holds the calls its checkpoint carried under the attempts that made them: those an earlier
        attempt recorded already (it ended the run, and its worker died before the save that clears the
        checkpoint) take that attempt's key, and are skipped as recorded.
    """
    totals: dict[tuple[int, str, str, str], list[int]] = {}
    for call in outcome.model_calls:
        group = (call.attempt, ledger_name(call.agent), ledger_name(call.model), call.purpose)
        entry = totals.setdefault(group, [0, 0, 0, 0])
        entry[0] += 1
        entry[1] += 0 if call.usage_known else 1  # failed, cancelled, or answered without usage
        entry[2] += call.input_tokens
        entry[3] += call.output_tokens
    common = {
        "run_id": ctx.run_id,
        "team": ctx.team,
        "team_version": ctx.team_version,
        "session_key": keys.session_key,
        "subject_key": keys.subject_key,
        "stop_reason": recordable(outcome.stop_reason),
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
            "attempt": n,
            "agent": a,
            "model": m,
            "purpose": p,
            "calls": c,
            "failed_calls": f,
            "input_tokens": i,
            "output_tokens": o,
        }
        for (n, a, m, p), (c, f, i, o) in totals.items()
    ]


def usage_insert(dialect: str, count: int) -> Insert:
    """The INSERT of ``count`` ledger rows, fenced in its own ``WHERE``.

    The rows (parameters ``<column>_<i>``, :func:`usage_params`) are written only while the user ``u`` still
    has the subject ``subject`` they are keyed by (an erasure deletes the mapping, and a user who comes back
    gets a new subject) and no erasure holds ``u``: so rows keyed by a subject remembered from an earlier run
    are checked in the write itself, and ``0`` rows written says to look the subject up again. A row already
    recorded (the same run, attempt, agent, model and purpose: the same record sent again, or the calls a
    continuation's checkpoint carried that the attempt before it recorded) is skipped rather than refused (a
    refusal is an error the server logs, with the key).

    Args:
        dialect: ``postgresql`` or ``sqlite``.
        count: How many rows (one per attempt, agent, model and purpose of the run).
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


SESSION_NAME_COLUMNS = ("session_key", "subject_key", "session_id", "created_at")


def session_name_insert(dialect: str) -> Insert:
    """The INSERT of a session's id beside its key (``ts_subject_sessions``), fenced as :func:`usage_insert`
    is: written only while the user ``u`` still has the subject ``subject`` and no erasure holds ``u``, so an
    erasure that deleted the mapping is never followed by a session id it would not find. A session already
    named is skipped. Parameters: ``u``, ``subject``, ``session_key``, ``session_id``, and on SQLite ``created_at``.
    """
    values = select(
        Param("session_key", subject_sessions.c.session_key.type).label("session_key"),
        SUBJECT.label("subject_key"),
        Param("session_id", subject_sessions.c.session_id.type).label("session_id"),
        # On the database's clock, as the sweep's cutoff is (on SQLite, this host's: the statement is compiled
        # once, so the time is a parameter).
        (func.now() if dialect == "postgresql" else Param("created_at", subject_sessions.c.created_at.type))
        .label("created_at"),
    ).subquery("v")
    mapped = exists().where(subjects.c.user_id == USER, subjects.c.subject_key == SUBJECT)
    insert_: Insert = insert_new(dialect, subject_sessions).from_select(
        SESSION_NAME_COLUMNS, select(*values.c).where(mapped, ~held(USER)))
    return insert_


async def record_usage(engine: AsyncEngine, rows: list[dict[str, Any]], session_id: str | None = None) -> None:
    """Insert rows as given, in one transaction, unfenced (seeding a ledger, backfills; a run's own rows go
    through :func:`usage_insert`); a run already recorded is left as it is.

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
                    session_id=session_id, created_at=shared_now(engine.dialect.name)))
    except SQLAlchemyError as exc:
        raise StoreUnavailable(
            f"could not write the usage ledger for run {rows[0]['run_id']}: {describe_failure(exc)}",
            hint="check the database; run `teamstore db upgrade` if ts_usage is missing",
        ) from exc


async def sweep_ledger(engine: AsyncEngine, older_than: datetime, batch_size: int = 5000) -> int:
    """Delete ledger rows of runs that started on a day (UTC) before the one ``older_than`` falls on, in batches.

    Whole days, as ``teamstore ledger export`` writes them: a day the sweep had cut through would be exported
    again with part of its runs, over the file that held them all.

    Returns:
        How many rows were deleted.

    Raises:
        StoreUnavailable: The database failed; the batches deleted before it stay deleted.
    """
    removed = 0
    while True:
        try:
            async with engine.begin() as conn:
                ids = select(usage.c.id).where(usage.c.day < older_than.astimezone(UTC).date()).limit(batch_size)
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


async def sweep_session_ids(engine: AsyncEngine, older_than: datetime, batch_size: int = 5000) -> int:
    """Delete the session ids recorded before ``older_than`` whose session has no ledger row left, in batches.

    Each batch takes the next ones in the order they were recorded (``ix_ts_subject_sessions_created_at``,
    migration 0019), after the last one the batch before it looked at: an old session whose ledger rows are still
    kept (it went on running) is looked at once per sweep, not again by every batch.

    Returns:
        How many were deleted.

    Raises:
        StoreUnavailable: The database failed; the batches deleted before it stay deleted.
    """
    removed, after = 0, None
    while True:
        try:
            async with engine.begin() as conn:
                found = (await conn.execute(_unnamed_sessions(older_than, after, batch_size))).all()
                if found:
                    # Checked again as it deletes: a run of the session recorded meanwhile keeps its id.
                    result = await conn.execute(delete(subject_sessions).where(
                        subject_sessions.c.session_key.in_([key for _, key in found]), _unnamed(older_than)))
                    removed += result.rowcount or 0
        except SQLAlchemyError as exc:
            raise StoreUnavailable(
                f"could not sweep the recorded session ids after removing {removed}: {describe_failure(exc)}",
                hint="check the database and run `teamstore retention sweep` again",
            ) from exc
        if len(found) < batch_size:
            return removed
        after = tuple(found[-1])


def _unnamed(older_than: datetime) -> ColumnElement[bool]:
    """A session id recorded before ``older_than`` that no ledger row names any more."""
    c = subject_sessions.c
    return and_(c.created_at < older_than, ~exists().where(usage.c.session_key == c.session_key))


def _unnamed_sessions(older_than: datetime, after: tuple[Any, ...] | None, limit: int) -> Select[Any]:
    """The next ``limit`` session ids :func:`_unnamed` holds for, as (recorded, key), after ``after``."""
    c = subject_sessions.c
    query = select(c.created_at, c.session_key).where(_unnamed(older_than))
    if after is not None:
        query = query.where(tuple_(c.created_at, c.session_key)
                            > tuple_(literal(after[0], c.created_at.type), literal(after[1], c.session_key.type)))
    return query.order_by(c.created_at, c.session_key).limit(limit)
