"""OS processes hammering the same session: every increment lands, nothing crashes.

The waiting workers poll far faster than the store's default backoff, so a worker often takes the lease
within microseconds of the previous holder's commit: a load that read a snapshot from before that commit
would surface here as a StaleStateVersion.
"""

from __future__ import annotations

import asyncio
import json
import multiprocessing
from datetime import UTC, datetime, timedelta

from teamstore.db.engine import create_engine
from teamstore.state.base import Claim, SaveRecord, SessionKey
from teamstore.state.factory import store_for
from tests.conftest import prepare

CYCLES = 80
WORKERS = 3
KEY = SessionKey("alice", "hot-session")
CLAIM = Claim("t", "v1", 1, "0.7.5", {})


async def _hammer(url: str, lease: str, worker: str) -> int:
    from teamstore.state import waiting

    # Contention, not politeness: poll every fraction of a millisecond.
    waiting.POLL_START, waiting.POLL_MAX = 0.0002, 0.0005
    engine = create_engine(url)
    store = store_for(engine, lease=lease)
    done = 0
    for _ in range(CYCLES):
        row = await store.acquire(KEY, CLAIM, owner=worker, lease_ttl=30, wait_seconds=30)
        count = json.loads(row.state)["count"] if row.state else 0
        rec = SaveRecord("t", "v1", 1, "0.7.5", {}, json.dumps({"count": count + 1}),
                         datetime.now(UTC) + timedelta(days=1))
        await store.save(KEY, owner=worker, expected_version=row.row_version, record=rec, release=True)
        done += 1
    await store.aclose()
    await engine.dispose()
    return done


def _worker(url: str, lease: str, worker: str, results: multiprocessing.Queue) -> None:  # type: ignore[type-arg]
    try:
        results.put((worker, asyncio.run(_hammer(url, lease, worker))))
    except Exception as exc:  # report to the parent, which fails the test with it
        results.put((worker, repr(exc)))


async def test_processes_hammering_one_session_never_lose_an_update(database_url: str, lease: str) -> None:
    await prepare(database_url, lease)
    engine = create_engine(database_url)
    ctx = multiprocessing.get_context("spawn")
    results = ctx.Queue()
    procs = [ctx.Process(target=_worker, args=(database_url, lease, f"p{i}", results)) for i in range(WORKERS)]
    for p in procs:
        p.start()
    outcomes = dict(results.get(timeout=120) for _ in procs)
    for p in procs:
        p.join(timeout=30)
    assert outcomes == {f"p{i}": CYCLES for i in range(WORKERS)}
    store = store_for(engine, lease=lease)
    row = await store.get(KEY)
    await store.aclose()
    assert row is not None and json.loads(row.state or "{}") == {"count": WORKERS * CYCLES}
    assert row.row_version == WORKERS * CYCLES
    await engine.dispose()
