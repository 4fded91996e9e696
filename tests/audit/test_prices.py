"""Prices that just work: exact decimals, entries matched by pattern, and the session_costs view priced
without anyone running `prices sync`, on SQLite and a real Postgres."""

from __future__ import annotations

import sqlite3
from datetime import date
from decimal import Decimal
from pathlib import Path

import pytest
from sqlalchemy import event, text
from sqlalchemy.ext.asyncio import AsyncEngine
from typer.testing import CliRunner

from teamstore.audit.ledger_observer import LedgerObserver
from teamstore.audit.observer import build_audit_observers
from teamstore.audit.price_sync import PriceSync
from teamstore.audit.prices import PriceTable, load_prices, parse_prices
from teamstore.audit.pseudonyms import Pseudonyms
from teamstore.cli import app
from teamstore.errors import ConfigurationError
from teamstore.settings import Settings
from tests.audit.teams import context, metered_round_robin, observe_run

TABLE = parse_prices({"version": "2026-12-01", "models": {
    "gpt-4o": [{"effective_from": "2024-05-13", "input": 5, "output": 15}],
    "gpt-4o-2024-*": [{"effective_from": "2024-08-06", "input": 2.5, "output": 10}],
    "gpt-4o-*": [{"effective_from": "2024-01-01", "input": 99, "output": 99}],
    "gpt-4o-mini-*": [{"effective_from": "2024-07-18", "input": 0.15, "output": 0.6}],
    "claude-?-5-*": [{"effective_from": "2024-06-20", "input": 3, "output": 15}],
}})


@pytest.mark.parametrize(("model", "entry", "price_in"), [
    ("gpt-4o", "gpt-4o", "5"),                           # an exact name first
    ("gpt-4o-2024-08-06", "gpt-4o-2024-*", "2.5"),       # then the longest pattern that matches
    ("gpt-4o-mini-2024-07-18", "gpt-4o-mini-*", "0.15"),  # gpt-4o-* matches too, but is shorter
    ("gpt-4o-audio-preview", "gpt-4o-*", "99"),
    ("claude-3-5-sonnet-20241022", "claude-?-5-*", "3"),
])
def test_a_model_takes_its_exact_entry_else_the_longest_matching_pattern(model: str, entry: str, price_in: str) -> None:
    price = TABLE.lookup(model, date(2025, 1, 1))
    assert price is not None and (price.model, price.input_per_million) == (entry, Decimal(price_in))


def test_a_model_no_entry_matches_and_a_day_before_its_first_price_are_unpriced() -> None:
    assert TABLE.lookup("GPT-4O", date(2025, 1, 1)) is None  # names are matched as written
    assert TABLE.lookup("gpt-4o-2024-08-06", date(2024, 8, 5)) is None


def test_costs_are_exact_decimals() -> None:
    price = parse_prices({"version": "v", "models": {"m": [{"effective_from": "2020-01-01", "input": 0.1,
                                                              "output": 0.2}]}}).lookup("m", date(2021, 1, 1))
    assert price is not None
    assert sum((price.cost(1_000_000, 0) for _ in range(3)), Decimal(0)) == Decimal("0.3")  # not 0.30000000000000004
    assert price.cost(75, 0) == Decimal("0.0000075")


CURRENT = ["gpt-4o", "gpt-4o-2024-11-20", "gpt-4o-mini", "gpt-4o-mini-2024-07-18", "gpt-4.1", "gpt-4.1-2025-04-14",
           "gpt-4.1-mini", "gpt-4.1-nano", "o1", "o1-2024-12-17", "o1-mini", "o3", "o3-2025-04-16", "o3-mini",
           "o4-mini", "o4-mini-2025-04-16", "gpt-5", "gpt-5-2025-08-07", "gpt-5-mini", "gpt-5-nano",
           "claude-3-5-sonnet-20241022", "claude-3-5-haiku-20241022", "claude-3-7-sonnet-20250219",
           "claude-3-7-sonnet-latest", "claude-sonnet-4-20250514", "claude-opus-4-20250514", "claude-opus-4-1-20250805",
           "claude-sonnet-4-5-20250929", "claude-haiku-4-5", "gemini-1.5-pro", "gemini-1.5-pro-002",
           "gemini-1.5-flash-002", "gemini-2.0-flash", "gemini-2.0-flash-001", "gemini-2.0-flash-lite",
           "gemini-2.5-pro", "gemini-2.5-flash", "gemini-2.5-flash-lite"]


