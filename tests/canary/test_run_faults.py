"""Runs and deliveries under faults: a damaged row version, two flushes at once, a model client that calls
itself something else than "model", one whose error quotes the user's words, an agent whose state is keyed by
them and is no JSON, a home made by the first command. Each leaves canaries only where the
policy lets them be, and does what the audit trail promises (one delivery, every run metered, a home no
other user can read)."""

from __future__ import annotations

import json
import stat
import uuid
from collections import Counter

import pytest

from config_registry import Manifest, Registry
from teamstore.app import open_platform
from teamstore.cli.run import CONTENT_CAPTURE
from tests.audit.fault_server import FaultServer
from tests.canary.canaries import CanaryBook, Kind
from tests.canary.conftest import MakeDeployment
from tests.canary.deployment import Deployment
from tests.canary.flows import (
    ON_EACH_DATABASE,
    TRIAGE,
    User,
    erase,
    first_run,
    gateway_env,
    register_teams,
    run,
)
from tests.canary.model_server import ModelServer
from tests.canary.policy import WORDS, judge, report, scan
from tests.canary.sinks import CapturedText
from tests.canary.teams import gateway_secrets, note_taker, relay_desk
from tests.conftest import upgrade_database

pytestmark = pytest.mark.otlp
MAX_ROW_VERSION = 2**63 - 1


@pytest.mark.parametrize("deployment", ON_EACH_DATABASE, indirect=True)
def test_a_row_version_at_its_maximum_fails_closed_into_quarantine_and_erasure_leaves_nothing(
    deployment: Deployment, book: CanaryBook, model_server: ModelServer
) -> None:
    alice = User.plant(book, "alice")
    first_run(deployment, alice, model_server.base_url)
    deployment.sql("UPDATE ts_sessions SET row_version = :v", v=MAX_ROW_VERSION)  # a damaged row
    damaged = deployment.cli("run", "--team", TRIAGE, "--user", alice.user_id, "--session", alice.sessions[0],
                             alice.tasks[1], "--json", ok=(0, 1))
    quarantined = deployment.cli_json("sessions", "quarantine", "--user", alice.user_id)

    assert erase(deployment, book, alice)["status"] == "completed"
    leaks = judge(scan(deployment.sinks(), book), erased={"alice"})
    assert not leaks, report(leaks)
    assert damaged.returncode == 0, f"the damaged row failed the run instead of being set aside:\n{damaged.stderr}"
    assert json.loads(damaged.stdout)["resume"]["outcome"] != "resumed"
    assert [q["session_id"] for q in quarantined] == [alice.sessions[0]] and quarantined[0]["reason"]


@pytest.mark.parametrize("deployment", [
    pytest.param("sqlite+local", id="sqlite+local"),
    pytest.param("postgres+s3", marks=[pytest.mark.postgres, pytest.mark.s3], id="postgres+s3"),
], indirect=True)
def test_an_interrupted_runs_checkpoint_is_sealed_in_the_session_row_and_erasure_leaves_nothing(
    deployment: Deployment, book: CanaryBook, model_server: ModelServer
) -> None:
    alice, bob = User.plant(book, "alice"), User.plant(book, "bob")
    register_teams(deployment.registry, model_server.base_url)
    desk = Manifest(name="relay_desk", persist=["triage"], context_bound=20, checkpoints="every_turn",
                    secrets={f"participants.1.config.{path}": f"env:{v}" for path, v in gateway_secrets().items()})
    Registry(deployment.registry).add("relay_desk", relay_desk().dump_component(), desk, "relay", label="production")
    deployment.cli("db", "upgrade", level="INFO")
    secrets: dict[str, str | None] = {variable: "unused" for variable in gateway_secrets().values()}
    for user in (alice, bob):  # each run stops in its second turn: its first is in the row's checkpoint
        stopped = deployment.cli("run", "--team", "relay_desk", "--user", user.user_id, "--session",
                                 user.sessions[0], user.tasks[0], "--json", ok=(1,), env=secrets)
        assert "RuntimeError" in stopped.stderr
    shown = deployment.cli_json("sessions", "show", "--user", alice.user_id, "--session", alice.sessions[0])
    assert shown["checkpoint"]["last_turn"] == 1
    abandoned = deployment.cli_json("run", "--team", "relay_desk", "--user", bob.user_id, "--session",
                                    bob.sessions[0], "--abandon", env=secrets)
    assert abandoned["abandoned"]["last_turn"] == 1
    before = scan(deployment.sinks(), book)
    assert not judge(before), report(judge(before))
    assert alice.user_id in {h.canary.token for h in before if "ts_sessions" in h.location}  # the row is scanned
    assert not [h for h in before if h.canary.kind in WORDS], "the checkpoint holds the run's words sealed only"

    # The retention sweep opens the expired row's checkpoint to record its run, in a process of its own.
    deployment.sql("UPDATE ts_sessions SET expires_at = created_at WHERE session_id = :s", s=alice.sessions[0])
    assert deployment.cli_json("retention", "sweep", "--json")["sessions"] == 1
    shown = deployment.cli_json("transcripts", "show", "--user", alice.user_id, "--session", alice.sessions[0],
                                "--json")
    assert shown["total"] == 1 and alice.tasks[0] in json.dumps(shown, ensure_ascii=False), (
        "the swept session's interrupted run is recorded, sealed, and opens again")
    swept = scan(deployment.sinks(), book)
    assert not judge(swept), report(judge(swept))
    assert not [h for h in swept if h.canary.kind in WORDS], "the run the sweep recorded holds the words sealed only"

    assert erase(deployment, book, alice)["status"] == "completed"
    after = judge(scan(deployment.sinks(), book), erased={"alice"})
    assert not after, report(after)


