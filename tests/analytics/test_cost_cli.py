"""`teamstore cost` on the hand-worked ledger, on SQLite and a real Postgres: the same exact totals in the
table, CSV and JSON, and an exit status that tells "nothing matched" (3) from "matched, cost 0" (0)."""

from __future__ import annotations

import asyncio
import csv
import io
import json
from datetime import UTC, datetime
from pathlib import Path

import pytest
from sqlalchemy.ext.asyncio import AsyncEngine
from typer.testing import CliRunner

from teamstore.audit.ledger import record_usage
from teamstore.audit.subjects import Subject, ensure_subject, session_key
from teamstore.cli import app
from teamstore.db.engine import create_engine
from tests.analytics.conftest import PRICE_FILE
from tests.analytics.seed import TOTAL
from tests.analytics.test_cost_query import GROUPINGS

runner = CliRunner()


def _cost(*args: str) -> tuple[int, str, str]:
    result = runner.invoke(app, ["cost", *args], env={"COLUMNS": "200"})
    return result.exit_code, result.stdout, result.stderr


@pytest.mark.parametrize("by", ["team,model", "session", "week,team", "user"])
def test_table_csv_and_json_give_the_same_exact_figures(ledger_env: AsyncEngine, by: str) -> None:
    code, as_json, _ = _cost("--by", by, "--format", "json")
    assert code == 0, as_json
    report = json.loads(as_json)
    assert {r["key"]: r["cost"] for r in report["rows"]} == {
        k: None if v is None else str(v) for k, v in GROUPINGS[by].items()}
    assert (report["total"]["cost"], report["total"]["limited_cost"]) == (str(TOTAL), "0.003")
    code, as_csv, _ = _cost("--by", by, "--format", "csv")
    lines = list(csv.DictReader(io.StringIO(as_csv)))
    assert code == 0 and len(lines) == len(report["rows"]) + 1
    *rows, total = lines
    assert total[report["fields"][0]] == "total" and total["cost"] == str(TOTAL)
    assert [r["cost"] for r in rows] == [r["cost"] or "" for r in report["rows"]]
    assert "e-" not in as_csv.lower() and "E-" not in as_csv
    code, table, _ = _cost("--by", by)
    assert code == 0 and f"{TOTAL} + unknown" in table  # mystery's tokens have no price
    assert all(r["cost"] in table for r in report["rows"] if r["cost"])


def test_top_keeps_the_costliest_and_every_format_keeps_the_whole_total(ledger_env: AsyncEngine) -> None:
    report = json.loads(_cost("--by", "session", "--top", "2", "--format", "json")[1])
    assert [r["key"] for r in report["rows"]] == ["alice / s1", "alice / s2"]
    assert (report["groups"], report["top"], report["total"]["cost"]) == (5, 2, str(TOTAL))
    *rows, total = list(csv.DictReader(io.StringIO(_cost("--by", "session", "--top", "2", "--format", "csv")[1])))
    assert [(r["user"], r["session"]) for r in rows] == [("alice", "s1"), ("alice", "s2")]
    assert total["cost"] == str(TOTAL)
    table = _cost("--by", "session", "--top", "2")[1]
    assert "the 2 costliest of 5 groups; the total counts all of them" in table


async def _subject_of(database_url: str, user: str) -> Subject:
    engine = create_engine(database_url)
    try:
        return await ensure_subject(engine, user)
    finally:
        await engine.dispose()


def test_pseudonymous_reports_hold_no_user_or_session_id(ledger_env: AsyncEngine, database_url: str) -> None:
    subject, secret = asyncio.run(_subject_of(database_url, "alice"))
    for fmt in ("json", "csv", "table"):
        code, out, _ = _cost("--by", "session", "--user", "alice", "--pseudonymous", "--format", fmt)
        assert code == 0 and "alice" not in out and " s1" not in out and "s2" not in out, fmt
        assert secret not in out, fmt
    # The subject key is published beside the session keys: the session ids must not be confirmable from it.
    rows = json.loads(_cost("--by", "user,session", "--user", "alice", "--pseudonymous", "--format", "json")[1])["rows"]
    assert {r["subject_key"] for r in rows} == {subject}
    assert {r["session_key"] for r in rows} == {session_key(secret, s) for s in ("s1", "s2")}
    assert not {session_key(subject, s) for s in ("s1", "s2")} & {r["session_key"] for r in rows}
    readable = json.loads(_cost("--by", "session", "--user", "alice", "--format", "json")[1])
    assert readable["filters"] == {"user": "alice"} and readable["rows"][0]["session"] == "s1"


