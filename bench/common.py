"""Helpers shared by the benchmarks: a Postgres to measure against, a throwaway database, timing."""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Awaitable, Callable

from tests.services import start_local_postgres


def bench_server_url() -> str:
    """A Postgres with production durability (fsync and synchronous_commit on) to measure against.

    ``TEAMSTORE_BENCH_DATABASE_URL`` names one; otherwise one is started from local binaries on port
    55433. The test server runs with fsync off, which would flatter every write.
    """
    url = os.environ.get("TEAMSTORE_BENCH_DATABASE_URL") or start_local_postgres(durable=True)
    if url is None:
        raise SystemExit("benchmarks need PostgreSQL: apt-get install postgresql, or set TEAMSTORE_BENCH_DATABASE_URL")
    return url


def postgres_database() -> tuple[str, str]:
    """Create a throwaway database on the benchmark Postgres; returns (server_url, database_url)."""
    import psycopg

    server = bench_server_url()
    name = f"bench_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(server, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    return server, f"{server.rpartition('/')[0]}/{name}"


def server_settings(url: str) -> str:
    """The durability settings of the server behind ``url``, for the printed figures."""
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        names = ("server_version", "fsync", "synchronous_commit")
        values = [conn.execute(f"SHOW {n}").fetchone()[0] for n in names]  # type: ignore[index]
    return ", ".join(f"{n}={v}" for n, v in zip(names, values, strict=True))


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
