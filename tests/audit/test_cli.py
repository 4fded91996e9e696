"""The audit commands end to end: transcripts show/flush, cost, prices, retention."""

from __future__ import annotations

import asyncio
import csv
import io
import json
import shutil
import socket
import threading
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path

import pytest
from sqlalchemy import update
from typer.testing import CliRunner

from config_registry import Registry
from teamstore import examples
from teamstore.app import open_platform
from teamstore.audit.observer import TranscriptObserver, build_audit_observers
from teamstore.audit.schema import outbox
from teamstore.audit.transcripts.base import run_key
from teamstore.audit.transcripts.local import LocalTranscriptStore
from teamstore.audit.transcripts.record import RunKeys
from teamstore.cli import app
from teamstore.cli.cost import _cell
from teamstore.db.engine import create_engine
from teamstore.db.migrate import upgrade
from teamstore.errors import StorageError
from teamstore.settings import Settings
from tests.audit.fault_server import FaultServer
from tests.audit.teams import CANARY, context, observe_run, triage_team

runner = CliRunner()
USER, SESSION = "Zoë/../admin", "sess/1"


def _populate(runs: int = 2, team_version: str = "v1") -> list[str]:
    async def go() -> list[str]:
        settings = Settings()
        engine = create_engine(settings.resolved_database_url)
        await upgrade(engine)
        observers = build_audit_observers(settings, engine)
        ids = []
        for n in range(runs):
            ctx = context(user_id=USER, session_id=SESSION, team_version=team_version)
            await observe_run(observers, triage_team(), ctx, f"router down {CANARY}", ended_by_limit=n == 1)
            ids.append(ctx.run_id)
        for observer in observers:
            if isinstance(observer, TranscriptObserver):
                await observer.drain()
        await engine.dispose()
        return ids

    return asyncio.run(go())


def _queued(runs: int) -> list[str]:
    """``runs`` runs whose uploads fail (a file stands where the transcript folder should be), so their
    transcripts wait in the outbox; their run ids."""
    home = Path(Settings().home)
    home.mkdir(parents=True, exist_ok=True)
    (home / "transcripts").write_text("a file where the transcript folder should be")
    return _populate(runs)


def test_transcripts_show_prints_a_session_readably_and_as_json() -> None:
    run_ids = _populate()
    shown = runner.invoke(app, ["transcripts", "show", "--user", USER, "--session", SESSION, "--json"])
    assert shown.exit_code == 0, shown.output
    runs = json.loads(shown.stdout)["runs"]
    assert [r["run"]["run_id"] for r in runs] == run_ids
    assert runs[1]["run"]["ended_by_limit"] is True
    assert CANARY in runs[0]["items"][0]["message"]["content"]
    one = runner.invoke(
        app, ["transcripts", "show", "--user", USER, "--session", SESSION, "--run", run_ids[0]]
    )
    assert one.exit_code == 0 and "researcher" in one.stdout and "out tokens" in one.stdout
    assert run_ids[1] not in one.stdout