async def _queue_while_s3_refuses(deployment: Deployment, monkeypatch: pytest.MonkeyPatch, *users: User) -> str:
    """Run each user's sessions while S3 refuses every upload: each transcript waits in the outbox. The refusing
    server stands at an endpoint of its own, which the workers' records name; returned."""
    refusing = FaultServer("deny")
    deployment.apply(monkeypatch, AWS_ENDPOINT_URL_S3=refusing.endpoint)
    try:
        with deployment.recording_logs():
            async with open_platform() as platform:
                for user in users:
                    for session in user.sessions:
                        async with platform.session(user.user_id, session, team=TRIAGE) as s:
                            await s.run(user.tasks[0])
    finally:
        refusing.stop()
    return refusing.endpoint


def _backlog(deployment: Deployment, copies: int) -> None:
    """Each queued transcript queued again under ``copies`` other run ids: a long outage's backlog, long
    enough for two flushes to overlap however their processes start."""
    rows = deployment.sql("SELECT run_id, object_key, subject_key, body, created_at, attempts FROM ts_transcript_outbox")
    for run_id, key, subject_key, body, created_at, attempts in rows:
        for _ in range(copies):
            other = uuid.uuid4().hex
            deployment.sql("INSERT INTO ts_transcript_outbox (run_id, object_key, subject_key, body, created_at, attempts) "
                           "VALUES (:r, :k, :s, :b, :c, :a)", r=other, k=key.replace(run_id, other), s=subject_key,
                           b=body, c=created_at, a=attempts)


