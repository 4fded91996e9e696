"""Erasure coordinators on hosts whose clocks disagree with the database's still exclude each other (Postgres): a
request's lease is written and checked on the server's clock, by them and by an extension (which a running
request refuses), and so is its receipt, from which the fence's grace counts, and so are a run's verdict on
whether it is overdue and its completion; and a rerun on such a host waits out what is left of the key step's
wait, counted on the server's clock too. A skewed host is this process with its clock moved
(:func:`tests.clocks.host_clock`)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from datetime import datetime, timedelta
from pathlib import Path

import pytest
from sqlalchemy import Interval, func, literal, select, update
from sqlalchemy.ext.asyncio import AsyncEngine

from teamstore.audit import claims
from teamstore.audit.subjects import get_or_create_subject
from teamstore.audit.transcripts.local import LocalTranscriptStore
from teamstore.db.engine import create_engine
from teamstore.db.migrate import upgrade
from teamstore.erasure import Receipt, RequestStatus, requests
from teamstore.erasure.desk import extend_request, list_requests
from teamstore.erasure.schema import erasure_requests
from teamstore.erasure.settings import ErasureSettings
from teamstore.erasure.waits import Waits
from teamstore.errors import ExtensionRefused
from tests.clocks import host_clock
from tests.erasure.conftest import KNOBS, KeyWaits, coordinator

pytestmark = pytest.mark.postgres
SKEW = timedelta(minutes=6)
LEASE_SECONDS = 120.0  # the default lease: shorter than the skew
GRACE_SECONDS = 1.0


@pytest.fixture
async def engine(postgres_url: str) -> AsyncIterator[AsyncEngine]:
    eng = create_engine(postgres_url)
    await upgrade(eng)
    await requests.open_request(eng, "req-1", "alice", None, 30)
    yield eng
    await eng.dispose()


async def test_a_coordinator_on_a_host_whose_clock_runs_ahead_cannot_take_over_a_running_request(
    engine: AsyncEngine,
) -> None:
    assert await requests.claim(engine, "req-1", "coordinator-a", LEASE_SECONDS)
    with host_clock(SKEW):
        assert not await requests.claim(engine, "req-1", "coordinator-b", LEASE_SECONDS)
    assert await requests.claim(engine, "req-1", "coordinator-a", LEASE_SECONDS)


async def test_a_lease_taken_on_a_host_whose_clock_runs_behind_still_excludes_other_coordinators(
    engine: AsyncEngine,
) -> None:
    with host_clock(-SKEW):
        assert await requests.claim(engine, "req-1", "coordinator-b", LEASE_SECONDS)
    assert not await requests.claim(engine, "req-1", "coordinator-a", LEASE_SECONDS)


async def test_a_request_a_coordinator_runs_is_not_extended_from_a_host_whose_clock_runs_ahead(
    engine: AsyncEngine,
) -> None:
    assert await requests.claim(engine, "req-1", "coordinator-a", LEASE_SECONDS)
    with host_clock(SKEW), pytest.raises(ExtensionRefused, match="being run by a coordinator"):
        await extend_request(engine, "req-1", "30d", "a complex request", operator="ana")
    assert (await requests.get_request(engine, "req-1")).extension is None  # type: ignore[union-attr]


async def test_a_request_whose_coordinators_lease_passed_is_extended_from_a_host_whose_clock_runs_behind(
    engine: AsyncEngine,
) -> None:
    assert await requests.claim(engine, "req-1", "coordinator-a", 0.2)
    await asyncio.sleep(0.5)  # the coordinator died: its lease has passed on the server's clock
    with host_clock(-SKEW):
        extended = await extend_request(engine, "req-1", "30d", "a complex request", operator="ana")
    assert extended.extension is not None


async def _waited_out_the_fence_grace(engine: AsyncEngine, row: requests.RequestRow) -> float:
    """How long a rerun of ``row`` (its first coordinator died before it leased it) waits for writes that passed
    the fence check just before it went up."""
    started = time.monotonic()
    await Waits(engine, ErasureSettings(fence_grace_seconds=GRACE_SECONDS), say=lambda _notice: None).fence_grace(
        row.received_at)
    return time.monotonic() - started


async def test_a_rerun_on_a_host_whose_clock_runs_ahead_still_waits_out_the_fence_grace(
    engine: AsyncEngine,
) -> None:
    opened = await requests.open_request(engine, "req-2", "bob", None, 30)
    with host_clock(SKEW):
        assert await _waited_out_the_fence_grace(engine, opened) > GRACE_SECONDS / 2


async def test_a_request_opened_on_a_host_whose_clock_runs_behind_is_received_on_the_database_clock(
    engine: AsyncEngine,
) -> None:
    with host_clock(-SKEW):
        opened = await requests.open_request(engine, "req-2", "bob", None, 30)
    r = erasure_requests.c
    async with engine.connect() as conn:
        age, due = (await conn.execute(select(func.now() - r.received_at, r.due_at - r.received_at)
                                       .where(r.request_id == "req-2"))).one()
    assert timedelta(0) <= age < timedelta(seconds=5) and due == timedelta(days=30)
    assert await _waited_out_the_fence_grace(engine, opened) > GRACE_SECONDS / 2  # a rerun on another host


@pytest.mark.parametrize("skew", [SKEW, -SKEW], ids=["ahead", "behind"])
async def test_a_rerun_on_a_host_whose_clock_disagrees_waits_what_is_left_of_the_key_wait_on_the_servers_clock(
    engine: AsyncEngine, tmp_path: Path, skew: timedelta
) -> None:
    """On a host ahead, the wait's start would look long past (the key step done while workers may still hold the
    erased key); on a host behind, not begun yet (the whole wait again)."""
    waits = KeyWaits(engine, LocalTranscriptStore(tmp_path / "t"), cache_seconds=2.0)
    await waits.make_key("lee")
    await waits.stopped_in_its_wait("lee", "req-wait", after=1.2)

    with host_clock(skew):
        receipt = await waits.rerun("lee", "req-wait")

    assert receipt.status is RequestStatus.COMPLETED
    began, (done,) = waits.began(), waits.keys_done
    assert done - began[0] >= waits.cache_seconds and waits.waited_only_what_was_left(1.2), waits.said


async def _due_in(engine: AsyncEngine, request_id: str, left: timedelta) -> None:
    """Make ``request_id`` fall due ``left`` from now by the database's clock (before now if negative)."""
    r = erasure_requests.c
    async with engine.begin() as conn:
        await conn.execute(update(erasure_requests).where(r.request_id == request_id).values(
            due_at=func.now() + literal(left, Interval())))


