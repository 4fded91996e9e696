"""Tokens summed per price period in SQL, then priced: the same figures as pricing each run on the day it
started, across price changes, midnight, patterns beside exact names, unpriced models, continued runs and
erased users, on SQLite and a real Postgres.

Prices (per million tokens): ``m-big`` 3 / 15 from 2026-01-01, 2 / 10 from 2026-03-01; the pattern
``m-small-*`` 0.15 / 0.60 from 2026-01-01, 0.10 / 0.40 from 2026-02-15; the exact name ``m-small-exact``
(which the pattern also matches) 1 / 2 from 2026-02-01 only; ``mystery`` none.

| run | user / session | day | how it ended | rows: agent model in out | cost |
|---|---|---|---|---|---|
| r1 | alice / s1 | 2026-02-28 23:59:30, ends 03-01 | completed | triage m-big 1M 100k | 3 + 1.5 = 4.5 (its start day's) |
| r2 | alice / s1 | 2026-03-01 | a limit | triage m-big 1M 100k; critic m-small-2024 1M 0 | 2 + 1 + 0.1 = 3.1 |
| r3 | alice / s1 | 2026-01-20 | completed | critic m-small-2024 1M 1M; critic m-small-exact 1M 0 | 0.75 + unknown (1M) |
| r4 | bob / s1 | 2026-02-20 | completed | triage m-small-exact 1M 1M; triage mystery 10 5 | 3 + unknown (15) |
| r5 | bob / s1 | 2026-03-05 | a limit, continued once | triage m-big 1M 0 in each of two attempts | 2 + 2 = 4 |
"""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta
from decimal import Decimal

import pytest
from sqlalchemy import delete, insert, select, update
from sqlalchemy.ext.asyncio import AsyncEngine

from teamstore.analytics.query import CostQuery, cost_report
from teamstore.audit.cost import CostReport, query_costs
from teamstore.audit.cost_report import costliest
from teamstore.audit.cost_sums import GroupSums
from teamstore.audit.prices import parse_prices
from teamstore.audit.schema import subject_sessions, subjects, usage
from teamstore.audit.subjects import find_subject
from tests.analytics.seed import PRICES as PRICED_FROM_2020
from tests.analytics.seed import seed_ledger

