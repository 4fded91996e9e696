"""`teamstore cost report` over spans longer than a chart draws legibly by the scale asked for: the time charts
are drawn by the first longer period that fits, the page and each figures table say so, every bar stays at least
`svg.MIN_BAR_WIDTH` pixels wide on a phone (390) and a desktop (1280) in a real headless Chromium, and every
figure is still the ledger's. On SQLite and a real Postgres."""

from __future__ import annotations

import asyncio
import json
from datetime import date, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy.ext.asyncio import AsyncEngine
from typer.testing import CliRunner

from teamstore.analytics.page import MOST_BARS
from teamstore.analytics.periods import drawn_scale
from teamstore.analytics.svg import MIN_BAR_WIDTH
from teamstore.cli import app
from teamstore.db.engine import create_engine
from tests.analytics.seed import seed_ledger

runner = CliRunner()
D = Decimal
COST = {"m-big": D("0.0045"), "m-small-2024": D("0.00021")}
"""A run's cost of 1000 input and 100 output tokens (seed.py's prices: 3 / 15 and 0.15 / 0.60 per million)."""
FIRST = date(2023, 1, 2)
YEARS = [(f"y{n}", "eve", f"s{n % 3}", ("north", "south")[n % 2], "v1", (FIRST + timedelta(days=9 * n)).isoformat(),
          "limited" if n % 7 == 0 else "completed", [("a", "m-small-2024" if n % 3 == 0 else "m-big", 1000, 100, 1)])
         for n in range(162)]
"""Eve's runs, one every nine days from 2023-01-02 to 2026-12-21: 1,450 days, 208 weeks, 48 months."""
LEDGER_TOTAL = sum((COST[run[-1][0][1]] for run in YEARS), D(0))

VISIBLE_BARS = """
return [...document.querySelectorAll('svg rect.bar')].filter(r => r.getClientRects().length
  && !r.closest('svg').id.startsWith('top-sessions')).map(r => [r.closest('svg').id, r.getBoundingClientRect().width])
"""


def _seed(url: str, runs: list[Any]) -> None:
    async def go() -> None:
        engine = create_engine(url)
        await seed_ledger(engine, runs)
        await engine.dispose()

    asyncio.run(go())


def _open(browser: Any, page: Path, width: int) -> None:
    browser.execute_cdp_cmd("Emulation.setDeviceMetricsOverride",
                            {"width": width, "height": 900, "deviceScaleFactor": 1, "mobile": width < 720})
    browser.get(page.as_uri())
    assert browser.get_log("browser") == []


def _bar_widths(browser: Any, width: int) -> dict[str, float]:
    """The narrowest drawn bar of each time chart the screen shows (the phone's below 720 pixels)."""
    narrowest: dict[str, float] = {}
    for chart, drawn in browser.execute_script(VISIBLE_BARS):
        narrowest[chart] = min(drawn, narrowest.get(chart, drawn))
    suffix = "-small" if width < 720 else ""
    assert set(narrowest) == {f"{c}{suffix}" for c in ("cost-by-team", "cost-by-model", "runs-by-outcome")}
    return narrowest


def _cost_json(*args: str) -> dict[str, Any]:
    result = runner.invoke(app, ["cost", *args, "--format", "json"])
    assert result.exit_code == 0, result.output
    parsed: dict[str, Any] = json.loads(result.stdout)
    return parsed