async def test_the_desk_on_a_host_whose_clock_runs_ahead_neither_lists_as_overdue_nor_refuses_to_extend_a_request_not_yet_due(
    engine: AsyncEngine,
) -> None:
    await _due_in(engine, "req-1", timedelta(minutes=3))
    with host_clock(SKEW):
        assert await list_requests(engine, overdue=True) == []
        assert not (await list_requests(engine))[0].overdue
        extended = await extend_request(engine, "req-1", "30d", "a complex request", operator="ana")
    assert extended.extension is not None


async def test_the_desk_on_a_host_whose_clock_runs_behind_lists_a_request_past_its_due_date_as_overdue(
    engine: AsyncEngine,
) -> None:
    await _due_in(engine, "req-1", -timedelta(minutes=3))
    with host_clock(-SKEW):
        assert [r.request_id for r in await list_requests(engine, overdue=True)] == ["req-1"]
        with pytest.raises(ExtensionRefused, match="too late to extend"):
            await extend_request(engine, "req-1", "30d", "a complex request", operator="ana")


@pytest.mark.parametrize("skew", [SKEW, -SKEW], ids=["ahead", "behind"])
async def test_a_run_ending_on_a_host_whose_clock_disagrees_judges_it_overdue_and_completes_it_on_the_servers_clock(
    engine: AsyncEngine, tmp_path: Path, skew: timedelta
) -> None:
    """Due three minutes after the server's now on a host ahead (which would call it overdue), three minutes
    before it on a host behind (which would not)."""
    folder = LocalTranscriptStore(tmp_path / "t")
    subject = await get_or_create_subject(engine, "dora")
    await claims.hold(engine, "upload-dora", "audit/dora", subject, "uploader", timedelta(minutes=30))
    await requests.open_request(engine, "req-3", "dora", None, 30)
    await _due_in(engine, "req-3", skew / 2)

    with host_clock(skew):  # an upload that may still land fails the run: its receipt says whether it is overdue
        failed = await coordinator(engine, folder, upload_wait_seconds=0).run("dora", request_id="req-3")
    assert failed.status is RequestStatus.FAILED and failed.overdue is (skew < timedelta(0))

    await claims.settle(engine, "upload-dora", "uploader", None)
    with host_clock(skew):
        done = await coordinator(engine, folder).run("dora", request_id="req-3")
    r = erasure_requests.c
    async with engine.connect() as conn:
        server_now, stored = (await conn.execute(select(func.now(), r.completed_at)
                                                 .where(r.request_id == "req-3"))).one()
    assert done.status is RequestStatus.COMPLETED and done.completed_at == stored
    assert done.completed_at is not None and timedelta(0) <= server_now - done.completed_at < timedelta(seconds=5)
    assert all(step.verified_at is None or abs(server_now - step.verified_at) < timedelta(seconds=5)
               for step in done.stores.values())
    assert _backups_until(done) - done.completed_at == timedelta(days=KNOBS.backup_retention_days)


@pytest.mark.parametrize("skew", [SKEW, -SKEW], ids=["ahead", "behind"])
async def test_a_dry_run_on_a_host_whose_clock_disagrees_gives_the_times_a_request_filed_now_would_have_on_the_servers_clock(
    engine: AsyncEngine, tmp_path: Path, skew: timedelta
) -> None:
    folder = LocalTranscriptStore(tmp_path / "t")
    await get_or_create_subject(engine, "emil")
    with host_clock(skew):
        planned = await coordinator(engine, folder).run("emil", dry_run=True)
    async with engine.connect() as conn:
        server_now = (await conn.execute(select(func.now()))).scalar_one()
    assert planned.status is RequestStatus.DRY_RUN
    assert timedelta(0) <= server_now - planned.received_at < timedelta(seconds=5)
    assert planned.due_at - planned.received_at == timedelta(days=KNOBS.due_days)
    assert _backups_until(planned) - planned.received_at == timedelta(days=KNOBS.backup_retention_days)


def _backups_until(receipt: Receipt) -> datetime:
    """When the receipt says the backups holding the user's rows expire."""
    return next(left.until for left in receipt.remains_elsewhere if left.what == "database backups")
