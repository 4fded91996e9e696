"""Run every benchmark in ``bench/`` and print its figures: ``python -m bench [name ...]``."""

from __future__ import annotations

import importlib
import pkgutil
import sys
from pathlib import Path


def main(argv: list[str]) -> int:
    """Import each ``bench/bench_*.py`` module (or those named) and call its ``main()``."""
    here = Path(__file__).parent
    names = sorted(m.name for m in pkgutil.iter_modules([str(here)]) if m.name.startswith("bench_"))
    chosen = [n for n in names if not argv or any(a in n for a in argv)]
    for name in chosen:
        print(f"\n=== {name} ===", flush=True)
        module = importlib.import_module(f"bench.{name}")
        module.main()
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
