"""A worker that dies holding a session does not lock it out for long: its lease goes with it."""

from __future__ import annotations

import asyncio
import multiprocessing
import os
import time

from teamstore.db.engine import create_engine
from teamstore.state.base import Claim, SessionKey
from teamstore.state.factory import store_for
from tests.conftest import prepare

KEY = SessionKey("alice", "crash-session")
CLAIM = Claim("t", "v1", 1, "0.7.5", {})
LEASE_TTL = 2.0


async def _take_and_die(url: str, lease: str, ready: multiprocessing.Event) -> None:  # type: ignore[valid-type]
    store = store_for(create_engine(url), lease=lease)
    await store.acquire(KEY, CLAIM, owner="doomed", lease_ttl=LEASE_TTL, wait_seconds=5)
    ready.set()  # type: ignore[attr-defined]
    os._exit(1)  # no cleanup of any kind: a killed process


def _child(url: str, lease: str, ready: multiprocessing.Event) -> None:  # type: ignore[valid-type]
    asyncio.run(_take_and_die(url, lease, ready))


async def test_a_killed_holder_frees_the_session(database_url: str, lease: str) -> None:
    await prepare(database_url, lease)
    engine = create_engine(database_url)
    ctx = multiprocessing.get_context("spawn")
    ready = ctx.Event()
    proc = ctx.Process(target=_child, args=(database_url, lease, ready))
    proc.start()
    assert ready.wait(60)
    proc.join(30)
    assert proc.exitcode == 1
    store = store_for(engine, lease=lease)
    started = time.monotonic()
    row = await store.acquire(KEY, CLAIM, owner="next", lease_ttl=30, wait_seconds=3 * LEASE_TTL)
    waited = time.monotonic() - started
    # An advisory lock goes with the dead connection; a row lease runs out after its TTL.
    limit = 1.0 if lease == "lock" else LEASE_TTL + 1.0
    assert row.is_new and waited < limit
    await store.aclose()
    await engine.dispose()
