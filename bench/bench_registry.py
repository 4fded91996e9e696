"""The config registry at a platform team's scale: 300 teams x 20 versions, three labels each, 30 shared
memory scopes (``BENCH_REGISTRY_TEAMS``, ``BENCH_REGISTRY_VERSIONS``, ``BENCH_REGISTRY_ROUNDS``), each user-facing operation timed with
this checkout's ``config_registry`` and with the baseline's (``BENCH_REGISTRY_BASELINE``, a commit: the one
before reads were batched), side by side.

Each side is a process of its own that imports its ``config_registry`` once and serves operations on its own
copy of the registry (the writes change it alike); the rounds interleave the two, one operation at a time, and
each figure is the median of its rounds, each ratio (baseline / this checkout) the median of the rounds'
ratios. ``registry list`` is timed in the first round only: the baseline takes minutes at this scale.
"""

from __future__ import annotations

import os
import shutil
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from io import BytesIO
from pathlib import Path

from bench.registry_scale import make_registry

ROUNDS = int(os.environ.get("BENCH_REGISTRY_ROUNDS", "5"))
BASELINE = "a59745a6d119d90712ad27ff72b4b9e1fda5fb09"
ONCE = {"registry list"}
HERE = Path(__file__).resolve().parent.parent


class Side:
    """A ``bench.registry_child`` process with ``root``'s ``config_registry`` first on its path (``-m`` puts
    the working folder first, so it runs in ``root``)."""

    def __init__(self, root: Path, registry: Path) -> None:
        path = os.pathsep.join([str(root), str(HERE / "platform"), str(HERE)])
        env = {**os.environ, "PYTHONPATH": path}
        self.process = subprocess.Popen([sys.executable, "-m", "bench.registry_child", str(registry)], env=env,
                                        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=root)
        assert self.process.stdout is not None and self.process.stdout.readline().strip() == "ready"

    def time(self, operation: str) -> float:
        """Seconds ``operation`` took."""
        assert self.process.stdin is not None and self.process.stdout is not None
        self.process.stdin.write(operation + "\n")
        self.process.stdin.flush()
        return float(self.process.stdout.readline())

    def close(self) -> None:
        """End the process."""
        assert self.process.stdin is not None
        self.process.stdin.close()
        self.process.wait(timeout=60)


def _baseline(folder: Path) -> Path:
    """The baseline commit's ``config_registry``, extracted under ``folder``."""
    commit = os.environ.get("BENCH_REGISTRY_BASELINE", BASELINE)
    archive = subprocess.run(["git", "-C", str(HERE), "archive", commit, "config_registry"], check=True,
                             capture_output=True).stdout
    with tarfile.open(fileobj=BytesIO(archive)) as tar:
        tar.extractall(folder, filter="data")
    return folder


def main() -> None:
    """Make the registry, then time every operation on both sides and print the medians and ratios."""
    from bench.registry_child import operations

    teams = int(os.environ.get("BENCH_REGISTRY_TEAMS", "300"))
    versions = int(os.environ.get("BENCH_REGISTRY_VERSIONS", "20"))
    with tempfile.TemporaryDirectory() as folder:
        made = Path(folder, "made")
        started = time.perf_counter()
        make_registry(made, teams=teams, versions=versions, scopes=30)
        commits = subprocess.run(["git", "-C", str(made), "rev-list", "--count", "HEAD"], check=True,
                                 capture_output=True, text=True).stdout.strip()
        print(f"registry: {teams} teams x {versions} versions, 3 labels each, 30 shared memory scopes; "
              f"{commits} commits, made in {time.perf_counter() - started:.0f}s", flush=True)
        sides = {}
        for name, root in (("baseline", _baseline(Path(folder, "baseline"))), ("now", HERE)):
            shutil.copytree(made, Path(folder, f"registry-{name}"))
            sides[name] = Side(root, Path(folder, f"registry-{name}"))
        times: dict[str, dict[str, list[float]]] = {op: {"baseline": [], "now": []} for op in operations(made)}
        for round_ in range(ROUNDS):
            for operation, by_side in times.items():
                if round_ and operation in ONCE:
                    continue
                for which in (("baseline", "now") if round_ % 2 else ("now", "baseline")):
                    by_side[which].append(sides[which].time(operation))
        for side in sides.values():
            side.close()
    print(f"{'operation':<38} {'baseline':>10} {'now':>10} {'ratio':>8}   (medians of {ROUNDS} interleaved rounds)")
    for operation, by_side in times.items():
        old, new = by_side["baseline"], by_side["now"]
        ratio = statistics.median(a / b for a, b in zip(old, new, strict=True))
        print(f"{operation:<38} {statistics.median(old):9.3f}s {statistics.median(new):9.3f}s {ratio:7.1f}x",
              flush=True)
