"""Every teamstore connection to Postgres reads time in UTC, whatever time zone the server or the database
is set to (a server built by initdb takes the OS's): the engine's, the synchronous reader's and the state
store's own pool's, pinned as each connection opens; a URL's own ``options`` are left as they are. Run on a real Postgres database set to another zone."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from urllib.parse import quote

import psycopg
import pytest
from sqlalchemy import select, text

from teamstore.db.clock import shared_later
from teamstore.db.engine import create_engine, create_reader
from teamstore.state.direct import DirectPool

pytestmark = pytest.mark.postgres


def set_database_zone(url: str, zone: str) -> None:
    """Make ``zone`` the time zone of every new session on ``url``'s database (as a server's own default)."""
    with psycopg.connect(url, autocommit=True) as conn:
        name = conn.execute("SELECT current_database()").fetchone()
        assert name is not None
        conn.execute(f"ALTER DATABASE \"{name[0]}\" SET timezone = '{zone}'")


@pytest.fixture
def tokyo_url(postgres_url: str) -> Iterator[str]:
    """A throwaway database whose sessions start in Asia/Tokyo (UTC+9) unless told otherwise."""
    set_database_zone(postgres_url, "Asia/Tokyo")
    with psycopg.connect(postgres_url) as conn:
        assert conn.execute("SHOW TimeZone").fetchone() == ("Asia/Tokyo",)
    yield postgres_url


async def test_the_engine_the_reader_and_the_state_pool_read_time_in_utc_on_a_database_set_to_another_zone(
    tokyo_url: str,
) -> None:
    engine = create_engine(tokyo_url)
    async with engine.connect() as conn:
        assert (await conn.execute(text("SHOW TimeZone"))).scalar_one() == "UTC"
        now = (await conn.execute(text("SELECT now()"))).scalar_one()
        assert now.utcoffset() == timedelta(0)
    async with engine.connect() as again:  # the same connection, back from the pool's rollback at check-in
        assert (await again.execute(text("SHOW TimeZone"))).scalar_one() == "UTC"
    assert engine.pool.checkedin() == 1
    with create_reader(engine).connect() as sync:
        assert sync.execute(text("SHOW TimeZone")).scalar_one() == "UTC"
    pool = DirectPool(engine, size=1, holds="statements")
    conn = await pool.checkout(seconds=5)
    try:
        assert (await (await conn.execute("SHOW TimeZone")).fetchone()) == ("UTC",)
    finally:
        await pool.checkin(conn, discard=True)
    await engine.dispose()


async def test_options_the_url_carries_are_kept_beside_the_utc_zone(tokyo_url: str) -> None:
    url = f"{tokyo_url}?options={quote('-c statement_timeout=4321')}"
    engine = create_engine(url)
    async with engine.connect() as conn:
        assert (await conn.execute(text("SHOW statement_timeout"))).scalar_one() == "4321ms"
        assert (await conn.execute(text("SHOW TimeZone"))).scalar_one() == "UTC"
    pool = DirectPool(engine, size=1, holds="statements")
    raw = await pool.checkout(seconds=5)
    try:
        assert (await (await raw.execute("SHOW statement_timeout")).fetchone()) == ("4321ms",)
        assert (await (await raw.execute("SHOW TimeZone")).fetchone()) == ("UTC",)
    finally:
        await pool.checkin(raw, discard=True)
    await engine.dispose()
    given = create_engine(tokyo_url, connect_args={"options": "-c lock_timeout=1234"})
    async with given.connect() as conn:
        assert (await conn.execute(text("SHOW lock_timeout"))).scalar_one() == "1234ms"
        assert (await conn.execute(text("SHOW TimeZone"))).scalar_one() == "UTC"
    await given.dispose()


async def test_a_later_time_is_that_many_hours_later_even_in_a_session_whose_zone_changes_to_summer_time(
    postgres_url: str,
) -> None:
    # Of 200 and 300 days from any day, one ends in the other season of Berlin's clocks (summer time lasts
    # about 217 days, winter time 148).
    engine = create_engine(postgres_url)
    async with engine.connect() as conn:
        await conn.execute(text("SET TimeZone = 'Europe/Berlin'"))  # as a session not pinned to UTC would be
        for days in (200, 300):
            length = timedelta(days=days)
            later, now = (await conn.execute(select(shared_later("postgresql", length), text("now()")))).one()
            assert later.timestamp() - now.timestamp() == length.total_seconds()  # not wall times: one zone
    await engine.dispose()
