"""Real OS processes: a three-agent run killed with SIGKILL after turn k, for every k, then continued in a new
process, on SQLite and a real Postgres (both kinds of lease). What the run says ends as an uninterrupted run's,
and it makes the uninterrupted run's model calls plus at most the one turn that was in flight; the ledger
holds every call the checkpoints carried and the continuation made. A kill in the middle of the checkpoint
write itself leaves a whole checkpoint: the one before it, or (Postgres, where the statement was already in
the server and runs to its end without its client) the one being written, never a torn one."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import func, select, text

from config_registry import Registry
from teamstore.audit.schema import usage
from teamstore.db.engine import create_engine
from tests.conftest import prepare
from tests.runtime.checkpoint_teams import TURNS, register

ROOT = Path(__file__).resolve().parents[2]
LEASE_TTL = 2.0


@pytest.fixture
def world(backend: tuple[str, str], tmp_path: Path) -> Iterator[dict[str, str]]:
    """A database, a registry with the long team, and the environment a worker process runs with."""
    url, lease = backend
    asyncio.run(prepare(url, lease))
    registry = tmp_path / "registry"
    register(Registry(registry, create=True))
    yield {
        **os.environ, "TEAMSTORE_HOME": str(tmp_path / "home"), "TEAMSTORE_DATABASE_URL": url,
        "TEAMSTORE_REGISTRY_PATH": str(registry), "TEAMSTORE_SESSION_LEASE": lease,
        "TEAMSTORE_LEASE_TTL_SECONDS": str(LEASE_TTL), "TEAMSTORE_LEASE_TIMEOUT_SECONDS": "20",
        "TEAMSTORE_AUTO_MIGRATE": "true", "PYTHONPATH": str(ROOT),
    }


def _worker(env: dict[str, str], *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "tests.runtime.crash_worker", *args], cwd=ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _finish(proc: subprocess.Popen[str]) -> dict[str, Any]:
    out, err = proc.communicate(timeout=180)
    assert proc.returncode == 0, err[-3000:]
    found: dict[str, Any] = json.loads(out.strip().splitlines()[-1])
    return found


def _calls(log: Path) -> int:
    return len(log.read_text().splitlines()) if log.exists() else 0


async def _ledger_calls(url: str, run_id: str) -> int:
    engine = create_engine(url)
    async with engine.connect() as conn:
        found = (await conn.execute(select(func.sum(usage.c.calls)).where(usage.c.run_id == run_id))).scalar()
    await engine.dispose()
    return int(found or 0)


def test_a_run_killed_after_turn_k_continues_in_a_new_process_as_if_never_killed_for_every_k(
    world: dict[str, str], tmp_path: Path
) -> None:
    # One user per k, their processes side by side (and an uninterrupted run beside them).
    kills = range(1, TURNS)
    logs = {k: tmp_path / f"alice-{k}.calls" for k in kills}
    whole_proc = _worker(world, "run", "bob", str(tmp_path / "bob.calls"))
    killed = {k: _worker(world, "run", f"alice-{k}", str(logs[k]), str(k)) for k in kills}
    whole = _finish(whole_proc)
    expected_calls = _calls(tmp_path / "bob.calls")
    assert expected_calls == TURNS and len(whole["said"]) == TURNS + 1
    for k, proc in killed.items():
        proc.communicate(timeout=180)
        assert proc.returncode == -signal.SIGKILL, k
        assert _calls(logs[k]) == k + 1  # turns 1..k, and the call of the turn in flight

    continuing = {k: _worker(world, "continue", f"alice-{k}", str(logs[k])) for k in kills}
    for k, proc in continuing.items():
        continued = _finish(proc)
        assert continued["resume"]["outcome"] == "interrupted"
        assert continued["resume"]["interrupted"]["last_turn"] == k
        assert continued["said"] == whole["said"]  # the final transcript of an uninterrupted run
        assert _calls(logs[k]) == expected_calls + 1  # the turn in flight ran again; no completed turn did
        # The completed turns' calls came with the checkpoint; the call the dead process made in its last
        # turn was recorded nowhere it could reach.
        assert asyncio.run(_ledger_calls(world["TEAMSTORE_DATABASE_URL"], continued["run_id"])) == expected_calls


async def _hold_the_row(url: str, holding: asyncio.Event, release: asyncio.Event) -> None:
    """Lock alice's row (Postgres) or the whole database for writing (SQLite) until ``release``."""
    engine = create_engine(url)
    async with engine.connect() as conn:
        if engine.dialect.name == "sqlite":
            await conn.exec_driver_sql("BEGIN IMMEDIATE")
        else:
            await conn.execute(text("BEGIN"))
            await conn.execute(text("SELECT 1 FROM ts_sessions WHERE user_id = 'alice' FOR UPDATE"))
        holding.set()
        await release.wait()
        await conn.rollback()
    await engine.dispose()


def test_a_kill_in_the_middle_of_the_checkpoint_write_leaves_the_one_before(
    world: dict[str, str], tmp_path: Path
) -> None:
    log = tmp_path / "alice.calls"
    whole = _worker(world, "run", "bob", str(tmp_path / "bob.calls"))
    proc = _worker(world, "blocked", "alice", str(log), "2")  # turn 3's checkpoint write waits in the database

    async def kill_it_mid_write() -> None:
        holding, release = asyncio.Event(), asyncio.Event()
        deadline = time.monotonic() + 120
        while not log.with_suffix(".ready").exists():
            assert time.monotonic() < deadline and proc.poll() is None, proc.stderr.read() if proc.stderr else ""
            await asyncio.sleep(0.05)
        holder = asyncio.create_task(_hold_the_row(world["TEAMSTORE_DATABASE_URL"], holding, release))
        await holding.wait()
        log.with_suffix(".locked").write_text("held")
        await asyncio.sleep(1.0)  # the worker's UPDATE is now waiting on the lock
        proc.send_signal(signal.SIGKILL)
        await asyncio.to_thread(proc.wait, 30)
        release.set()
        await holder

    asyncio.run(kill_it_mid_write())
    assert proc.returncode == -signal.SIGKILL
    continued = _finish(_worker(world, "continue", "alice", str(log)))
    landed = 2 if world["TEAMSTORE_DATABASE_URL"].startswith("sqlite") else continued["resume"]["interrupted"]["last_turn"]
    assert continued["resume"]["interrupted"]["last_turn"] == landed and landed in (2, 3)
    assert continued["said"] == _finish(whole)["said"]