@pytest.mark.parametrize("model", CURRENT)
def test_the_shipped_table_prices_the_current_models_of_the_default_providers(model: str) -> None:
    price = load_prices().lookup(model, date(2026, 11, 1))
    assert price is not None and price.source.startswith("https://"), model


# Every name autogen-ext 0.7.5's model clients know (the model-info tables and aliases of its OpenAI and
# Anthropic clients), but Meta's Llama API models, which have no published list price, and Anthropic's
# retired Claude 2.0, 2.1 and Instant 1.2.
AUTOGEN_KNOWN = [
    "gpt-3.5-turbo", "gpt-3.5-turbo-0125", "gpt-3.5-turbo-0613", "gpt-3.5-turbo-1106", "gpt-3.5-turbo-16k",
    "gpt-3.5-turbo-16k-0613", "gpt-3.5-turbo-instruct", "gpt-4", "gpt-4-0125-preview", "gpt-4-0613",
    "gpt-4-1106-preview", "gpt-4-1106-vision-preview", "gpt-4-32k", "gpt-4-32k-0613", "gpt-4-turbo",
    "gpt-4-turbo-2024-04-09", "gpt-4-turbo-preview", "gpt-4.5-preview", "gpt-4.5-preview-2025-02-27",
    "gpt-4o-2024-05-13", "gpt-4o-2024-08-06", "gpt-4o-search-preview-2025-03-11",
    "gpt-4o-mini-search-preview-2025-03-11", "gpt-4.1-mini-2025-04-14", "gpt-4.1-nano-2025-04-14",
    "gpt-5-mini-2025-08-07", "gpt-5-nano-2025-08-07", "o1-preview", "o1-preview-2024-09-12",
    "o1-mini-2024-09-12", "o3-mini-2025-01-31", "gemini-1.5-flash", "gemini-1.5-flash-8b",
    "gemini-2.0-flash-lite-preview-02-05", "gemini-2.5-pro-preview-03-25", "claude-3-haiku", "claude-3-sonnet",
    "claude-3-opus", "claude-3-5-haiku", "claude-3-5-sonnet", "claude-3-7-sonnet", "claude-4-sonnet",
    "claude-4-opus", "claude-opus-4-0", "claude-sonnet-4-0", "claude-3-sonnet-20240229", "claude-3-opus-20240229",
    "claude-3-5-sonnet-20240620",
]


@pytest.mark.parametrize("model", AUTOGEN_KNOWN)
def test_the_shipped_table_prices_every_model_autogens_clients_know(model: str) -> None:
    assert load_prices().lookup(model, date(2026, 11, 1)) is not None, model


def test_the_shipped_table_prices_a_family_by_its_own_entry_not_a_shorter_one() -> None:
    table, day = load_prices(), date(2026, 11, 1)
    assert table.lookup("gpt-5-mini-2025-08-07", day).input_per_million == Decimal("0.25")  # type: ignore[union-attr]
    assert table.lookup("claude-opus-4-5-20251101", day).input_per_million == Decimal("5")  # type: ignore[union-attr]
    assert table.lookup("claude-opus-4-1-20250805", day).input_per_million == Decimal("15")  # type: ignore[union-attr]
    assert table.lookup("gpt-4o-2024-05-13", day).input_per_million == Decimal("5")  # type: ignore[union-attr]
    assert table.lookup("gpt-4-1106-preview", day).input_per_million == Decimal("10")  # type: ignore[union-attr]
    assert table.lookup("gpt-3.5-turbo", day).input_per_million == Decimal("0.5")  # type: ignore[union-attr]


async def _view(engine: AsyncEngine) -> list[tuple[object, object]]:
    async with engine.connect() as conn:
        return [(r.cost, r.price_version) for r in (await conn.execute(text("SELECT * FROM session_costs"))).all()]


