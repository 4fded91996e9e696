"""The Postgres stores' own connection pool: bounded, replacing connections the server ended, never
handing out one left mid-statement."""

from __future__ import annotations

import asyncio
import os
import re
from collections.abc import AsyncIterator

import pytest
from psycopg import AsyncRawCursor
from sqlalchemy import text

from teamstore.db.engine import create_engine
from teamstore.errors import StoreUnavailable
from teamstore.state.direct import DirectPool, Statement, execute

pytestmark = pytest.mark.postgres


@pytest.fixture
async def pool(postgres_url: str) -> AsyncIterator[DirectPool]:
    engine = create_engine(postgres_url)
    pool = DirectPool(engine, size=2, holds="sessions")
    yield pool
    await pool.close()
    await engine.dispose()


async def _pid(conn: object) -> int:
    row = await execute(AsyncRawCursor(conn), Statement("SELECT pg_backend_pid()"), {})
    assert row is not None
    return int(row[0])


async def test_a_connection_comes_back_and_is_reused(pool: DirectPool) -> None:
    conn = await pool.checkout(1)
    first = await _pid(conn)
    await pool.checkin(conn)
    again = await pool.checkout(1)
    assert await _pid(again) == first
    await pool.checkin(again)


async def test_a_full_pool_waits_then_refuses_with_a_typed_error(pool: DirectPool) -> None:
    held = [await pool.checkout(1), await pool.checkout(1)]
    with pytest.raises(StoreUnavailable, match=r"no database connection came free within 0\.2s: all 2"):
        await pool.checkout(0.2)
    waiting = asyncio.create_task(pool.checkout(5))  # a check-in wakes a waiter
    await asyncio.sleep(0.1)
    assert not waiting.done()
    await pool.checkin(held.pop())
    held.append(await asyncio.wait_for(waiting, 2))
    for conn in held:
        await pool.checkin(conn)


async def test_idle_connections_the_server_ended_are_replaced_at_checkout(pool: DirectPool, postgres_url: str) -> None:
    conns = [await pool.checkout(1), await pool.checkout(1)]
    pids = {await _pid(c) for c in conns}
    for conn in conns:
        await pool.checkin(conn)
    admin = create_engine(postgres_url)
    async with admin.connect() as conn:  # a restart, as the pool sees it
        await conn.execute(text("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE pid = ANY(:pids)"),
                           {"pids": list(pids)})
    await admin.dispose()
    await asyncio.sleep(0.2)
    conn = await pool.checkout(1)
    assert await _pid(conn) not in pids  # a live connection, on the first try: no statement failed
    await pool.checkin(conn)


async def test_a_connection_left_mid_transaction_is_closed_not_reused(pool: DirectPool) -> None:
    conn = await pool.checkout(1)
    pid = await _pid(conn)
    await conn.execute("BEGIN")
    await pool.checkin(conn)
    assert conn.closed
    again = await pool.checkout(1)
    assert await _pid(again) != pid
    await pool.checkin(again)


async def test_an_unreachable_database_is_a_typed_error(postgres_url: str) -> None:
    engine = create_engine(postgres_url.replace(postgres_url.split("@")[1].split("/")[0], "127.0.0.1:1"))
    pool = DirectPool(engine, size=1, holds="sessions")
    with pytest.raises(StoreUnavailable, match="could not connect to the state database"):
        await pool.checkout(1)
    with pytest.raises(StoreUnavailable):  # the slot was given back: the next attempt fails the same way
        await pool.checkout(1)
    await engine.dispose()


async def test_connections_past_descriptor_1024_are_reused(pool: DirectPool) -> None:
    # A big service has many descriptors open; select() refuses those past 1024, and a liveness check
    # built on it would call every such connection dead and reconnect on each checkout.
    padding = [os.open(os.devnull, os.O_RDONLY) for _ in range(1100)]
    try:
        conn = await pool.checkout(1)
        assert conn.pgconn.socket > 1024
        pid = await _pid(conn)
        await pool.checkin(conn)
        again = await pool.checkout(1)
        assert await _pid(again) == pid
        await pool.checkin(again)
    finally:
        for fd in padding:
            os.close(fd)


async def _setting(conn: object, name: str) -> str:
    row = await execute(AsyncRawCursor(conn), Statement(f"SELECT current_setting('{name}')"), {})
    assert row is not None
    return str(row[0])


async def test_each_connection_is_named_for_itself_and_kept_alive(pool: DirectPool, postgres_url: str) -> None:
    # Its own name: a server process reads as the connection it serves, even one a pooler handed on; TCP
    # keepalives: a network that fails silently shows within a minute. What the URL sets is kept.
    conns = [await pool.checkout(1), await pool.checkout(1)]
    names = [await _setting(c, "application_name") for c in conns]
    assert len(set(names)) == 2 and all(re.fullmatch(r"teamstore-state [0-9a-f]{8}", n) for n in names)
    assert all(c.info.get_parameters().get("keepalives_idle") == "30" for c in conns)  # type: ignore[attr-defined]
    for conn in conns:
        await pool.checkin(conn)
    engine = create_engine(f"{postgres_url}?application_name=billing-api&keepalives_idle=5")
    own = DirectPool(engine, size=1, holds="sessions")
    conn = await own.checkout(1)
    assert await _setting(conn, "application_name") == "billing-api"
    assert conn.info.get_parameters()["keepalives_idle"] == "5" and conn.info.get_parameters()["keepalives"] == "1"
    await own.checkin(conn)
    await own.close()
    await engine.dispose()
