"""Helpers shared by the benchmarks: a Postgres to measure against, a throwaway database, timing."""

from __future__ import annotations

import time
import uuid
from collections.abc import Awaitable, Callable

from tests.services import postgres_server_url


def postgres_database() -> tuple[str, str]:
    """Create a throwaway database on the local/test Postgres; returns (server_url, database_url)."""
    import psycopg

    server = postgres_server_url()
    if server is None:
        raise SystemExit("benchmarks need PostgreSQL: set TEAMSTORE_TEST_DATABASE_URL or apt-get install postgresql")
    name = f"bench_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(server, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    return server, f"{server.rpartition('/')[0]}/{name}"


def drop_database(server: str, url: str) -> None:
    """Drop a database made by :func:`postgres_database`."""
    import psycopg

    with psycopg.connect(server, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{url.rpartition("/")[2]}" WITH (FORCE)')


async def rate(fn: Callable[[], Awaitable[int]], seconds: float) -> float:
    """Call ``fn`` (which returns how many cycles it did) until ``seconds`` pass; cycles per second."""
    done, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        done += await fn()
    return done / (time.perf_counter() - start)