async def test_the_view_prices_the_first_run_with_no_sync(engine: AsyncEngine, tmp_path: Path) -> None:
    settings = Settings(home=tmp_path / "home")
    ledger = next(o for o in build_audit_observers(settings, engine) if isinstance(o, LedgerObserver))
    await observe_run([ledger], metered_round_robin(model="offline-small"), context())
    ((cost, version),) = await _view(engine)
    assert cost is not None and float(cost) > 0 and version == load_prices().version


async def test_a_dated_snapshot_is_priced_in_the_view_by_its_pattern(engine: AsyncEngine) -> None:
    observer = LedgerObserver(engine, Pseudonyms(engine), PriceSync(lambda: TABLE))
    await observe_run([observer], metered_round_robin(model="gpt-4o-2024-08-06"), context(session_id="a"))
    await observe_run([observer], metered_round_robin(model="gpt-4o-mini-2024-07-18"), context(session_id="b"))
    async with engine.connect() as conn:
        rows = (await conn.execute(text("SELECT model, input_per_million FROM ts_prices WHERE model LIKE 'gpt-4o-%'"
                                        " ORDER BY model"))).all()
    assert [(m, float(p)) for m, p in rows] == [("gpt-4o-2024-08-06", 2.5), ("gpt-4o-mini-2024-07-18", 0.15)]
    assert all(cost is not None for cost, _ in await _view(engine))


async def test_a_price_table_that_cannot_be_read_fails_no_run_and_the_next_run_tries_again(
    engine: AsyncEngine, caplog: pytest.LogCaptureFixture
) -> None:
    tables = iter([ConfigurationError("the price table is malformed", hint="fix it"), TABLE])

    def load() -> PriceTable:
        found = next(tables)
        if isinstance(found, Exception):
            raise found
        return found

    observer = LedgerObserver(engine, Pseudonyms(engine), PriceSync(load))
    await observe_run([observer], metered_round_robin(model="gpt-4o"), context(run_id="first"))
    assert "could not write the prices" in caplog.text and await _view(engine) == [(None, None)]
    await observe_run([observer], metered_round_robin(model="gpt-4o"), context(run_id="second"))
    assert [version for _, version in await _view(engine)] == ["2026-12-01"]


async def test_a_later_version_in_the_database_is_left_as_it_is(engine: AsyncEngine) -> None:
    later = parse_prices({"version": "2099-01-01", "models": {
        "offline-small": [{"effective_from": "2020-01-01", "input": 7, "output": 9}]}})
    await PriceSync(lambda: later).ensure(engine, ["offline-small"])
    observer = LedgerObserver(engine, Pseudonyms(engine), PriceSync(load_prices))
    await observe_run([observer], metered_round_robin(), context())
    assert {version for _, version in await _view(engine)} == {"2099-01-01"}


def test_db_upgrade_writes_the_prices_so_the_view_needs_no_sync() -> None:
    result = CliRunner().invoke(app, ["db", "upgrade", "--json"])
    assert result.exit_code == 0, result.output
    assert '"prices": "' + load_prices().version + '"' in result.stdout
    with sqlite3.connect(Settings().home / "teamstore.db") as conn:
        (versions,) = conn.execute("SELECT COUNT(DISTINCT version), COUNT(*) FROM ts_prices").fetchall()
    assert versions[0] == 1 and versions[1] == sum(len(h) for h in load_prices().prices.values())
    shown = CliRunner().invoke(app, ["prices", "sync", "--json"])  # still there, and idempotent
    assert shown.exit_code == 0, shown.output


PRICED = [{"effective_from": "2024-01-01", "input": 1, "output": 2}]


@pytest.mark.parametrize("models", [
    {"offline-small": []},                           # prices nothing: every cost would read unknown
    {"gpt-4o": PRICED, "gpt-4o-mini": []},           # one name of several with no price
    {"gpt-4o-*": PRICED, "gpt-4o-2024-*": []},       # an empty pattern would hide the shorter one that prices
])
def test_a_model_or_pattern_with_no_price_entry_is_refused_with_its_fix(models: dict[str, object]) -> None:
    with pytest.raises(ConfigurationError) as caught:
        parse_prices({"version": "v1", "currency": "EUR", "models": models})
    (empty,) = [name for name, entries in models.items() if not entries]
    assert f"{empty}: no price entry" in caught.value.message and "one or more entries" in caught.value.hint


