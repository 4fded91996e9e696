"""`teamstore cost report`: one self-contained HTML page, opened in a real headless Chromium. It loads with
no console error, every chart is drawn with one mark per figure, and its figures are the command line's
for the same filters (SQLite and a real Postgres)."""

from __future__ import annotations

import asyncio
import errno
import itertools
import json
import os
import re
import stat
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy.ext.asyncio import AsyncEngine
from typer.testing import CliRunner

from teamstore.audit.ledger import record_usage
from teamstore.audit.subjects import ensure_subject, session_key
from teamstore.cli import app
from teamstore.db.engine import create_engine
from teamstore.errors import ReportNotWritten
from tests.analytics.seed import TOTAL, seed_ledger

runner = CliRunner()
FILTERS = ["--since", "2026-11-01", "--until", "2027-01-01"]


def _write(path: Path, *args: str) -> str:
    result = runner.invoke(app, ["cost", "report", *FILTERS, "--every", "week", "--output", str(path), *args])
    assert result.exit_code == 0, result.output
    return path.read_text(encoding="utf-8")


def _cli(*args: str) -> dict[str, Any]:
    result = runner.invoke(app, ["cost", *args, *FILTERS, "--format", "json"])
    assert result.exit_code == 0, result.output
    parsed: dict[str, Any] = json.loads(result.stdout)
    return parsed


def _marks(browser: Any, chart: str, kind: str = "rect.bar") -> list[dict[str, str]]:
    from selenium.webdriver.common.by import By

    found = browser.find_elements(By.CSS_SELECTOR, f"svg#{chart} {kind}")
    return [{"x": m.get_attribute("data-x"), "series": m.get_attribute("data-series"),
             "value": m.get_attribute("data-value")} for m in found]


def _shown(row: dict[str, Any]) -> str:
    """A cost as the page shows it: ``unknown`` with no priced token, ``+ unknown`` with some unpriced."""
    if row["cost"] is None:
        return "unknown"
    return f"{row['cost']} + unknown" if row["unpriced_tokens"] else str(row["cost"])


def test_the_page_renders_in_chromium_with_the_command_lines_figures(
    ledger_env: AsyncEngine, browser: Any, tmp_path: Path
) -> None:
    from selenium.webdriver.common.by import By

    page = tmp_path / "cost.html"
    _write(page)
    expected = {"by_time": _cli("--by", "week"), "cost_by_team": _cli("--by", "week,team"),
                "cost_by_model": _cli("--by", "week,model"), "top_sessions": _cli("--by", "session", "--top", "10")}

    browser.get(page.as_uri())
    assert browser.execute_script("return document.readyState") == "complete"
    errors = [e for e in browser.get_log("browser") if e["level"] in ("SEVERE", "WARNING")]
    assert errors == [], errors
    embedded = json.loads(browser.find_element(By.ID, "report-data").get_attribute("textContent"))
    assert embedded == expected  # each report whole, as `teamstore cost --format json` prints it

    for chart in ("cost-by-team", "cost-by-model", "top-sessions", "tokens-per-run", "runs-by-outcome"):
        svg = browser.find_element(By.ID, chart)
        assert svg.size["width"] > 300 and svg.size["height"] > 100, chart  # drawn, not an empty box
    by_team = {(m["x"], m["series"]): m["value"] for m in _marks(browser, "cost-by-team")}
    assert by_team == {(r["week"], r["team"]): _shown(r) for r in expected["cost_by_team"]["rows"]}
    assert len(by_team) == 3
    by_model = _marks(browser, "cost-by-model")
    assert sorted((m["x"], m["series"], m["value"]) for m in by_model) == sorted(
        (r["week"], r["model"], _shown(r)) for r in expected["cost_by_model"]["rows"])
    assert len(by_model) == 5
    sessions = _marks(browser, "top-sessions")
    assert [(m["x"], m["value"]) for m in sessions] == [(r["key"], _shown(r)) for r in expected["top_sessions"]["rows"]]
    assert [m["x"] for m in sessions] == ["alice / s1", "alice / s2", "dave / d1", "bob / s1", "carol / c1"]
    per_run = _marks(browser, "tokens-per-run", "circle.point")
    weeks = expected["by_time"]["rows"]
    assert [(m["x"], Decimal(m["value"])) for m in per_run] == [
        (r["week"], round(Decimal(r["input_tokens"] + r["output_tokens"]) / _runs(r), 1)) for r in weeks]
    outcomes = _marks(browser, "runs-by-outcome")
    assert len(outcomes) == 3 * len(weeks) and sum(int(m["value"]) for m in outcomes) == 5
    assert {(m["x"], m["series"]): int(m["value"]) for m in outcomes}[("2026-W46", "ended by a limit")] == 1
    bars = browser.find_elements(By.CSS_SELECTOR, "svg#cost-by-team rect.bar")
    assert all(b.rect["height"] > 0 for b in bars)  # every week's cost is above zero: every bar is seen

    # What a reader sees equals the command line's figures.
    assert browser.find_element(By.ID, "total-cost").text.split("\n")[-1] == f"{_shown(expected['by_time']['total'])} USD"
    assert Decimal(expected["by_time"]["total"]["cost"]) == TOTAL
    assert browser.find_element(By.ID, "total-runs").text.split("\n")[-1] == "5"
    assert browser.find_element(By.ID, "total-limited").text.split("\n")[-1] == "1"
    table = [row.text for row in browser.find_elements(By.CSS_SELECTOR, "#top-sessions-table tr")][1:]
    rows = expected["top_sessions"]["rows"]
    assert len(table) == len(rows) and all(line.endswith(f" {_shown(r)}") for line, r in zip(table, rows, strict=True))
    assert "No price for mystery" in browser.find_element(By.TAG_NAME, "body").text


