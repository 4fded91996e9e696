"""docs/analysts.md run as written, on SQLite and Postgres, over the hand-worked ledger of tests/analytics (last
November) and two runs of the example team today: every ``teamstore cost``, report and ledger export line (to a
folder, and to S3 over HTTP), the notebook block, the SQL it gives for BI tools and the DuckDB query over the
exported folder. (Its DuckDB pricing query is run by tests/audit/test_ledger_export.py.)"""

from __future__ import annotations

import asyncio
import csv
import json
import re
import sys
import types
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import text

from teamstore.app import App
from teamstore.settings import Settings
from tests.analytics.conftest import PRICE_FILE
from tests.analytics.seed import seed_ledger
from tests.guides.guide import DOCS, Shell, commands, pieces

GUIDE = "analysts.md"


def _sql(language: str) -> list[str]:
    """The guide's ``sql`` blocks about ``language`` (the view's, or DuckDB's), each as its statements."""
    blocks = re.findall(r"```sql\n(.*?)```", (DOCS / GUIDE).read_text(encoding="utf-8"), re.DOTALL)
    return [statement for block in blocks if language in block for statement in block.split(";\n") if statement.strip()]


@pytest.fixture
def ledger(on_database: Shell, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Shell:
    """The hand-worked ledger (November 2026, priced by its own table) and two of alice's runs today."""
    prices = tmp_path / "prices.json"
    prices.write_text(json.dumps(PRICE_FILE), encoding="utf-8")
    monkeypatch.setenv("TEAMSTORE_PRICES_PATH", str(prices))
    on_database.json("registry", "add", "support_triage", "--factory", "teamstore.examples:support_triage",
                     "--persist", "researcher", "--context-bound", "20", "-m", "first version", "--label", "production")
    for text_ in ("My router keeps dropping", "It dropped again"):
        on_database.json("run", "--team", "support_triage", "--user", "alice", "--session", "s1", text_)

    async def seeded() -> None:
        app = App(Settings())
        try:
            await seed_ledger(app.engine)
        finally:
            await app.aclose()

    asyncio.run(seeded())
    return on_database


@pytest.mark.s3
def test_every_command_of_the_guide_runs(ledger: Shell, s3_bucket: str) -> None:
    ledger.replaced["s3://warehouse/"] = f"s3://{s3_bucket}/"
    said = {str(line): ledger.line(line) for line in commands(GUIDE)}
    assert len(said) == 9, list(said)

    with (ledger.cwd / "november.csv").open(encoding="utf-8") as november:
        users = {row["user"] for row in csv.DictReader(november)} - {"total"}
    assert users == {"alice", "carol", "dave"}  # bob's run started on December 1st
    agents = next(done.stdout for line, done in said.items() if "--session s1 --by agent" in line)
    assert "triage" in agents and "researcher" in agents
    assert "alice" not in next(done.stdout for line, done in said.items() if "--by month --pseudonymous" in line)
    assert (ledger.cwd / "cost.html").stat().st_size and (ledger.cwd / "triage.html").stat().st_size
    assert list((ledger.cwd / "warehouse" / "ledger").glob("day=2026-11-02/*.parquet"))
    exported = json.loads(next(done.stdout for line, done in said.items() if "s3://" in line))
    assert sorted(p["key"] for p in exported["partitions"]) == [
        "day=2026-11-02/part-00000.parquet", "day=2026-11-09/part-00000.parquet"]

    import duckdb

    (query,) = [q for q in _sql("read_parquet") if "prices" not in q]
    rows = duckdb.sql(query).fetchall()  # over ./warehouse/ledger, where the first export wrote it
    assert {(str(day), model) for day, model, *_ in rows} >= {("2026-11-02", "m-big"), ("2026-12-01", "mystery")}


def test_the_session_costs_sql_runs_on_the_database(ledger: Shell) -> None:
    statements = _sql("session_costs")
    assert len(statements) == 3

    async def answered() -> list[list[Any]]:
        app = App(Settings())
        try:
            async with app.engine.connect() as conn:
                return [list((await conn.execute(text(statement))).all()) for statement in statements]
        finally:
            await app.aclose()

    costliest, per_version, unknown = asyncio.run(answered())
    assert len(costliest) == 6  # November's five sessions and alice's s1, the costliest first, unpriced last
    costs = [row.cost for row in costliest]
    assert costs[0] is not None and costs[-1] is None and costs.index(None) == len(costs) - costs.count(None)
    assert {(row.team, row.team_version) for row in per_version} >= {("support", "v1"), ("sales", "v2")}
    assert all(row.unknown_usage_calls > 0 for row in unknown)


DRAWN: list[tuple[Any, str]] = []
PLOTS = types.ModuleType("guide_plot_backend")
"""A pandas plotting backend that keeps what it is given (pandas keeps the first module of a name it loads)."""
PLOTS.plot = lambda data, kind, **kwargs: DRAWN.append((data, kind))  # type: ignore[attr-defined]


def test_the_notebook_block_runs(ledger: Shell, monkeypatch: pytest.MonkeyPatch) -> None:
    """As in a notebook; the plot goes to a backend that keeps what it was given (the guide asks for matplotlib,
    which the analytics extra does not install)."""
    import pandas

    DRAWN.clear()
    monkeypatch.setitem(sys.modules, PLOTS.__name__, PLOTS)
    with pandas.option_context("plotting.backend", PLOTS.__name__):
        done = asyncio.run(pieces(GUIDE)["notebook.py"].run())
    assert {row.group["team"] for row in done["report"].rows} == {"support_triage", "sales"}
    ((weekly, kind),) = DRAWN
    assert kind == "line" and "support_triage" in weekly.columns and weekly.index.name == "week"
    assert (ledger.cwd / "cost.html").stat().st_size
