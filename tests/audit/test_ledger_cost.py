"""The usage ledger and cost queries, on SQLite and a real Postgres, fed by real (offline) team runs."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta, timezone
from decimal import Decimal
from pathlib import Path

import pytest
from sqlalchemy import select, text, update
from sqlalchemy.ext.asyncio import AsyncEngine

from teamstore.audit.cost import CostFilter, parse_by, query_costs
from teamstore.audit.ledger import sweep_ledger
from teamstore.audit.ledger_observer import LedgerObserver
from teamstore.audit.observer import TranscriptObserver
from teamstore.audit.price_sync import sync_prices
from teamstore.audit.prices import load_prices, parse_prices
from teamstore.audit.pseudonyms import Pseudonyms
from teamstore.audit.schema import usage
from teamstore.audit.subjects import ensure_subject, find_subject, session_key
from teamstore.audit.transcripts.local import LocalTranscriptStore
from teamstore.errors import ConfigurationError, ErasureInProgress
from teamstore.events import drain_observers
from tests.audit.teams import (
    context,
    metered_round_robin,
    observe_run,
    open_session,
    selector_team,
    triage_team,
)

PRICES = parse_prices(
    {
        "version": "test-1",
        "models": {
            "offline-small": [
                {"effective_from": "2020-01-01", "input": 1.0, "output": 2.0},
                {"effective_from": "2030-01-01", "input": 100.0, "output": 200.0},
            ]
        },
    }
)


async def _rows(engine: AsyncEngine) -> list[dict[str, object]]:
    async with engine.connect() as conn:
        return [dict(r._mapping) for r in (await conn.execute(select(usage))).all()]


async def test_a_run_writes_one_row_per_agent_and_model_with_pseudonymous_keys(engine: AsyncEngine) -> None:
    observer = LedgerObserver(engine, Pseudonyms(engine))
    ctx = context(user_id="alice", session_id="s1")
    outcome = await observe_run([observer], triage_team(), ctx)
    rows = await _rows(engine)
    assert {r["agent"] for r in rows} == {"triage", "researcher", "critic"}
    assert sum(int(r["input_tokens"]) for r in rows) == outcome.input_tokens > 0  # type: ignore[call-overload]
    subject, secret = await ensure_subject(engine, "alice")
    assert {r["subject_key"] for r in rows} == {subject}
    assert {r["session_key"] for r in rows} == {session_key(secret, "s1")}
    assert all("alice" not in str(v) and v != "s1" for r in rows for v in r.values())
    await observer.run_finished(ctx, outcome)  # reported twice: the first record stands
    assert len(await _rows(engine)) == 3


async def test_speaker_selection_calls_are_in_the_ledger(engine: AsyncEngine) -> None:
    await observe_run([LedgerObserver(engine, Pseudonyms(engine))], selector_team(), context(team="selector"))
    purposes = {r["purpose"] for r in await _rows(engine)}
    assert purposes == {"agent", "speaker_selection"}


async def test_cost_groups_by_every_dimension_and_counts_limit_ended_runs_apart(engine: AsyncEngine) -> None:
    observer = LedgerObserver(engine, Pseudonyms(engine))
    await observe_run([observer], triage_team(), context(user_id="alice", session_id="s1"))
    await observe_run(
        [observer], triage_team(), context(user_id="alice", session_id="s2"), ended_by_limit=True
    )
    await observe_run([observer], triage_team(), context(user_id="bob", session_id="s1", team_version="v2"))
    for by, groups in (
        ("session", 3),
        ("user", 2),
        ("team", 1),
        ("version", 2),
        ("model", 1),
        ("agent", 3),
        ("day", 1),
        ("week", 1),
        ("month", 1),
        ("team,model", 1),
        ("version,agent", 6),
    ):
        report = await query_costs(engine, PRICES, by=by)
        assert len(report.rows) == groups, by
        assert (report.total.runs_completed, report.total.runs_limited) == (2, 1), by
        assert report.price_version == "test-1"
    by_user = await query_costs(
        engine, PRICES, by="user", where=CostFilter(subject_key=await find_subject(engine, "alice"))
    )
    (alice,) = by_user.rows
    assert (alice.runs_completed, alice.runs_limited) == (1, 1)
    expected = Decimal(alice.input_tokens * 1 + alice.output_tokens * 2) / 1_000_000
    assert alice.cost == expected  # exact: a Decimal, no binary noise
    assert 0 < alice.limited_cost < expected


async def test_a_model_missing_from_the_price_table_has_unknown_cost_and_counted_tokens(
    engine: AsyncEngine,
) -> None:
    observer = LedgerObserver(engine, Pseudonyms(engine))
    await observe_run([observer], metered_round_robin(model="mystery-model"), context())
    report = await query_costs(engine, PRICES, by="model")
    (row,) = report.rows
    assert row.key == "mystery-model" and row.cost is None
    assert row.limited_cost is None  # unknown like the cost, never a 0 that reads as "nothing spent"
    assert row.input_tokens > 0 and row.unpriced_tokens == row.input_tokens + row.output_tokens
    assert row.unpriced_models == ["mystery-model"]


async def test_prices_apply_by_effective_date_and_filters_narrow_by_time(engine: AsyncEngine) -> None:
    ctx = context()
    outcome = await observe_run([], triage_team(), ctx)
    ledger = LedgerObserver(engine, Pseudonyms(engine))
    await open_session([ledger], ctx)
    await ledger.run_finished(ctx, outcome)
    late = context(run_id="late")
    late = type(late)(**{**late.__dict__, "started_at": datetime(2031, 1, 1, tzinfo=UTC)})
    await ledger.run_finished(late, outcome)
    now_only = await query_costs(
        engine, PRICES, by="day", where=CostFilter(until=datetime(2030, 1, 1, tzinfo=UTC))
    )
    future = await query_costs(
        engine, PRICES, by="day", where=CostFilter(since=datetime(2030, 1, 1, tzinfo=UTC))
    )
    assert now_only.total.cost and future.total.cost
    assert future.total.cost == now_only.total.cost * 100
    assert [r.key for r in future.rows] == ["2031-01-01"]


async def test_time_filters_compare_instants_whatever_their_offset(engine: AsyncEngine) -> None:
    ctx = context()
    ctx = type(ctx)(**{**ctx.__dict__, "started_at": datetime(2026, 11, 30, 0, 4, 39, tzinfo=UTC)})
    outcome = await observe_run([], triage_team(), ctx)
    ledger = LedgerObserver(engine, Pseudonyms(engine))
    await open_session([ledger], ctx)
    await ledger.run_finished(ctx, outcome)
    plus_two, minus_five = timezone(timedelta(hours=2)), timezone(timedelta(hours=-5))
    for where, runs in (
        (CostFilter(since=datetime(2026, 11, 30, 1, 0, tzinfo=plus_two)), 1),  # 23:00Z
        (CostFilter(since=datetime(2026, 11, 30, 3, 0, tzinfo=plus_two)), 0),  # 01:00Z
        (CostFilter(until=datetime(2026, 11, 29, 19, 30, tzinfo=minus_five)), 1),  # 00:30Z
        (CostFilter(until=datetime(2026, 11, 29, 19, 0, tzinfo=minus_five)), 0),  # 00:00Z
    ):
        report = await query_costs(engine, PRICES, by="day", where=where)
        assert report.total.runs_completed == runs, where


async def test_ledger_sweep_removes_only_rows_past_retention(engine: AsyncEngine) -> None:
    observer = LedgerObserver(engine, Pseudonyms(engine))
    old, new = context(run_id="old"), context(run_id="new")
    await observe_run([observer], triage_team(), old)
    await observe_run([observer], triage_team(), new)
    async with engine.begin() as conn:
        await conn.execute(
            update(usage)
            .where(usage.c.run_id == "old")
            .values(started_at=datetime.now(UTC) - timedelta(days=500),
                    finished_at=datetime.now(UTC) - timedelta(days=500),
                    day=(datetime.now(UTC) - timedelta(days=500)).date())
        )
    assert await sweep_ledger(engine, datetime.now(UTC) - timedelta(days=400), batch_size=2) == 3
    assert {r["run_id"] for r in await _rows(engine)} == {"new"}


async def test_the_session_costs_view_prices_sessions_in_sql(engine: AsyncEngine) -> None:
    observer = LedgerObserver(engine, Pseudonyms(engine))
    await observe_run([observer], triage_team(), context(user_id="alice", session_id="s1"))
    await observe_run(
        [observer], triage_team(), context(user_id="alice", session_id="s1"), ended_by_limit=True
    )
    await observe_run([observer], metered_round_robin(model="mystery-model"), context(user_id="bob"))
    assert await sync_prices(engine, load_prices()) > 0
    async with engine.connect() as conn:
        rows = {r.session_key: r for r in (await conn.execute(text("SELECT * FROM session_costs"))).all()}
    alice = rows[session_key((await ensure_subject(engine, "alice")).session_secret, "s1")]
    assert (alice.runs, alice.runs_ended_by_limit, alice.unpriced_tokens) == (2, 1, 0)
    report = await query_costs(
        engine, load_prices(), by="session", where=CostFilter(session_key=alice.session_key)
    )
    assert float(alice.cost) == pytest.approx(float(report.total.cost or 0))
    assert alice.price_version == load_prices().version
    bob = rows[session_key((await ensure_subject(engine, "bob")).session_secret, "s1")]
    assert bob.cost is None and bob.unpriced_tokens > 0


async def test_syncing_an_older_price_version_is_refused_so_the_view_and_the_cli_agree(
    engine: AsyncEngine,
) -> None:
    observer = LedgerObserver(engine, Pseudonyms(engine))
    await observe_run([observer], triage_team(), context(user_id="alice", session_id="s1"))
    shipped = load_prices()
    newer = parse_prices({"version": shipped.version + "-negotiated", "models": {
        "offline-small": [{"effective_from": "2020-01-01", "input": 7.0, "output": 9.0}]}})
    assert await sync_prices(engine, newer) == 1
    # Back to the shipped table: the view would go on using the greater version, teamstore cost would not.
    with pytest.raises(ConfigurationError) as caught:
        await sync_prices(engine, shipped)
    assert newer.version in caught.value.message and "sorts after" in caught.value.message
    assert caught.value.hint and f"DELETE FROM ts_prices WHERE version = '{newer.version}'" in caught.value.hint
    async with engine.connect() as conn:
        versions = (await conn.execute(text("SELECT DISTINCT version FROM ts_prices"))).scalars().all()
        view = (await conn.execute(text("SELECT cost, price_version FROM session_costs"))).one()
    assert versions == [newer.version]
    report = await query_costs(engine, newer, by="session")
    assert (float(view.cost), view.price_version) == (pytest.approx(float(report.total.cost or 0)), newer.version)
    assert await sync_prices(engine, newer) == 1  # the same version again replaces its own rows


async def test_the_view_sums_costs_in_exact_decimals_on_postgres(engine: AsyncEngine) -> None:
    # Three runs at 0.1 each: floating point sums them to 0.30000000000000004.
    prices = parse_prices({"version": "2026-11-30", "models": {
        "tenth-model": [{"effective_from": "2020-01-01", "input": 0.1, "output": 0.0}]}})
    await sync_prices(engine, prices)
    now = datetime.now(UTC)
    async with engine.begin() as conn:
        for run in ("r1", "r2", "r3"):
            await conn.execute(usage.insert().values(
                run_id=run, agent="a", model="tenth-model", purpose="reply", calls=1, failed_calls=0,
                input_tokens=1_000_000, output_tokens=0, team="t", team_version="v", session_key="k",
                subject_key="s", stop_reason=None, ended_by_limit=False, run_failed=False, started_at=now,
                finished_at=now, day=now.date()))
    async with engine.connect() as conn:
        cost = (await conn.execute(text("SELECT cost FROM session_costs WHERE session_key = 'k'"))).scalar()
    if engine.dialect.name == "postgresql":
        assert cost == Decimal("0.3")
    else:  # SQLite has no exact type: the docs say to round
        assert cost == pytest.approx(0.3)


async def test_the_view_counts_a_sessions_calls_of_unknown_usage(engine: AsyncEngine) -> None:
    # A session whose only calls failed or came back without usage, on a priced model: the view gave cost 0 and
    # nothing said why.
    prices = parse_prices({"version": "2026-11-30", "models": {
        "tenth-model": [{"effective_from": "2020-01-01", "input": 0.1, "output": 0.0}]}})
    await sync_prices(engine, prices)
    now = datetime.now(UTC)
    async with engine.begin() as conn:
        for run, calls, failed, tokens, key in (("r1", 2, 2, 0, "unknown"), ("r2", 3, 1, 1_000_000, "partly"),
                                                ("r3", 1, 0, 1_000_000, "known")):
            await conn.execute(usage.insert().values(
                run_id=run, agent="a", model="tenth-model", purpose="reply", calls=calls, failed_calls=failed,
                input_tokens=tokens, output_tokens=0, team="t", team_version="v", session_key=key,
                subject_key="s", stop_reason=None, ended_by_limit=False, run_failed=False, started_at=now,
                finished_at=now, day=now.date()))
    async with engine.connect() as conn:
        rows = {r.session_key: r for r in (await conn.execute(text(
            "SELECT session_key, model_calls, unknown_usage_calls, cost FROM session_costs"))).all()}
    assert {k: (r.model_calls, r.unknown_usage_calls) for k, r in rows.items()} == {
        "unknown": (2, 2), "partly": (3, 1), "known": (1, 0)}
    assert [float(rows[k].cost) for k in ("unknown", "partly", "known")] == [0, pytest.approx(0.1),
                                                                             pytest.approx(0.1)]


def test_an_unknown_dimension_is_a_typed_error() -> None:
    with pytest.raises(ConfigurationError):
        import asyncio

        asyncio.run(query_costs(None, PRICES, by="planet"))  # type: ignore[arg-type]


def test_the_shipped_price_table_has_offline_small_and_real_models() -> None:
    table = load_prices()
    assert table.lookup("offline-small", datetime.now(UTC).date()) is not None
    assert table.lookup("gpt-4o", date(2025, 1, 1)).input_per_million == Decimal("2.5")  # type: ignore[union-attr]
    assert table.lookup("gpt-4o", date(2024, 6, 1)).input_per_million == Decimal("5")  # type: ignore[union-attr]
    assert table.lookup("not-a-model", datetime.now(UTC).date()) is None


@pytest.mark.usefixtures("nothing_left_running")
async def test_nothing_is_written_for_a_user_under_an_open_erasure(
    engine: AsyncEngine, tmp_path: Path
) -> None:
    from teamstore.db.fence import user_holds

    async with engine.begin() as conn:
        await conn.execute(
            user_holds.insert().values(user_id="leaving", reason="erasure", created_at=datetime.now(UTC))
        )
    pseudonyms = Pseudonyms(engine)
    store = LocalTranscriptStore(tmp_path / "t")
    observers = [LedgerObserver(engine, pseudonyms), TranscriptObserver(store, engine, pseudonyms)]
    with pytest.raises(ErasureInProgress):
        await observe_run(observers, triage_team(), context(user_id="leaving"))
    await drain_observers(observers)
    assert await _rows(engine) == [] and await store.list_keys("") == []
    assert await find_subject(engine, "leaving") is None


@pytest.mark.parametrize("price", [-5, "0.15", None, True, float("inf"), float("nan"), Decimal("1e400"), 1_000_001])
def test_a_price_that_is_not_a_non_negative_number_is_refused(price: object) -> None:
    with pytest.raises(ConfigurationError) as caught:
        parse_prices({"version": "v", "models": {"m": [{"effective_from": "2026-01-01", "input": price, "output": 1}]}})
    assert "input must be a number of at least 0" in caught.value.message


@pytest.mark.parametrize("models", [{}, []])
def test_a_price_table_that_prices_no_model_is_refused(models: object) -> None:
    with pytest.raises(ConfigurationError) as caught:
        parse_prices({"version": "v", "models": models})
    assert "models names no model" in caught.value.message


@pytest.mark.parametrize(("field", "value"), [
    ("version", "2027-01-01-negotiated-rates-of-the-enterprise-agreement-renewed-in-january"),
    ("version", ""), ("currency", "EUR-negotiated"), ("currency", " ")])
async def test_a_version_or_currency_the_price_rows_cannot_hold_is_refused_before_anything_is_written(
    engine: AsyncEngine, field: str, value: str
) -> None:
    # A version over 64 characters or a currency over 8 made `prices sync` and `db upgrade` end in a
    # traceback on Postgres (value too long for ts_prices) while SQLite kept them whole.
    document = {"version": "v", "currency": "USD", "models": {
        "m": [{"effective_from": "2026-01-01", "input": 1, "output": 2}]}, field: value}
    with pytest.raises(ConfigurationError) as caught:
        parse_prices(document)
    assert f"{field} must be 1 to" in caught.value.message and caught.value.hint
    longest = parse_prices({**document, "version": "v" * 64, "currency": "USD-2026"})
    assert await sync_prices(engine, longest) == 1


def test_two_prices_for_one_model_on_one_day_are_refused() -> None:
    # Which one priced the day depended on the order in the file; `prices sync` died on ts_prices' key.
    entries = [{"effective_from": "2026-01-01", "input": 1, "output": 2},
               {"effective_from": "2026-01-01", "input": 3, "output": 4}]
    with pytest.raises(ConfigurationError) as caught:
        parse_prices({"version": "v", "models": {"m": entries}})
    assert "m: two entries take effect on 2026-01-01" in caught.value.message


async def test_a_model_name_longer_than_the_ledger_column_keeps_its_usage(engine: AsyncEngine) -> None:
    # A model path over 128 characters lost every run's usage on Postgres (value too long for the
    # column, the whole INSERT refused) while SQLite kept it: it is stored shortened, alike on both,
    # names that differ only past the cut still apart.
    common = "projects/analytics-" + "x" * 140 + "/endpoints/"
    models = [common + "1234", common + "5678"]
    observer = LedgerObserver(engine, Pseudonyms(engine))
    for model in models:
        await observe_run([observer], metered_round_robin(model=model), context())
    report = await query_costs(engine, PRICES, by="model")
    assert len(report.rows) == 2 and all(row.input_tokens > 0 for row in report.rows)
    assert all(len(row.key) == 128 and row.key.startswith(common[:100]) for row in report.rows)
    # A price file names the model as its client does; that price applies, and syncs for the SQL view.
    priced = parse_prices({"version": "long-1", "models": {
        models[0]: [{"effective_from": "2020-01-01", "input": 1.0, "output": 1.0}]}})
    assert await sync_prices(engine, priced) == 1
    by_model = await query_costs(engine, priced, by="model")
    assert sorted(row.cost is not None for row in by_model.rows) == [False, True]


@pytest.mark.parametrize(("document", "said"), [
    ([], "it must be one JSON object of version, currency and models, not a list"),
    ({"version": "v"}, "it has no 'models'"),
    ({"models": {"m": [{"effective_from": "2026-01-01", "input": 1, "output": 1}]}}, "it has no 'version'"),
    ({"version": "v", "models": [["m", []]]}, "models must be an object of model names"),
    ({"version": "v", "models": {"m": [{"effective_from": "2026-13-01", "input": 1, "output": 1}]}},
     "m: effective_from must be a day as YYYY-MM-DD, not '2026-13-01'"),
])
def test_a_malformed_price_file_is_refused_in_its_own_terms(document: object, said: str) -> None:
    with pytest.raises(ConfigurationError) as caught:
        parse_prices(document)  # type: ignore[arg-type]
    assert said in caught.value.message and "Error" not in caught.value.message  # no Python exception's name


def test_a_misspelt_grouping_is_refused_with_the_one_it_meant() -> None:
    with pytest.raises(ConfigurationError) as caught:
        parse_by("team,sesion")
    assert caught.value.hint is not None and caught.value.hint.startswith("did you mean 'session'?")


async def test_a_streamed_call_answered_without_usage_counts_as_unknown_never_as_free(engine: AsyncEngine) -> None:
    # A stream whose request did not ask for usage ends with 0 tokens: its cost used to read as exactly 0.
    from autogen_agentchat.agents import AssistantAgent
    from autogen_agentchat.conditions import MaxMessageTermination
    from autogen_agentchat.teams import RoundRobinGroupChat

    from teamstore.metering import MeteredChatCompletionClient
    from tests.openai_endpoint import OpenAIEndpoint

    endpoint = OpenAIEndpoint()
    clients = {"triage": endpoint.client(stream_options={"include_usage": False}),  # the caller's choice stands
               "researcher": endpoint.client()}  # asked for usage by the metering
    team = RoundRobinGroupChat(
        [AssistantAgent(name, model_client=MeteredChatCompletionClient(client, name), model_client_stream=True)
         for name, client in clients.items()], termination_condition=MaxMessageTermination(3))
    await observe_run([LedgerObserver(engine, Pseudonyms(engine))], team, context())
    rows = {r["agent"]: r for r in await _rows(engine)}
    assert [(rows[a]["calls"], rows[a]["failed_calls"], rows[a]["input_tokens"]) for a in clients] == [
        (1, 1, 0), (1, 0, 12)]
    prices = parse_prices({"version": "t", "models": {"gpt-4o": [
        {"effective_from": "2020-01-01", "input": 2.5, "output": 10}]}})
    report = await query_costs(engine, prices, by="agent")
    by_agent = {r.key: r for r in report.rows}
    assert (by_agent["triage"].cost, by_agent["triage"].unknown_usage_calls) == (None, 1)  # unknown, not 0
    assert (by_agent["researcher"].cost, by_agent["researcher"].unknown_usage_calls) == (Decimal("0.00008"), 0)
    assert (report.total.cost, report.total.unknown_usage_calls, report.total.calls) == (Decimal("0.00008"), 1, 2)