def _runs(row: dict[str, Any]) -> int:
    return int(row["runs_completed"] + row["runs_limited"] + row["runs_failed"])


def test_the_page_loads_nothing_and_runs_no_script(ledger_env: AsyncEngine, tmp_path: Path) -> None:
    text = _write(tmp_path / "cost.html")
    assert "Content-Security-Policy\" content=\"default-src 'none'; style-src 'unsafe-inline'\"" in text
    assert re.findall(r"https?://[^\"'<> ]+", text) == ["http://www.w3.org/2000/svg"] * text.count("<svg ")
    assert "<script src" not in text and "<link" not in text and "<img" not in text
    assert re.findall(r"<script[^>]*>", text) == ['<script type="application/json" id="report-data">']


def test_a_pseudonymous_page_names_no_user_or_session(ledger_env: AsyncEngine, tmp_path: Path) -> None:
    readable = _write(tmp_path / "readable.html")
    keys = _write(tmp_path / "keys.html", "--pseudonymous")
    assert "alice / s1" in readable and "Users and sessions are named by the application" in readable
    for name in ("alice", "bob", "carol", "dave", "s1", "s2", "c1", "d1"):
        assert not re.search(rf"\b{name}\b", keys), name
    assert "pseudonymous keys only" in keys


async def _odd_names(url: str) -> None:
    engine = create_engine(url)
    subject, secret = await ensure_subject(engine, "eve")
    started = datetime(2026, 11, 20, 10, tzinfo=UTC)
    await record_usage(engine, [{
        "run_id": "odd", "team": "<img src=x onerror=alert(1)>", "team_version": "v1", "subject_key": subject,
        "session_key": session_key(secret, "</script><b>"), "stop_reason": None, "ended_by_limit": False,
        "run_failed": False, "started_at": started, "finished_at": started, "day": started.date(),
        "purpose": "agent", "failed_calls": 0, "agent": "a", "model": "m-big", "input_tokens": 1, "output_tokens": 1,
        "calls": 1}], "</script><b>")
    await engine.dispose()


def test_names_that_look_like_markup_are_shown_as_text(ledger_env: AsyncEngine, database_url: str,
                                                       tmp_path: Path) -> None:
    asyncio.run(_odd_names(database_url))
    text = _write(tmp_path / "cost.html")
    assert "<img src=x" not in text and "&lt;img src=x onerror=alert(1)&gt;" in text
    assert text.count("</script>") == 1 and "\\u003c/script>\\u003cb>" in text  # the data block stays whole


async def _reordering_names(url: str) -> None:
    engine = create_engine(url)
    subject, secret = await ensure_subject(engine, "eve")
    started = datetime(2026, 11, 20, 10, tzinfo=UTC)
    await record_usage(engine, [{
        "run_id": "rlo", "team": "team\u202e", "team_version": "v1", "subject_key": subject,
        "session_key": session_key(secret, "s\u202e9"), "stop_reason": None, "ended_by_limit": False,
        "run_failed": False, "started_at": started, "finished_at": started, "day": started.date(),
        "purpose": "agent", "failed_calls": 0, "agent": "a", "model": "m\u202e", "input_tokens": 1,
        "output_tokens": 1, "calls": 1}], "s\u202e9")
    await engine.dispose()


def test_a_name_with_a_bidirectional_override_is_shown_escaped_and_turns_no_figure_around(
    ledger_env: AsyncEngine, database_url: str, browser: Any, tmp_path: Path
) -> None:
    from selenium.webdriver.common.by import By

    asyncio.run(_reordering_names(database_url))
    page = tmp_path / "cost.html"
    _write(page)
    browser.get(page.as_uri())
    body = browser.find_element(By.TAG_NAME, "body").text
    titles = browser.execute_script("return [...document.querySelectorAll('title')].map(t => t.textContent)")
    assert "\u202e" not in body + "".join(titles)  # an override would show the figures after it reversed
    assert "eve / s\\u202e9" in body and "No price for mystery, m\\u202e" in body and "team\\u202e" in body
    marks = _marks(browser, "top-sessions")
    assert "eve / s\u202e9" in [m["x"] for m in marks]  # the page's data keep each name exact


def test_nothing_to_chart_exits_3_and_writes_no_page(ledger_env: AsyncEngine, tmp_path: Path) -> None:
    page = tmp_path / "cost.html"
    result = runner.invoke(app, ["cost", "report", "--team", "suport", "--output", str(page)])
    assert result.exit_code == 3 and "did you mean 'support'?" in result.output and not page.exists()


def test_a_page_that_cannot_be_written_is_refused_before_the_query_with_its_fix(
    ledger_env: AsyncEngine, tmp_path: Path
) -> None:
    (tmp_path / "a-file").write_text("kept")
    for output, says in ((str(tmp_path / "missing" / "cost.html"), "does not exist"), (str(tmp_path), "is a folder"),
                         ("", "no file given"), (str(tmp_path / "a-file" / "cost.html"), "does not exist"),
                         (str(tmp_path / ("a" * 300 + ".html")), "could not write")):
        result = runner.invoke(app, ["cost", "report", "--output", output])
        said = " ".join(result.output.split())  # as one line: the terminal wraps it
        assert result.exit_code == 1 and says in said and "fix:" in said, (output, said)
        assert "Traceback" not in said
    assert (tmp_path / "a-file").read_text() == "kept"