def test_a_price_file_that_prices_nothing_fails_the_command_with_its_fix(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "prices.json"
    path.write_text('{"version":"v1","currency":"EUR","models":{"offline-small":[]}}', encoding="utf-8")
    monkeypatch.setenv("TEAMSTORE_PRICES_PATH", str(path))
    result = CliRunner().invoke(app, ["prices", "show"])
    assert result.exit_code == 1 and "offline-small: no price entry" in result.output and "fix:" in result.output


@pytest.mark.parametrize(("text", "said"), [
    # A model listed twice: JSON keeps the later list, and the days only the first priced read unpriced.
    ('{"version":"v1","models":{"m":[{"effective_from":"2020-01-01","input":3,"output":15}],'
     '"m":[{"effective_from":"2026-11-16","input":2,"output":10}]}}', "'m' is given twice"),
    ('{"version":"v1","models":{"m":[{"effective_from":"2020-01-01","input":3,"output":1,"input":30}]}}',
     "'input' is given twice"),
])
def test_a_price_file_naming_a_model_or_a_field_twice_is_refused(tmp_path: Path, text: str, said: str) -> None:
    path = tmp_path / "prices.json"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(ConfigurationError) as caught:
        load_prices(path)
    assert said in caught.value.message and "once" in caught.value.hint


@pytest.mark.parametrize(("entries", "said"), [
    # A rate teamstore does not price by would be left out of every cost while the file seemed to set it.
    ([{**PRICED[0], "cached_input": 0.5}], "m: unknown field 'cached_input'"),
    ([{"effective_from": "2024-01-01", "input": 1}], "m: an entry has no 'output'"),
    ({"effective_from": "2024-01-01", "input": 1, "output": 2}, "m: its entries must be a list"),
    ([3], "m: an entry must be an object"),
])
def test_a_price_entry_of_another_shape_is_refused_naming_its_model(entries: object, said: str) -> None:
    with pytest.raises(ConfigurationError) as caught:
        parse_prices({"version": "v1", "models": {"m": entries}})
    assert said in caught.value.message


async def test_a_run_writing_a_new_price_version_reads_no_ledger_row_and_keeps_earlier_models_priced(
    engine: AsyncEngine,
) -> None:
    earlier = LedgerObserver(engine, Pseudonyms(engine), PriceSync(lambda: TABLE))
    await observe_run([earlier], metered_round_robin(model="gpt-4o-2024-08-06"), context(session_id="a"))
    newer = parse_prices({"version": "2027-01-01", "models": {
        "gpt-4o": [{"effective_from": "2024-05-13", "input": 4, "output": 12}],
        "gpt-4o-2024-*": [{"effective_from": "2024-08-06", "input": 2, "output": 8}]}})
    statements: list[str] = []

    def record(conn: object, cursor: object, statement: str, *args: object) -> None:
        statements.append(statement)

    event.listen(engine.sync_engine, "before_cursor_execute", record)
    try:  # the first run of a process with a new version: with millions of ledger rows, a pass over them stalled it
        later = LedgerObserver(engine, Pseudonyms(engine), PriceSync(lambda: newer))
        await observe_run([later], metered_round_robin(model="gpt-4o"), context(session_id="b"))
    finally:
        event.remove(engine.sync_engine, "before_cursor_execute", record)
    assert [s for s in statements if "ts_usage" in s and s.lstrip().upper().startswith("SELECT")] == []
    # The model only the earlier run recorded is priced under the new version all the same.
    view = await _view(engine)
    assert len(view) == 2 and all(cost is not None and version == "2027-01-01" for cost, version in view)


async def test_db_upgrade_prices_every_model_of_the_ledger_under_a_new_version(engine: AsyncEngine) -> None:
    await observe_run([LedgerObserver(engine, Pseudonyms(engine))], metered_round_robin(model="gpt-4o-2024-08-06"),
                      context())  # recorded with no price sync: no version names the model
    await PriceSync(lambda: TABLE, whole_ledger=True).ensure(engine, ())
    assert [version for cost, version in await _view(engine) if cost is not None] == ["2026-12-01"]
