"""What per-turn checkpoints cost: writes and bytes per turn, and a run's time with checkpoints against without.

    python -m bench checkpoints

The same six-turn offline team (:func:`teamstore.examples.support_escalation`) is registered twice, with
checkpoints ``every_turn`` and ``off``, and run through teamstore's session (no audit observers: the
difference is the checkpoints alone), on SQLite (a file, WAL) and on Postgres with production durability
(both kinds of lease). Printed for each: the checkpoint writes per run and per completed turn, each turn's
checkpoint bytes, and whole requests per second with and without, side by side in short interleaved rounds
(the order rotating), with the median of the per-round ratios. The offline model answers in microseconds,
so that ratio is the worst case; the same pair again with each model call taking 50 ms (still fast for a
hosted model) shows how quickly a checkpoint's milliseconds vanish beside real calls.

``BENCH_CHECKPOINT_ROUNDS`` (9) and ``BENCH_CHECKPOINT_SECONDS`` (1.0) change the rounds and their length.
"""

from __future__ import annotations

import asyncio
import logging
import statistics
import tempfile
from collections.abc import Callable
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
from config_registry import Registry
from teamstore.db.engine import create_engine
from teamstore.db.migrate import upgrade
from teamstore.examples import example_manifest, support_escalation
from teamstore.runtime.platform import Platform
from teamstore.settings import Settings
from teamstore.state.lease_mode import lease_mode, set_lease_mode

TASK = "The line drops every evening since the storm; the technician found nothing."
TEAMS = {"every_turn": "escalation_checkpointed", "off": "escalation_plain"}
SLOW = {"every_turn": "slow_checkpointed", "off": "slow_plain"}
MODEL_SECONDS = 0.05


class Writes:
    """The checkpoint writes a store makes, and each one's bytes (a clearing writes none)."""

    def __init__(self, platform: Platform) -> None:
        self.sizes: list[int] = []
        store: Any = platform.store
        real = store.checkpoint

        async def checkpoint(key: Any, **kwargs: Any) -> int:
            text = kwargs["record"].checkpoint
            self.sizes.append(len(text.encode()) if text is not None else 0)
            return int(await real(key, **kwargs))

        store.checkpoint = checkpoint


async def _platform(url: str, home: Path, lease: str) -> Platform:
    registry = Registry(home / "registry", create=True)
    for teams, delay in ((TEAMS, 0.0), (SLOW, MODEL_SECONDS)):
        for checkpoints, name in teams.items():
            manifest = example_manifest("support_escalation").model_copy(
                update={"name": name, "checkpoints": checkpoints})
            registry.add(name, support_escalation(delay).dump_component(), manifest, name, label="production")
    engine = create_engine(url)
    await upgrade(engine)
    if await lease_mode(engine) != lease:
        await set_lease_mode(engine, lease)
    settings = Settings(home=home / "home", auto_migrate=False, registry_refresh_seconds=3600, session_lease=lease)
    platform = Platform(engine, registry, settings=settings, on_close=engine.dispose)
    await platform.ensure_schema()
    return platform


def _cycle(platform: Platform, team: str) -> Callable[[int, int], Any]:
    async def cycle(worker: int, n: int) -> int:
        for _ in range(n):
            async with platform.session(f"user-{worker}", f"{team}-{worker}", team=team) as s:
                await s.run(TASK)
        return n
    return cycle


async def _measure(label: str, url: str, home: Path, lease: str) -> None:
    platform = await _platform(url, home, lease)
    writes = Writes(platform)
    try:
        for team in (*TEAMS.values(), *SLOW.values()):  # warm up: imports, the definition cache, the first rows
            await _cycle(platform, team)(0, 1)
        writes.sizes.clear()
        await _cycle(platform, TEAMS["every_turn"])(0, 1)
        per_turn = [size for size in writes.sizes if size]
        rounds, seconds = int(env_number("BENCH_CHECKPOINT_ROUNDS", 9)), env_number("BENCH_CHECKPOINT_SECONDS", 1.0)
        rates = await interleave({name: _cycle(platform, team) for name, team in TEAMS.items()}, workers=1,
                                 rounds=rounds, seconds=seconds, per_worker=1)
        slow = await interleave({name: _cycle(platform, team) for name, team in SLOW.items()}, workers=1,
                                rounds=max(3, rounds // 2), seconds=seconds, per_worker=1)
    finally:
        await platform.aclose()
    turns = len(per_turn) + 1  # the last turn ends the run: the save that follows it drops the checkpoint
    print(f"  {label}")
    print(f"    checkpoint writes: {len(per_turn)} per run of {turns} turns (one per completed turn but the last, "
          f"each one statement); bytes per turn: {', '.join(f'{b:,}' for b in per_turn)}")
    print(f"    requests/s: without {statistics.median(rates['off']):.1f}, with {statistics.median(rates['every_turn']):.1f}; "
          f"with/without {median_ratio(rates, 'every_turn', 'off'):.2f}x (median of paired rounds)")
    print(f"    with each model call taking {MODEL_SECONDS * 1000:.0f} ms: without {statistics.median(slow['off']):.2f}, "
          f"with {statistics.median(slow['every_turn']):.2f} requests/s; with/without "
          f"{median_ratio(slow, 'every_turn', 'off'):.2f}x")


async def run() -> None:
    rounds, seconds = int(env_number("BENCH_CHECKPOINT_ROUNDS", 9)), env_number("BENCH_CHECKPOINT_SECONDS", 1.0)
    print(f"a six-turn offline run, checkpoints every turn against none, {rounds} rounds of {seconds}s, sequential")
    with tempfile.TemporaryDirectory(prefix="teamstore-bench-checkpoints-") as folder:
        await _measure("SQLite (WAL)", f"sqlite:///{(Path(folder) / 'teamstore.db').as_posix()}", Path(folder), "row")
    for lease in ("lock", "row"):
        server, url = postgres_database()
        try:
            durable, _ = commit_time(url, n=100, repeats=1)
            with tempfile.TemporaryDirectory(prefix="teamstore-bench-checkpoints-") as folder:
                await _measure(f"Postgres, {lease} leases ({server_settings(url)}; a one-row commit "
                               f"{durable * 1000:.1f} ms)", url, Path(folder), lease)
        finally:
            drop_database(server, url)


def main() -> None:
    """Print the figures."""
    logging.getLogger("teamstore").setLevel(logging.WARNING)
    asyncio.run(run())
