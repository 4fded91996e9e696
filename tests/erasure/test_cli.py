"""``teamstore erase`` and ``teamstore erase status`` on the embedded default, human and --json."""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime

import pytest
from sqlalchemy import insert, update
from sqlalchemy.ext.asyncio import AsyncEngine
from typer.testing import CliRunner

from teamstore.audit.observer import TranscriptObserver, build_audit_observers
from teamstore.audit.schema import subjects
from teamstore.audit.subjects import get_or_create_subject, new_session_secret, new_subject_key
from teamstore.cli import app
from teamstore.db.engine import create_engine
from teamstore.db.migrate import upgrade
from teamstore.erasure import request_checks, requests
from teamstore.erasure.schema import erasure_requests
from teamstore.settings import Settings
from tests.audit.teams import context, observe_run, triage_team
from tests.services import free_port

runner = CliRunner()
USER = "Zoë/../admin"


@pytest.fixture(autouse=True)
def _no_grace(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TEAMSTORE_ERASURE_FENCE_GRACE_SECONDS", "0")


def _populate(runs: int = 2) -> None:
    async def go() -> None:
        settings = Settings()
        engine = create_engine(settings.resolved_database_url)
        await upgrade(engine)
        observers = build_audit_observers(settings, engine)
        for n in range(runs):
            await observe_run(observers, triage_team(), context(user_id=USER, session_id=f"s{n}"), "router down")
        for observer in observers:
            if isinstance(observer, TranscriptObserver):
                await observer.drain()
        await engine.dispose()

    asyncio.run(go())


def test_dry_run_then_erase_then_status() -> None:
    _populate()
    plan = runner.invoke(app, ["erase", "--user", USER, "--dry-run", "--json"])
    assert plan.exit_code == 0, plan.output
    planned = json.loads(plan.stdout)
    assert planned["status"] == "dry_run" and planned["stores"]["transcripts"]["status"] == "would_erase"

    done = runner.invoke(app, ["erase", "--user", USER, "--request-id", "cli-1", "--reason", "art. 17", "--json", "--yes"])
    assert done.exit_code == 0, done.output
    receipt = json.loads(done.stdout)
    assert receipt["status"] == "completed" and USER not in done.stdout
    assert receipt["stores"]["transcripts"] | {"verified_at": None} == {
        "status": "erased", "detail": None, "verified_at": None,
        "counts": planned["stores"]["transcripts"]["counts"]}
    assert [r["what"] for r in receipt["remains_elsewhere"]] == ["database backups", "tracing backend"]

    shown = runner.invoke(app, ["erase", "status", "cli-1"])
    assert shown.exit_code == 0 and "completed" in shown.stdout and "transcripts" in shown.stdout
    again = runner.invoke(app, ["erase", "--user", USER, "--request-id", "cli-1", "--json", "--yes"])
    assert json.loads(again.stdout) == receipt


def test_a_dry_run_presents_no_request_id_since_it_stores_no_request() -> None:
    # A dry run printed a freshly minted id that was never stored: `erase status` with it found nothing.
    _populate(1)
    for extra in ([], ["--request-id", "REQ-dry"]):
        plan = runner.invoke(app, ["erase", "--user", USER, "--dry-run", "--json", *extra])
        assert plan.exit_code == 0, plan.output
        assert json.loads(plan.stdout)["request_id"] is None
        shown = runner.invoke(app, ["erase", "--user", USER, "--dry-run", *extra], env={"COLUMNS": "300"})
        assert shown.exit_code == 0, shown.output
        assert "er-" not in shown.stdout and "REQ-dry" not in shown.stdout
        assert "no request was opened" in shown.stdout
    assert runner.invoke(app, ["erase", "status", "REQ-dry"]).exit_code == 1  # it names no request


def test_a_failed_erasure_exits_non_zero_and_status_says_how_to_resume(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TEAMSTORE_TRANSCRIPTS_URL", "s3://nowhere/audit")
    monkeypatch.setenv("AWS_ENDPOINT_URL_S3", f"http://127.0.0.1:{free_port()}")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "x")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "x")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")

    async def subject() -> None:
        engine = create_engine(Settings().resolved_database_url)
        await upgrade(engine)
        await get_or_create_subject(engine, USER)
        await engine.dispose()

    asyncio.run(subject())
    failed = runner.invoke(app, ["erase", "--user", USER, "--request-id", "cli-2", "--json", "--yes"])
    assert failed.exit_code == 2
    assert json.loads(failed.stdout)["stores"]["transcripts"]["status"] == "failed"
    status = runner.invoke(app, ["erase", "status", "cli-2", "--json"], env={"COLUMNS": "300"})
    assert status.exit_code == 2 and json.loads(status.stdout)["status"] == "failed"
    assert "error: the erasure is failed" in status.output  # read like every other failure
    assert "fix: read the detail lines above, fix the cause, then rerun" in status.output


