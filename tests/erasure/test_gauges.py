"""The erasure gauges read only the requests they count, through an index, on SQLite and a real Postgres:
every request ever made stays in the table, and each collection on each worker counted all of them."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from sqlalchemy import Select
from sqlalchemy.ext.asyncio import AsyncEngine

from teamstore.erasure.metrics import completed_query, overdue_query, standing_query


async def _plan(engine: AsyncEngine, query: Select[object]) -> str:
    async with engine.connect() as conn:
        sql = str(query.compile(dialect=conn.dialect, compile_kwargs={"literal_binds": True}))
        if engine.dialect.name == "sqlite":
            return "\n".join(str(row[-1]) for row in await conn.exec_driver_sql(f"EXPLAIN QUERY PLAN {sql}"))
        # A table of a few rows is read whole whatever its indexes: ask for the plan it gets when large.
        await conn.exec_driver_sql("SET enable_seqscan = off")
        return "\n".join(str(row[0]) for row in await conn.exec_driver_sql(f"EXPLAIN {sql}"))


@pytest.mark.parametrize("query", [standing_query(), overdue_query(datetime.now(UTC)),
                                   completed_query(datetime.now(UTC))], ids=["standing", "overdue", "completed"])
async def test_each_erasure_gauge_reads_its_requests_through_the_status_index(
    engine: AsyncEngine, query: Select[object]
) -> None:
    plan = await _plan(engine, query)
    assert "ix_ts_erasure_requests_status" in plan, plan
    assert "Seq Scan" not in plan and "SCAN ts_erasure_requests" not in plan, plan
