"""Erasure coordinators on hosts whose clocks disagree with the database's still exclude each other (Postgres): a
request's lease is written and checked on the server's clock, by them and by an extension (which a running
request refuses). A skewed host is this process with its clock moved
(:func:`tests.clocks.host_clock`)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import timedelta

import pytest
from sqlalchemy.ext.asyncio import AsyncEngine

from teamstore.db.engine import create_engine
from teamstore.db.migrate import upgrade
from teamstore.erasure import requests
from teamstore.erasure.desk import extend_request
from teamstore.errors import ExtensionRefused
from tests.clocks import host_clock

pytestmark = pytest.mark.postgres
SKEW = timedelta(minutes=6)
LEASE_SECONDS = 120.0  # the default lease: shorter than the skew


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