@pytest.mark.postgres
@pytest.mark.s3
async def test_two_flushes_at_once_deliver_each_queued_transcript_once_and_erasure_leaves_nothing(
    make_deployment: MakeDeployment, book: CanaryBook, model_server: ModelServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    deployment = make_deployment("postgres+s3")
    alice, bob = User.plant(book, "alice"), User.plant(book, "bob")
    register_teams(deployment.registry, model_server.base_url)
    assert deployment.database_url is not None
    await upgrade_database(deployment.database_url)
    refused_at = await _queue_while_s3_refuses(deployment, monkeypatch, alice, bob)
    _backlog(deployment, copies=14)
    assert len(deployment.sql("SELECT run_id FROM ts_transcript_outbox")) == 90

    flushes = [deployment.start("transcripts", "flush", "--json") for _ in range(2)]
    for proc in flushes:
        deployment.finish(proc)
    # The workers' records name the refusing server's endpoint, where no server answers now (as after a wrong
    # AWS_ENDPOINT_URL_S3): the operator says the bucket the flushes reached is theirs, as the erasure's fix says.
    deployment.finish(deployment.start("transcripts", "mark", "--as-reached-at", refused_at))
    assert erase(deployment, book, bob)["status"] == "completed"
    leaks = judge(scan(deployment.sinks(), book), erased={"bob"})
    assert not leaks, report(leaks)
    versions = Counter(v["Key"] for page in deployment.s3_client().get_paginator("list_object_versions").paginate(
        Bucket=deployment.buckets[0]) for v in page.get("Versions", []) if "/subjects/" in v["Key"])
    assert len(versions) == 45, "alice's transcripts were delivered"
    assert set(versions.values()) == {1}, f"delivered more than once: {sorted(versions.values())}"


def test_a_run_on_a_model_client_of_any_component_type_is_in_the_ledger_and_the_spans(
    make_deployment: MakeDeployment, book: CanaryBook, model_server: ModelServer
) -> None:
    deployment = make_deployment("sqlite+local")
    bob = User.plant(book, "bob")
    register_teams(deployment.registry, model_server.base_url)
    status = book.plant(Kind.TOOL_OUTPUT, "the order tool's answer for bob", owner="bob", shape="order {} in Tromsø")
    reported = run(deployment, bob, bob.sessions[0], "Where is my order?", team="order_desk",
                   env={"CANARY_ORDER_STATUS": status})
    cost = json.loads(deployment.cli("cost", "--user", bob.user_id, "--session", bob.sessions[0],
                                     "--format", "json").stdout)
    leaks = judge(scan(deployment.sinks(), book))
    assert not leaks, report(leaks)
    assert reported["usage"]["input_tokens"] > 0, "the run reports its model's usage"
    assert (cost["total"]["calls"], cost["total"]["input_tokens"]) == (1, reported["usage"]["input_tokens"]), (
        "AutoGen's ReplayChatCompletionClient (component_type 'replay_chat_completion_client') is metered"
    )
    assert any(s["name"].startswith("chat ") for s in deployment.receiver.spans), "its call has a chat span"


def test_the_home_the_first_command_creates_is_its_owners_only(
    make_deployment: MakeDeployment, book: CanaryBook
) -> None:
    deployment = make_deployment("sqlite+local")
    alice = User.plant(book, "alice")
    deployment.cli("registry", "add", TRIAGE, "--factory", "teamstore.examples:support_triage", "--persist",
                   "researcher", "--context-bound", "20", level="INFO")
    modes = {"home": stat.S_IMODE(deployment.home.stat().st_mode)}
    run(deployment, alice, alice.sessions[0], alice.tasks[0])
    modes["teamstore.db"] = stat.S_IMODE((deployment.home / "teamstore.db").stat().st_mode)
    modes["transcripts"] = stat.S_IMODE((deployment.home / "transcripts").stat().st_mode)
    leaks = judge(scan(deployment.sinks(), book))
    assert not leaks, report(leaks)
    assert modes == {"home": 0o700, "teamstore.db": 0o600, "transcripts": 0o700}, {k: oct(v) for k, v in modes.items()}


def test_a_run_whose_model_client_quotes_the_users_words_in_its_error_fails_without_them_unless_opted_in(
    make_deployment: MakeDeployment, book: CanaryBook, model_server: ModelServer
) -> None:
    deployment = make_deployment("sqlite+local")
    bob = User.plant(book, "bob")
    register_teams(deployment.registry, model_server.base_url)
    env = gateway_env(book)
    model_server.rejecting = True  # "provider rejected request: <the user's words>"
    asked = ("run", "--team", "gateway_desk", "--user", bob.user_id, "--session")
    failed = deployment.cli(*asked, bob.sessions[0], bob.tasks[0], "--json", ok=(1,), env=env)
    said = deployment.cli(*asked, bob.sessions[1], bob.tasks[1], ok=(1,), env=env)  # the error line, for a person
    output = CapturedText("cli --json output")
    output.add("teamstore run --json", failed.stdout)
    deployment.extra_sinks.append(output)
    leaks = judge(scan(deployment.sinks(), book))
    assert not leaks, report(leaks)
    error = json.loads(failed.stdout)["error"]
    assert "raised BadRequestError (at " in error["message"], error  # its type, and where it was raised
    assert f"{CONTENT_CAPTURE}=true" in error["fix"], error
    assert "error: the team's run raised" in said.stderr and "BadRequestError" in said.stderr

    opted = deployment.cli(*asked, bob.sessions[2], bob.tasks[2], ok=(1,), env={**env, CONTENT_CAPTURE: "true"})
    assert f"provider rejected request: {bob.tasks[2]}" in " ".join(opted.stderr.split()), opted.stderr


def test_a_state_keyed_by_the_users_words_that_is_no_json_is_refused_without_quoting_them(
    make_deployment: MakeDeployment, book: CanaryBook, model_server: ModelServer
) -> None:
    deployment = make_deployment("sqlite+local")
    bob = User.plant(book, "bob")
    register_teams(deployment.registry, model_server.base_url)
    notes = Manifest(name="note_desk", persist=["notes"], context_bound=20, allowed_providers=["tests.canary."])
    Registry(deployment.registry).add("note_desk", note_taker().dump_component(), notes, "note desk", label="production")
    asked = ("run", "--team", "note_desk", "--user", bob.user_id, "--session")
    failed = deployment.cli(*asked, bob.sessions[0], bob.tasks[0], "--json", ok=(1,))
    said = deployment.cli(*asked, bob.sessions[1], bob.tasks[1], ok=(1,))  # the error line, for a person
    output = CapturedText("cli --json output")
    output.add("teamstore run --json", failed.stdout)
    deployment.extra_sinks.append(output)
    leaks = judge(scan(deployment.sinks(), book))
    assert not leaks, report(leaks)
    error = json.loads(failed.stdout)["error"]
    assert (error["type"], error["message"]) == (
        "StateNotSerializable", "notes.notes{key 1} holds a datetime, which is not JSON"), error
    assert "error: notes.notes{key 1} holds a datetime" in said.stderr, said.stderr


def test_a_message_that_reads_as_an_option_or_as_extra_arguments_is_refused_without_quoting_it(
    make_deployment: MakeDeployment, book: CanaryBook
) -> None:
    deployment = make_deployment("sqlite+local")
    bob = User.plant(book, "bob")
    asked = ("run", "--team", TRIAGE, "--user", bob.user_id, "--session", bob.sessions[0])
    dashed = book.plant(Kind.MESSAGE, "bob's message that starts with a dash", owner="bob", shape="--my router {} drops")
    refused = [deployment.cli(*asked, dashed, ok=(1,)), deployment.cli(*asked, f"-{bob.tasks[0]}", ok=(1,)),
               deployment.cli(*asked, "my router", bob.tasks[1], ok=(1,))]
    leaks = judge(scan(deployment.sinks(), book))
    assert not leaks, report(leaks)
    assert all("`--`" in " ".join(r.stderr.split()) or "one quoted argument" in r.stderr for r in refused)
