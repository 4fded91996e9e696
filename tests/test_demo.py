"""`teamstore demo`, the main job, runs offline on the embedded default and shows what it promises."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from teamstore.keys.sealed import is_sealed
from tests.conftest import fits_with_ids_whole
from tests.otlp_receiver import OtlpReceiver


def _demo(tmp_path: Path, **settings: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "AWS_", "TEAMSTORE_"))}
    env.update(TEAMSTORE_HOME=str(tmp_path / "home"), OPENAI_API_KEY="")
    env.update(settings)
    return subprocess.run([sys.executable, "-m", "teamstore", "demo"], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=240, check=False)


def _cost_rows(cost: str) -> list[tuple[str, ...]]:
    """The rows of the demo's cost table: user, session, runs completed, ended by limit, model calls, tokens in,
    tokens out, cost."""
    return re.findall(r"^ (\w+) +(\S+) +(\d+) +(\d+) +(\d+) +(\d+) +(\d+) +(\S+(?: \+ unknown)?) *$", cost, re.M)


def test_demo_runs_end_to_end_offline(tmp_path: Path) -> None:
    # On an 80-column terminal: every line fits, its tables included, and the session ids are whole.
    proc = _demo(tmp_path, COLUMNS="80")
    out = proc.stdout
    assert proc.returncode == 0, proc.stderr
    assert "context came back" in out
    assert "resume: resumed" in out and "resume: definition_changed" in out
    assert "quarantined: alice/" in out
    assert "after the restore the researcher knows alice's first message again" in out
    assert "receipt er-" in out and ": completed" in out
    assert "sessions left for bob: 0" in out
    assert (tmp_path / "home" / "teamstore.db").exists()
    assert any((tmp_path / "home" / "transcripts").rglob("*.jsonl.gz"))
    killed = " ".join(out.split("7. A worker is killed")[1].split("8. The audit trail")[0].split())  # unwrapped
    assert "resume interrupted" in killed and "stopped after turn 2" in killed
    assert killed.count("(from the killed worker)") == 3 and killed.count("(this process)") == 4  # task, turns 1-2
    assert "6 model calls for six turns" in killed and "1 interrupted run" in killed
    assert "…" in out.split("8. The audit trail")[1].split("9. Token cost")[0]  # a long message says it is cut
    cost = out.split("9. Token cost")[1].split("10. Compliance")[0]
    rows = _cost_rows(cost)
    assert [row[0] for row in rows] == ["alice", "bob"], cost  # each session by its own ids, its cost an exact decimal
    assert all(re.fullmatch(r"ticket-\d+-[ab]", row[1]) and re.fullmatch(r"0\.\d+", row[-1]) for row in rows), cost
    sessions = [row[1] for row in rows]
    fits_with_ids_whole(out, 80, *sessions)
    fits_with_ids_whole(out.split("6. What is stored")[1].split("7. A worker")[0], 80, *sessions)
    assert "of which the memory writer (teamstore cost --by purpose):" in cost
    memory = out.split("5. Memory outlives the session")[1].split("6. What is stored")[0]
    assert "resume: expired" in memory
    assert "the state expired, and triage knows alice's ticket id and router model" in memory
    assert "teamstore memory show --user alice" in memory and "55102" in memory and "ZX-81" in memory


def test_demo_runs_on_a_price_table_without_its_offline_model(tmp_path: Path) -> None:
    # "on whatever settings are in force": an operator's own price file knows no offline-small.
    prices = tmp_path / "prices.json"
    prices.write_text(json.dumps({"version": "2026-11-01", "currency": "USD", "models": {
        "gpt-4o": [{"effective_from": "2024-05-13", "input": 5.0, "output": 15.0}]}}))
    proc = _demo(tmp_path, TEAMSTORE_PRICES_PATH=str(prices))
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr
    cost = proc.stdout.split("9. Token cost")[1].split("10. Compliance")[0]
    assert "unknown" in cost


def test_demo_runs_again_in_the_same_home(tmp_path: Path) -> None:
    first = _demo(tmp_path)
    assert first.returncode == 0, first.stderr
    # The first run left alice's earlier session and its quarantined copy behind; the second run restores and
    # lists only its own session's copies.
    second = _demo(tmp_path)
    assert second.returncode == 0, second.stderr
    assert "after the restore the researcher knows alice's first message again" in second.stdout
    assert second.stdout.count("quarantined: alice/") == 1
    assert "sessions left for bob: 0" in second.stdout
    # The memory writer's share is of the sessions the table shows, not of the first run's as well.
    cost = second.stdout.split("9. Token cost")[1].split("10. Compliance")[0]
    rows = [[int(n) for n in row[4:7]] for row in _cost_rows(cost)]  # model calls, tokens in, tokens out
    share = re.search(r"memory writer \(teamstore cost --by purpose\): (\d+) calls, \d+\+\d+ tokens of (\d+)\+(\d+)",
                      " ".join(cost.split()))
    assert len(rows) == 2 and share is not None, cost
    assert [int(share[2]), int(share[3])] == [sum(r[1] for r in rows), sum(r[2] for r in rows)]
    assert int(share[1]) < sum(r[0] for r in rows)


def test_a_failing_step_is_reported_as_text(tmp_path: Path) -> None:
    # A '[/]' in TEAMSTORE_HOME crashed the demo's opening panel with a MarkupError; a failed step's error output
    # is printed as it is.
    proc = _demo(tmp_path, TEAMSTORE_HOME=str(tmp_path / "odd[/]home"), TEAMSTORE_TRANSCRIPTS_URL="ftp://nowhere/x")
    assert proc.returncode == 1
    assert "odd[/]home" in proc.stdout and "teamstore run failed" in proc.stdout
    assert "error: unsupported transcripts URL scheme 'ftp'" in proc.stdout
    assert "Traceback" not in proc.stdout + proc.stderr


def test_the_demo_fails_when_its_erasure_does_not_complete(monkeypatch: pytest.MonkeyPatch) -> None:
    from teamstore import demo

    receipt = {"request_id": "er-1", "status": "failed", "due_at": "2026-12-30T00:00:00+00:00",
               "remains_elsewhere": [], "stores": {"transcripts": {"status": "failed", "counts": {
                   "rows": 0, "objects": 0, "versions": 0, "bytes": 0}}}}
    answers = iter([receipt, []])  # the erase command's receipt, then the sessions left
    monkeypatch.setattr(demo, "teamstore", lambda *args, **kwargs: next(answers))
    with pytest.raises(SystemExit) as ended:
        demo._erase("bob", "s1")
    assert ended.value.code == 2  # the receipt is shown, and the main job says it did not finish


def _commands(tmp_path: Path) -> Callable[..., subprocess.CompletedProcess[str]]:
    """``teamstore`` commands on a home of their own under ``tmp_path``, with no store or exporter configured."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "AWS_", "TEAMSTORE_"))}
    env.update(TEAMSTORE_HOME=str(tmp_path / "home"), OPENAI_API_KEY="")

    def teamstore(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "teamstore", *args], cwd=tmp_path, env=env,
                              capture_output=True, text=True, timeout=240, check=False)
    return teamstore


