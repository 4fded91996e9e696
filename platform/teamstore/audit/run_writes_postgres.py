"""The audit's per-run statements on Postgres: compiled once for psycopg, sent in autocommit on a pool of the
audit's own (:mod:`teamstore.audit.run_writes` says why).

    writes = PostgresRunWrites(engine, pool_size=20)
    subject, fenced = await writes.subject("alice")
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any

import psycopg
from psycopg import AsyncRawCursor
from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncEngine

from teamstore.audit.ledger import session_name_insert, usage_insert, usage_params
from teamstore.audit.run_writes import session_name_params, unavailable
from teamstore.audit.schema import usage
from teamstore.audit.subjects import Subject, subject_lookup, subject_of
from teamstore.state.direct import DirectPool, Statement, for_psycopg

_CONNECTION_WAIT = 10.0  # each connection is held for one statement
_LOOKUP = for_psycopg(subject_lookup())
_NAME = for_psycopg(session_name_insert("postgresql"))


@functools.lru_cache(maxsize=64)
def _postgres_insert(count: int) -> Statement:
    """The fenced ledger insert of ``count`` rows, compiled once per count (a run writes a row per agent,
    model and purpose: a handful)."""
    return for_psycopg(usage_insert("postgresql", count))


@functools.lru_cache(maxsize=64)
def _postgres_end(count: int) -> Statement:
    """The end-of-run fence with the fenced ledger insert of ``count`` rows in the same statement (and the same
    snapshot): ``(subject key, session secret, held, rows written)``."""
    written = usage_insert("postgresql", count).returning(usage.c.id).cte("written")
    return for_psycopg(subject_lookup().add_columns(select(func.count()).select_from(written).scalar_subquery()))


class PostgresRunWrites:
    """The statements compiled for psycopg and sent in autocommit on a pool of the audit's own.

    Args:
        engine: A ``postgresql+psycopg`` engine the caller owns; only its URL is used here.
        pool_size: The most connections open at once.
    """

    def __init__(self, engine: AsyncEngine, pool_size: int) -> None:
        self._pool = DirectPool(engine, pool_size, holds="audit writes")

    async def _run(self, stmt: Statement, params: Mapping[str, Any]) -> tuple[tuple[Any, ...] | None, int]:
        """Run ``stmt`` on a pooled connection: its first row (if it returns any) and how many rows it
        wrote. Once more on a fresh connection if the pooled one had been ended by the server (a restart, a
        failover): both statements may run twice, as the lookup only reads and a ledger row already written
        is skipped."""
        stale = 0
        while True:
            conn = await self._pool.checkout(_CONNECTION_WAIT)
            cursor = AsyncRawCursor(conn)
            try:
                await cursor.execute(stmt.sql, stmt.args(params))
                row = await cursor.fetchone() if cursor.description is not None else None
            except BaseException:
                await self._pool.checkin(conn, discard=conn.broken)
                if conn.broken and stale < self._pool.size:
                    stale += 1
                    continue
                raise
            await self._pool.checkin(conn)
            return row, cursor.rowcount

    async def subject(self, user_id: str) -> tuple[Subject | None, bool]:
        """See :meth:`RunWrites.subject`."""
        try:
            row, _ = await self._run(_LOOKUP, {"u": user_id})
        except psycopg.Error as exc:
            raise unavailable(exc, "resolve the audit subject") from exc
        assert row is not None  # a SELECT of three expressions and no FROM: always one row
        return subject_of(row[0], row[1]), bool(row[2])

    async def insert_usage(self, rows: list[dict[str, Any]], *, user_id: str, subject_key: str) -> int:
        """See :meth:`RunWrites.insert_usage`."""
        try:
            _, added = await self._run(_postgres_insert(len(rows)), usage_params(rows, user_id, subject_key))
        except psycopg.Error as exc:
            raise unavailable(exc, f"write the usage ledger for run {rows[0]['run_id']}") from exc
        return max(added, 0)

    async def end_of_run(self, rows: list[dict[str, Any]], *, user_id: str, subject_key: str) -> tuple[Subject | None, bool, int]:
        """See :meth:`RunWrites.end_of_run`: one statement, the insert in a ``WITH`` beside the lookup."""
        try:
            row, _ = await self._run(_postgres_end(len(rows)), usage_params(rows, user_id, subject_key))
        except psycopg.Error as exc:
            raise unavailable(exc, f"write the usage ledger for run {rows[0]['run_id']}") from exc
        assert row is not None  # a SELECT of four expressions and no FROM: always one row
        return subject_of(row[0], row[1]), bool(row[2]), int(row[3])

    async def name_session(self, *, user_id: str, subject_key: str, session_key: str, session_id: str) -> None:
        """See :meth:`RunWrites.name_session`."""
        params = session_name_params(user_id=user_id, subject_key=subject_key, session_key=session_key,
                                     session_id=session_id)
        try:
            await self._run(_NAME, params)
        except psycopg.Error as exc:
            raise unavailable(exc, "record the session's id beside its key") from exc

    async def aclose(self) -> None:
        """Close the pool's idle connections (it opens new ones when used again)."""
        await self._pool.close()
