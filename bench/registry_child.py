"""One side of the registry benchmark: serves timed registry operations over stdin/stdout, with whichever
``config_registry`` comes first on its path (the checkout's, or the baseline's). Run by ``bench_registry``.

    python -m bench.registry_child REGISTRY     # then: one operation name a line in, seconds a line out
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import teamstore  # noqa: F401  (registers the bounding context a build needs)
from bench.registry_scale import team_files
from config_registry import Manifest, Registry

TEAM, SCOPES = "team-0005", 30
REF = f"{TEAM}@production"


def operations(path: Path) -> dict[str, Callable[[], Any]]:
    """Operation name -> what it does, as the command line or a worker does it."""
    registry = Registry(path)  # a worker's, for the cached lookups
    counter = [0]

    def add() -> None:
        counter[0] += 1
        component, manifest = team_files(5, 1000 + counter[0], SCOPES)
        Registry(path).add(TEAM, component, Manifest.model_validate(manifest), f"v{1000 + counter[0]}")

    def label() -> None:
        counter[0] += 1
        Registry(path).label(TEAM, ("canary", "production")[counter[0] % 2], "staging", "bench")

    def after_commit() -> None:  # the HEAD moved: a memory write's next call reads the registry again
        registry.memory_facts("scope-5")

    return {
        "registry add (shared memory scope)": add,
        "memory_facts after a commit": after_commit,
        "memory_facts, cached": lambda: registry.memory_facts("scope-5"),
        "registry label": label,
        "registry list": lambda: Registry(path).list(),
        "registry history": lambda: Registry(path).history(TEAM),
        "registry diff": lambda: Registry(path).diff(TEAM, "staging", "production"),
        "registry check": lambda: Registry(path).check(TEAM, "staging", "production"),
        "worker resolve+build, cold": lambda: Registry(path).build(REF),
        "worker lookup, cached (version_of)": lambda: registry.version_of(REF),
    }


def main() -> None:
    """Answer each operation name read with the seconds it took."""
    served = operations(Path(sys.argv[1]))
    print("ready", flush=True)
    for line in sys.stdin:
        started = time.perf_counter()
        served[line.strip()]()
        print(f"{time.perf_counter() - started:.6f}", flush=True)


if __name__ == "__main__":
    main()