def test_a_request_id_teamstore_made_is_named_when_another_coordinator_takes_the_request_over(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The operator gave no --request-id: the id is teamstore's own, and the only way back to the request.
    _populate(1)
    real_claim, calls = requests.claim, []

    async def taken_after_the_first_step(engine: AsyncEngine, request_id: str, owner: str, lease: float) -> bool:
        calls.append(request_id)
        if len(calls) == 2:  # another coordinator holds the lease once the first step is done
            async with engine.begin() as conn:
                await conn.execute(update(erasure_requests).where(erasure_requests.c.request_id == request_id)
                                   .values(owner="another-coordinator"))
        return await real_claim(engine, request_id, owner, lease)

    monkeypatch.setattr(requests, "claim", taken_after_the_first_step)
    result = runner.invoke(app, ["erase", "--user", USER, "--yes", "--json"], env={"COLUMNS": "300"})
    assert result.exit_code == 1, result.output
    error = json.loads(result.stdout)["error"]
    made = calls[0]
    assert made.startswith("er-") and error["message"].startswith(f"the erasure request {made} was taken over"), error
    assert f"`teamstore erase status {made}`" in error["fix"] and f"--request-id {made}" in error["fix"]


def test_a_request_id_the_operator_gave_is_not_repeated_when_another_coordinator_takes_it_over() -> None:
    refused = requests.taken_over("TICKET-jane-doe")
    assert "jane" not in refused.message + (refused.hint or "")
    assert request_checks.made_by_teamstore("er-" + "0" * 23 + "G") is None  # only teamstore's own shape is named


def test_erase_needs_a_user_and_status_needs_a_known_id() -> None:
    no_user = runner.invoke(app, ["erase"])  # a usage error: 1, since 2 means a failed or held request
    assert no_user.exit_code == 1 and "error: Missing option '--user'" in no_user.output  # not 'Invalid value'
    empty = runner.invoke(app, ["erase", "--user", ""])  # refused as such, before the database is looked for
    assert empty.exit_code == 1 and "error: user_id is empty" in empty.output
    assert "does not exist yet" not in empty.output
    assert runner.invoke(app, ["db", "upgrade"]).exit_code == 0
    missing = runner.invoke(app, ["erase", "status", "alice-7Q3X"])  # a user's id given in the wrong place
    assert missing.exit_code == 1 and "the request id given names no erasure request" in missing.output
    assert "7Q3X" not in missing.output


def test_an_empty_request_id_is_refused_not_replaced_by_a_fresh_one() -> None:
    # `--request-id "$TICKET"` with the variable unset: erasing under an id nobody holds loses the idempotency key.
    _populate(1)
    result = runner.invoke(app, ["erase", "--user", USER, "--request-id", "", "--json"])
    assert result.exit_code == 1 and "error: request id is empty" in result.output and "fix:" in result.output
    plan = runner.invoke(app, ["erase", "--user", USER, "--dry-run", "--json"])
    assert json.loads(plan.stdout)["stores"]["transcripts"]["status"] == "would_erase"  # nothing was erased


def test_a_blank_request_id_or_one_with_spaces_around_it_is_refused_with_exit_1() -> None:
    _populate(1)
    for bad, said in (("   ", "request id is blank: it holds only spaces or invisible characters"),
                      ("REQ-7 ", "request id has U+0020, a space or an invisible character, at its end"),
                      ("REQ\x7f7", "request id holds the control character U+007F")):
        for extra in ([], ["--dry-run"]):
            result = runner.invoke(app, ["erase", "--user", USER, "--request-id", bad, "--yes", *extra])
            assert result.exit_code == 1 and f"error: {said}" in result.output and "fix:" in result.output
            assert "REQ" not in result.output  # what is wrong is said; the id given is not repeated
    listed = runner.invoke(app, ["erase", "list", "--json"])
    assert json.loads(listed.stdout)["requests"] == []  # no request was opened


def test_a_request_id_no_request_can_have_is_refused_saying_what_is_wrong_with_it() -> None:
    _populate(1)
    for bad, said in (("er-\x01x", "request id holds the control character U+0001"),
                      ("r" * 129, "request id is 129 characters long; the limit is 128")):
        result = runner.invoke(app, ["erase", "status", bad])
        assert result.exit_code == 1 and f"error: {said}" in result.output, result.output
        assert "fix: a request id is 1..128 printable UTF-8 characters" in " ".join(result.output.split())


def test_ids_that_look_like_markup_are_printed_as_given() -> None:
    _populate(1)
    done = runner.invoke(app, ["erase", "--user", USER, "--request-id", "REQ[/]7", "--yes"])  # a ticket id, not markup
    assert done.exit_code == 0, done.output
    assert "REQ[/]7" in done.stdout and "completed" in done.stdout
    shown = runner.invoke(app, ["erase", "status", "REQ[/]7"])
    assert shown.exit_code == 0 and "REQ[/]7" in shown.stdout
    missing = runner.invoke(app, ["erase", "status", "REQ[bold]8"])
    assert missing.exit_code == 1 and "the request id given names no erasure request" in missing.output
    assert "REQ[bold]8" not in missing.output and "8" not in missing.output.split("fix:")[0]  # never repeated


def test_status_of_a_request_that_is_still_open_is_not_success() -> None:
    _populate(1)

    async def open_only() -> None:  # a coordinator killed right after opening the request
        from teamstore.erasure import requests

        engine = create_engine(Settings().resolved_database_url)
        await requests.open_request(engine, "cli-open", USER, None, 30)
        await engine.dispose()

    asyncio.run(open_only())
    shown = runner.invoke(app, ["erase", "status", "cli-open", "--json"])
    assert json.loads(shown.stdout)["status"] == "open"
    assert shown.exit_code == 2  # 0 would tell a script the user is erased


def test_the_receipt_table_on_a_narrow_terminal_names_every_column_whole() -> None:
    # 'ver…' stood for both versions and verified, 'obj…' and 'mar…' for the rest.
    _populate(1)
    plan = runner.invoke(app, ["erase", "--user", USER, "--dry-run"], env={"COLUMNS": "80"})
    assert plan.exit_code == 0, plan.output
    assert "…" not in plan.stdout
    header = next(line for line in plan.stdout.splitlines() if "store" in line and "status" in line)
    assert header.split() == ["store", "status", "rows", "objects", "versions", "markers", "bytes", "held", "verified"]
    assert "resume_state" in plan.stdout and "would_erase" in plan.stdout


def test_erasing_an_id_with_a_control_character_says_that_no_session_can_have_it() -> None:
    user = "legacy\x01id"

    async def stored_by_an_earlier_release() -> None:
        engine = create_engine(Settings().resolved_database_url)
        await upgrade(engine)
        async with engine.begin() as conn:
            await conn.execute(insert(subjects).values(user_id=user, subject_key=new_subject_key(),
                                                       session_secret=new_session_secret(),
                                                       created_at=datetime.now(UTC)))
        await engine.dispose()

    asyncio.run(stored_by_an_earlier_release())
    done = runner.invoke(app, ["erase", "--user", user, "--request-id", "req-ctl", "--json", "--yes"], env={"COLUMNS": "300"})
    assert done.exit_code == 0, done.output
    assert "note: the user id holds the control character U+0001: no session can have such an id" in done.output
    assert json.loads(done.stdout)["stores"]["subject"]["status"] == "erased"
    refused = runner.invoke(app, ["erase", "--user", "legacy\x00id"])  # no release stored NUL anywhere
    assert refused.exit_code == 1 and "error: user_id contains NUL" in refused.output