@pytest.fixture(params=["local", pytest.param("s3", marks=pytest.mark.s3)])
def transcripts_url(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Where the commands put and read transcripts: the local folder (the default), or S3 over HTTP."""
    if request.param == "s3":
        monkeypatch.setenv("TEAMSTORE_TRANSCRIPTS_URL", f"s3://{request.getfixturevalue('s3_bucket')}/teamstore")
    return Settings().resolved_transcripts_url


def test_transcripts_show_pages_the_newest_runs_and_says_how_many_there_are(transcripts_url: str) -> None:
    run_ids = _populate(4)
    show = ["transcripts", "show", "--user", USER, "--session", SESSION]
    every = json.loads(runner.invoke(app, [*show, "--json"]).stdout)
    assert every["total"] == 4 and [r["run"]["run_id"] for r in every["runs"]] == run_ids  # under the default
    newest = runner.invoke(app, [*show, "--last", "2", "--json"])
    assert newest.exit_code == 0, newest.output
    assert json.loads(newest.stdout)["total"] == 4
    assert [r["run"]["run_id"] for r in json.loads(newest.stdout)["runs"]] == run_ids[2:]
    readable = runner.invoke(app, [*show, "--last", "2"], env={"COLUMNS": "300"})
    assert readable.exit_code == 0 and "the newest 2 of the session's 4 run(s), oldest first" in readable.stdout
    assert run_ids[1] not in readable.stdout and run_ids[3] in readable.stdout
    one = runner.invoke(app, [*show, "--run", run_ids[0]], env={"COLUMNS": "300"})
    assert one.exit_code == 0 and "one of the session's 4 run(s)" in one.stdout and run_ids[1] not in one.stdout
    for args, message in ((["--last", "0"], "--last"), (["--last", "2", "--run", run_ids[0]], "--last and --run")):
        refused = runner.invoke(app, [*show, *args])
        assert refused.exit_code == 1 and message in refused.output and "fix:" in refused.output, args


def test_transcripts_show_for_an_unknown_user_or_session_is_a_typed_error() -> None:
    _populate(1)
    for args, message in ((["--user", "nobody", "--session", SESSION], "no audit data for that user"),
                          (["--user", USER, "--session", "other"], "no transcript for that session")):
        result = runner.invoke(app, ["transcripts", "show", *args])
        assert result.exit_code == 1 and f"error: {message}" in result.output and "fix:" in result.output


def test_one_run_is_found_by_a_unique_prefix_of_its_id_as_the_demo_prints_it() -> None:
    run_ids = _populate(2)
    show = ["transcripts", "show", "--user", USER, "--session", SESSION, "--json", "--run"]
    one = runner.invoke(app, [*show, run_ids[1][:12]])
    assert one.exit_code == 0, one.output
    assert [r["run"]["run_id"] for r in json.loads(one.stdout)["runs"]] == [run_ids[1]]
    for run, message in (("", "--run is empty"), ("nope-7Q3X", "no run of that session has the run id given"),
                         (run_ids[0][:-1] + "x", "no run")):
        result = runner.invoke(app, [*show, run])
        assert result.exit_code == 1 and f"error: {message}" in result.output and "fix:" in result.output, run
        assert "subjects/" not in result.output  # the store's key is no help to the reader
        assert "7Q3X" not in result.output  # the run id given is not repeated
    damaged = next((Path(Settings().home) / "transcripts").rglob(f"{run_ids[0]}.jsonl.gz"))
    damaged.write_bytes(b"not gzip")
    result = runner.invoke(app, ["transcripts", "show", "--user", USER, "--session", SESSION], env={"COLUMNS": "300"})
    assert result.exit_code == 1 and f"error: run {run_ids[0]}: the transcript object is not readable" in result.output


def test_cost_as_csv_and_json_counts_limit_ended_runs_apart() -> None:
    _populate()
    as_csv = runner.invoke(app, ["cost", "--by", "user", "--format", "csv"])
    assert as_csv.exit_code == 0, as_csv.output
    row, total = list(csv.DictReader(io.StringIO(as_csv.stdout)))
    assert (row["user"], total["user"]) == (USER, "total")  # readable: the application's own id
    assert (row["runs_completed"], row["runs_limited"]) == ("1", "1") and float(row["cost"]) > 0
    assert row["price_version"] and total["cost"] == row["cost"]
    assert "e-" not in row["cost"] and row["cost"].startswith("0.")  # plain decimals, as a spreadsheet expects
    keys_only = runner.invoke(app, ["cost", "--by", "user", "--format", "csv", "--pseudonymous"])
    assert keys_only.exit_code == 0 and USER not in keys_only.stdout
    assert next(csv.DictReader(io.StringIO(keys_only.stdout)))["subject_key"] not in ("", USER)
    as_json_total = json.loads(runner.invoke(app, ["cost", "--by", "user", "--format", "json"]).stdout)["total"]
    assert row["cost"] == as_json_total["cost"]  # the same exact text in both
    as_json = runner.invoke(
        app, ["cost", "--user", USER, "--session", SESSION, "--by", "agent", "--format", "json"]
    )
    report = json.loads(as_json.stdout)
    assert {r["key"] for r in report["rows"]} == {"triage", "researcher", "critic"}
    assert report["total"]["runs_limited"] == 1
    empty = runner.invoke(app, ["cost", "--user", "nobody", "--format", "json"])
    assert empty.exit_code == 3 and "error: the ledger holds no run of the user given" in empty.stderr
    report = json.loads(empty.stdout)  # still printed, so a pipe gets well-formed JSON
    assert report["rows"] == [] and report["total"]["cost"] == "0" and report["total"]["limited_cost"] == "0"
    table = runner.invoke(app, ["cost", "--by", "day", "--since", "2000-01-01"])
    assert table.exit_code == 0 and "total" in table.stdout


def test_cost_by_version_shows_a_registry_version_as_the_registrys_tables_do_and_keeps_it_whole_elsewhere() -> None:
    sha = "43ffe07b92f46c1d8e0a5b3f9c2d7e1a6b4c8d0f"  # a registry version: a commit's sha
    _populate(team_version=sha)
    table = runner.invoke(app, ["cost", "--by", "version"], env={"COLUMNS": "80"})
    assert table.exit_code == 0, table.output
    assert f"support_triage@{sha[:12]}" in table.stdout and sha[12:] not in table.stdout  # whole, on one line
    as_json = json.loads(runner.invoke(app, ["cost", "--by", "version", "--format", "json"]).stdout)
    assert [row["key"] for row in as_json["rows"]] == [f"support_triage@{sha}"]
    as_csv = runner.invoke(app, ["cost", "--by", "version", "--format", "csv"])
    assert next(csv.DictReader(io.StringIO(as_csv.stdout)))["version"] == f"support_triage@{sha}"


def test_cost_refuses_a_session_without_its_user_and_bad_dates() -> None:
    for args in (["--session", SESSION], ["--since", "yesterday"], ["--by", "planet"], ["--format", "xml"],
                 ["--since", "9999-12-31T23:00:00-05:00"], ["--until", "0001-01-01T01:00:00+05:00"],
                 ["--since", "2026-12-01", "--until", "2026-11-01"],
                 ["--user", "nobody", "--since", "2026-12-01", "--until", "2026-12-01"]):
        result = runner.invoke(app, ["cost", *args])
        assert result.exit_code == 1 and "error: " in result.output and "fix:" in result.output, args
        assert not isinstance(result.exception, OverflowError), args  # past year 9999 in UTC: a traceback


def test_prices_show_and_sync() -> None:
    shown = json.loads(runner.invoke(app, ["prices", "show", "--json"]).stdout)
    assert any(p["model"] == "offline-small" for p in shown["prices"])
    synced = json.loads(runner.invoke(app, ["prices", "sync", "--json"]).stdout)
    # Every entry of an exact name; a pattern is written out for the models the ledger holds (none yet).
    assert synced == {"version": shown["version"], "rows": len([p for p in shown["prices"] if not p["pattern"]])}


def test_a_price_table_is_shown_as_written_never_read_as_markup(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A deployment name is whatever the operator's file says: '[/]' crashed the table, '[red]' vanished.
    prices = tmp_path / "prices.json"
    prices.write_text(json.dumps({"version": "2027-01-01", "currency": "USD", "models": {
        "[red]gpt-x[/]\u001b": [{"effective_from": "2024-01-01", "input": 1, "output": 2}]}}))
    monkeypatch.setenv("TEAMSTORE_PRICES_PATH", str(prices))
    shown = runner.invoke(app, ["prices", "show"], env={"COLUMNS": "120"})
    assert shown.exit_code == 0, shown.output
    assert "[red]gpt-x[/]\\x1b" in shown.stdout and "\x1b" not in shown.stdout


def test_retention_sweep_and_flush_on_the_embedded_default() -> None:
    _populate(1)
    swept = json.loads(runner.invoke(app, ["retention", "sweep", "--json"]).stdout)
    assert (swept["transcripts"], swept["ledger_rows"], swept["sessions"]) == (0, 0, 0)
    applied = json.loads(runner.invoke(app, ["retention", "apply", "--json"]).stdout)
    assert applied["backend"] == "local" and applied["days"] == 90
    flushed = json.loads(runner.invoke(app, ["transcripts", "flush", "--json"]).stdout)
    assert (flushed["delivered"], flushed["remaining"]) == (0, 0)


def test_retention_apply_refuses_days_a_local_folder_would_not_keep(monkeypatch: pytest.MonkeyPatch) -> None:
    # It printed "days": 30 and exited 0, while `retention sweep` went on keeping transcripts for 90 days.
    monkeypatch.setenv("TEAMSTORE_TRANSCRIPT_RETENTION_DAYS", "90")
    refused = runner.invoke(app, ["retention", "apply", "--days", "30", "--json"])
    assert refused.exit_code == 1 and json.loads(refused.stdout)["error"]["exit_code"] == 1
    assert "TEAMSTORE_TRANSCRIPT_RETENTION_DAYS=30" in refused.output
    kept = json.loads(runner.invoke(app, ["retention", "apply", "--days", "90", "--json"]).stdout)
    assert (kept["backend"], kept["days"]) == ("local", 90)


def test_retention_apply_tells_a_person_what_keeps_a_local_folders_transcripts() -> None:
    # Without --json it printed the JSON document all the same.
    said = runner.invoke(app, ["retention", "apply"], env={"COLUMNS": "300"})
    assert said.exit_code == 0, said.output
    assert "are kept 90 days by `teamstore retention sweep`" in said.stdout and "{" not in said.stdout


@pytest.mark.s3
def test_a_flush_the_store_still_refuses_says_so_with_a_fix() -> None:
    _queued(1)
    flushed = runner.invoke(app, ["transcripts", "flush", "--json"])
    assert flushed.exit_code == 1, flushed.output
    assert json.loads(flushed.stdout)["remaining"] == 1
    assert "error: 1 transcript(s) still queued: the last upload failed and stored nothing" in flushed.output
    assert "fix:" in flushed.output and json.loads(flushed.stdout)["in_doubt"] is False


def test_a_flush_s3_does_not_answer_gives_the_fix_for_that_not_a_list_of_guesses(
    s3_env: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Its fix named TEAMSTORE_TRANSCRIPTS_URL, credentials and permissions, none of which was wrong.
    _queued(1)
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]  # nothing listens there once the socket is closed
    monkeypatch.setenv("AWS_ENDPOINT_URL_S3", f"http://127.0.0.1:{port}")
    monkeypatch.setenv("TEAMSTORE_TRANSCRIPTS_URL", "s3://audit/teamstore")
    flushed = runner.invoke(app, ["transcripts", "flush", "--json"], env={"COLUMNS": "300"})
    assert flushed.exit_code == 1, flushed.output
    report = json.loads(flushed.stdout)
    assert report["remaining"] == 1 and "AWS_ENDPOINT_URL_S3" in report["last_hint"]
    fix = " ".join(flushed.stderr.split()).split("fix: ", 1)[1]
    assert "AWS_ENDPOINT_URL_S3" in fix and "permissions" not in fix and "`teamstore transcripts flush` again" in fix


def test_a_flush_whose_upload_s3_left_unanswered_says_it_may_land_not_that_it_was_refused(
    s3_env: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # It said "the store refused them" of an upload S3 may well have stored.
    _queued(1)
    server = FaultServer("hang")  # S3 takes the PUT and answers nothing: the client's read timeout (5 s) ends it
    monkeypatch.setenv("AWS_ENDPOINT_URL_S3", server.endpoint)
    monkeypatch.setenv("TEAMSTORE_TRANSCRIPTS_URL", "s3://audit/teamstore")
    try:
        flushed = runner.invoke(app, ["transcripts", "flush", "--json"], env={"COLUMNS": "300"})
    finally:
        server.stop()
    assert flushed.exit_code == 1, flushed.output
    report = json.loads(flushed.stdout)
    assert (report["remaining"], report["held"], report["in_doubt"]) == (1, 1, True), report
    said = " ".join(flushed.stderr.split())
    assert "error: 1 transcript(s) still queued: the store left the last upload unanswered, and it may land" in said
    assert "refused" not in said and "nothing is lost" in said


def test_a_flush_that_leaves_transcripts_an_upload_that_may_land_holds_says_until_when() -> None:
    # It said only "still queued 1", and the doc's "run it again while remaining is above 0" ran it in a loop
    # for as long as the upload may land.
    home = Path(Settings().home)
    _queued(1)
    (home / "transcripts").unlink()
    until = datetime(2999, 1, 2, 3, 4, 5, tzinfo=UTC)  # an upload of it may land until then

    async def claim() -> None:
        engine = create_engine(Settings().resolved_database_url)
        async with engine.begin() as conn:
            await conn.execute(update(outbox).values(claimed_by="worker-1", claimed_until=until))
        await engine.dispose()

    asyncio.run(claim())
    flushed = runner.invoke(app, ["transcripts", "flush", "--make-folder"], env={"COLUMNS": "300"})
    assert flushed.exit_code == 0, flushed.output
    assert "still queued 1; 1 of them held until 2999-01-02 03:04:05 UTC" in flushed.stdout
    report = json.loads(runner.invoke(app, ["transcripts", "flush", "--json"]).stdout)
    assert (report["remaining"], report["held"], report["held_until"]) == (1, 1, until.isoformat())


def test_a_session_whose_transcripts_wait_in_the_outbox_says_so_not_that_it_has_none() -> None:
    folder = Path(Settings().home) / "transcripts"
    run_ids = _queued(2)
    show = ["transcripts", "show", "--user", USER, "--session", SESSION]
    down = runner.invoke(app, show, env={"COLUMNS": "300"})  # the store still refuses: its fix, and what waits
    assert down.exit_code == 1 and "2 of the session's transcripts wait in the outbox" in down.stderr, down.output
    folder.unlink()  # the store answers again; nobody has flushed yet
    for args in ([], ["--run", run_ids[0]]):
        result = runner.invoke(app, [*show, *args], env={"COLUMNS": "300"})
        assert result.exit_code == 1, result.output
        assert "2 of the session's transcripts wait in the outbox" in result.output, args
        assert "teamstore transcripts flush" in result.output and "check the session id" not in result.output
    # No run made the folder on this machine since (the file stood there): making it is the operator's call.
    assert runner.invoke(app, ["transcripts", "flush", "--make-folder"]).exit_code == 0
    shown = json.loads(runner.invoke(app, [*show, "--json"]).stdout)
    assert (shown["total"], shown["queued"]) == (2, 0)


def test_a_transcript_folder_this_machine_does_not_have_is_said_to_be_elsewhere_not_an_unknown_session(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # It said "no transcript for that session" and to check the session id, which was right.
    folder = tmp_path / "workers-disk"
    monkeypatch.setenv("TEAMSTORE_TRANSCRIPTS_URL", folder.as_uri())
    run_ids = _populate(1)
    folder.rename(tmp_path / "unmounted")  # seen from another machine, or with the disk not mounted
    show = ["transcripts", "show", "--user", USER, "--session", SESSION]
    for args in ([], ["--run", run_ids[0]]):
        result = runner.invoke(app, [*show, *args], env={"COLUMNS": "300"})
        said = " ".join(result.stderr.split())
        assert result.exit_code == 1 and "a folder this machine does not have" in said, result.output
        assert "check the session id" not in said and "on the machine whose folder that is" in said
    (tmp_path / "unmounted").rename(folder)
    assert json.loads(runner.invoke(app, [*show, "--json"]).stdout)["total"] == 1


@pytest.mark.parametrize("here_exists", [True, False])
def test_a_session_whose_transcripts_went_to_another_store_names_it_and_the_setting_that_reads_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, here_exists: bool
) -> None:
    # It said "no transcript for that session" and to check the session id (or, with no folder of its own here,
    # that the transcripts are kept in that folder), while the records said where they went.
    there = tmp_path / "service-tx"
    monkeypatch.setenv("TEAMSTORE_TRANSCRIPTS_URL", there.as_uri())
    run_ids = _populate(1)
    here = tmp_path / "default-tx"
    if here_exists:
        here.mkdir()
    monkeypatch.setenv("TEAMSTORE_TRANSCRIPTS_URL", here.as_uri())
    show = ["transcripts", "show", "--user", USER, "--session", SESSION]
    for args in ([], ["--run", run_ids[0]]):
        result = runner.invoke(app, [*show, *args], env={"COLUMNS": "300"})
        said = " ".join(result.stderr.split())
        assert result.exit_code == 1 and f"were written to {there.as_uri()}" in said, result.output
        assert f"TEAMSTORE_TRANSCRIPTS_URL={there.as_uri()}" in said and "check the session id" not in said
        assert "a folder this machine does not have" not in said
    monkeypatch.setenv("TEAMSTORE_TRANSCRIPTS_URL", there.as_uri())
    assert json.loads(runner.invoke(app, [*show, "--json"]).stdout)["total"] == 1
    missing = runner.invoke(app, ["transcripts", "show", "--user", USER, "--session", "other"])
    assert missing.exit_code == 1 and "check the session id" in missing.stderr  # its own store: a wrong id


def test_a_user_whose_transcripts_went_to_two_other_stores_is_told_each_and_its_own_store_keeps_its_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Reviewed: the fix named only the first store, and a store holding transcripts written before stores were
    # recorded was said to hold none of the user's.
    first, second, here = (tmp_path / name for name in ("first-tx", "second-tx", "default-tx"))
    for folder in (first, second):
        monkeypatch.setenv("TEAMSTORE_TRANSCRIPTS_URL", folder.as_uri())
        _populate(1)
    here.mkdir()
    monkeypatch.setenv("TEAMSTORE_TRANSCRIPTS_URL", here.as_uri())
    show = ["transcripts", "show", "--user", USER, "--session", SESSION]
    said = " ".join(runner.invoke(app, show, env={"COLUMNS": "300"}).stderr.split())
    assert f"one of: TEAMSTORE_TRANSCRIPTS_URL={first.as_uri()}; TEAMSTORE_TRANSCRIPTS_URL={second.as_uri()}" in said
    shutil.copytree(second, here, dirs_exist_ok=True)  # the user's, with no record of this store
    assert json.loads(runner.invoke(app, [*show, "--json"]).stdout)["total"] == 1
    wrong = runner.invoke(app, [*show, "--run", "0000000"], env={"COLUMNS": "300"})
    assert wrong.exit_code == 1 and "were written to" not in " ".join(wrong.stderr.split()), wrong.output


def test_a_flush_on_a_machine_without_the_transcript_folder_delivers_nothing_there_unless_told_to_make_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # It made the folder there and delivered into it: the transcripts landed on that machine's disk, where
    # show, export and erase on the workers' machine never find them.
    folder = tmp_path / "workers-disk"
    monkeypatch.setenv("TEAMSTORE_TRANSCRIPTS_URL", folder.as_uri())
    folder.write_text("the workers' upload fails: their transcript waits in the outbox")
    _populate(1)
    folder.unlink()  # as this machine sees the workers' folder: not at all
    refused = runner.invoke(app, ["transcripts", "flush", "--json"], env={"COLUMNS": "300"})
    said = " ".join(refused.stderr.split())
    assert refused.exit_code == 1 and "a folder this machine does not have" in said, refused.output
    assert json.loads(refused.stdout)["error"]["type"] == "TranscriptFolderElsewhere" and str(folder) in said
    assert "--make-folder" in said and not folder.exists()
    made = runner.invoke(app, ["transcripts", "flush", "--make-folder", "--json"])
    assert (json.loads(made.stdout)["delivered"], made.exit_code) == (1, 0), made.output
    shown = runner.invoke(app, ["transcripts", "show", "--user", USER, "--session", SESSION, "--json"])
    assert json.loads(shown.stdout)["total"] == 1


def test_a_retention_sweep_on_a_machine_without_the_transcript_folder_says_so_not_removed_0(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # It printed "removed 0 transcripts" while the workers' folder, elsewhere, was never swept.
    folder = tmp_path / "workers-disk"
    monkeypatch.setenv("TEAMSTORE_TRANSCRIPTS_URL", folder.as_uri())
    _populate(1)
    folder.rename(tmp_path / "unmounted")
    refused = runner.invoke(app, ["retention", "sweep"], env={"COLUMNS": "300"})
    said = " ".join(refused.stderr.split())
    assert refused.exit_code == 1 and "a folder this machine does not have" in said, refused.output
    assert "removed" not in refused.stdout and "run it on the machine whose folder that is" in said
    assert runner.invoke(app, ["transcripts", "flush", "--make-folder"]).exit_code == 0  # as its fix says, on purpose
    assert json.loads(runner.invoke(app, ["retention", "sweep", "--json"]).stdout)["transcripts"] == 0


def test_a_sweep_or_flush_of_a_folder_another_database_made_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = tmp_path / "shared-path"
    monkeypatch.setenv("TEAMSTORE_TRANSCRIPTS_URL", folder.as_uri())
    _populate(1)
    marker = folder / ".teamstore-folder"
    ours = json.loads(marker.read_text())["database_id"]
    marker.write_text(json.dumps({"database_id": "f" * 32}))  # the folder of another deployment at the same path
    refused = runner.invoke(app, ["retention", "sweep"], env={"COLUMNS": "300"})
    said = " ".join(refused.stderr.split())
    assert refused.exit_code == 1 and "belongs to another teamstore database" in said, refused.output
    assert "f" * 32 in said and ours in said


def test_a_file_where_the_transcript_folder_should_be_is_named_not_file_exists(tmp_path: Path) -> None:
    # A run's upload said "could not write transcript <run>.jsonl.gz: File exists", and the sweep "removed 0".
    folder = tmp_path / "transcripts"
    folder.write_text("not a folder")

    async def go() -> None:
        store = LocalTranscriptStore(folder)
        for attempt in (store.put(run_key(RunKeys("a" * 32, "b" * 32), "r1"), b"body"),
                        store.sweep(datetime.now(UTC)), store.present()):
            with pytest.raises(StorageError, match="is not a folder: a file") as caught:
                await attempt
            assert "move that file away" in (caught.value.hint or "")

    asyncio.run(go())


@pytest.mark.s3
def test_a_session_whose_bucket_is_missing_says_so_and_what_waits_in_the_outbox(
    s3_bucket: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TEAMSTORE_TRANSCRIPTS_URL", f"s3://{s3_bucket}-gone/teamstore")  # no such bucket
    _populate(1)  # the upload is refused: the transcript waits in the outbox
    down = runner.invoke(app, ["transcripts", "show", "--user", USER, "--session", SESSION], env={"COLUMNS": "300"})
    said = " ".join(down.stderr.split())
    assert down.exit_code == 1 and "1 of the session's transcripts wait in the outbox" in said, down.output
    assert "bucket" in said and CANARY not in down.output


def test_retention_apply_on_s3_prints_the_rule(s3_bucket: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TEAMSTORE_TRANSCRIPTS_URL", f"s3://{s3_bucket}/teamstore")
    monkeypatch.setenv("TEAMSTORE_TRANSCRIPT_RETENTION_DAYS", "30")
    for days in ([], ["--days", "30"]):
        result = runner.invoke(app, ["retention", "apply", *days, "--json"])
        assert result.exit_code == 0, result.output
        rule = json.loads(result.stdout)["rule"]
        assert rule["Expiration"] == {"Days": 30} and rule["Filter"] == {"Prefix": "teamstore/subjects/"}
    said = runner.invoke(app, ["retention", "apply"], env={"COLUMNS": "300"})
    assert said.exit_code == 0 and f"put on s3://{s3_bucket}/teamstore" in said.stdout, said.output
    assert "under teamstore/subjects/ expire 30 days after they are written" in said.stdout and "{" not in said.stdout


def test_retention_apply_on_s3_refuses_days_the_sweep_would_not_keep_and_puts_no_rule(
    s3_bucket: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # It put a rule expiring transcripts after 30 days, while the sweep of transcripts written again (and the
    # erasure's check of the store) went on counting the setting's 90.
    import boto3

    monkeypatch.setenv("TEAMSTORE_TRANSCRIPTS_URL", f"s3://{s3_bucket}/teamstore")
    monkeypatch.setenv("TEAMSTORE_TRANSCRIPT_RETENTION_DAYS", "90")
    refused = runner.invoke(app, ["retention", "apply", "--days", "30", "--json"], env={"COLUMNS": "300"})
    said = " ".join(refused.stderr.split())
    assert refused.exit_code == 1 and json.loads(refused.stdout)["error"]["exit_code"] == 1, refused.output
    assert "--days 30 differs from TEAMSTORE_TRANSCRIPT_RETENTION_DAYS (90)" in said and "Nothing was changed" in said
    assert "fix: set TEAMSTORE_TRANSCRIPT_RETENTION_DAYS=30" in said
    s3 = boto3.client("s3")
    with pytest.raises(s3.exceptions.ClientError, match="NoSuchLifecycleConfiguration"):
        s3.get_bucket_lifecycle_configuration(Bucket=s3_bucket)


def test_a_message_is_shown_as_text_that_the_terminal_never_acts_on() -> None:
    # A user's message (or a model's reply) holding rich markup and terminal escape sequences: a title and
    # clipboard write (OSC), an erase of the screen, a one-character CSI, a right-to-left override.
    hostile = "hi [/] [link=https://evil.example]x[/link] \x1b]52;c;cm0gLXJmIH4=\x07\x1b[2J\x9b8m\u202eok"

    async def go() -> None:
        settings = Settings()
        engine = create_engine(settings.resolved_database_url)
        await upgrade(engine)
        observers = build_audit_observers(settings, engine)
        await observe_run(observers, triage_team(), context(user_id=USER, session_id=SESSION), hostile)
        for observer in observers:
            if isinstance(observer, TranscriptObserver):
                await observer.drain()
        await engine.dispose()

    asyncio.run(go())
    shown = runner.invoke(app, ["transcripts", "show", "--user", USER, "--session", SESSION], env={"COLUMNS": "300"})
    assert shown.exit_code == 0, shown.output
    assert not any(c in shown.stdout for c in "\x1b\x07\x9b\u202e")
    assert "hi [/] [link=https://evil.example]x[/link] \\x1b]52;c;cm0gLXJmIH4=\\x07\\x1b[2J\\x9b8m\\u202eok" in shown.stdout
    as_json = runner.invoke(app, ["transcripts", "show", "--user", USER, "--session", SESSION, "--json"])
    assert json.loads(as_json.stdout)["runs"][0]["items"][0]["message"]["content"] == hostile  # exact, and
    assert not any(c in as_json.stdout for c in "\x1b\x07\x9b\u202e")  # still inert in a terminal


def test_a_run_that_raised_says_so_in_the_readable_transcript() -> None:
    from teamstore.cli.transcripts import _render_transcripts
    from teamstore.terminal import console

    run = {"run_id": "r1", "team": "t", "team_version": "v", "started_at": "2026-11-30T00:00:00+00:00",
           "stop_reason": None, "ended_by_limit": False, "error": "RuntimeError",
           "totals": {"model_calls": 2, "input_tokens": 10, "output_tokens": 3}}
    with console.capture() as captured:
        _render_transcripts({"runs": [{"run": run, "items": []}], "total": 1}, one=False)
    assert "raised RuntimeError; 2 model calls" in captured.get()
    with console.capture() as captured:
        _render_transcripts({"runs": [{"run": {**run, "error": None, "stop_reason": "done"}, "items": []}],
                             "total": 1}, one=False)
    assert "stop: done; 2 model calls" in captured.get()


@pytest.mark.s3
async def test_closing_a_platform_closes_the_transcript_store_it_made(
    s3_bucket: str, registry_path: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # The S3 store runs its requests on threads of its own; a platform that made the store ends them.
    monkeypatch.setenv("TEAMSTORE_TRANSCRIPTS_URL", f"s3://{s3_bucket}/teamstore")
    Registry(registry_path, create=True).add("support_triage", examples.support_triage().dump_component(),
                                examples.example_manifest("support_triage"), "v1", label="production")
    async with open_platform(Settings(home=tmp_path / "home", auto_migrate=True)) as platform:
        async with platform.session("alice", "s1", team="support_triage") as s:
            await s.run("hello")
        assert _s3_threads()  # the transcript went up through them
    for _ in range(100):  # idle threads end soon after their pool is shut down
        if not _s3_threads():
            break
        await asyncio.sleep(0.05)
    assert _s3_threads() == []


def _s3_threads() -> list[str]:
    return [t.name for t in threading.enumerate() if t.name.startswith("teamstore-s3")]


def test_cost_csv_never_hands_a_spreadsheet_a_formula(capsys: pytest.CaptureFixture[str]) -> None:
    # Team, agent and model names come from definitions; a spreadsheet would run '=...' as a formula.
    from teamstore.audit.cost import CostReport, CostRow
    from teamstore.cli.cost import _write_csv

    name = '=HYPERLINK("http://x","y")'
    row = CostRow(key=name, group={"model": name}, calls=1, cost=Decimal("0.5"), unpriced_models=["@sum(1)"])
    _write_csv(CostReport(by="model", price_version="v", currency="USD", rows=[row], total=row, fields=("model",)))
    written, _total = list(csv.DictReader(io.StringIO(capsys.readouterr().out)))
    assert written["model"] == "'=HYPERLINK(\"http://x\",\"y\")" and written["unpriced_models"] == "'@sum(1)"
    assert written["cost"] == "0.5" and written["calls"] == "1"


@pytest.mark.parametrize(("value", "cell"), [
    (6.74e-05, "0.0000674"), (0.0, "0"), (1.5, "1.5"), (12.0, "12"), (1.5e-07, "0.00000015"),
    (Decimal("7.5E-5"), "0.000075"), (Decimal("12.500"), "12.5"), (Decimal("0E-9"), "0"),
    ("=HYPERLINK()", "'=HYPERLINK()"), (None, ""), (3, 3),
])
def test_a_csv_cell_is_what_a_spreadsheet_reads_as_meant(value: object, cell: object) -> None:
    assert _cell(value) == cell


def test_a_run_heading_on_a_narrow_terminal_keeps_its_version_and_start() -> None:
    _populate(1)
    shown = json.loads(runner.invoke(app, ["transcripts", "show", "--user", USER, "--session", SESSION,
                                           "--json"]).stdout)["runs"][0]["run"]
    readable = runner.invoke(app, ["transcripts", "show", "--user", USER, "--session", SESSION],
                             env={"COLUMNS": "80"})
    assert readable.exit_code == 0, readable.output
    flat = " ".join(readable.stdout.split())
    assert f"{shown['team']}@{shown['team_version']}" in flat and str(shown["started_at"]) in flat
    assert "…" not in readable.stdout


def test_the_cost_table_on_a_narrow_terminal_shows_every_figure_whole() -> None:
    _populate()
    as_json = json.loads(runner.invoke(app, ["cost", "--by", "session", "--format", "json", "--pseudonymous"]).stdout)
    table = runner.invoke(app, ["cost", "--by", "session", "--pseudonymous"], env={"COLUMNS": "80"})
    assert table.exit_code == 0, table.output
    assert "…" not in table.stdout and max(len(line) for line in table.stdout.splitlines()) <= 80
    assert as_json["total"]["cost"] in table.stdout  # the exact amount, whole
    assert str(as_json["total"]["input_tokens"]) in table.stdout
    lines = table.stdout.splitlines()
    body = lines[next(i for i, line in enumerate(lines) if line.strip().startswith("─")) + 1:]
    key = as_json["rows"][0]["key"]  # 32 hex digits: wrapped in its cell, never cut
    assert len(key) == 32 and key in "".join(line.split()[0] for line in body if line.strip())
    readable = runner.invoke(app, ["cost", "--by", "session"], env={"COLUMNS": "200"})
    assert readable.exit_code == 0 and USER in readable.stdout and SESSION in readable.stdout
    assert key not in readable.stdout


def test_an_id_no_run_can_have_is_refused_by_name_not_answered_with_nothing() -> None:
    for args, message in ((["cost", "--user", ""], "user_id is empty"),
                          (["cost", "--user", "alice", "--session", ""], "session_id is empty"),
                          (["transcripts", "show", "--user", "", "--session", "s1"], "user_id is empty"),
                          (["sessions", "show", "--user", "alice", "--session", "a\tb"], "control character U+0009"),
                          (["sessions", "list", "--user", ""], "user_id is empty")):
        result = runner.invoke(app, args)
        assert result.exit_code == 1 and message in result.output and "fix:" in result.output, args


def test_retention_sweep_runs_every_step_past_a_failing_transcript_store_and_exits_2_naming_it() -> None:
    # The transcript step's failure stopped the whole sweep: the ledger, quarantine and memory were never swept.
    _populate(1)
    folder = Path(Settings().home) / "transcripts"
    (folder / "subjects").rename(folder / "subjects-real")
    (folder / "subjects").symlink_to(folder / "subjects-real")  # the sweep refuses to walk through a link
    swept = runner.invoke(app, ["retention", "sweep", "--json"])
    assert swept.exit_code == 2, swept.output
    report = json.loads(swept.stdout)
    assert list(report["failed_steps"]) == ["transcripts"] and report["transcripts"] is None
    assert (report["ledger_rows"], report["quarantined"], report["forgotten_users"]) == (0, 0, None)
    assert "forget_quiet_users" in report["skipped_steps"]
    assert "error: the retention sweep's step(s) transcripts failed" in " ".join(swept.stderr.split())
    said = runner.invoke(app, ["retention", "sweep"], env={"COLUMNS": "300"})
    assert said.exit_code == 2 and "removed 0 queued transcripts" in said.stdout
    assert "failed: transcripts" in said.stdout and "forgot no one: the transcript step failed" in said.stdout
