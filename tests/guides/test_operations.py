"""docs/operations.md run as an operator follows it, on SQLite and Postgres with transcripts in S3 (moto's server
over HTTP): a run while the bucket is missing waits in the outbox and `transcripts flush` fails, saying so, until
the bucket is there; then the guide's command lines in order (transcripts, retention, sessions per user, the
switch to row leases) on what that run and a second one left."""

from __future__ import annotations

import asyncio
import json
import uuid

import boto3
import psycopg
import pytest

from teamstore.app import open_platform
from tests.guides.guide import Command, Shell, commands, queries

GUIDE = "operations.md"


@pytest.fixture
def operator(on_database: Shell, s3_env: str, monkeypatch: pytest.MonkeyPatch) -> tuple[Shell, str]:
    """The shell, transcripts in a bucket nobody has made yet, and the team alice's runs use."""
    bucket = f"ts-{uuid.uuid4().hex[:12]}"
    monkeypatch.setenv("TEAMSTORE_TRANSCRIPTS_URL", f"s3://{bucket}/teamstore")
    on_database.json("registry", "add", "support_triage", "--factory", "teamstore.examples:support_triage",
                     "--persist", "researcher", "-m", "first version", "--label", "production")
    return on_database, bucket


def _run(shell: Shell, session: str) -> str:
    """One of alice's runs; its run id."""
    said = shell.json("run", "--team", "support_triage", "--user", "alice", "--session", session, "My line drops")
    return str(said["run_id"])


def _guide_lines() -> dict[str, list[Command]]:
    lines: dict[str, list[Command]] = {}
    for line in commands(GUIDE):
        lines.setdefault(" ".join(line.args[:2]), []).append(line)
    assert list(lines) == ["transcripts show", "retention apply", "retention sweep", "sessions list",
                           "sessions show", "sessions delete", "db lease-mode"], lines
    return lines


def _the_outbox_holds_the_run_until_the_bucket_is_made(shell: Shell, bucket: str) -> None:
    flushed = shell("transcripts", "flush", "--json")
    queued = json.loads(flushed.stdout)
    assert flushed.exit_code == 1 and queued["remaining"] == 1 and not queued["in_doubt"], flushed.output
    assert queued["last_error"] == f"could not write transcripts: bucket '{bucket}' does not exist", queued
    assert "error: 1 transcript(s) still queued" in flushed.stderr and "fix: create the bucket" in flushed.stderr
    boto3.client("s3").create_bucket(Bucket=bucket)
    delivered = shell.json("transcripts", "flush")
    assert delivered["delivered"] == 1 and delivered["remaining"] == 0, delivered


@pytest.mark.s3
def test_every_command_of_the_guide_runs_as_it_says(operator: tuple[Shell, str]) -> None:
    shell, bucket = operator
    lines = _guide_lines()
    first = _run(shell, "s1")
    _the_outbox_holds_the_run_until_the_bucket_is_made(shell, bucket)
    second = _run(shell, "s1")
    _run(shell, "s2")

    newest, last_50, one = lines["transcripts show"]
    assert "the newest 2 of the session's 2 run(s)" in " ".join(shell.line(newest).stdout.split())
    shell.line(last_50)
    shell.filled["RUN"] = first[:12]
    shown = json.loads(shell.line(one).stdout)
    assert shown["total"] == 2 and [r["run"]["run_id"] for r in shown["runs"]] == [first], shown
    assert second != first

    rule, other_days = lines["retention apply"]
    assert f"put on s3://{bucket}/teamstore" in " ".join(shell.line(rule).stdout.split())
    refused = json.loads(shell.line(other_days, status=1).stdout)["error"]
    assert refused["type"] == "ConfigurationError" and "Nothing was changed" in refused["message"]
    (sweep,) = lines["retention sweep"]
    shell.line(sweep, said="forgot 0 users nothing was left of")

    hers, page = lines["sessions list"]
    shell.line(hers, said="2 unexpired stored session(s) for this user, of the 1000")
    shell.filled["CURSOR"] = shell.json("sessions", "list", "--limit", "1")[0]["cursor"]
    assert len(json.loads(shell(*[shell.filled.get(a, a) for a in page.args], "--json").stdout)) == 1
    (show,) = lines["sessions show"]
    counted = json.loads(shell.line(show).stdout)
    assert counted["user_live_sessions"] == 2 and counted["max_sessions_per_user"] == 1000, counted
    (delete,) = lines["sessions delete"]
    shell.line(delete, said="deleted")
    assert shell.json("sessions", "show", "--user", "alice", "--session", "s2")["user_live_sessions"] == 1

    (switch,) = lines["db lease-mode"]
    shell.line(switch, said="session lease")


@pytest.mark.postgres
def test_the_guides_queries_show_the_sessions_open_and_who_is_nearest_the_bound(
    shell: Shell, postgres_url: str, postgres_server: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The lock query listed every advisory lock of the server: another database's, and teamstore's own locks
    # that are no session's (a retention sweep's, a migration's), as sessions open here.
    monkeypatch.setenv("TEAMSTORE_DATABASE_URL", postgres_url)
    shell.json("db", "upgrade")
    shell.json("registry", "add", "support_triage", "--factory", "teamstore.examples:support_triage",
               "--persist", "researcher", "-m", "first version", "--label", "production")
    _run(shell, "s1")
    nearest, opened = queries(GUIDE)
    with psycopg.connect(postgres_url, autocommit=True) as here, \
            psycopg.connect(postgres_server, autocommit=True) as elsewhere:
        here.execute("SELECT pg_advisory_lock(42)")  # one number: no session's
        elsewhere.execute("SELECT pg_advisory_lock(1, 2)")  # another database's
        assert here.execute(nearest).fetchall() == [("alice", 1)]
        assert here.execute(opened).fetchall() == []
        assert len(asyncio.run(_open_session_sees(postgres_url, opened))) == 1


async def _open_session_sees(url: str, query: str) -> list[tuple[object, ...]]:
    """What ``query`` lists while alice's session is open on a worker (``lock`` leases, the default)."""
    platform = open_platform()
    try:
        async with platform.session("alice", "s2", team="support_triage"), \
                await psycopg.AsyncConnection.connect(url) as conn:
            return await (await conn.execute(query)).fetchall()
    finally:
        await platform.aclose()
