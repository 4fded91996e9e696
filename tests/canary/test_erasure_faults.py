"""Erasure under faults: a slow S3 upload that lands after its client gave up, a wrong transcripts setting,
a writer killed before its rename, racing first sessions and a second erasure request, an operator who names
the user in what the receipt keeps. Whatever the fault, once a receipt says ``completed`` no sink holds the
user's canaries, and no log (the Postgres server's included) ever held a raw id."""

from __future__ import annotations

import asyncio
import os
import signal
import time
from typing import Any

import pytest
from botocore.config import Config
from sqlalchemy.ext.asyncio import AsyncEngine

from config_registry import Registry
from teamstore.app import open_platform
from teamstore.audit.ledger_observer import LedgerObserver
from teamstore.audit.observer import TranscriptObserver
from teamstore.audit.pseudonyms import Pseudonyms
from teamstore.audit.transcripts.s3 import S3TranscriptStore
from teamstore.db.engine import create_engine
from teamstore.events import RunObserver
from teamstore.runtime.platform import Platform
from teamstore.settings import Settings
from tests.audit.fault_server import HoldingProxy
from tests.canary.canaries import CanaryBook
from tests.canary.conftest import MakeDeployment
from tests.canary.deployment import Deployment
from tests.canary.flows import ON_EACH_DATABASE, TRIAGE, User, erase, first_run, register_teams, run
from tests.canary.model_server import ModelServer
from tests.canary.policy import judge, report, scan
from tests.conftest import upgrade_database

pytestmark = pytest.mark.otlp


def _settled(deployment: Deployment, book: CanaryBook, user: User, request_id: str, **env: str | None) -> None:
    """Erase ``user`` under ``env`` (a fault); if that did not complete, rerun the same request as the
    receipt says to, on the right settings. Then nothing of the user may be anywhere."""
    receipt = erase(deployment, book, user, ok=(0, 1, 2), env=env, request_id=request_id)
    if receipt is None or receipt.get("status") != "completed":  # an error document, for one that failed
        receipt = erase(deployment, book, user, request_id=request_id)
    assert receipt["status"] == "completed", receipt
    leaks = judge(scan(deployment.sinks(), book), erased={user.alias})
    assert not leaks, report(leaks)


@pytest.mark.parametrize("setting", ["missing", "another bucket"])
def test_an_erasure_on_a_wrong_transcripts_setting_completes_only_once_the_transcripts_are_gone(
    make_deployment: MakeDeployment, book: CanaryBook, model_server: ModelServer, setting: str
) -> None:
    deployment = make_deployment("sqlite+s3")
    alice = User.plant(book, "alice")
    register_teams(deployment.registry, model_server.base_url)
    run(deployment, alice, alice.sessions[0], alice.tasks[0])
    wrong = None if setting == "missing" else f"s3://{deployment.new_bucket()}/audit"
    _settled(deployment, book, alice, "REQ-wrong-setting", TEAMSTORE_TRANSCRIPTS_URL=wrong)


def test_a_writer_killed_between_its_temporary_file_and_the_rename_leaves_nothing_after_erasure(
    make_deployment: MakeDeployment, book: CanaryBook, model_server: ModelServer
) -> None:
    deployment = make_deployment("sqlite+local")
    alice = User.plant(book, "alice")
    register_teams(deployment.registry, model_server.base_url)
    # The user's first run: the temporary file is all the store ever got of them. A short lease: the killed
    # worker's session frees itself before the erasure looks for open sessions.
    killed = deployment.start("run", "--team", TRIAGE, "--user", alice.user_id, "--session", alice.sessions[0],
                              alice.tasks[0], host=["--crash-before-rename"], env={"TEAMSTORE_LEASE_TTL_SECONDS": "1"})
    deployment.finish(killed, ok=(-signal.SIGKILL,))
    assert any(p.name.startswith(".tmp-") for p in (deployment.home / "transcripts").rglob("*")), (
        "the crash left the temporary file this scenario is about"
    )
    time.sleep(1.5)
    _settled(deployment, book, alice, "REQ-crashed-writer")


@pytest.mark.parametrize("deployment", ON_EACH_DATABASE, indirect=True)
def test_an_erasure_whose_reason_or_requester_names_the_user_is_refused_and_the_receipt_keeps_no_id(
    deployment: Deployment, book: CanaryBook, model_server: ModelServer
) -> None:
    alice = User.plant(book, "alice")
    first_run(deployment, alice, model_server.base_url)
    named = [deployment.cli("erase", "--user", alice.user_id, "--yes", option, text, ok=(0, 1, 3))
             for option, text in (("--requested-by", f"{alice.user_id} by mail"),
                                  ("--reason", f"{alice.user_id.upper()} asked"))]

    receipt = erase(deployment, book, alice, ok=(0, 3))
    leaks = judge(scan(deployment.sinks(), book), erased={"alice"})
    assert not leaks, report(leaks)
    assert receipt["status"] == "completed" and [done.returncode for done in named] == [1, 1]