def test_the_page_is_owner_only_and_a_second_one_replaces_the_first_whole(
    ledger_env: AsyncEngine, tmp_path: Path
) -> None:
    folder = tmp_path / "reports"
    folder.mkdir()
    page = folder / "cost.html"
    page.write_text("last week's page", encoding="utf-8")
    page.chmod(0o644)
    before = os.umask(0o022)  # the usual umask, which made the page readable by everyone
    try:
        with page.open(encoding="utf-8") as reader:  # a reader of the old page, as the new one is written
            text = _write(page)
            assert reader.read() == "last week's page"  # replaced, not rewritten in place under the reader
    finally:
        os.umask(before)
    assert stat.S_IMODE(page.stat().st_mode) == 0o600 and "alice / s1" in text
    assert [p.name for p in folder.iterdir()] == ["cost.html"]  # nothing left beside it
    said = runner.invoke(app, ["cost", "report", "--help"], env={"COLUMNS": "200"}).stdout
    assert "owner-only (0600); one already there is replaced" in said


def test_a_page_that_fails_as_it_is_written_leaves_the_old_one_and_nothing_beside_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from teamstore.analytics.page import write_page

    page = tmp_path / "cost.html"
    page.write_text("last week's page", encoding="utf-8")

    def full(*_: object) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "replace", full)
    with pytest.raises(ReportNotWritten, match="No space left on device"):
        write_page(page, "<html>this week's page</html>")
    assert [p.name for p in tmp_path.iterdir()] == ["cost.html"]
    assert page.read_text(encoding="utf-8") == "last week's page"


def test_periods_without_runs_keep_their_place_on_the_time_axis(ledger_env: AsyncEngine, tmp_path: Path) -> None:
    text = _write(tmp_path / "cost.html")  # runs in weeks 45, 46 and 49 only
    for chart in ("cost-by-team", "cost-by-model", "runs-by-outcome", "tokens-per-run"):
        svg = text[text.index(f'id="{chart}"'):]
        svg = svg[:svg.index("</svg>")]
        labels = re.findall(r'<text class="label"[^>]*>([^<]+)</text>', svg)
        assert [label for label in labels if label.startswith("2026-W")] == [
            "2026-W45", "2026-W46", "2026-W47", "2026-W48", "2026-W49"], chart


@pytest.mark.parametrize(("keys", "every", "periods"), [
    (["2026-12-30", "2027-01-02"], "day", ["2026-12-30", "2026-12-31", "2027-01-01", "2027-01-02"]),
    (["2026-W52", "2027-W02"], "week", ["2026-W52", "2026-W53", "2027-W01", "2027-W02"]),
    (["2026-11", "2027-02"], "month", ["2026-11", "2026-12", "2027-01", "2027-02"]),
    (["2026-11"], "month", ["2026-11"]),
    (["2026-01", "2026-02"], "month", ["2026-01", "2026-02"]),
    (["2025-12", "2027-01"], "month", ["2025-12", *(f"2026-{m:02d}" for m in range(1, 13)), "2027-01"]),
    (["2019", "2022"], "year", ["2019", "2020", "2021", "2022"]),
    (["2020-01-01", "2026-01-01"], "day", None),  # more periods than an axis lays out: the runs' own
    (["not a day"], "day", None),
])
def test_a_time_axis_lays_out_every_period_from_the_first_to_the_last(
    keys: list[str], every: str, periods: list[str] | None
) -> None:
    from teamstore.analytics.periods import periods as laid_out

    assert laid_out(keys, every) == periods


LONG = "a-team-with-a-name-nobody-thought-would-ever-be-shown-in-a-chart_v2"


async def _long_names(url: str) -> None:
    engine = create_engine(url)
    await seed_ledger(engine, [
        ("long", "user-with-a-long-identifier-0123456789abcdef0123456789@example.com", "session-" + "x" * 60, LONG,
         "v1", "2026-11-20", "completed", [("a", "mystery", 185152000000000, 28708000000000, 1)])])
    await engine.dispose()


def test_on_a_phone_the_page_is_laid_out_at_the_phones_width_and_long_names_wrap_inside_it(
    ledger_env: AsyncEngine, database_url: str, browser: Any, tmp_path: Path
) -> None:
    asyncio.run(_long_names(database_url))
    page = tmp_path / "cost.html"
    _write(page)
    browser.execute_cdp_cmd("Emulation.setDeviceMetricsOverride",
                            {"width": 390, "height": 844, "deviceScaleFactor": 2, "mobile": True})
    browser.get(page.as_uri())
    width, wide = browser.execute_script(
        "return [document.documentElement.clientWidth, document.documentElement.scrollWidth]")
    assert width == 390  # laid out for the phone, not at a desktop's 980 pixels shrunk to fit
    assert wide <= width  # no name, table or figure runs off the side of the screen
    lines = browser.execute_script(  # the lines each word of a figure's cell is drawn on
        "return [...document.querySelectorAll('#top-sessions-table td:not(:nth-child(2))')].flatMap(td => {"
        " const text = td.firstChild; return [...text.data.matchAll(/\\S+/g)].map(m => {"
        " const r = document.createRange(); r.setStart(text, m.index); r.setEnd(text, m.index + m[0].length);"
        " return r.getClientRects().length }) })")
    assert lines and set(lines) == {1}  # a name wraps; a figure is never broken across lines


def test_a_cost_chart_with_no_priced_cost_says_so_and_what_to_do_not_an_empty_box_scaled_to_1(
    ledger_env: AsyncEngine, browser: Any, tmp_path: Path
) -> None:
    from selenium.webdriver.common.by import By

    page = tmp_path / "cost.html"
    _write(page, "--model", "mystery")  # the one model with no price
    browser.get(page.as_uri())
    for chart in ("cost-by-team", "cost-by-model", "top-sessions"):
        svg = browser.find_element(By.ID, chart)
        said = svg.find_element(By.CSS_SELECTOR, "text.empty")
        assert said.is_displayed() and "have no price. Add them to the price table" in said.text, chart
        assert [t.text for t in svg.find_elements(By.CSS_SELECTOR, "text.tick")] in ([], ["0"]), chart  # no "1 USD"
    assert browser.find_elements(By.CSS_SELECTOR, "svg#tokens-per-run text.empty") == []  # it has tokens to draw
    assert "No price for mystery" in browser.find_element(By.TAG_NAME, "body").text