@pytest.mark.parametrize(("args", "error", "fix"), [
    (["--team", "suport"], "the ledger holds no run of the team given with --team", "did you mean 'support'?"),
    (["--model", "m-bgi"], "the ledger holds no run of the model given with --model", "did you mean 'm-big'?"),
    (["--user", "nobody"], "the ledger holds no run of the user given with --user", "matched exactly"),
    (["--user", "alice", "--session", "s9"], "the ledger holds no run of that session of the user", "unique per user"),
    (["--since", "2026-12-02"], "no run matching these filters started in", "widen --since/--until"),
    (["--since", "2099-01-01"], "--since 2099-01-01T00:00:00+00:00 is in the future", "give a time before now"),
])
def test_a_filter_that_matches_nothing_exits_3_and_says_why(
    ledger_env: AsyncEngine, args: list[str], error: str, fix: str
) -> None:
    for fmt in ("table", "json", "csv"):
        code, _out, err = _cost(*args, "--format", fmt)
        assert code == 3, (args, fmt, err)
        assert f"error: {error}" in err and "fix:" in err and fix in err
        assert "nobody" not in err and "bob" not in err and "carol" not in err  # no id, given or other
        assert args[0] not in ("--team", "--model") or args[1] not in err  # nor a name given: a user's words
        # typed in the wrong place land there
    empty = json.loads(_cost(*args, "--format", "json")[1])
    assert empty["rows"] == [] and empty["total"]["cost"] == "0"


