"""A full listing (``teamstore cost`` without ``--top``) streams its groups, on SQLite and a real Postgres:
every group in the order of its key, each with the figures of its own runs, read and printed one at a time
while the database's rows are still coming; and a ledger naming more models than the drivers take bound
parameters is priced all the same."""

from __future__ import annotations

import csv
import io
import json
import sqlite3
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from typing import Any

import pytest
from sqlalchemy import delete, insert, text
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncResult
from typer.testing import CliRunner

from teamstore.analytics.query import CostQuery, cost_listing, cost_report
from teamstore.audit import cost
from teamstore.audit.cost import CostFilter, CostRow, query_costs
from teamstore.audit.prices import parse_prices
from teamstore.audit.schema import subjects, usage
from teamstore.cli import app
from teamstore.cli import cost as cost_cli
from tests.analytics.seed import PRICES, seed_ledger

USERS = ["alice", "Bob", "'quoted", "erased", "zoë", "al", "al b"]
"""Ids whose labels sort apart from the ids (a quote, a live ``erased``), by case and code point, and a
prefix of another; ``al`` is erased below."""
MODELS = [("m-big", Decimal(3), Decimal(15)), ("m-small-2024", Decimal("0.15"), Decimal("0.60")), ("mystery", None, None)]
SESSIONS = 420


def _runs() -> list[Any]:
    runs = []
    for i in range(SESSIONS):
        model = MODELS[i % 3][0]
        day = (date(2026, 11, 1) + timedelta(days=i % 30)).isoformat()
        ended = ("completed", "limited", "failed")[i % 5 % 3]
        runs.append((f"r{i}", USERS[i % len(USERS)], f"s{(i * 37) % 1000:03d}", "support", "v1", day, ended,
                     [("triage", model, 100 + i, 10 + i, 1)]))
    return runs


def _expected() -> dict[tuple[str, str], tuple[int, int, Decimal | None]]:
    """Per user and session: runs, tokens, and cost (None: no price)."""
    found: dict[tuple[str, str], tuple[int, int, Decimal | None]] = {}
    for _run, user, session, *_, rows in _runs():
        (_agent, model, tokens_in, tokens_out, _calls), = rows
        _name, price_in, price_out = next(m for m in MODELS if m[0] == model)
        amount = None if price_in is None or price_out is None else \
            (tokens_in * price_in + tokens_out * price_out).scaleb(-6)
        found[(user, session)] = (1, tokens_in + tokens_out, amount)
    return found


@pytest.fixture
async def many(engine: AsyncEngine) -> AsyncEngine:
    """420 sessions of seven users, one of them (``al``) erased since: the subject mapping gone."""
    await seed_ledger(engine, _runs())
    async with engine.begin() as conn:
        await conn.execute(delete(subjects).where(subjects.c.user_id == "al"))
    return engine


async def _listing(engine: AsyncEngine, by: str = "session", **filters: Any) -> tuple[list[CostRow], CostRow]:
    async with cost_listing(engine, PRICES, CostQuery.build(by, **filters)) as listing:
        rows = [row async for row in listing.rows()]
        assert await listing.missing() is None
        return rows, listing.report.total


async def test_a_full_listing_is_every_group_in_key_order_with_its_own_runs_figures(many: AsyncEngine) -> None:
    rows, total = await _listing(many)
    assert [r.key for r in rows] == sorted(r.key for r in rows)  # as Python sorts them: by code point
    expected = _expected()
    live = {(u, s): v for (u, s), v in expected.items() if u != "al"}
    named = {(r.group["user"], r.group["session"]): (r.runs, r.tokens, r.cost) for r in rows
             if not r.group["session"].startswith("erased-")}
    assert named == {("'" + u if u in ("erased", "'quoted") else u, s): v for (u, s), v in live.items()}
    erased = [(r.runs, r.tokens, r.cost) for r in rows if r.group["session"].startswith("erased-")]
    assert sorted(erased, key=repr) == sorted((v for (u, _), v in expected.items() if u == "al"), key=repr)
    assert all(r.group["user"] == "erased" for r in rows if r.group["session"].startswith("erased-"))
    assert (total.runs, total.tokens) == (SESSIONS, sum(v[1] for v in expected.values()))
    assert total.cost == sum(v[2] for v in expected.values() if v[2] is not None)
    assert total.unpriced_models == ["mystery"]
    # The costliest-first path reads and names the groups its own way: the same groups, the same figures.
    everyone = await cost_report(many, PRICES, CostQuery.build("session", top=len(rows)))
    assert {r.key: r.figures() for r in everyone.rows} == {r.key: r.figures() for r in rows}


@pytest.mark.parametrize("by", ["user", "session,team", "week,user", "user,month", "team,day", "version,model"])
async def test_every_grouping_lists_the_rows_the_whole_report_holds_in_key_order(many: AsyncEngine, by: str) -> None:
    rows, total = await _listing(many, by)
    assert [r.key for r in rows] == sorted(r.key for r in rows)
    whole = await cost_report(many, PRICES, CostQuery.build(by, top=10_000))
    assert sorted((r.key, r.figures()) for r in rows) == sorted((r.key, r.figures()) for r in whole.rows)
    assert total.figures() == whole.total.figures()