def test_a_screen_reader_hears_each_chart_named_by_its_heading_and_each_mark_by_its_figure(
    ledger_env: AsyncEngine, browser: Any, tmp_path: Path
) -> None:
    from selenium.webdriver.common.by import By

    page = tmp_path / "cost.html"
    _write(page)
    browser.get(page.as_uri())
    for chart, heading in (("cost-by-team", "Cost over time by team"), ("tokens-per-run", "Tokens per run"),
                           ("top-sessions", "The 5 sessions by cost")):
        assert browser.find_element(By.ID, chart).accessible_name == heading
    mark = browser.find_element(By.CSS_SELECTOR, 'svg#cost-by-team rect.bar[data-x="2026-W49"]')
    unmarked = str.maketrans("", "", "\u2068\u2069")  # the marks that keep a right-to-left name in its place
    assert mark.aria_role == "image"
    assert mark.accessible_name.translate(unmarked) == "2026-W49 · sales: 0.0021 + unknown USD"
    point = browser.find_element(By.CSS_SELECTOR, 'svg#tokens-per-run circle.point[data-x="2026-W49"]')
    assert point.accessible_name.translate(unmarked) == "2026-W49: 11055.0 tokens"


def test_printed_a_chart_is_kept_whole_on_one_page_under_its_heading(
    ledger_env: AsyncEngine, browser: Any, tmp_path: Path
) -> None:
    page = tmp_path / "cost.html"
    _write(page)
    browser.execute_cdp_cmd("Emulation.setEmulatedMedia", {"media": "print"})
    browser.get(page.as_uri())
    kept = browser.execute_script(
        "return [...document.querySelectorAll('svg.chart')].map(svg => { const section = svg.closest('section');"
        " return [svg.id, getComputedStyle(section).breakInside,"
        " getComputedStyle(section.querySelector('h2')).breakAfter] })")
    assert kept == [[chart, "avoid", "avoid"] for chart in (
        "cost-by-team", "cost-by-model", "top-sessions", "tokens-per-run", "runs-by-outcome")]


async def _giant_and_tiny(url: str) -> None:
    engine = create_engine(url)
    await seed_ledger(engine, [
        ("giant", "eve", "g1", "giant", "v1", "2026-11-20", "completed", [("a", "m-big", 185152000000000, 0, 1)]),
        ("tiny", "eve", "t1", "tiny", "v1", "2026-11-20", "completed", [("a", "m-small-2024", 1, 0, 1)])])
    await engine.dispose()


@pytest.mark.parametrize(("team", "top"), [("giant", "555.5M"), ("tiny", "0.00000015")])
def test_an_axis_gives_its_top_figure_as_a_reader_reads_one_never_as_an_exponent(
    ledger_env: AsyncEngine, database_url: str, browser: Any, tmp_path: Path, team: str, top: str
) -> None:
    from selenium.webdriver.common.by import By

    asyncio.run(_giant_and_tiny(database_url))
    page = tmp_path / "cost.html"
    _write(page, "--team", team)  # 185152000000000 tokens at 3 USD a million: 555456000 USD; 1 at 0.15: 0.00000015
    browser.get(page.as_uri())
    ticks = [t.text for t in browser.find_elements(By.CSS_SELECTOR, "svg#cost-by-team text.tick")]
    assert ticks == ["0", top]


async def _twelve_teams(url: str) -> None:
    engine = create_engine(url)
    await seed_ledger(engine, [(f"t{n}", "eve", f"s{n}", f"team-{n:02d}", "v1", "2026-11-20", "completed",
                                [("a", "m-big", 1000 * (20 - n), 0, 1)]) for n in range(12)])
    await engine.dispose()


def test_past_ten_teams_no_two_share_a_colour_and_the_smallest_are_named_together_in_grey(
    ledger_env: AsyncEngine, database_url: str, browser: Any, tmp_path: Path
) -> None:
    from selenium.webdriver.common.by import By

    asyncio.run(_twelve_teams(database_url))
    page = tmp_path / "cost.html"
    _write(page, "--user", "eve")  # twelve teams, team-00 the costliest
    browser.get(page.as_uri())
    legend = browser.find_elements(By.CSS_SELECTOR, "#cost-by-team ~ ul.legend li")
    swatches = [li.find_element(By.CLASS_NAME, "swatch").value_of_css_property("background-color") for li in legend]
    assert len(set(swatches)) == len(swatches) == 10  # one colour, one item
    assert legend[-1].text == "the other 3: team-09, team-10, team-11"
    fills = {m.get_attribute("data-series"): m.get_attribute("fill")
             for m in browser.find_elements(By.CSS_SELECTOR, "svg#cost-by-team rect.bar")}
    assert len(fills) == len(set(fills.values())) == 10  # the three in grey are one mark, their sum
    assert "team-09" not in fills and fills["the other 3"] != fills["team-00"]
    grey = browser.find_element(By.CSS_SELECTOR, 'svg#cost-by-team rect.bar[data-series="the other 3"]')
    assert grey.get_attribute("data-value") == "0.09"  # 11000, 10000 and 9000 tokens in at 3 USD a million


def test_the_page_says_which_periods_its_runs_started_in_and_which_price_table_it_used(
    ledger_env: AsyncEngine, browser: Any, tmp_path: Path
) -> None:
    from selenium.webdriver.common.by import By

    page = tmp_path / "cost.html"
    result = runner.invoke(app, ["cost", "report", "--every", "week", "--output", str(page)])  # the whole ledger
    assert result.exit_code == 0, result.output
    browser.get(page.as_uri())
    meta = browser.find_element(By.CSS_SELECTOR, "p.meta").text
    assert meta.startswith("the whole ledger · runs started 2026-W45 to 2026-W49 · every week · prices hand-1 (USD)")
    page.unlink()
    result = runner.invoke(app, ["cost", "report", "--every", "week", "--output", str(page), *FILTERS])
    assert result.exit_code == 0, result.output
    browser.get(page.as_uri())
    meta = browser.find_element(By.CSS_SELECTOR, "p.meta").text  # the days given, as given
    assert meta.startswith("since 2026-11-01, until 2027-01-01 · runs started"), meta


