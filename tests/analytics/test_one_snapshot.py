"""A report read while runs are being recorded agrees with itself: its rows, its total and (for the HTML
page) its four reports all read one snapshot of the ledger, on SQLite and a real Postgres. A run of a new
user is recorded from another connection between the queries of one report, every time."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Any

import pytest
from sqlalchemy.ext.asyncio import AsyncEngine

from teamstore.analytics.page import report_data
from teamstore.analytics.query import CostQuery, cost_report
from teamstore.audit import cost_sums
from teamstore.audit.cost import CostReport, query_costs
from tests.analytics.seed import PRICES, TOTAL, seed_ledger

NOW = datetime(2026, 12, 2, 12, 0, tzinfo=UTC)


def land_a_run_before_each_count(engine: AsyncEngine, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Before each count of runs apart from the groups' tokens (the total's, after every group was read; a
    ``top`` report's groups'), a run of a new user is recorded and committed on another connection; returns
    the users whose runs landed."""
    landed: list[str] = []
    count: Callable[..., Awaitable[list[Any]]] = cost_sums.run_groups

    async def land_then_count(conn: Any, names: list[str], where: Any, *among: Any) -> list[Any]:
        user = f"late-{len(landed)}"
        await seed_ledger(engine, [(f"r-{user}", user, "s1", "support", "v1", "2026-11-09", "completed",
                                    [("triage", "m-big", 1000, 100, 1)])])
        landed.append(user)
        return await count(conn, names, where, *among)

    monkeypatch.setattr(cost_sums, "run_groups", land_then_count)
    return landed


def _agrees_with_itself(report: CostReport) -> None:
    rows, total = report.rows, report.total
    assert sum(r.runs for r in rows) == total.runs == 5  # what was committed when the report began
    assert sum(r.calls for r in rows) == total.calls == 10
    assert sum(r.tokens for r in rows) == total.tokens and total.cost == TOTAL
    assert all(r.calls for r in rows)  # no user with runs but no calls, tokens or cost


async def test_a_report_reads_its_rows_and_total_in_one_snapshot(
    ledger: AsyncEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    landed = land_a_run_before_each_count(ledger, monkeypatch)
    report = await cost_report(ledger, PRICES, CostQuery.build("user", now=NOW))
    assert len(landed) == 1  # after the groups were read, before the total's count
    _agrees_with_itself(report)
    assert {r.key for r in report.rows} == {"alice", "bob", "carol", "dave"}


async def test_the_pseudonymous_query_alone_reads_one_snapshot(
    ledger: AsyncEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    landed = land_a_run_before_each_count(ledger, monkeypatch)
    report = await query_costs(ledger, PRICES, "user")
    assert len(landed) == 1
    _agrees_with_itself(report)
    monkeypatch.undo()
    later = await query_costs(ledger, PRICES, "user")  # the next report sees the runs that landed
    assert later.total.runs == sum(r.runs for r in later.rows) == 5 + len(landed)


async def test_the_pages_four_reports_read_one_snapshot(ledger: AsyncEngine, monkeypatch: pytest.MonkeyPatch) -> None:
    landed = land_a_run_before_each_count(ledger, monkeypatch)
    reports = await report_data(ledger, PRICES, every="week", now=NOW)
    assert len(landed) == 5  # the total's count in each of the four reports, the top sessions' own
    totals = {name: (r.total.runs, r.total.calls, r.total.tokens, r.total.cost) for name, r in reports.items()}
    assert set(totals.values()) == {(5, 10, 15265, TOTAL)}, totals
    for name in ("by_time", "top_sessions"):  # a run of two models is a row of each in the others
        assert sum(r.runs for r in reports[name].rows) == reports[name].total.runs
    assert reports["top_sessions"].groups == 5
