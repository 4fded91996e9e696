"""The Python API for notebooks: synchronous, inside a running event loop too, rows or a DataFrame, the
same filters and figures as the command line (SQLite and a real Postgres)."""

from __future__ import annotations

import json
import sys
import threading
from decimal import Decimal
from pathlib import Path

import pytest
from sqlalchemy.ext.asyncio import AsyncEngine
from typer.testing import CliRunner

from teamstore import analytics
from teamstore.cli import app
from teamstore.errors import MissingExtra, NoMatchingUsage
from tests.analytics.seed import TOTAL
from tests.analytics.test_cost_query import GROUPINGS


def test_cost_is_a_plain_call_returning_rows_with_exact_costs(ledger_env: AsyncEngine) -> None:
    report = analytics.cost(by="team,model", since="2026-11-01", until="2026-12-31")
    assert {row.key: row.cost for row in report.rows} == GROUPINGS["team,model"]
    assert report.total.cost == TOTAL and isinstance(report.total.cost, Decimal)
    assert [row.group for row in analytics.cost(by=("session",), user="alice", top=1).rows] == [
        {"user": "alice", "session": "s1"}]


def test_the_api_and_the_command_line_give_the_same_report(ledger_env: AsyncEngine) -> None:
    args = ["--by", "week,model", "--team", "support", "--since", "2026-11-01", "--format", "json"]
    cli = json.loads(CliRunner().invoke(app, ["cost", *args]).stdout)
    api = analytics.cost(by="week,model", team="support", since="2026-11-01").to_dict()
    assert json.loads(json.dumps(api)) == cli


async def test_cost_works_where_an_event_loop_is_already_running(ledger_env: AsyncEngine) -> None:
    # As in a Jupyter cell: the kernel's loop is running, and the call is still a plain call.
    seen: list[str] = []
    real = analytics.api.cost_report

    async def spy(*args: object, **kwargs: object) -> object:
        seen.append(threading.current_thread().name)
        return await real(*args, **kwargs)  # type: ignore[arg-type]

    analytics.api.cost_report = spy  # type: ignore[assignment]
    try:
        report = analytics.cost(by="month")
    finally:
        analytics.api.cost_report = real  # type: ignore[assignment]
    assert report.total.cost == TOTAL and seen and seen[0].startswith("teamstore-analytics")


def test_cost_frame_is_a_dataframe_of_the_rows(ledger_env: AsyncEngine) -> None:
    frame = analytics.cost_frame(by="team,model")
    assert list(frame.columns[:2]) == ["team", "model"] and len(frame) == 4
    assert sum(c for c in frame["cost"] if c is not None) == TOTAL
    assert int(frame["input_tokens"].sum()) == 13650
    assert set(frame.loc[frame["model"] == "mystery", "unpriced_tokens"]) == {55}


def test_without_pandas_a_dataframe_names_the_extra_to_install(
    ledger_env: AsyncEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    report = analytics.cost(by="team")
    monkeypatch.setitem(sys.modules, "pandas", None)  # as if it were not installed
    with pytest.raises(MissingExtra) as caught:
        report.to_pandas()
    assert caught.value.extra == "analytics" and caught.value.hint == "pip install 'teamstore[analytics]'"


def test_nothing_matching_raises_unless_an_empty_report_is_asked_for(ledger_env: AsyncEngine) -> None:
    with pytest.raises(NoMatchingUsage) as caught:
        analytics.cost(by="team", team="suport")
    assert caught.value.suggestions == ("support",)
    empty = analytics.cost(by="team", team="suport", allow_empty=True)
    assert empty.rows == [] and empty.total.cost == 0


def test_write_report_to_a_folder_is_refused_before_anything_is_queried(tmp_path: Path) -> None:
    from teamstore.errors import ReportNotWritten

    with pytest.raises(ReportNotWritten, match="is a folder"):
        analytics.write_report(tmp_path)  # no database anywhere: refused before it is looked for


def test_write_report_writes_the_page_the_command_writes(ledger_env: AsyncEngine, tmp_path: Path) -> None:
    page = analytics.write_report(tmp_path / "cost.html", every="week", since="2026-11-01")
    text = page.read_text(encoding="utf-8")
    assert text.startswith("<!doctype html>") and 'id="cost-by-team"' in text


@pytest.mark.parametrize("holding", ["another applications table", "nothing (an empty file)"])
def test_a_read_never_writes_teamstores_tables_into_a_database_it_finds_none_in(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, holding: str
) -> None:
    import sqlite3

    from teamstore.errors import SchemaNotReady

    path = tmp_path / "other.sqlite"
    with sqlite3.connect(path) as conn:
        if holding.startswith("another"):
            conn.execute("CREATE TABLE customers (id INTEGER PRIMARY KEY, name TEXT)")
    monkeypatch.setenv("TEAMSTORE_DATABASE_URL", f"sqlite:///{path.as_posix()}")
    with pytest.raises(SchemaNotReady, match="has no teamstore tables"):
        analytics.cost()
    result = CliRunner().invoke(app, ["cost"], env={"COLUMNS": "200"})
    assert result.exit_code == 1 and "has no teamstore tables" in result.output
    with sqlite3.connect(path) as conn:
        tables = [name for (name,) in conn.execute("SELECT name FROM sqlite_master")]
    assert tables == (["customers"] if holding.startswith("another") else [])


def test_the_notebook_example_says_what_its_plot_needs_beyond_the_analytics_extra() -> None:
    """pandas' ``.plot()`` draws with matplotlib, which the ``analytics`` extra does not install: the docs'
    example that plots must say so, not leave the reader a ModuleNotFoundError."""
    import tomllib

    root = Path(__file__).resolve().parents[2]
    extra = tomllib.loads((root / "pyproject.toml").read_text(encoding="utf-8"))["project"][
        "optional-dependencies"]["analytics"]
    section = (root / "docs" / "analysts.md").read_text(encoding="utf-8").split("## In Python and notebooks")[1]
    section = section.split("\n## ")[0]
    assert "pip install 'teamstore[analytics]'" in section
    if ".plot(" in section and not any(need.startswith("matplotlib") for need in extra):
        assert "pip install matplotlib" in section