async def _right_to_left_user(url: str) -> None:
    engine = create_engine(url)
    await seed_ledger(engine, [("rtl", "مستخدم", "42", "فريق", "v1", "2026-11-20", "completed",
                                [("a", "m-big", 1000, 10, 1)])])
    await engine.dispose()


LEFT_OF = """
const [where, first, second] = arguments;
const place = text => { const walk = document.createTreeWalker(where, NodeFilter.SHOW_TEXT);
  for (let node = walk.nextNode(); node; node = walk.nextNode()) { const at = node.data.indexOf(text);
    if (at >= 0) { const r = document.createRange(); r.setStart(node, at); r.setEnd(node, at + text.length);
      return r.getBoundingClientRect().left } } };
return place(first) < place(second);
"""


def test_a_right_to_left_user_is_read_before_their_session_as_the_page_names_it(
    ledger_env: AsyncEngine, database_url: str, browser: Any, tmp_path: Path
) -> None:
    from selenium.webdriver.common.by import By

    asyncio.run(_right_to_left_user(database_url))
    page = tmp_path / "cost.html"
    _write(page, "--team", "فريق")
    browser.get(page.as_uri())
    cell = browser.find_element(By.CSS_SELECTOR, "#top-sessions-table tr:nth-child(2) td:nth-child(2)")
    label = browser.find_element(By.CSS_SELECTOR, "svg#top-sessions text.label")
    for shown in (cell, label):  # as "alice / 7" reads: the user on the left, "/", then the session
        assert browser.execute_script(LEFT_OF, shown, "مستخدم", "/"), shown.tag_name
        assert browser.execute_script(LEFT_OF, shown, "/", "42"), shown.tag_name


def test_the_labels_under_the_most_days_a_chart_draws_stand_apart(ledger_env: AsyncEngine, database_url: str,
                                                                  browser: Any, tmp_path: Path) -> None:
    from selenium.webdriver.common.by import By

    from teamstore.analytics.page import MOST_BARS

    async def the_most_days(url: str) -> None:
        engine = create_engine(url)
        days = [date(2026, 1, 1), date(2026, 1, 1) + timedelta(days=MOST_BARS - 1)]
        await seed_ledger(engine, [(f"y{day}", "eve", "y", "yearly", "v1", day.isoformat(), "completed",
                                    [("a", "m-big", 9, 9, 1)]) for day in days])
        await engine.dispose()

    asyncio.run(the_most_days(database_url))
    page = tmp_path / "cost.html"
    result = runner.invoke(app, ["cost", "report", "--team", "yearly", "--output", str(page)])  # every day
    assert result.exit_code == 0, result.output
    browser.get(page.as_uri())
    labels = browser.find_elements(By.CSS_SELECTOR, "svg#cost-by-team text.label")
    assert labels[0].text == "2026-01-01" and len(labels) >= 6
    edges = [(label.rect["x"], label.rect["x"] + label.rect["width"]) for label in labels]
    assert all(right + 4 <= left for (_, right), (left, _) in itertools.pairwise(edges)), edges


CHARTS = ("cost-by-team", "cost-by-model", "top-sessions", "tokens-per-run", "runs-by-outcome")
CHART_TEXT = """
return [...document.querySelectorAll('svg text')].filter(t => t.getClientRects().length).map(t => {
  const svg = t.closest('svg').getBoundingClientRect(), box = t.getBoundingClientRect();
  return [t.closest('svg').id, t.textContent, parseFloat(getComputedStyle(t).fontSize) * t.getScreenCTM().a,
          box.left >= svg.left - 1 && box.right <= svg.right + 1] })
"""


async def _a_small_cost(url: str) -> None:
    engine = create_engine(url)  # 111 output tokens of m-big: 0.001665, an axis figure of eight characters
    await seed_ledger(engine, [("t1", "eve", "t", "tiny", "v1", "2026-11-20", "completed", [("a", "m-big", 0, 111, 1)])])
    await engine.dispose()


@pytest.mark.parametrize("args", [(), ("--model", "mystery"), ("--team", "tiny")],
                         ids=["costs", "no-priced-cost", "a-long-figure"])
def test_on_a_phone_each_chart_is_drawn_for_its_width_with_text_as_large_as_on_a_desktop(
    ledger_env: AsyncEngine, database_url: str, browser: Any, tmp_path: Path, args: tuple[str, ...]
) -> None:
    page = tmp_path / "cost.html"
    if "tiny" in args:
        asyncio.run(_a_small_cost(database_url))  # its top figure was cut to ".001665" at the phone chart's left
    _write(page, *args)
    browser.execute_cdp_cmd("Emulation.setDeviceMetricsOverride",
                            {"width": 390, "height": 844, "deviceScaleFactor": 2, "mobile": True})
    browser.get(page.as_uri())
    shown = browser.execute_script(CHART_TEXT)  # each text drawn: its chart, its size on the screen, inside it
    assert [(chart, text, round(size, 1)) for chart, text, size, _ in shown if size < 10.5] == []  # not 5px
    assert [(chart, text) for chart, text, _, inside in shown if not inside] == []  # no label cut off at a side
    assert {chart for chart, *_ in shown} == {f"{chart}-small" for chart in CHARTS}  # one of each, the phone's
    for chart in CHARTS:  # the phone's chart has the desktop's marks, figures and names
        kind = "circle.point" if chart == "tokens-per-run" else "rect.bar"
        assert _marks(browser, f"{chart}-small", kind) == _marks(browser, chart, kind), chart
    width, wide = browser.execute_script(
        "return [document.documentElement.clientWidth, document.documentElement.scrollWidth]")
    assert wide <= width == 390