def _someone_elses(tmp_path: Path, *teams: str) -> Callable[..., subprocess.CompletedProcess[str]]:
    """:func:`_commands` on a home where a person registered ``teams`` (the example support team, under their own
    message) and ran a session of their own user bob."""
    teamstore = _commands(tmp_path)
    for name in teams:
        assert teamstore("registry", "add", name, "--factory", "teamstore.examples:support_triage", "--persist",
                         "researcher", "--message", "first version", "--label", "production").returncode == 0
    assert teamstore("db", "upgrade").returncode == 0
    assert teamstore("run", "--team", "support_triage", "--user", "bob", "--session", "real-1", "hi").returncode == 0
    return teamstore


def test_demo_refuses_stores_that_hold_other_teams_or_users(tmp_path: Path) -> None:
    # Pointed at a service's real stores, it would move their production label and erase their user bob.
    teamstore = _someone_elses(tmp_path, "support_triage", "billing")
    assert teamstore("run", "--team", "support_triage", "--user", "carol", "--session", "c-1", "hi").returncode == 0
    labelled = teamstore("registry", "show", "support_triage@production", "--json").stdout

    refused = teamstore("demo")
    said = " ".join(refused.stderr.split())
    assert refused.returncode == 1, refused.stdout
    assert ("1 other team(s) in its registry and 1 version(s) of support_triage or support_escalation it did "
            "not register and 1 other user(s) in its database and 1 session(s) of alice or bob it did not open") in said
    assert "fix: run it on a throwaway home" in said and "Traceback" not in said
    # Nothing was touched: the real bob keeps his session, the label stays where it was.
    assert teamstore("sessions", "show", "--user", "bob", "--session", "real-1").returncode == 0
    assert teamstore("registry", "show", "support_triage@production", "--json").stdout == labelled


