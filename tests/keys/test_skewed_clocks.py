"""``keys rotate`` and ``keys retire`` on hosts whose clocks disagree with the database's (Postgres, the key file):
a retired key-encryption key falls due, and is destroyed, on the server's clock. A skewed host is this process with
its clock moved (:func:`tests.clocks.host_clock`)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import timedelta

import pytest
from sqlalchemy import Interval, func, literal, select, update
from sqlalchemy.ext.asyncio import AsyncEngine

from teamstore.db.engine import create_engine
from teamstore.db.migrate import upgrade
from teamstore.keys import KeyService
from teamstore.keys.rotation import retire, rotate
from teamstore.keys.schema import key_encryption_keys
from teamstore.keys.status import status
from teamstore.settings import Settings
from tests.clocks import host_clock

pytestmark = pytest.mark.postgres
SKEW = timedelta(minutes=6)
k = key_encryption_keys.c


@pytest.fixture
async def keys(postgres_url: str) -> AsyncIterator[KeyService]:
    engine = create_engine(postgres_url)
    await upgrade(engine)
    yield KeyService.from_settings(engine, Settings())
    await engine.dispose()


async def _retired(keys: KeyService) -> str:
    """The key-encryption key a rotation just retired."""
    first = await keys.current_kek()
    await rotate(keys, retire_days=7)
    return first


async def _due_in(engine: AsyncEngine, kek_id: str, left: timedelta) -> None:
    """Make the retired ``kek_id`` due ``left`` from now by the database's clock (before now if negative)."""
    async with engine.begin() as conn:
        await conn.execute(update(key_encryption_keys).where(k.kek_id == kek_id).values(
            destroy_after=func.now() + literal(left, Interval())))


async def test_a_rotation_on_a_host_whose_clock_runs_behind_retires_the_old_key_for_days_by_the_database_clock(
    keys: KeyService,
) -> None:
    first = await keys.current_kek()
    with host_clock(-SKEW):
        await rotate(keys, retire_days=7)
    async with keys.engine.connect() as conn:
        left = (await conn.execute(select(k.destroy_after - func.now()).where(k.kek_id == first))).scalar_one()
    assert timedelta(days=7) - timedelta(seconds=5) < left <= timedelta(days=7)


async def test_a_retire_on_a_host_whose_clock_runs_ahead_keeps_a_key_not_yet_due(keys: KeyService) -> None:
    first = await _retired(keys)
    await _due_in(keys.engine, first, timedelta(minutes=3))
    with host_clock(SKEW):
        done = await retire(keys)
    assert done.destroyed == [] and done.next_destroy_after is not None


async def test_a_retire_on_a_host_whose_clock_runs_behind_destroys_a_key_that_is_due(keys: KeyService) -> None:
    first = await _retired(keys)
    await _due_in(keys.engine, first, -timedelta(minutes=3))
    with host_clock(-SKEW):
        done = await retire(keys)
    assert done.destroyed == [first]


async def _rotation_due_in(engine: AsyncEngine, left: timedelta) -> None:
    """Make the current key-encryption key's rotation due ``left`` from now by the database's clock."""
    made = func.now() - literal(timedelta(days=Settings().key_rotation_days) - left, Interval())
    async with engine.begin() as conn:
        await conn.execute(update(key_encryption_keys).where(k.retired_at.is_(None)).values(created_at=made))


async def test_keys_status_on_a_host_whose_clock_runs_ahead_does_not_call_a_rotation_not_yet_due_overdue(
    keys: KeyService,
) -> None:
    await keys.current_kek()
    await _rotation_due_in(keys.engine, timedelta(minutes=3))
    with host_clock(SKEW):
        assert (await status(keys, Settings()))["overdue"] is False


async def test_keys_status_on_a_host_whose_clock_runs_behind_calls_a_rotation_past_due_overdue(
    keys: KeyService,
) -> None:
    await keys.current_kek()
    await _rotation_due_in(keys.engine, -timedelta(minutes=3))
    with host_clock(-SKEW):
        assert (await status(keys, Settings()))["overdue"] is True
