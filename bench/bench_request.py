"""The whole request: teamstore against a bare AutoGen run and a hand-rolled persistence, on SQLite and Postgres.

    python -m bench request

A request is what a service does for one user message (:mod:`bench.request_variants`): teamstore's
``Platform.session(...)`` + ``s.run(...)`` (build from the registry, lease+load, validate, apply, run,
transcript and ledger, save+release) against the same offline team built in Python and run bare, and
against a hand-rolled persistence (``load_state`` from a row, ``save_state`` into it; no lease,
validation or audit). Sequential and with 16 concurrent sessions, on SQLite (a file, WAL) and on
Postgres with production durability. Each figure is the median over short interleaved rounds, the
order rotating; throughput ratios are to the bare run of the same round. Printed for each variant: the
throughput ratio, the client CPU per request (``time.process_time``: for SQLite this includes the
database, which runs in the process) and the time per request in each phase, timed from the outside.

``BENCH_REQUEST_ROUNDS`` (11) and ``BENCH_REQUEST_SECONDS`` (1.0) change the rounds and their length.
"""

from __future__ import annotations

import asyncio
import logging
import statistics
import tempfile
from pathlib import Path
from typing import Any

from bench.common import (
    commit_time,
    drop_database,
    env_number,
    interleave,
    median_ratio,
    postgres_database,
    server_settings,
)
from bench.request_variants import Bare, HandRolled, Teamstore

TARGET = 0.5  # the whole request's throughput against the bare run, sequential and 16 concurrent


class Queued(logging.Filter):
    """Counts the transcripts the runtime queued in its outbox (an upload over its deadline), instead of
    letting each one's warning interleave with the figures."""

    def __init__(self) -> None:
        super().__init__()
        self.count = 0

    def filter(self, record: logging.LogRecord) -> bool:
        if "queued in the outbox" in str(record.msg):
            self.count += 1
            return False
        return True


QUEUED = Queued()


async def _measure(url: str, home: Path, workers: int) -> tuple[dict[str, Any], dict[str, list[float]], dict[str, list[float]]]:
    """Open the three variants, warm them up, run the rounds; (variants, rates, CPU seconds per request)."""
    variants: dict[str, Any] = {"bare": Bare(), "hand": HandRolled(url), "teamstore": Teamstore(url, home)}
    for variant in variants.values():
        await variant.setup(workers)
    try:
        runs = {name: v.cycle for name, v in variants.items()}
        await interleave(runs, workers, rounds=1, seconds=0.5, per_worker=1)  # imports, caches, first rows
        for variant in variants.values():
            variant.reset()
        cpu: dict[str, list[float]] = {}
        rates = await interleave(runs, workers, int(env_number("BENCH_REQUEST_ROUNDS", 11)),
                                 env_number("BENCH_REQUEST_SECONDS", 1.0), per_worker=1, cpu=cpu)
    finally:
        for variant in variants.values():
            await variant.close()
    return variants, rates, cpu


def _print(label: str, variants: dict[str, Any], rates: dict[str, list[float]], cpu: dict[str, list[float]]) -> None:
    queued = f" ({QUEUED.count} transcripts queued in the outbox: upload over its deadline)" if QUEUED.count else ""
    QUEUED.count = 0
    print(f"  {label}{queued}")
    for name, variant in variants.items():
        ratio = "" if name == "bare" else f", {median_ratio(rates, name, 'bare'):.3f}x the bare run"
        target = f" (target >= {TARGET}x)" if name == "teamstore" else ""
        print(f"    {variant.label + ':':<25} {statistics.median(rates[name]):7,.1f} requests/s{ratio}{target};"
              f" client CPU {statistics.median(cpu[name]) * 1000:.2f} ms per request")
        phases = variant.per_request()
        total = phases.pop("total")
        parts = ", ".join(f"{phase} {seconds * 1000:.2f}" for phase, seconds in phases.items())
        print(f"    {'':<25} ms per request: {parts}; total {total * 1000:.2f}")


async def _one_database(kind: str, url_for: Any) -> None:
    for workers in (1, 16):
        with tempfile.TemporaryDirectory(prefix="teamstore-bench-request-") as folder:
            url, cleanup = url_for(Path(folder))
            try:
                variants, rates, cpu = await _measure(url, Path(folder), workers)
            finally:
                cleanup()
        _print(f"{kind}, {'sequential' if workers == 1 else f'{workers} concurrent sessions'}", variants, rates, cpu)


def _sqlite(folder: Path) -> tuple[str, Any]:
    return f"sqlite:///{(folder / 'teamstore.db').as_posix()}", lambda: None


def _postgres(folder: Path) -> tuple[str, Any]:
    server, url = postgres_database()
    return url, lambda: drop_database(server, url)


async def run() -> None:
    rounds, seconds = int(env_number("BENCH_REQUEST_ROUNDS", 11)), env_number("BENCH_REQUEST_SECONDS", 1.0)
    print(f"whole requests of the offline support team, {rounds} rounds of {seconds}s per variant, the order"
          " rotating; medians; ratios to the bare run of the same round")
    await _one_database("SQLite", _sqlite)
    server, probe = postgres_database()
    on, off = commit_time(probe, n=100, repeats=2)
    print(f"  Postgres: {server_settings(probe)}; a one-row commit takes {on * 1000:.2f} ms"
          f" ({off * 1000:.2f} ms with synchronous_commit off: the rest is the wait for the WAL flush)")
    drop_database(server, probe)
    await _one_database("Postgres", _postgres)


def main() -> None:
    """Print the figures."""
    logging.getLogger("teamstore").setLevel(logging.WARNING)
    logging.getLogger("teamstore.audit.observer").addFilter(QUEUED)
    asyncio.run(run())