def _rgb(css: str) -> tuple[float, ...]:
    return tuple(float(n) for n in re.findall(r"[\d.]+", css)[:3])


def _luminance(css: str) -> float:
    linear = [c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4 for c in (v / 255 for v in _rgb(css))]
    return 0.2126 * linear[0] + 0.7152 * linear[1] + 0.0722 * linear[2]


def _contrast(one: str, other: str) -> float:
    """WCAG 2's contrast ratio of two computed colours (``rgb(r, g, b)``)."""
    light, dark = sorted((_luminance(one), _luminance(other)), reverse=True)
    return (light + 0.05) / (dark + 0.05)


COLOURS = """
const style = (selector, property) => [...document.querySelectorAll(selector)]
  .filter(e => e.getClientRects().length).map(e => getComputedStyle(e)[property]);
// the page's background: the body's, else the root's, else the browser's canvas (white, as the page declares none)
const page = [document.body, document.documentElement].map(e => getComputedStyle(e).backgroundColor)
  .find(c => c !== 'rgba(0, 0, 0, 0)') || 'rgb(255, 255, 255)';
return {page, chart: style('svg.chart, svg.small-chart', 'backgroundColor')[0],
  text: style('body, h1, h2, .meta, .summary div, .summary b, td, th, .legend li, .note, .warn', 'color'),
  labels: style('svg text', 'fill'), axis: style('svg .axis', 'stroke'),
  marks: [...style('svg .bar, svg .point', 'fill'), ...style('svg .line', 'stroke')],
  swatches: style('.swatch', 'backgroundColor')};
"""


def _seen(browser: Any, page: Path, media: str = "screen") -> dict[str, Any]:
    browser.execute_cdp_cmd("Emulation.setEmulatedMedia",
                            {"media": media, "features": [{"name": "prefers-color-scheme", "value": "dark"}]})
    browser.get(page.as_uri())
    seen: dict[str, Any] = browser.execute_script(COLOURS)
    return seen


def test_in_a_dark_scheme_the_page_is_dark_its_text_reads_4_5_to_1_and_its_marks_3_to_1(
    ledger_env: AsyncEngine, database_url: str, browser: Any, tmp_path: Path
) -> None:
    asyncio.run(_twelve_teams(database_url))  # every colour of the palette, the shared grey among them
    page = tmp_path / "cost.html"
    _write(page)
    seen = _seen(browser, page)
    assert _luminance(seen["page"]) < 0.02 and _luminance(seen["chart"]) < 0.02, seen
    assert "No price for mystery" in browser.find_element("tag name", "body").text  # the warning is among them
    low = [(c, round(_contrast(c, seen["page"]), 2)) for c in seen["text"] if _contrast(c, seen["page"]) < 4.5]
    assert low == []
    low = [(c, round(_contrast(c, seen["chart"]), 2)) for c in seen["labels"] if _contrast(c, seen["chart"]) < 4.5]
    assert low == []
    assert len(set(seen["marks"])) == 10 and set(seen["swatches"]) == set(seen["marks"])  # nine, and the grey
    marks = seen["marks"] + seen["axis"]
    low = [(c, round(_contrast(c, seen["chart"]), 2)) for c in marks if _contrast(c, seen["chart"]) < 3]
    assert low == []
    low = [(c, round(_contrast(c, seen["page"]), 2)) for c in seen["swatches"] if _contrast(c, seen["page"]) < 3]
    assert low == []


def test_printed_with_a_dark_scheme_the_page_stays_light(ledger_env: AsyncEngine, browser: Any,
                                                          tmp_path: Path) -> None:
    page = tmp_path / "cost.html"
    _write(page)
    seen = _seen(browser, page, media="print")
    assert _luminance(seen["page"]) > 0.9 and _luminance(seen["chart"]) > 0.9, seen
    assert all(_contrast(c, seen["page"]) >= 4.5 for c in seen["text"]), seen["text"]


HOSTILE = ("<script>alert(1)</script>", "\"quoted' <b>id</b>", "مستخدم", "🙂 emoji", "u" * 256)
"""User ids a page must show as written: markup, quotes, right-to-left text, an emoji, the longest id."""


async def _fifty_sessions(url: str) -> None:
    engine = create_engine(url)  # 55 sessions, the fifty costliest charted; 12 teams, some with long names
    await seed_ledger(engine, [
        (f"h{n}", HOSTILE[n % len(HOSTILE)], f"s-{n}-<img src=x onerror=alert(2)>",
         (LONG if n % 2 else "فريق") + f"-{n % 12}", "v1", f"2026-11-{1 + n % 28:02d}", "completed",
         [("a", "m-big", 1000 * (n + 1), 10, 1)]) for n in range(55)])
    await engine.dispose()


OVERLAPS = """
const out = [];
for (const svg of document.querySelectorAll('svg')) {
  if (!svg.getClientRects().length) continue;
  const texts = [...svg.querySelectorAll('text')].map(t => [t.textContent, t.getBoundingClientRect()]);
  texts.forEach(([one, a], i) => texts.slice(i + 1).forEach(([other, b]) => {
    if (a.left < b.right - 1 && b.left < a.right - 1 && a.top < b.bottom - 1 && b.top < a.bottom - 1)
      out.push([svg.id, one, other]) })) }
return out;
"""
OFF_SCREEN = """
const width = document.documentElement.clientWidth;
return [...document.querySelectorAll('body *')].filter(e => e.getClientRects().length
  && e.getBoundingClientRect().right > width + 1 && !e.closest('.scroll')).map(e => e.tagName + '#' + e.id);
"""


