"""What row leases do on both databases that lease in the row (SQLite, and Postgres with ``row``)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC

import pytest
from sqlalchemy import select

from teamstore.db.engine import create_engine
from teamstore.errors import SessionBusy
from teamstore.state.base import Claim, SessionKey, StateStore
from teamstore.state.factory import store_for
from teamstore.state.schema import sessions
from tests.conftest import prepare
from tests.state.test_store_conformance import record

CLAIM = Claim("support_triage", "v1", 1, "0.7.5", {"researcher": "fp-1"})


@pytest.fixture(params=["sqlite", pytest.param("postgres-row", marks=pytest.mark.postgres)])
async def row_store(request: pytest.FixtureRequest, tmp_path) -> AsyncIterator[StateStore]:  # type: ignore[no-untyped-def]
    if request.param == "sqlite":
        url = f"sqlite:///{(tmp_path / 'rows.db').as_posix()}"
    else:
        url = request.getfixturevalue("postgres_url")
    await prepare(url, "row")
    engine = create_engine(url)
    store = store_for(engine, pool_size=2, lease="row")
    assert store.lease == "row"
    yield store
    await store.aclose()
    await engine.dispose()


async def test_a_session_a_killed_worker_holds_is_refused_saying_when_its_lease_runs_out(row_store: StateStore) -> None:
    key = SessionKey("alice", "s1")
    await row_store.acquire(key, CLAIM, owner="killed", lease_ttl=120, wait_seconds=1)  # never released
    async with row_store.engine.connect() as conn:  # type: ignore[attr-defined]
        until = (await conn.execute(select(sessions.c.lease_until))).scalar_one()
    if until.tzinfo is None:  # SQLite's
        until = until.replace(tzinfo=UTC)
    with pytest.raises(SessionBusy) as info:
        await row_store.acquire(key, CLAIM, owner="w2", lease_ttl=60, wait_seconds=0.1)
    assert f"this one's at {until.astimezone(UTC):%Y-%m-%d %H:%M:%S} UTC" in (info.value.hint or "")


async def test_an_owner_takes_its_own_lease_again_at_once(row_store: StateStore) -> None:
    key = SessionKey("alice", "s1")
    await row_store.acquire(key, CLAIM, owner="w1", lease_ttl=60, wait_seconds=1)
    again = await row_store.acquire(key, CLAIM, owner="w1", lease_ttl=60, wait_seconds=0)  # a retried load
    with pytest.raises(SessionBusy):
        await row_store.acquire(key, CLAIM, owner="w2", lease_ttl=60, wait_seconds=0.1)
    assert await row_store.save(key, owner="w1", expected_version=again.row_version, record=record(), release=True) == 1