def test_demo_refuses_a_home_where_its_team_and_users_are_someone_elses(tmp_path: Path) -> None:
    # The README's tour in the demo's home: the same team and user names, registered and run by a person. The
    # demo would move that team's label and erase that bob, sessions it never opened included.
    teamstore = _someone_elses(tmp_path, "support_triage")
    history = teamstore("registry", "history", "support_triage", "--json").stdout

    refused = teamstore("demo")
    said = " ".join(refused.stderr.split())
    assert refused.returncode == 1, refused.stdout
    assert ("1 version(s) of support_triage or support_escalation it did not register and 1 session(s) of alice "
            "or bob it did not open") in said
    assert "other team" not in said and "other user" not in said
    assert teamstore("sessions", "show", "--user", "bob", "--session", "real-1").returncode == 0
    assert teamstore("registry", "history", "support_triage", "--json").stdout == history


def _refused(home: Path) -> str:
    """What the demo's check refuses in ``home`` ('' for nothing), as one line."""
    from teamstore import demo
    from teamstore.errors import ConfigurationError
    from teamstore.settings import Settings

    try:
        demo._refuse_others(Settings(home=home))
    except ConfigurationError as refused:
        return " ".join(refused.message.split())
    return ""


def _with_its_teams(tmp_path: Path) -> Callable[..., subprocess.CompletedProcess[str]]:
    """:func:`_commands`, on a home where the demo registered its teams and made the database."""
    from config_registry import Registry
    from teamstore import demo

    demo._register(Registry.from_path(tmp_path / "home" / "registry", create=True))
    teamstore = _commands(tmp_path)
    assert teamstore("db", "upgrade").returncode == 0
    return teamstore


def test_demo_registers_again_over_a_rename_a_killed_demo_left_in_production(tmp_path: Path) -> None:
    # Killed between shipping the rename and rolling it back, the demo left production on v2, and the next one
    # stopped at its first step ("label 'production' points at version ..., would not resume").
    from config_registry import Registry
    from teamstore import demo

    registry = Registry.from_path(tmp_path / "registry", create=True)
    _v1, v2 = demo._register(registry)
    registry.label(demo.TEAM, v2, "production", reason="demo: ship the rename")
    again, _v2 = demo._register(registry)
    assert registry.version_of(f"{demo.TEAM}@production") == again


def test_demo_refuses_a_session_of_bob_by_an_id_only_alice_has_in_the_demo(tmp_path: Path) -> None:
    teamstore = _with_its_teams(tmp_path)
    assert teamstore("run", "--team", "support_triage", "--user", "bob", "--session", "case-104512", "hi").returncode == 0
    assert "1 session(s) of alice or bob it did not open" in _refused(tmp_path / "home")