async def _first_sessions_at_once(user: User) -> None:
    """A new user's sessions opened at the same moment, as a page making parallel requests does."""
    async with open_platform() as platform:

        async def first(session: str) -> None:
            async with platform.session(user.user_id, session, team=TRIAGE) as s:
                await s.run(user.tasks[0])

        await asyncio.gather(*(first(session) for session in user.sessions))


@pytest.mark.parametrize("deployment", ON_EACH_DATABASE, indirect=True)
async def test_racing_first_sessions_and_a_second_erasure_request_leave_no_raw_id_in_any_log(
    deployment: Deployment, book: CanaryBook, model_server: ModelServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    alice = User.plant(book, "alice", sessions=8)
    register_teams(deployment.registry, model_server.base_url)
    deployment.apply(monkeypatch)
    if deployment.database_url:
        await upgrade_database(deployment.database_url)
    with deployment.recording_logs():
        await _first_sessions_at_once(alice)

    # A coordinator killed while it holds the fence leaves its request open (its lease short here) ...
    opened = deployment.start("erase", "--user", alice.user_id, "--request-id", "REQ-first", "--yes",
                              env={"TEAMSTORE_ERASURE_FENCE_GRACE_SECONDS": "60", "TEAMSTORE_ERASURE_LEASE_SECONDS": "2"})
    deadline = time.monotonic() + 60
    while not deployment.sql("SELECT 1 FROM ts_user_holds") and time.monotonic() < deadline:
        await asyncio.sleep(0.1)
    os.kill(opened.pid, signal.SIGKILL)
    deployment.finish(opened, ok=(-signal.SIGKILL,))
    # ... and a second request for the same user is refused while it is open.
    second = deployment.cli("erase", "--user", alice.user_id, "--request-id", "REQ-second", "--yes", ok=(1,))
    assert "REQ-first" in second.stderr
    await asyncio.sleep(2)
    _settled(deployment, book, alice, "REQ-first")


async def test_an_upload_s3_completes_after_its_client_gave_up_is_gone_once_the_erasure_completes(
    make_deployment: MakeDeployment, book: CanaryBook, model_server: ModelServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    deployment = make_deployment("sqlite+s3")
    alice = User.plant(book, "alice")
    register_teams(deployment.registry, model_server.base_url)
    deployment.apply(monkeypatch)
    assert deployment.s3_endpoint is not None
    proxy = HoldingProxy(deployment.s3_endpoint)  # holds each PUT until released, then lets it land
    import boto3

    client = boto3.client("s3", endpoint_url=proxy.endpoint, config=Config(
        connect_timeout=1, read_timeout=1, retries={"total_max_attempts": 2}))
    store = S3TranscriptStore(client, deployment.buckets[0], "audit")
    engine = create_engine(Settings().resolved_database_url)
    pseudonyms = Pseudonyms(engine)
    observers: list[RunObserver] = [LedgerObserver(engine, pseudonyms), TranscriptObserver(store, engine, pseudonyms)]
    try:
        with deployment.recording_logs():
            receipt = await _slow_upload_then_erase(deployment, book, alice, proxy, engine, observers)
        await asyncio.to_thread(deployment.cli, "transcripts", "flush", ok=(0, 1))  # the routine cron job
        if receipt is None or receipt.get("status") != "completed":  # an error document, for one that failed
            receipt = await asyncio.to_thread(erase, deployment, book, alice, (0,), None, "REQ-slow-s3")
    finally:
        proxy.stop()
        await store.close()
        await engine.dispose()
    assert receipt["status"] == "completed", receipt
    leaks = judge(scan(deployment.sinks(), book), erased={"alice"})
    assert not leaks, report(leaks)


async def _slow_upload_then_erase(deployment: Deployment, book: CanaryBook, user: User, proxy: HoldingProxy,
                                  engine: AsyncEngine, observers: list[RunObserver]) -> dict[str, Any] | None:
    """A run whose upload S3 holds until its client gives up; the user erased meanwhile; then S3
    completes the upload. The worker stays up throughout. The erasure's receipt."""
    async with Platform(engine, Registry(deployment.registry), observers=observers) as platform:
        async with platform.session(user.user_id, user.sessions[0], team=TRIAGE) as s:
            await s.run(user.tasks[0])
        assert proxy.arrived.is_set(), "the upload reached S3 and is held there"
        await asyncio.sleep(3)  # the client gives up: two attempts, a 1 s read timeout each
        receipt = await asyncio.to_thread(erase, deployment, book, user, (0, 1, 2), None, "REQ-slow-s3")
        proxy.release()
        assert await asyncio.to_thread(proxy.landed.wait, 10), "S3 completed the upload after all"
    return receipt