@pytest.mark.parametrize("width", [390, 1280])
def test_fifty_sessions_of_odd_long_names_overlap_nothing_run_nothing_and_read_as_written(
    ledger_env: AsyncEngine, database_url: str, browser: Any, tmp_path: Path, width: int
) -> None:
    from selenium.common.exceptions import NoAlertPresentException
    from selenium.webdriver.common.by import By

    asyncio.run(_fifty_sessions(database_url))
    page = tmp_path / "cost.html"
    _write(page, "--top", "50")
    browser.execute_cdp_cmd("Emulation.setDeviceMetricsOverride",
                            {"width": width, "height": 900, "deviceScaleFactor": 1, "mobile": width < 720})
    browser.get(page.as_uri())
    assert browser.get_log("browser") == []  # no negative bar height, nothing refused by the policy
    with pytest.raises(NoAlertPresentException):
        browser.switch_to.alert.accept()
    assert browser.execute_script(OVERLAPS) == []  # fifty names beside fifty bars, each on its own line
    browser.execute_script("document.querySelectorAll('details').forEach(d => d.open = true)")
    assert browser.execute_script(OFF_SCREEN) == []  # only a table in its own scrolling box runs past the side
    wide, shown = browser.execute_script(
        "return [document.documentElement.scrollWidth, document.documentElement.clientWidth]")
    assert wide <= shown
    labels = [t.text for t in browser.find_elements(By.CSS_SELECTOR, "svg[id^=top-sessions] text.label")]
    titles = browser.execute_script("return [...document.querySelectorAll('svg[id^=top-sessions] .bar title')]"
                                    ".map(t => t.textContent)")
    assert [label for label in labels if "u" * 20 in label and len(label) > 40] == []  # cut short on the chart
    assert any("u" * 256 in title for title in titles)  # and whole in its mark's title
    assert browser.execute_script("return document.querySelectorAll('img, script:not(#report-data)').length") == 0
    assert browser.execute_script("return [...document.querySelectorAll('b')].every(b => b.closest('.summary'))")
    table = browser.find_element(By.ID, "top-sessions-table").text
    for name in ("<script>alert(1)</script>", "\"quoted' <b>id</b>", "🙂 emoji", "<img src=x onerror=alert(2)>"):
        assert name in table, name  # shown as the text it is
    assert len(browser.find_elements(By.CSS_SELECTOR, "#top-sessions-table tr")) == 51


def test_more_than_fifty_sessions_are_refused_with_the_command_that_lists_them(ledger_env: AsyncEngine,
                                                                                tmp_path: Path) -> None:
    page = tmp_path / "cost.html"
    result = runner.invoke(app, ["cost", "report", "--top", "51", "--output", str(page)])
    said = " ".join(result.output.split())
    assert result.exit_code == 1 and "'--top': it takes a number of sessions to chart from 1 to 50" in said and "--by session --top N" in said
    assert not page.exists()


FIGURES = """
const table = document.getElementById(arguments[0] + '-table'), heads = [...table.rows[0].cells].map(c => c.textContent);
return [...table.rows].slice(1).flatMap(row => [...row.cells].slice(1).map((cell, i) =>
  [row.cells[0].textContent, heads[i + 1], cell.textContent])).filter(([, , value]) => value !== '-');
"""
FOCUSED = """
const e = document.activeElement;
return [e.tagName, e.closest('section') ? e.closest('section').querySelector('h2').id : null];
"""


def test_a_reviewer_finds_a_language_a_title_named_charts_their_figures_as_tables_and_focus_in_reading_order(
    ledger_env: AsyncEngine, browser: Any, tmp_path: Path
) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys

    page = tmp_path / "cost.html"
    _write(page)
    browser.get(page.as_uri())
    assert browser.execute_script("return [document.documentElement.lang, document.title]") == [
        "en", "teamstore cost report"]
    for chart in CHARTS:  # named by its heading; its legend says each series in words, not by colour alone
        assert browser.find_element(By.ID, chart).accessible_name, chart
    for item in browser.find_elements(By.CSS_SELECTOR, "ul.legend li"):
        assert item.text.strip()
    for chart in ("cost-by-team", "cost-by-model", "runs-by-outcome"):  # each mark's figure is in its table
        marks = _marks(browser, chart)
        shown = browser.execute_script(FIGURES, chart)
        assert sorted(shown) == sorted([m["x"], m["series"], m["value"]] for m in marks), chart
    points = _marks(browser, "tokens-per-run", "circle.point")
    assert browser.execute_script(FIGURES, "tokens-per-run") == [[m["x"], "tokens per run", m["value"]] for m in points]
    table = browser.find_element(By.ID, "cost-by-team-table")
    assert not table.is_displayed()  # folded away under its summary until asked for
    body = browser.find_element(By.TAG_NAME, "body")
    stops = []
    for _ in range(5):  # Tab from the top: each chart's table, in the order of the charts
        body.send_keys(Keys.TAB) if not stops else browser.switch_to.active_element.send_keys(Keys.TAB)
        stops.append(browser.execute_script(FOCUSED))
    assert stops[:4] == [["SUMMARY", f"{chart}-title"] for chart in
                         ("cost-by-team", "cost-by-model", "tokens-per-run", "runs-by-outcome")]
    browser.execute_script("document.querySelector('section').querySelector('summary').focus()")
    browser.switch_to.active_element.send_keys(Keys.ENTER)  # opened by the keyboard
    assert table.is_displayed()
    browser.switch_to.active_element.send_keys(Keys.TAB)  # then its box, which the arrow keys scroll
    assert browser.execute_script("return [document.activeElement.className, document.activeElement.contains("
                                  "document.getElementById('cost-by-team-table'))]") == ["scroll", True]
    assert browser.switch_to.active_element.accessible_name == "Cost over time by team"


