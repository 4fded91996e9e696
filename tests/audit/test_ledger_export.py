"""`teamstore ledger export`: Parquet partitions by day, queried with DuckDB, equal to `teamstore cost` for
the same window, on SQLite and Postgres, to a folder and to S3 over HTTP; idempotent per day; pseudonymous."""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

import duckdb
import pyarrow.parquet as pq
import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine
from typer.testing import CliRunner

from teamstore.audit.ledger import record_usage, sweep_ledger, usage_rows
from teamstore.audit.subjects import ensure_subject, record_store, session_key
from teamstore.audit.transcripts import transcript_store_from_settings
from teamstore.audit.transcripts.base import run_key
from teamstore.audit.transcripts.record import RunKeys
from teamstore.cli import app
from teamstore.events import ModelCall, RunContext, RunOutcome
from teamstore.settings import Settings

runner = CliRunner()
DAYS = [date(2026, 11, 28), date(2026, 11, 29), date(2026, 11, 30)]
USERS = ("alice.raw-id@example.com", "bob.raw-id@example.com")
SESSION = "ticket-CANARY-4411"


async def _record_run(engine: AsyncEngine, user: str, day: date, hour: int, tokens: int,
                      stop: str = "done", models: tuple[str, ...] = ("gpt-4o", "gpt-4o-mini")) -> None:
    subject, secret = await ensure_subject(engine, user)
    started = datetime(day.year, day.month, day.day, hour, 30, tzinfo=UTC)
    calls = [ModelCall("triage", model, tokens * (i + 1), tokens // 2, started, 0.5) for i, model in enumerate(models)]
    ctx = RunContext(f"run-{user[:3]}-{day}-{hour}", user, SESSION, "support_triage", "v1", started)
    outcome = RunOutcome(started + timedelta(seconds=3), stop_reason=stop, model_calls=calls,
                         ended_by_limit=stop.startswith("Maximum"))
    await record_usage(engine, usage_rows(ctx, outcome, RunKeys(subject, session_key(secret, SESSION))))


async def _fill(engine: AsyncEngine) -> None:
    for n, day in enumerate(DAYS):
        for hour in (0, 23):  # the ends of the UTC day stay in it
            await _record_run(engine, USERS[n % 2], day, hour, 100 * (n + 1) + hour)
    await _record_run(engine, USERS[1], DAYS[1], 12, 7, stop="Maximum number of messages 6 reached")


def _one(query: str) -> tuple[Any, ...]:
    (row,) = duckdb.sql(query).fetchall()
    return tuple(row)


def _cli(*args: str) -> Any:
    result = runner.invoke(app, [*args])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def _window(since: str | None, until: str | None) -> list[str]:
    return [*(["--since", since] if since else []), *(["--until", until] if until else [])]


def _duckdb_by_day(root: Path) -> dict[str, dict[str, int]]:
    rows = duckdb.sql(
        f"SELECT day, sum(calls), sum(input_tokens), sum(output_tokens), count(DISTINCT run_id) "
        f"FROM read_parquet('{root.as_posix()}/**/*.parquet', hive_partitioning = true) GROUP BY day ORDER BY day"
    ).fetchall()
    return {str(d): {"calls": c, "input_tokens": i, "output_tokens": o, "runs": r} for d, c, i, o, r in rows}


def _cost_by_day(window: list[str]) -> dict[str, dict[str, int]]:
    report = _cli("cost", "--by", "day", "--format", "json", *window)
    return {r["key"]: {"calls": r["calls"], "input_tokens": r["input_tokens"], "output_tokens": r["output_tokens"],
                       "runs": r["runs_completed"] + r["runs_limited"] + r["runs_failed"]} for r in report["rows"]}


@pytest.mark.parametrize(("since", "until"), [(None, None), ("2026-11-29", "2026-11-30"), ("2026-11-29", None)])
async def test_duckdb_over_the_exported_folder_gives_the_totals_teamstore_cost_gives(
    engine: AsyncEngine, database_url: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
    since: str | None, until: str | None,
) -> None:
    await _fill(engine)
    monkeypatch.setenv("TEAMSTORE_DATABASE_URL", database_url)
    window = _window(since, until)
    report = await asyncio.to_thread(_cli, "ledger", "export", "--to", str(tmp_path / "wh"), "--json", *window)
    exported = _duckdb_by_day(tmp_path / "wh")
    expected = await asyncio.to_thread(_cost_by_day, window)
    assert exported == expected and expected
    assert report["rows"] == sum(p["rows"] for p in report["partitions"])
    assert sorted(p["key"] for p in report["partitions"]) == [f"day={d}/part-00000.parquet" for d in expected]


# An exact name whose first price comes after the first day (so that day is unpriced, not priced by a pattern),
# a price change in the window, a longer pattern beside a shorter one, and a model with no price at all.
WAREHOUSE_PRICES = {"version": "w-1", "currency": "USD", "models": {
    "gpt-4o": [{"effective_from": "2026-11-29", "input": 2.5, "output": 10}],
    "gpt-4o-*": [{"effective_from": "2020-01-01", "input": 0.15, "output": 0.6},
                 {"effective_from": "2026-11-30", "input": 0.1, "output": 0.4}],
    "gpt-*": [{"effective_from": "2020-01-01", "input": 100, "output": 100}],
}}


def _docs_pricing_query() -> str:
    guide = (Path(__file__).resolve().parents[2] / "docs" / "analysts.md").read_text(encoding="utf-8")
    section = guide.split("## Exporting the ledger to a warehouse")[1].split("\n## ")[0]
    (query,) = [block for block in section.split("```sql\n")[1:] if "prices.json" in block]
    return query.split("```")[0]


async def test_the_guides_duckdb_query_prices_the_export_as_teamstore_cost_does(
    engine: AsyncEngine, database_url: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    await _fill(engine)
    await _record_run(engine, USERS[0], DAYS[2], 9, 77, models=("in-house-llm",))
    (tmp_path / "prices.json").write_text(json.dumps(WAREHOUSE_PRICES), encoding="utf-8")
    monkeypatch.setenv("TEAMSTORE_DATABASE_URL", database_url)
    monkeypatch.setenv("TEAMSTORE_PRICES_PATH", str(tmp_path / "prices.json"))
    await asyncio.to_thread(_cli, "ledger", "export", "--to", str(tmp_path / "wh"), "--json")
    table = await asyncio.to_thread(runner.invoke, app, ["prices", "show", "--json"])
    (tmp_path / "shown.json").write_text(table.stdout, encoding="utf-8")
    query = (_docs_pricing_query().replace("'prices.json'", f"'{(tmp_path / 'shown.json').as_posix()}'")
             .replace("'warehouse/ledger/", f"'{(tmp_path / 'wh').as_posix()}/"))
    priced = {str(day): (cost, unpriced) for day, cost, unpriced in duckdb.sql(query).fetchall()}
    report = await asyncio.to_thread(_cli, "cost", "--by", "day", "--format", "json")
    expected = {r["key"]: (None if r["cost"] is None else Decimal(r["cost"]), r["unpriced_tokens"])
                for r in report["rows"]}
    assert priced == expected and expected[str(DAYS[0])][1] and expected[str(DAYS[2])][1]  # gpt-4o, in-house-llm


async def test_the_files_are_typed_and_hold_pseudonymous_keys_only(
    engine: AsyncEngine, database_url: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    await _fill(engine)
    monkeypatch.setenv("TEAMSTORE_DATABASE_URL", database_url)
    await asyncio.to_thread(_cli, "ledger", "export", "--to", str(tmp_path / "wh"), "--json")
    files = sorted((tmp_path / "wh").rglob("*"))
    assert [f.relative_to(tmp_path / "wh").as_posix() for f in files if f.is_file()] == [
        f"day={d}/part-00000.parquet" for d in DAYS]
    schema = pq.read_schema(tmp_path / "wh" / f"day={DAYS[0]}" / "part-00000.parquet")
    assert str(schema.field("started_at").type) == "timestamp[us, tz=UTC]"
    assert str(schema.field("input_tokens").type) == "int64" and str(schema.field("calls").type) == "int32"
    assert str(schema.field("interruptions").type) == "int32"  # runs continued after they stopped mid-run
    assert "day" not in schema.names and "cost" not in schema.names  # the day is the partition; prices join later
    (hour,) = _one(f"SELECT min(hour(started_at AT TIME ZONE 'UTC')) FROM read_parquet("
                   f"'{tmp_path.as_posix()}/wh/day=2026-11-28/*.parquet')")
    assert hour == 0
    raw = b"".join(f.read_bytes() for f in files if f.is_file())
    session_secrets = [(await ensure_subject(engine, user)).session_secret for user in USERS]
    for secret in (*USERS, SESSION, *session_secrets):
        assert secret.encode() not in raw
    # Each row publishes its subject key beside its session key: the session id must not be confirmable.
    pairs = duckdb.sql(f"SELECT DISTINCT subject_key, session_key FROM read_parquet("
                       f"'{tmp_path.as_posix()}/wh/**/*.parquet', hive_partitioning = true)").fetchall()
    assert len(pairs) == len(USERS)
    assert all(session_key(subject, SESSION) != key for subject, key in pairs)


async def test_exporting_a_day_again_replaces_its_file_and_leaves_days_without_rows_as_they_are(
    engine: AsyncEngine, database_url: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    await _fill(engine)
    monkeypatch.setenv("TEAMSTORE_DATABASE_URL", database_url)
    target = str(tmp_path / "wh")
    await asyncio.to_thread(_cli, "ledger", "export", "--to", target, "--json")
    await _record_run(engine, USERS[0], DAYS[2], 5, 1000)
    async with engine.begin() as conn:  # the first day's rows pass their retention
        await conn.execute(text("DELETE FROM ts_usage WHERE day = :day"), {"day": DAYS[0]})
    report = await asyncio.to_thread(_cli, "ledger", "export", "--to", target, "--json")
    assert [p["day"] for p in report["partitions"]] == [str(DAYS[1]), str(DAYS[2])]
    by_day = _duckdb_by_day(tmp_path / "wh")
    assert set(by_day) == {str(d) for d in DAYS}  # the swept day's file stays in the warehouse
    assert by_day[str(DAYS[2])] == (await asyncio.to_thread(_cost_by_day, []))[str(DAYS[2])]
    assert not [f for f in (tmp_path / "wh").rglob(".tmp-*")]


async def test_an_export_killed_before_its_rename_leaves_nothing_a_readers_glob_counts(
    engine: AsyncEngine, database_url: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from teamstore.audit.warehouse.local import LocalPartitions

    await _fill(engine)
    monkeypatch.setenv("TEAMSTORE_DATABASE_URL", database_url)
    await asyncio.to_thread(_cli, "ledger", "export", "--to", str(tmp_path / "wh"), "--json")
    # The next night's export is killed with each day's file written and not yet renamed over the old one.
    monkeypatch.setattr(LocalPartitions, "commit", lambda self, key, staged: None)
    await asyncio.to_thread(_cli, "ledger", "export", "--to", str(tmp_path / "wh"), "--json")
    assert len(list((tmp_path / "wh").rglob(".tmp-*"))) == len(DAYS)  # left behind, as by a kill
    assert _duckdb_by_day(tmp_path / "wh") == await asyncio.to_thread(_cost_by_day, [])


async def test_the_retention_sweep_takes_a_day_whole_so_its_exported_file_keeps_every_run(
    engine: AsyncEngine, database_url: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    await _fill(engine)
    monkeypatch.setenv("TEAMSTORE_DATABASE_URL", database_url)
    target = str(tmp_path / "wh")
    await asyncio.to_thread(_cli, "ledger", "export", "--to", target, "--json")
    exported = _duckdb_by_day(tmp_path / "wh")
    # A nightly sweep's cutoff is a time of day: the retention counts back from when it runs.
    first, second = (datetime(d.year, d.month, d.day, 12, tzinfo=UTC) for d in DAYS[:2])
    await sweep_ledger(engine, first)
    await asyncio.to_thread(_cli, "ledger", "export", "--to", target, "--json")  # the nightly export, whole window
    assert _duckdb_by_day(tmp_path / "wh") == exported  # no day rewritten with part of its runs
    assert await sweep_ledger(engine, second) == 4  # the next night's sweep takes the first day, whole
    assert str(DAYS[0]) not in await asyncio.to_thread(_cost_by_day, [])


async def test_an_erased_users_rows_are_exported_as_the_ledger_holds_them_then(
    engine: AsyncEngine, database_url: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    await _fill(engine)
    monkeypatch.setenv("TEAMSTORE_DATABASE_URL", database_url)
    subject, secret = await ensure_subject(engine, USERS[0])
    store = transcript_store_from_settings(Settings())
    await record_store(engine, subject, store.url)  # as a run's transcript writer does, and then writes:
    await store.put(run_key(RunKeys(subject, session_key(secret, SESSION)), "r1"), b"{}")
    await asyncio.to_thread(_cli, "ledger", "export", "--to", str(tmp_path / "before"), "--json")
    await asyncio.to_thread(_cli, "erase", "--user", USERS[0], "--yes", "--json")
    await asyncio.to_thread(_cli, "ledger", "export", "--to", str(tmp_path / "after"), "--json")
    query = "SELECT count(*) FROM read_parquet('{}/**/*.parquet', hive_partitioning = true) WHERE subject_key = '{}'"
    assert _one(query.format((tmp_path / "before").as_posix(), subject)) == (8,)  # 4 runs, 2 models each
    assert _one(query.format((tmp_path / "after").as_posix(), subject)) == (0,)
    nulls = _one(f"SELECT count(*) FROM read_parquet('{(tmp_path / 'after').as_posix()}/**/*.parquet') "
                 "WHERE subject_key IS NULL")
    assert nulls == (8,)
    assert _duckdb_by_day(tmp_path / "after") == _duckdb_by_day(tmp_path / "before")  # de-linked, not deleted


@pytest.mark.s3
async def test_an_export_to_s3_is_one_put_per_day_and_queries_like_the_folder(
    engine: AsyncEngine, database_url: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, s3_bucket: str
) -> None:
    import boto3

    await _fill(engine)
    monkeypatch.setenv("TEAMSTORE_DATABASE_URL", database_url)
    await asyncio.to_thread(_cli, "ledger", "export", "--to", f"s3://{s3_bucket}/exports/ledger", "--json")
    await asyncio.to_thread(_cli, "ledger", "export", "--to", f"s3://{s3_bucket}/exports/ledger", "--json",
                            "--since", str(DAYS[1]))
    client = boto3.client("s3")
    keys = sorted(o["Key"] for o in client.list_objects_v2(Bucket=s3_bucket)["Contents"])
    assert keys == [f"exports/ledger/day={d}/part-00000.parquet" for d in DAYS]
    assert not client.list_multipart_uploads(Bucket=s3_bucket).get("Uploads")
    # DuckDB's httpfs extension is downloaded on first use, which an offline machine cannot: the objects are
    # fetched with boto3 into a folder, keeping their keys, and queried there.
    for key in keys:
        local = tmp_path / "copy" / key
        local.parent.mkdir(parents=True, exist_ok=True)
        client.download_file(s3_bucket, key, str(local))
    assert _duckdb_by_day(tmp_path / "copy" / "exports" / "ledger") == await asyncio.to_thread(_cost_by_day, [])


@pytest.mark.s3
async def test_an_export_to_an_s3_that_does_not_answer_says_to_check_the_endpoint_not_permissions(
    engine: AsyncEngine, database_url: str, monkeypatch: pytest.MonkeyPatch, s3_bucket: str
) -> None:
    from tests.services import free_port

    await _fill(engine)
    monkeypatch.setenv("TEAMSTORE_DATABASE_URL", database_url)
    monkeypatch.setenv("AWS_ENDPOINT_URL_S3", f"http://127.0.0.1:{free_port()}")
    result = await asyncio.to_thread(runner.invoke, app, ["ledger", "export", "--to", f"s3://{s3_bucket}/l", "--json"])
    assert result.exit_code == 1, result.output
    error = json.loads(result.stdout)["error"]
    assert "EndpointConnectionError" in error["message"] and "AWS_ENDPOINT_URL_S3" in error["fix"]
    assert "s3:PutObject" not in error["fix"]  # it said to check the credentials and s3:PutObject


@pytest.mark.parametrize("fails", ["open", "write"])
async def test_a_destination_that_fails_mid_export_is_a_typed_error_and_leaves_no_staged_file(
    engine: AsyncEngine, database_url: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, fails: str
) -> None:
    from teamstore.audit import warehouse

    await _fill(engine)
    monkeypatch.setenv("TEAMSTORE_DATABASE_URL", database_url)
    writes = {"n": 0}
    real_init, real_write = warehouse.PartitionWriter.__init__, warehouse.PartitionWriter.write

    def full(self: Any, *args: Any) -> None:  # the disk fills up at the second day
        writes["n"] += 1
        if writes["n"] > 1:
            raise OSError(28, "No space left on device")
        (real_init if fails == "open" else real_write)(self, *args)

    monkeypatch.setattr(warehouse.PartitionWriter, "__init__" if fails == "open" else "write", full)
    if fails == "write":
        monkeypatch.setattr(warehouse.PartitionWriter, "__init__", real_init)
    result = await asyncio.to_thread(runner.invoke, app, ["ledger", "export", "--to", str(tmp_path / "wh")])
    assert result.exit_code == 1 and "No space left on device" in result.output and "fix" in result.output
    assert "Traceback" not in result.output
    assert [p.parent.name for p in (tmp_path / "wh").rglob("*.parquet")] == [f"day={DAYS[0]}"]  # the first stands
    assert not [f for f in (tmp_path / "wh").rglob(".tmp-*")]


@pytest.mark.parametrize(("args", "says"), [
    (["--since", "2026-11-29T10:00"], "Invalid value for '--since': it takes a day as YYYY-MM-DD"),
    (["--since", "2026-11-30", "--until", "2026-11-29"], "is not before"),
    (["--to", "ftp://host/x"], "Invalid value for '--to': it takes a folder, a file:/// URL or s3://bucket/prefix"),
    (["--to", "s3://"], "names no bucket"),
    (["--to", "alice-7Q3X:x"], "Invalid value for '--to'"),  # a user's id in the wrong place: its "scheme" unsaid
    (["--to", ""], "no destination given"),
    (["--to", " "], "no destination given"),
    (["--to", "file://wh"], "names no folder"),  # the host "wh" and no path: it went to the working directory
    (["--to", "file://elsewhere/srv/wh"], "names no folder"),
])
def test_a_window_that_is_not_whole_days_or_a_destination_teamstore_cannot_write_is_refused(
    args: list[str], says: str, tmp_path: Path
) -> None:
    to = [] if "--to" in args else ["--to", str(tmp_path / "wh")]
    (tmp_path / "home").mkdir()
    runner.invoke(app, ["db", "upgrade"])
    result = runner.invoke(app, ["ledger", "export", *to, *args])
    assert result.exit_code == 1
    assert says in " ".join(result.output.split()) and "fix" in result.output
    assert "alice-7q3x" not in result.output.lower()
