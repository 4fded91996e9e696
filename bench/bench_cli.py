"""How fast the command line starts: `teamstore --help` and a small `teamstore cost --format json`, beside
`python -c "import typer, rich"` (what any typer + rich command pays) measured in the same run.

Each round runs the three commands once, in a rotating order, as new processes; the figures are the
medians over the rounds and each command's ratio to the floor. The cost query runs on a small SQLite
ledger (a few hundred rows) already migrated, so its figure is start-up, not the query.
"""

from __future__ import annotations

import asyncio
import os
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

ROUNDS = 15


async def _small_ledger(home: Path) -> None:
    from teamstore.audit.ledger import record_usage, usage_rows
    from teamstore.audit.transcripts.record import RunKeys
    from teamstore.db.engine import create_engine
    from teamstore.db.migrate import upgrade
    from teamstore.events import ModelCall, RunContext, RunOutcome

    engine = create_engine(f"sqlite:///{(home / 'teamstore.db').as_posix()}")
    await upgrade(engine)
    start = datetime(2026, 11, 1, tzinfo=UTC)
    for n in range(200):
        at = start + timedelta(hours=n)
        calls = [ModelCall("triage", "gpt-4o", 300, 80, at, 0.4), ModelCall("critic", "gpt-4o-mini", 200, 40, at, 0.2)]
        ctx = RunContext(f"run-{n}", f"user-{n % 7}", "s", "support_triage", "v1", at)
        await record_usage(engine, usage_rows(ctx, RunOutcome(at, model_calls=calls), RunKeys(f"k{n % 7}", f"s{n}")))
    await engine.dispose()


def _time(command: list[str], env: dict[str, str]) -> float:
    started = time.perf_counter()
    subprocess.run(command, env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=120)
    return time.perf_counter() - started


def measure(rounds: int = ROUNDS) -> dict[str, list[float]]:
    """Seconds per run of each command over ``rounds`` interleaved rounds."""
    script = str(Path(sys.executable).with_name("teamstore"))
    commands = {
        "import typer, rich": [sys.executable, "-c", "import typer, rich"],
        "teamstore --help": [script, "--help"],
        "teamstore cost --format json": [script, "cost", "--format", "json"],
    }
    with tempfile.TemporaryDirectory() as folder:
        home = Path(folder) / "home"
        home.mkdir()
        asyncio.run(_small_ledger(home))
        env = {k: v for k, v in os.environ.items() if not k.startswith(("TEAMSTORE_", "OTEL_"))}
        env["TEAMSTORE_HOME"] = str(home)
        times: dict[str, list[float]] = {name: [] for name in commands}
        names = list(commands)
        for _ in range(2):  # warm the file cache: the first start of any of them reads every module from disk
            for name in names:
                _time(commands[name], env)
        for round_ in range(rounds):
            for name in names[round_ % 3:] + names[:round_ % 3]:
                times[name].append(_time(commands[name], env))
    return times


def main() -> None:
    """Print each command's median start time and its ratio to `import typer, rich`."""
    times = measure()
    floor = statistics.median(times["import typer, rich"])
    print(f"command line start, {ROUNDS} interleaved rounds, medians (min-max):")
    for name, values in times.items():
        median = statistics.median(values)
        print(f"  {name:<30} {median * 1000:7.0f} ms ({min(values) * 1000:.0f}-{max(values) * 1000:.0f}) "
              f"= {median / floor:.2f}x the floor", flush=True)