def test_demo_refuses_a_user_of_its_names_whose_memory_outlived_every_record_of_their_sessions(
    tmp_path: Path,
) -> None:
    import sqlite3

    teamstore = _with_its_teams(tmp_path)
    assert teamstore("run", "--team", "support_triage", "--user", "bob", "--session", "ticket-104512-b", "hi").returncode == 0
    assert _refused(tmp_path / "home") == ""  # a session the demo opens: its own
    with sqlite3.connect(tmp_path / "home" / "teamstore.db") as db:  # the sessions deleted, the ledger's swept
        db.execute("DELETE FROM ts_sessions")
        db.execute("DELETE FROM ts_subject_sessions")
    assert "1 user(s) alice or bob with memory no session of its own left" in _refused(tmp_path / "home")
    with sqlite3.connect(tmp_path / "home" / "teamstore.db") as db:  # what a run killed as it began leaves
        db.execute("DELETE FROM ts_user_memory_facts")
        db.execute("DELETE FROM ts_user_memory")
    assert _refused(tmp_path / "home") == ""  # a subject alone is no one's data


def test_demo_takes_its_own_versions_by_their_content_not_their_commit_message(tmp_path: Path) -> None:
    # A commit hook that prefixes a ticket to every message, or a registration recovered after a kill.
    from config_registry import Registry
    from teamstore import demo

    registry = Registry.from_path(tmp_path / "home" / "registry", create=True)
    for name, made in demo._definitions().items():
        for message, component, manifest in made:
            registry.add(name, component, manifest, f"[OPS-42] {message}", allow_incompatible=True)
    assert _refused(tmp_path / "home") == ""
    message, component, manifest = demo._definitions()[demo.TEAM][0]
    registry.add(demo.TEAM, component, manifest.model_copy(update={"description": "the CRM team's triage"}), message)
    assert "1 version(s) of support_triage or support_escalation it did not register" in _refused(tmp_path / "home")
    team = tmp_path / "home" / "registry" / "teams" / "support_triage"
    (team / "component.json").write_text('{"broken": ')  # a hand edit, committed: not the demo's, and no crash
    subprocess.run(["git", "-C", str(team), "commit", "-qam", "hand edit", "--no-verify"], check=True,
                   env={**os.environ, "GIT_AUTHOR_NAME": "a", "GIT_AUTHOR_EMAIL": "a@example.com",
                        "GIT_COMMITTER_NAME": "a", "GIT_COMMITTER_EMAIL": "a@example.com"})
    assert "2 version(s) of support_triage" in _refused(tmp_path / "home")


@pytest.mark.postgres
def test_demo_runs_on_postgres_s3_kms_and_an_otlp_endpoint(
    tmp_path: Path, postgres_url: str, s3_bucket: str, kms_key: str, otlp_env: OtlpReceiver
) -> None:
    # The same command on a service's stores, through the standard variables: the demo's users' words reach
    # S3 sealed and the exporter not at all.
    import boto3

    stores = {k: v for k, v in os.environ.items() if k.startswith(("AWS_", "OTEL_", "TEAMSTORE_KMS"))}
    proc = _demo(tmp_path, COLUMNS="100", TEAMSTORE_DATABASE_URL=postgres_url,
                 TEAMSTORE_TRANSCRIPTS_URL=f"s3://{s3_bucket}/demo", **stores)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr
    assert "context came back" in proc.stdout and "sessions left for bob: 0" in proc.stdout
    assert "Traceback" not in proc.stderr
    home = tmp_path / "home"  # the registry stays a folder of the home; nothing else is kept there
    assert not any((home / name).exists() for name in ("teamstore.db", "transcripts", "key-encryption-keys.json"))
    s3 = boto3.client("s3")
    keys = [o["Key"] for o in s3.list_objects_v2(Bucket=s3_bucket, Prefix="demo/").get("Contents", [])]
    assert any(key.endswith(".jsonl.gz") for key in keys), keys
    assert all(is_sealed(s3.get_object(Bucket=s3_bucket, Key=key)["Body"].read()) for key in keys if
               key.endswith(".jsonl.gz"))
    otlp_env.wait_for(lambda spans: any(s["name"].startswith("invoke_agent") for s in spans))
    for word in (b"alice", b"55102", b"ZX-81"):
        assert word not in otlp_env.wire()