async def _many_teams(url: str) -> None:
    engine = create_engine(url)  # bob: 10 teams; eve: 120 teams, in the same week, one session each
    await seed_ledger(engine, [(f"b{n}", "bob", "b", f"team-{n:03d}", "v1", "2026-11-20", "completed",
                                [("a", "m-big", 1000 + n, 0, 1)]) for n in range(10)]
                      + [(f"e{n}", "eve", "e", f"team-{n:03d}", "v1", "2026-11-20", "completed",
                          [("a", "m-big", 1000 + n, 0, 1)]) for n in range(120)])
    await engine.dispose()


def test_a_page_of_120_teams_draws_as_many_marks_as_one_of_ten_and_embeds_at_most_its_cap_of_rows(
    ledger_env: AsyncEngine, database_url: str, browser: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from selenium.webdriver.common.by import By

    from teamstore.analytics import page as page_module

    asyncio.run(_many_teams(database_url))
    monkeypatch.setattr(page_module, "MOST_EMBEDDED_ROWS", 20)
    few, many = tmp_path / "few.html", tmp_path / "many.html"
    sizes = [len(_write(path, "--user", user).encode()) for path, user in ((few, "bob"), (many, "eve"))]
    assert sizes[1] - sizes[0] < 110 * 100  # each team past the tenth: its name in the legend, not a mark
    browser.get(many.as_uri())
    assert browser.get_log("browser") == []
    assert len(_marks(browser, "cost-by-team")) == 10
    grey = browser.find_element(By.CSS_SELECTOR, 'svg#cost-by-team rect.bar[data-series="the other 111"]')
    rows = _cli("--by", "week,team", "--user", "eve")["rows"][:111]  # the cheapest: team-000 to team-110
    assert Decimal(grey.get_attribute("data-value")) == sum(Decimal(r["cost"]) for r in rows)
    embedded = json.loads(browser.find_element(By.ID, "report-data").get_attribute("textContent"))
    assert len(embedded["cost_by_team"]["rows"]) == 20 and embedded["cost_by_team"]["rows_left_out"] == 100
    assert embedded["cost_by_team"]["rows"][-1]["team"] == "team-119"  # the latest (last by key) are kept
    assert "rows_left_out" not in embedded["by_time"]


A4 = {"paperWidth": 8.27, "paperHeight": 11.69, "marginTop": 0.4, "marginBottom": 0.4, "marginLeft": 0.4,
      "marginRight": 0.4}


def _pages(pdf: bytes) -> int:
    return len(re.findall(rb"/Type\s*/Page(?!s)", pdf))


def test_printed_the_page_is_a_pdf_of_a_few_pages_no_chart_or_table_row_cut_across_two(
    ledger_env: AsyncEngine, database_url: str, browser: Any, tmp_path: Path
) -> None:
    import base64

    asyncio.run(_fifty_sessions(database_url))
    page = tmp_path / "cost.html"
    _write(page, "--top", "50", "--every", "week")
    browser.get(page.as_uri())
    browser.execute_script("document.querySelectorAll('details').forEach(d => d.open = true)")  # as left open
    pdf = base64.b64decode(browser.execute_cdp_cmd("Page.printToPDF", A4)["data"])
    assert pdf.startswith(b"%PDF-") and 3 <= _pages(pdf) <= 8, _pages(pdf)
    # At A4's printed width (7.47in, 717px) in print media: each chart fits on a page (10.89in, 1045px) and
    # is kept whole, as each row of a table is; the figures' tables, a screen's, are not printed.
    browser.execute_cdp_cmd("Emulation.setDeviceMetricsOverride",
                            {"width": 717, "height": 1045, "deviceScaleFactor": 1, "mobile": False})
    browser.execute_cdp_cmd("Emulation.setEmulatedMedia", {"media": "print"})
    seen = browser.execute_script(
        "return {charts: [...document.querySelectorAll('svg.chart')].map(s => [s.id, s.getBoundingClientRect()"
        ".height <= 1045, getComputedStyle(s).breakInside]), rows: [...new Set([...document.querySelectorAll("
        "'#top-sessions-table tr')].map(r => getComputedStyle(r).breakInside))], figures: [...document"
        ".querySelectorAll('details.figures')].map(d => d.getClientRects().length)}")
    assert seen["charts"] == [[chart, True, "avoid"] for chart in CHARTS]
    assert seen["rows"] == ["avoid"] and set(seen["figures"]) == {0}


def test_right_to_left_teams_named_together_in_grey_read_in_their_order(
    ledger_env: AsyncEngine, database_url: str, browser: Any, tmp_path: Path
) -> None:
    from selenium.webdriver.common.by import By

    async def seed(url: str) -> None:
        engine = create_engine(url)  # the three cheapest, named together, are right-to-left: فريق-1, فريق-2, فريق-3
        names = [f"team-{n:02d}" for n in range(9)] + ["فريق-1", "فريق-2", "فريق-3"]
        await seed_ledger(engine, [(f"t{n}", "eve", f"s{n}", name, "v1", "2026-11-20", "completed",
                                    [("a", "m-big", 1000 * (20 - n), 0, 1)]) for n, name in enumerate(names)])
        await engine.dispose()

    asyncio.run(seed(database_url))
    page = tmp_path / "cost.html"
    _write(page, "--user", "eve")
    browser.get(page.as_uri())
    grey = browser.find_elements(By.CSS_SELECTOR, "#cost-by-team ~ ul.legend li")[-1]
    assert grey.text.startswith("the other 3: ")
    assert browser.execute_script(LEFT_OF, grey, "فريق-1", "فريق-2")  # not "2-فريق ,1-فريق", swapped by the comma
    assert browser.execute_script(LEFT_OF, grey, "فريق-2", "فريق-3")