def test_an_empty_window_names_the_span_of_the_runs_in_utc_whatever_the_connections_time_zone(
    ledger_env: AsyncEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PGTZ", "Asia/Tokyo")  # libpq's default for the session's TimeZone, as a BI host may set
    code, _out, err = _cost("--since", "2030-01-01")
    assert code == 3 and "2026-11-02T10:00:00+00:00 and 2026-12-01T10:00:00+00:00" in " ".join(err.split()), err


async def _free_run(url: str) -> None:
    engine = create_engine(url)
    subject, secret = await ensure_subject(engine, "erin")
    started = datetime(2026, 11, 20, 10, tzinfo=UTC)
    await record_usage(engine, [{
        "run_id": "free", "team": "free", "team_version": "v1", "subject_key": subject,
        "session_key": session_key(secret, "e1"), "stop_reason": None, "ended_by_limit": False, "run_failed": False,
        "started_at": started, "finished_at": started, "day": started.date(), "purpose": "agent", "failed_calls": 0,
        "agent": "triage", "model": "m-free", "input_tokens": 10, "output_tokens": 5, "calls": 1}], "e1")
    await engine.dispose()


def test_a_filter_that_matches_runs_that_cost_nothing_exits_0(ledger_env: AsyncEngine, database_url: str) -> None:
    asyncio.run(_free_run(database_url))
    code, out, err = _cost("--team", "free", "--by", "user", "--format", "json")
    assert code == 0, err
    report = json.loads(out)
    assert report["total"]["cost"] == "0" and report["rows"][0]["user"] == "erin"


async def _run_of(url: str, user: str) -> None:
    engine = create_engine(url)
    subject, secret = await ensure_subject(engine, user)
    started = datetime(2026, 11, 20, 10, tzinfo=UTC)
    await record_usage(engine, [{
        "run_id": "odd", "team": "odd", "team_version": "v1", "subject_key": subject,
        "session_key": session_key(secret, "o1"), "stop_reason": None, "ended_by_limit": False, "run_failed": False,
        "started_at": started, "finished_at": started, "day": started.date(), "purpose": "agent", "failed_calls": 0,
        "agent": "triage", "model": "m-free", "input_tokens": 10, "output_tokens": 5, "calls": 1}], "o1")
    await engine.dispose()


def _on_a_terminal(*args: str) -> str:
    """``teamstore ARGS``'s stdout when it is a terminal (a pseudo-terminal the test reads)."""
    import os
    import subprocess
    import sys

    reading, writing = os.openpty()
    try:
        done = subprocess.run([sys.executable, "-m", "teamstore", *args], stdout=writing, stderr=subprocess.PIPE,
                              timeout=120, check=False)
    finally:
        os.close(writing)
    assert done.returncode == 0, done.stderr
    shown = b""
    while True:
        try:
            chunk = os.read(reading, 65536)
        except OSError:  # the terminal's other end closed: all of it was read
            break
        if not chunk:
            break
        shown += chunk
    os.close(reading)
    return shown.decode("utf-8")


def test_csv_on_a_terminal_shows_the_characters_a_terminal_acts_on_escaped_and_a_pipe_gets_them_as_stored(
    ledger_env: AsyncEngine, database_url: str
) -> None:
    # U+009B is a C1 control: CSI, on a terminal the start of an escape sequence (ESC [); U+202E turns text around.
    asyncio.run(_run_of(database_url, "mal\x9b2J\u202elory"))
    shown = _on_a_terminal("cost", "--team", "odd", "--by", "user", "--format", "csv")
    assert "\x9b" not in shown and "\u202e" not in shown, repr(shown)
    assert "mal\\x9b2J\\u202elory" in shown  # as the table shows it
    code, piped, _ = _cost("--team", "odd", "--by", "user", "--format", "csv")
    assert code == 0 and next(iter(csv.DictReader(io.StringIO(piped))))["user"] == "mal\x9b2J\u202elory"


def test_an_empty_ledger_exits_3(engine: AsyncEngine, database_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TEAMSTORE_DATABASE_URL", database_url)
    code, _, err = _cost()
    assert code == 3 and "error: the ledger holds no runs yet" in err


def test_options_before_the_report_command_are_refused_not_ignored(ledger_env: AsyncEngine, tmp_path: object) -> None:
    result = runner.invoke(app, ["cost", "--team", "support", "report", "--output", "x.html"])
    assert result.exit_code == 1 and "options given before `report`" in result.output


def test_the_groupings_help_lists_are_the_ones_a_query_takes() -> None:
    from teamstore.audit.cost import DIMENSIONS
    from teamstore.cli.cost import GROUPINGS as LISTED

    assert tuple(DIMENSIONS) == LISTED


async def test_a_limited_run_with_unpriced_tokens_shows_its_limited_cost_as_partly_unknown(
    ledger_env: AsyncEngine,
) -> None:
    from tests.analytics.seed import seed_ledger

    await seed_ledger(ledger_env, [("r6", "erin", "e1", "support", "v1", "2026-11-10", "limited",
                                    [("triage", "mystery", 40, 4, 1), ("triage", "m-big", 100, 0, 1)])])
    status, out, _ = await asyncio.to_thread(_cost, "--by", "team", "--format", "json")
    support = next(r for r in json.loads(out)["rows"] if r["key"] == "support")
    assert status == 0 and support["limited_cost"] == "0.0033" and support["limited_unpriced_tokens"] == 44
    status, table, _ = await asyncio.to_thread(_cost, "--by", "team")
    (line,) = [line for line in table.splitlines() if line.strip().startswith("support")]
    assert line.rstrip().endswith("0.0033 + unknown")  # the limited part, not only its priced share


async def test_calls_of_unknown_usage_show_a_cost_partly_unknown_in_every_format(ledger_env: AsyncEngine) -> None:
    # The triage's one call was answered without its usage (a stream that did not ask for it): never a cost of 0.
    from tests.analytics.seed import seed_ledger

    await seed_ledger(ledger_env, [("r6", "erin", "e1", "streams", "v1", "2026-11-10", "completed",
                                    [("triage", "m-big", 0, 0, 1, 1), ("researcher", "m-big", 100, 0, 1)])])
    status, out, _ = await asyncio.to_thread(_cost, "--team", "streams", "--by", "agent", "--format", "json")
    report = json.loads(out)
    rows = {r["key"]: (r["cost"], r["unknown_usage_calls"]) for r in report["rows"]}
    assert status == 0 and rows == {"triage": (None, 1), "researcher": ("0.0003", 0)}
    assert (report["total"]["cost"], report["total"]["unknown_usage_calls"]) == ("0.0003", 1)
    status, out, _ = await asyncio.to_thread(_cost, "--team", "streams", "--by", "agent", "--format", "csv")
    *_, total = csv.DictReader(io.StringIO(out))
    assert (total["cost"], total["unknown_usage_calls"]) == ("0.0003", "1")
    status, table, _ = await asyncio.to_thread(_cost, "--team", "streams", "--by", "agent")
    lines = {line.split()[0]: line.rstrip() for line in table.splitlines() if line.strip()}
    assert lines["triage"].endswith("unknown") and "0.0003 + unknown" in lines["total"]
    assert "1 of the calls have unknown usage" in table


async def test_a_live_user_named_erased_reads_apart_from_the_erased_in_the_table_and_csv(
    ledger_env: AsyncEngine,
) -> None:
    from sqlalchemy import delete, update

    from teamstore.audit.schema import subject_sessions, subjects, usage
    from teamstore.audit.subjects import find_subject
    from tests.analytics.seed import seed_ledger

    await seed_ledger(ledger_env, [("r6", "erased", "s1", "support", "v1", "2026-11-10", "completed",
                                    [("triage", "m-big", 1000, 0, 1)])])
    bob = await find_subject(ledger_env, "bob")
    async with ledger_env.begin() as conn:  # bob erased: what the erasure's steps leave
        await conn.execute(update(usage).where(usage.c.subject_key == bob).values(subject_key=None))
        await conn.execute(delete(subject_sessions).where(subject_sessions.c.subject_key == bob))
        await conn.execute(delete(subjects).where(subjects.c.subject_key == bob))
    status, out, _ = await asyncio.to_thread(_cost, "--by", "user", "--format", "csv")
    users = {line["user"]: line["cost"] for line in csv.DictReader(io.StringIO(out))}
    assert status == 0 and (users["erased"], users["'erased"]) == ("0.0021", "0.003") and len(users) == 6
    status, out, _ = await asyncio.to_thread(_cost, "--by", "session", "--format", "csv")
    sessions = [(line["user"], line["session"]) for line in csv.DictReader(io.StringIO(out))]
    assert ("'erased", "s1") in sessions and [s for u, s in sessions if u == "erased"] != ["s1"]
    status, table, _ = await asyncio.to_thread(_cost, "--by", "user")
    assert [line.split()[0] for line in table.splitlines() if "erased" in line] == ["'erased", "erased"]


@pytest.mark.parametrize("listing", [[], ["--top", "10"]])
async def test_a_user_whose_id_is_total_reads_apart_from_the_total_line_in_every_format(
    ledger_env: AsyncEngine, listing: list[str],
) -> None:
    from tests.analytics.seed import seed_ledger

    await seed_ledger(ledger_env, [("r6", "total", "s1", "support", "v1", "2026-11-10", "completed",
                                    [("triage", "m-big", 1000, 0, 1)])])
    status, out, _ = await asyncio.to_thread(_cost, "--by", "user", "--format", "csv", *listing)
    *rows, total = list(csv.DictReader(io.StringIO(out)))
    assert status == 0 and total["user"] == "total" and total["cost"] != "0.003"
    assert [row["cost"] for row in rows if row["user"] == "'total"] == ["0.003"]
    assert [row for row in rows if row["user"] == "total"] == []
    status, table, _ = await asyncio.to_thread(_cost, "--by", "user", *listing)
    assert [line.split()[0] for line in table.splitlines() if "total" in line] == ["'total", "total"]
    status, out, _ = await asyncio.to_thread(_cost, "--by", "user", "--format", "json", *listing)
    report = json.loads(out)  # the total is a key of its own: the user's id is given as it is
    assert [row["cost"] for row in report["rows"] if row["user"] == "total"] == ["0.003"]



async def test_a_group_named_with_an_apostrophe_reads_apart_from_one_the_csv_guards_in_any_column(
    ledger_env: AsyncEngine,
) -> None:
    # The CSV writes =x as '=x, so a spreadsheet does not run it: an agent (a team, a model) literally named '=x
    # gets one ' more, in the second column as in the first, or the two read alike.
    from tests.analytics.seed import seed_ledger

    await seed_ledger(ledger_env, [("r6", "'=u", "s1", "'=t", "v1", "2026-11-10", "completed",
                                    [("=x", "m-big", 1000, 0, 1), ("'=x", "m-big", 2000, 0, 1)]),
                                   ("r7", "=u", "s2", "=t", "v1", "2026-11-10", "completed",
                                    [("=x", "m-big", 4000, 0, 1)])])
    status, out, _ = await asyncio.to_thread(_cost, "--by", "team,agent", "--format", "csv")
    rows = {(r["team"], r["agent"]): r["input_tokens"] for r in csv.DictReader(io.StringIO(out))}
    assert status == 0 and {k: v for k, v in rows.items() if "=" in k[0]} == {
        ("''=t", "'=x"): "1000", ("''=t", "''=x"): "2000", ("'=t", "'=x"): "4000"}
    status, out, _ = await asyncio.to_thread(_cost, "--by", "model,user", "--format", "csv")
    users = {r["user"]: r["input_tokens"] for r in csv.DictReader(io.StringIO(out)) if "=" in r["user"]}
    assert users == {"''=u": "3000", "'=u": "4000"}  # a user's id is marked once, as user_label does it
    status, out, _ = await asyncio.to_thread(_cost, "--by", "team,agent", "--format", "json")
    assert {(r["team"], r["agent"]) for r in json.loads(out)["rows"] if "=" in r["team"]} == {
        ("'=t", "=x"), ("'=t", "'=x"), ("=t", "=x")}  # JSON gives the names as they are


async def test_a_team_named_total_reads_apart_from_one_named_with_an_apostrophe_before_it(
    ledger_env: AsyncEngine,
) -> None:
    # total is marked as the total line's namesake, 'total as a name with an apostrophe: two marks, not one each.
    from tests.analytics.seed import seed_ledger

    await seed_ledger(ledger_env, [("r6", "u1", "s1", "total", "v1", "2026-11-10", "completed",
                                    [("triage", "m-big", 1000, 0, 1)]),
                                   ("r7", "u1", "s2", "'total", "v1", "2026-11-10", "completed",
                                    [("triage", "m-big", 2000, 0, 1)])])
    status, out, _ = await asyncio.to_thread(_cost, "--by", "team", "--format", "csv")
    *rows, _total = list(csv.DictReader(io.StringIO(out)))
    assert status == 0 and {r["team"]: r["input_tokens"] for r in rows if "total" in r["team"]} == {
        "'total": "1000", "''total": "2000"}
    status, table, _ = await asyncio.to_thread(_cost, "--by", "team")
    assert [line.split()[0] for line in table.splitlines() if "total" in line] == ["''total", "'total", "total"]


@pytest.mark.parametrize("by", ["day", "day,team"])
def test_a_table_a_little_wider_than_the_terminal_shows_each_day_whole(ledger_env: AsyncEngine, by: str) -> None:
    # Two columns short of the table's own width: the text columns are narrowed to fit, never the day's.
    args = ["cost", "--by", by, "--model", "m-big"]
    width = max(len(line.rstrip()) for line in runner.invoke(app, args, env={"COLUMNS": "200"}).stdout.splitlines())
    result = runner.invoke(app, args, env={"COLUMNS": str(width - 2)})
    assert result.exit_code == 0, result.output
    assert "2026-11-02" in result.stdout and "2026-11-09" in result.stdout, result.stdout


def test_the_table_says_since_when_a_model_it_could_not_price_has_a_price(
    ledger_env: AsyncEngine, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # m-big's negotiated rate starts on the 5th: the runs of the 2nd have none, though `prices show` lists it.
    prices = {**PRICE_FILE, "models": {**PRICE_FILE["models"],
                                       "m-big": [{"effective_from": "2026-11-05", "input": 3, "output": 15}]}}
    (tmp_path / "later.json").write_text(json.dumps(prices), encoding="utf-8")
    monkeypatch.setenv("TEAMSTORE_PRICES_PATH", str(tmp_path / "later.json"))
    code, table, _ = _cost("--by", "model")
    assert code == 0 and "no price for m-big before 2026-11-05, mystery:" in table, table
