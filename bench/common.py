"""Helpers shared by the benchmarks: a Postgres to measure against, a throwaway database, interleaved rounds.

    from bench.common import interleave, median_ratio

    rates = await interleave({"floor": floor.cycle, "ours": ours.cycle}, workers=16, rounds=25, seconds=0.4)
    print(median_ratio(rates, "ours", "floor"))   # the median of the per-round ratios
"""

from __future__ import annotations

import asyncio
import atexit
import functools
import os
import statistics
import time
import uuid
from collections.abc import Awaitable, Callable, Iterator, Mapping
from contextlib import contextmanager

from tests.otlp_receiver import OtlpReceiver
from tests.services import Services, ServicesError, ServiceUnavailable, decide

Cycle = Callable[[int, int], Awaitable[int]]
"""``cycle(worker, n)`` does ``n`` cycles as worker ``worker`` and returns how many it did."""


@functools.cache
def _services() -> Services:
    """The benchmarks' services, chosen like the tests' (``TEAMSTORE_TEST_SERVICES``), stopped at exit."""
    try:
        services = Services(decide(os.environ), database_url_variable="TEAMSTORE_BENCH_DATABASE_URL", durable=True)
    except ServicesError as exc:
        raise SystemExit(str(exc)) from exc
    atexit.register(services.close)
    return services


def _service_url(name: str) -> str:
    try:
        return _services().url(name)
    except ServiceUnavailable as exc:
        raise SystemExit(f"the benchmarks need {name}: {exc}") from exc


def bench_server_url() -> str:
    """A Postgres with production durability (fsync and synchronous_commit on) to measure against.

    ``TEAMSTORE_BENCH_DATABASE_URL`` names one; otherwise one is started (local binaries on port 55433, or
    a container where a Docker engine answers). The test server runs with fsync off, which would flatter
    every write.
    """
    return _service_url("postgres")


def s3_endpoint() -> str:
    """moto's S3 server over HTTP (in this process, or its container), started once per benchmark run."""
    return _service_url("aws")


@contextmanager
def otlp_receiver() -> Iterator[OtlpReceiver]:
    """An OTLP/HTTP receiver decoding what the benchmark exports, stopped on leaving."""
    with _services().otlp(OtlpReceiver) as receiver:
        yield receiver


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


def commit_time(url: str, n: int = 300, repeats: int = 3) -> tuple[float, float]:
    """The server's commit latency: median seconds of one tiny INSERT in autocommit, with
    ``synchronous_commit`` on and off (the difference is the wait for the WAL flush, the disk's share).

    The two settings alternate ``repeats`` times so both meet the same machine.
    """
    import psycopg

    times: dict[str, list[float]] = {"on": [], "off": []}
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("CREATE TABLE IF NOT EXISTS commit_probe (n int)")
        for _ in range(repeats):
            for setting, found in times.items():
                conn.execute(f"SET synchronous_commit = {setting}")
                for i in range(n):
                    started = time.perf_counter()
                    conn.execute("INSERT INTO commit_probe VALUES (%s)", (i,))
                    found.append(time.perf_counter() - started)
        conn.execute("DROP TABLE commit_probe")
    return statistics.median(times["on"]), statistics.median(times["off"])


def drop_database(server: str, url: str) -> None:
    """Drop a database made by :func:`postgres_database`."""
    import psycopg

    with psycopg.connect(server, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{url.rpartition("/")[2]}" WITH (FORCE)')


async def rate(fn: Callable[[], Awaitable[int]], seconds: float) -> tuple[float, float]:
    """Call ``fn`` (which returns how many cycles it did) until ``seconds`` pass; (cycles per second,
    this process's CPU seconds per cycle)."""
    done, start, cpu = 0, time.perf_counter(), time.process_time()
    while time.perf_counter() - start < seconds:
        done += await fn()
    return done / (time.perf_counter() - start), (time.process_time() - cpu) / max(done, 1)


async def gather_cycles(cycle: Cycle, workers: int, per_worker: int = 20) -> int:
    """``per_worker`` cycles on each of ``workers`` concurrent tasks; how many were done."""
    counts = await asyncio.gather(*(cycle(w, per_worker) for w in range(workers)))
    return int(sum(counts))


async def interleave(
    runs: Mapping[str, Cycle], workers: int, rounds: int, seconds: float, per_worker: int = 20,
    cpu: dict[str, list[float]] | None = None,
) -> dict[str, list[float]]:
    """Each run's rate (cycles/s) in each of ``rounds`` short rounds, the order rotating every round;
    with ``cpu``, each run's client CPU seconds per cycle in each round too.

    This machine's speed drifts by 20% over seconds: short rounds pair each figure with the others'
    measured moments apart, and the ratios are taken round by round (:func:`median_ratio`).
    """
    rates: dict[str, list[float]] = {name: [] for name in runs}
    names = list(runs)
    for i in range(rounds):
        for name in names[i % len(names):] + names[:i % len(names)]:
            async def once(cycle: Cycle = runs[name]) -> int:
                return await gather_cycles(cycle, workers, per_worker)

            per_second, cpu_per_cycle = await rate(once, seconds)
            rates[name].append(per_second)
            if cpu is not None:
                cpu.setdefault(name, []).append(cpu_per_cycle)
    return rates


def median_ratio(rates: Mapping[str, list[float]], name: str, against: str) -> float:
    """The median over rounds of ``name``'s rate divided by ``against``'s in the same round."""
    return statistics.median(x / y for x, y in zip(rates[name], rates[against], strict=True))


def env_number(name: str, default: float) -> float:
    """A benchmark knob from the environment (``BENCH_ROUNDS``, ``BENCH_SECONDS``...)."""
    return float(os.environ.get(name, default))
