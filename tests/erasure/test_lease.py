"""The lease a coordinator keeps on its request while the steps run: renewed past its length, given up to no one,
lost to a coordinator that took the request over (said once), and kept trying while the database does not answer."""

from __future__ import annotations

import asyncio
import logging

import pytest
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncEngine

from teamstore.db.engine import create_engine
from teamstore.erasure import requests
from teamstore.erasure.lease import keeping_lease
from teamstore.erasure.schema import erasure_requests
from tests.services import free_port


def _lines(caplog: pytest.LogCaptureFixture, level: int) -> list[str]:
    """The coordinator's lines at ``level`` (the lease's are logged under its name)."""
    return [r.getMessage() for r in caplog.records if r.name == "teamstore.erasure.coordinator" and r.levelno == level]


async def test_a_kept_lease_outlasts_its_length_and_lapses_once_the_body_ends(engine: AsyncEngine) -> None:
    await requests.open_request(engine, "req-kept", "ulla", None, due_days=30)
    assert await requests.claim(engine, "req-kept", "first", lease_seconds=0.6)

    async with keeping_lease(engine, "req-kept", "first", 0.6, logged_as="req-kept"):
        await asyncio.sleep(1.5)  # well past the lease taken: renewed every 0.2 s meanwhile
        assert not await requests.claim(engine, "req-kept", "second", lease_seconds=30)

    await asyncio.sleep(0.8)  # no renewal since the body ended: the lease runs out
    assert await requests.claim(engine, "req-kept", "second", lease_seconds=30)


async def test_a_lease_taken_over_is_said_once_and_renewed_no_more(
    engine: AsyncEngine, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="teamstore")
    await requests.open_request(engine, "req-lost", "vera", None, due_days=30)
    assert await requests.claim(engine, "req-lost", "paused", lease_seconds=0.01)
    await asyncio.sleep(0.05)
    assert await requests.claim(engine, "req-lost", "other", lease_seconds=30)  # the lease ran out: taken over

    async with keeping_lease(engine, "req-lost", "paused", 0.3, logged_as="request#0123456789"):
        await asyncio.sleep(0.8)  # room for several renewals: only the first is tried

    assert _lines(caplog, logging.ERROR) == ["erasure request#0123456789: lost its lease to another coordinator"]
    async with engine.connect() as conn:
        owner = (await conn.execute(select(erasure_requests.c.owner))).scalar_one()
    assert owner == "other"


async def test_a_renewal_the_database_does_not_answer_is_said_and_tried_again(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="teamstore")
    gone = create_engine(f"postgresql://x@127.0.0.1:{free_port()}/x")  # nothing accepts connections there
    try:
        async with keeping_lease(gone, "req-away", "first", 0.3, logged_as="req-away"):
            await asyncio.sleep(0.75)  # several renewals, each refused: the body goes on
    finally:
        await gone.dispose()

    warned = _lines(caplog, logging.WARNING)
    assert len(warned) >= 2 and all(line.startswith(
        "erasure req-away: could not renew the lease; retrying: could not lease the erasure request: could not "
        "connect to the database") for line in warned), warned
    assert _lines(caplog, logging.ERROR) == []