async def test_the_listing_yields_its_first_row_before_the_database_has_sent_the_rest(
    many: AsyncEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    fetched: list[int] = []
    partitions = AsyncResult.partitions

    def counted(result: AsyncResult[Any], size: int | None = None) -> Any:
        async def each() -> Any:
            async for part in partitions(result, size):
                fetched.append(len(part))
                yield part
        return each()

    monkeypatch.setattr(AsyncResult, "partitions", counted)
    monkeypatch.setattr(cost, "STREAM_ROWS", 20)
    held, firsts = [], []
    async with cost_listing(many, PRICES, CostQuery.build("session")) as listing:
        async for _row in listing.rows():
            held.append(len(listing._stream._rows.groups))  # the groups being summed beside the one given
            if not firsts:
                firsts.append(len(fetched))
                if many.dialect.name == "postgresql":  # read through a server-side cursor, not fetched whole
                    assert await listing._conn.scalar(text("SELECT count(*) FROM pg_cursors")) == 1
    assert firsts == [1] and len(fetched) > 20  # the first row came out of the first 20 records
    assert max(held) <= 1


def test_the_command_prints_every_format_of_a_long_listing_as_the_report_holds_it(
    many: AsyncEngine, database_url: str, tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    prices = tmp_path / "prices.json"
    prices.write_text(json.dumps({"version": "hand-1", "currency": "USD", "models": {
        "m-big": [{"effective_from": "2020-01-01", "input": 3, "output": 15}],
        "m-small-*": [{"effective_from": "2020-01-01", "input": 0.15, "output": 0.60}]}}), encoding="utf-8")
    env = {"TEAMSTORE_DATABASE_URL": database_url, "TEAMSTORE_PRICES_PATH": str(prices), "COLUMNS": "200"}
    monkeypatch.setattr(cost_cli, "TABLE_PAGE", 100)
    invoke = CliRunner().invoke
    as_json = invoke(app, ["cost", "--format", "json"], env=env)
    assert as_json.exit_code == 0, as_json.output
    report = json.loads(as_json.stdout)
    keys = [r["key"] for r in report["rows"]]
    assert report["groups"] == len(keys) > 300 and keys == sorted(keys)
    assert as_json.stdout == cost_cli.dumps(report) + "\n"  # the document json.dumps gives, to the byte
    lines = list(csv.reader(io.StringIO(invoke(app, ["cost", "--format", "csv"], env=env).stdout)))
    assert [" / ".join(line[:2]) for line in lines[1:-1]] == keys and lines[-1][0] == "total"
    assert lines[-1][lines[0].index("cost")] == report["total"]["cost"]
    table = invoke(app, ["cost"], env=env).stdout
    assert table.count("cost by session (USD, prices hand-1)") == 1  # the title once, over the first page
    assert table.count(" completed ") == -(-len(keys) // 100)  # a heading over each page of 100
    assert [line.split()[0] for line in table.splitlines() if line.startswith(" total ")] == ["total"]
    assert report["total"]["cost"] + " + unknown" in table


async def test_a_ledger_of_more_models_than_the_drivers_take_parameters_is_priced(engine: AsyncEngine) -> None:
    # A parameter per model ran past SQLite's limit (this build's, read here) and Postgres's 65,535.
    limit = sqlite3.connect(":memory:").getlimit(sqlite3.SQLITE_LIMIT_VARIABLE_NUMBER)
    count = max(limit, 65_535) + 1
    started = datetime(2026, 11, 2, 10, tzinfo=UTC)
    common = {"agent": "triage", "purpose": "agent", "calls": 1, "failed_calls": 0, "team": "support",
              "team_version": "v1", "session_key": "k", "subject_key": "s", "stop_reason": None,
              "ended_by_limit": False, "run_failed": False, "started_at": started, "finished_at": started,
              "day": started.date()}
    async with engine.begin() as conn:
        await conn.execute(insert(usage), [{**common, "run_id": f"r{i // 1000}", "model": f"deploy-{i}",
                                            "input_tokens": 1_000_000, "output_tokens": 0} for i in range(count)])
    # Every name priced by itself, two periods each: the later one (2026-11-01) applies.
    prices = parse_prices({"version": "many", "models": {f"deploy-{i}": [
        {"effective_from": "2020-01-01", "input": 1, "output": 1},
        {"effective_from": "2026-11-01", "input": 2, "output": 1}] for i in range(count)}})
    whole = await query_costs(engine, prices, "team")
    top = await query_costs(engine, prices, "team", top=1)
    one = await query_costs(engine, prices, "team", where=CostFilter(model="deploy-7"))
    for report, calls in ((whole, count), (top, count), (one, 1)):
        (row,) = report.rows
        assert (row.calls, row.cost, row.unpriced_tokens) == (calls, Decimal(2 * calls), 0)



async def test_the_costliest_of_more_groups_than_one_query_can_name_have_their_runs(engine: AsyncEngine) -> None:
    # The runs of the groups kept were counted in one query naming each of them: an OR of over 1,000 groups, which
    # SQLite refused ("Expression tree is too large").
    runs = [(f"r{i}", "alice", f"s{i:04d}", "support", "v1", "2026-11-02", "completed",
             [("triage", "m-big", 100 + i, 10, 1)]) for i in range(1_100)]
    await seed_ledger(engine, runs)
    report = await query_costs(engine, PRICES, "session", top=1_050)
    assert len(report.rows) == 1_050 and all(row.runs == 1 for row in report.rows)
    assert report.rows[0].tokens == 100 + 1_099 + 10 and report.total.runs == 1_100