D = Decimal
M = 1_000_000
PRICES = parse_prices({"version": "periods-1", "currency": "USD", "models": {
    "m-big": [{"effective_from": "2026-01-01", "input": 3, "output": 15},
              {"effective_from": "2026-03-01", "input": 2, "output": 10}],
    "m-small-*": [{"effective_from": "2026-01-01", "input": D("0.15"), "output": D("0.60")},
                  {"effective_from": "2026-02-15", "input": D("0.10"), "output": D("0.40")}],
    "m-small-exact": [{"effective_from": "2026-02-01", "input": 1, "output": 2}],
}})
RUNS = [
    ("r1", "alice", "s1", "support", "v1", "2026-02-28", "completed", [("triage", "m-big", M, M // 10, 1)]),
    ("r2", "alice", "s1", "support", "v1", "2026-03-01", "limited",
     [("triage", "m-big", M, M // 10, 1), ("critic", "m-small-2024", M, 0, 1)]),
    ("r3", "alice", "s1", "support", "v1", "2026-01-20", "completed",
     [("critic", "m-small-2024", M, M, 1), ("critic", "m-small-exact", M, 0, 1)]),
    ("r4", "bob", "s1", "sales", "v2", "2026-02-20", "completed",
     [("triage", "m-small-exact", M, M, 1), ("triage", "mystery", 10, 5, 1)]),
    ("r5", "bob", "s1", "sales", "v2", "2026-03-05", "limited", [("triage", "m-big", M, 0, 1)]),
]
TOTAL = D("15.35")
BY = {
    "session": {"alice / s1": D("8.35"), "bob / s1": D("7")},
    "user": {"alice": D("8.35"), "bob": D("7")},
    "team": {"sales": D("7"), "support": D("8.35")},
    "model": {"m-big": D("11.5"), "m-small-2024": D("0.85"), "m-small-exact": D("3"), "mystery": None},
    "agent": {"critic": D("0.85"), "triage": D("14.5")},
    "day": {"2026-01-20": D("0.75"), "2026-02-20": D("3"), "2026-02-28": D("4.5"), "2026-03-01": D("3.1"),
            "2026-03-05": D("4")},
    "month": {"2026-01": D("0.75"), "2026-02": D("7.5"), "2026-03": D("7.1")},
    "team,model": {"sales / m-big": D("4"), "sales / m-small-exact": D("3"), "sales / mystery": None,
                   "support / m-big": D("7.5"), "support / m-small-2024": D("0.85"),
                   "support / m-small-exact": None},
}


@pytest.fixture
async def periods(engine: AsyncEngine) -> AsyncEngine:
    """The five runs above: r1 made to span midnight, r5 continued once from its checkpoint."""
    await seed_ledger(engine, RUNS)
    started = datetime(2026, 2, 28, 23, 59, 30, tzinfo=UTC)
    async with engine.begin() as conn:
        await conn.execute(update(usage).where(usage.c.run_id == "r1").values(
            started_at=started, finished_at=started + timedelta(minutes=1)))
        await conn.execute(update(usage).where(usage.c.run_id == "r5").values(interruptions=1))
        first = (await conn.execute(select(usage).where(usage.c.run_id == "r5"))).mappings().one()
        again = {k: v for k, v in first.items() if k != "id"}
        await conn.execute(insert(usage).values({**again, "attempt": 1}))
    return engine


async def _report(engine: AsyncEngine, by: str, **given: object) -> CostReport:
    return await cost_report(engine, PRICES, CostQuery.build(by, **given))  # type: ignore[arg-type]


@pytest.mark.parametrize("by", list(BY))
async def test_tokens_are_priced_at_the_price_of_the_day_each_run_started_in_every_grouping(
    periods: AsyncEngine, by: str
) -> None:
    report = await _report(periods, by)
    assert {row.key: row.cost for row in report.rows} == BY[by]
    total = report.total
    assert (total.cost, total.limited_cost, total.unpriced_tokens, total.limited_unpriced_tokens) == (
        TOTAL, D("7.1"), M + 15, 0)
    assert total.unpriced_models == ["m-small-exact", "mystery"]
    assert (total.runs_completed, total.runs_limited, total.runs_failed, total.runs_interrupted) == (3, 2, 0, 1)
    assert sum(row.runs for row in report.rows) >= 5 and sum(row.calls for row in report.rows) == total.calls == 9


async def test_a_session_across_price_changes_counts_each_run_once_and_its_limited_cost_apart(
    periods: AsyncEngine,
) -> None:
    rows = {row.key: row for row in (await _report(periods, "session")).rows}
    alice, bob = rows["alice / s1"], rows["bob / s1"]
    assert (alice.runs_completed, alice.runs_limited, alice.runs_interrupted) == (2, 1, 0)
    assert (alice.limited_cost, alice.unpriced_tokens, alice.unpriced_models) == (D("3.1"), M, ["m-small-exact"])
    # r5's two attempts are one run, continued once, whose both attempts' tokens count.
    assert (bob.runs_completed, bob.runs_limited, bob.runs_interrupted) == (1, 1, 1)
    assert (bob.limited_cost, bob.input_tokens, bob.unpriced_models) == (D("4"), 3 * M + 10, ["mystery"])


async def test_top_and_every_format_agree_with_the_whole_report(periods: AsyncEngine) -> None:
    for by in BY:
        whole = await query_costs(periods, PRICES, by)
        for n in (1, 2, len(whole.rows)):
            top = await query_costs(periods, PRICES, by, top=n)
            assert top.rows == sorted(whole.rows, key=costliest)[:n] and top.total == whole.total, (by, n)
        assert whole.to_dict()["total"]["cost"] == "15.35", by


async def test_an_erased_users_tokens_keep_their_periods_prices_and_pseudonymous_keys_read_the_same(
    periods: AsyncEngine,
) -> None:
    alice = await find_subject(periods, "alice")
    keyed = {row.key: row.cost for row in (await _report(periods, "user", pseudonymous=True)).rows}
    assert keyed[alice] == D("8.35")
    async with periods.begin() as conn:  # what the erasure's ledger, session_ids and subject steps leave
        await conn.execute(update(usage).where(usage.c.subject_key == alice).values(subject_key=None))
        await conn.execute(delete(subject_sessions).where(subject_sessions.c.subject_key == alice))
        await conn.execute(delete(subjects).where(subjects.c.subject_key == alice))
    for pseudonymous in (False, True):
        costs = {row.key: row.cost for row in (await _report(periods, "user", pseudonymous=pseudonymous)).rows}
        assert costs["erased"] == D("8.35") and sum(costs.values()) == TOTAL


async def test_a_sessions_runs_on_many_days_at_one_price_reach_python_as_one_sum_per_model(
    engine: AsyncEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The rows crossing the wire are groups x models x price periods: a session's runs on forty days at
    two prices of one model are two sums, not forty."""
    start = date(2026, 2, 1)
    await seed_ledger(engine, [(f"r{i}", "alice", "s1", "support", "v1", (start + timedelta(days=i)).isoformat(),
                                "completed", [("triage", "m-big", 1000 * i, 10 * i, 1)]) for i in range(40)])
    sums: list[object] = []
    add_tokens = GroupSums.add_tokens

    def counting(rows: GroupSums, values: dict[str, object], figures: tuple[object, object, object]) -> None:
        sums.append(values["day"])
        add_tokens(rows, values, figures)

    monkeypatch.setattr(GroupSums, "add_tokens", counting)
    for top in (None, 1):
        sums.clear()
        report = await query_costs(engine, PRICES, "session", top=top)
        assert sorted(sums) == [date(2026, 1, 1), date(2026, 3, 1)], top  # m-big's two prices in force
        # 28 days of February at 3/15, 12 of March at 2/10, priced as each day's runs would be.
        feb, mar = range(28), range(28, 40)
        expected = sum(D(1000 * i * 3 + 10 * i * 15) for i in feb) + sum(D(1000 * i * 2 + 10 * i * 10) for i in mar)
        assert report.rows[0].cost == expected.scaleb(-6) and report.rows[0].runs_completed == 40


async def test_costs_by_year_sum_each_years_days_whole_and_with_top(engine: AsyncEngine) -> None:
    # 1000 in and 100 out: 0.0045 of m-big, 0.00021 of m-small-2024 at seed.py's prices.
    # 2024-12-30 and 2025-01-01 are both in ISO week 2025-W01: a year is the calendar's, not the ISO week's.
    runs = [(f"r{day}", "eve", "s", team, "v1", day, "completed", [("a", model, 1000, 100, 1)])
            for day, team, model in (("2024-12-30", "north", "m-big"), ("2025-01-01", "north", "m-big"),
                                     ("2025-12-31", "south", "m-small-2024"), ("2026-06-01", "south", "m-big"))]
    await seed_ledger(engine, runs)
    big, small = D("0.0045"), D("0.00021")
    by_year = await cost_report(engine, PRICED_FROM_2020, CostQuery.build("year"))
    assert {r.key: (r.cost, r.runs) for r in by_year.rows} == {
        "2024": (big, 1), "2025": (big + small, 2), "2026": (big, 1)}
    top = await cost_report(engine, PRICED_FROM_2020, CostQuery.build("year,team", top=2))
    assert [(r.key, r.cost, r.runs) for r in top.rows] == [
        ("2024 / north", big, 1), ("2025 / north", big, 1)]
    assert top.groups == 4 and top.total.cost == by_year.total.cost == 3 * big + small