@pytest.mark.parametrize("width", [390, 1280])
def test_years_of_days_are_drawn_by_month_each_bar_legible_and_every_figure_the_ledgers(
    ledger_env: AsyncEngine, database_url: str, browser: Any, tmp_path: Path, width: int
) -> None:
    from selenium.webdriver.common.by import By

    _seed(database_url, YEARS)
    page = tmp_path / "cost.html"
    result = runner.invoke(app, ["cost", "report", "--user", "eve", "--every", "day", "--output", str(page)])
    assert result.exit_code == 0, result.output
    _open(browser, page, width)

    assert all(drawn >= MIN_BAR_WIDTH for drawn in _bar_widths(browser, width).values())
    note = browser.find_element(By.ID, "drawn-by").text
    assert note.startswith("Drawn by month, not by day: from 2023-01 to 2026-12") and "--by day" in note
    assert "every month" in browser.find_element(By.CLASS_NAME, "meta").text
    captions = browser.execute_script(
        "return [...document.querySelectorAll('table caption')].map(c => [c.closest('table').id, c.textContent])")
    assert dict(captions) == {f"{chart}-table": note for chart in ("cost-by-team", "cost-by-model",
                                                                     "tokens-per-run", "runs-by-outcome")}

    by_month = _cost_json("--by", "month", "--user", "eve")
    embedded = json.loads(browser.find_element(By.ID, "report-data").get_attribute("textContent"))
    assert embedded["by_time"] == by_month  # what `teamstore cost --by month` prints, whole
    assert len(by_month["rows"]) == 48
    marks = browser.find_elements(By.CSS_SELECTOR, "svg#cost-by-team rect.bar")
    assert sum(D(m.get_attribute("data-value")) for m in marks) == LEDGER_TOTAL  # every day's cost, in its month
    by_day = _cost_json("--by", "day", "--user", "eve")
    assert D(by_day["total"]["cost"]) == D(by_month["total"]["cost"]) == LEDGER_TOTAL
    outcomes = browser.find_elements(By.CSS_SELECTOR, "svg#runs-by-outcome rect.bar")
    assert sum(int(m.get_attribute("data-value")) for m in outcomes) == len(YEARS)
    assert browser.find_element(By.ID, "total-cost").text.split("\n")[-1] == f"{LEDGER_TOTAL} USD"


@pytest.mark.parametrize("width", [390, 1280])
@pytest.mark.parametrize(("days", "drawn"), [(MOST_BARS, "day"), (MOST_BARS + 1, "week")])
def test_the_most_days_a_chart_draws_stay_days_and_one_more_is_drawn_by_week(
    ledger_env: AsyncEngine, database_url: str, browser: Any, tmp_path: Path, width: int, days: int, drawn: str
) -> None:
    from selenium.webdriver.common.by import By

    first = date(2025, 3, 3)
    _seed(database_url, [(f"b{n}", "eve", "b", "edge", "v1", (first + timedelta(days=n)).isoformat(), "completed",
                          [("a", "m-big", 1000, 100, 1)]) for n in (0, days // 2, days - 1)])
    page = tmp_path / "cost.html"
    result = runner.invoke(app, ["cost", "report", "--user", "eve", "--output", str(page)])  # --every day
    assert result.exit_code == 0, result.output
    _open(browser, page, width)

    assert all(shown >= MIN_BAR_WIDTH for shown in _bar_widths(browser, width).values())
    assert f"every {drawn}" in browser.find_element(By.CLASS_NAME, "meta").text
    notes = browser.find_elements(By.ID, "drawn-by")
    assert [n.text.split(":")[0] for n in notes] == ([] if drawn == "day" else ["Drawn by week, not by day"])
    suffix = "-small" if width < 720 else ""
    labels = browser.find_elements(By.CSS_SELECTOR, f"svg#cost-by-team{suffix} text.label")
    assert labels[0].text == (first.isoformat() if drawn == "day" else "2025-W10")
    marks = browser.find_elements(By.CSS_SELECTOR, "svg#cost-by-team rect.bar")
    assert len(marks) == 3 and sum(D(m.get_attribute("data-value")) for m in marks) == 3 * COST["m-big"]


@pytest.mark.parametrize(("keys", "every", "drawn"), [
    (["2026-01-01", "2026-04-14"], "day", "day"),  # 104 days
    (["2026-01-01", "2026-04-15"], "day", "week"),  # 105 days, 16 weeks
    (["2024-01-01", "2025-12-28"], "day", "week"),  # Monday to Sunday: 104 weeks
    (["2024-01-01", "2025-12-29"], "day", "month"),  # 105 weeks, 24 months
    (["2024-W01", "2025-W52"], "week", "week"),
    (["2024-W01", "2026-W01"], "week", "month"),
    (["2017-01", "2025-08"], "month", "month"),  # 104 months
    (["2017-01", "2025-09"], "month", "year"),
    (["1900-01-01", "2026-12-31"], "day", "year"),  # 127 years: the longest period there is, however many
    (["2026-11-02"], "day", "day"),
    (["2026"], "year", "year"),
])
def test_a_span_is_drawn_by_the_first_scale_it_has_at_most_the_most_bars_of(keys: list[str], every: str,
                                                                              drawn: str) -> None:
    assert MOST_BARS == 104  # a phone's chart: 274 pixels of bars, each 0.76 of its room, 2 pixels at least
    assert drawn_scale(keys, every, MOST_BARS) == drawn
