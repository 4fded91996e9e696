"""teamstore's packages import each other in one direction only: down the layers of docs/architecture.md.

The rule, read from every ``import`` statement of ``platform/teamstore`` and ``config_registry`` (those
inside functions included):

- ``config_registry`` imports nothing of ``teamstore``.
- A teamstore module imports modules of its own package, or of packages in a lower layer; never one of
  its own layer's other packages, never one above. Bottom to top: ``errors``, ``limits``; ``ids``, ``settings``,
  ``terminal``, ``logs``, ``aws``, ``disk`` (a file or folder flushed to the disk); ``db``, ``events`` (the
  run's contract), ``context``, ``offline``, ``people``, ``stream_usage``; ``keys`` (users' data keys,
  which every store seals through); ``state``, ``migrations``, ``examples``; ``memory`` (it writes under the
  state's erasure fence; retention and erasure reach it); ``audit``, ``metering``; ``runtime``; ``export``;
  ``erasure``; ``app`` (the composition root); ``demo``, ``analytics`` (the Python API for notebooks);
  ``cli``; ``__main__``. So ``runtime`` imports no ``audit``, ``erasure`` or ``cli``; ``audit`` and
  ``metering`` import no ``runtime`` and not each other; ``erasure`` imports no ``runtime`` or ``cli``;
  ``export`` no ``erasure`` (an erasure reaches the export records, and hands the export an exporter of its
  own records through the composition root); only ``__main__`` imports ``cli``.
- No lower package reaches ``app``, not even from inside a function: the conveniences that build from
  settings (``open_platform``, ``erase_user``) live in ``app`` itself.
- The package root ``teamstore`` (its ``__init__`` registers the bounding context and hands out
  ``Platform``, ``open_platform`` and ``erase_user`` lazily) is the namespace every import passes
  through: it is left out of the rule.
- No package reaches itself through others (no cycle).
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TEAMSTORE = ROOT / "platform" / "teamstore"
CONFIG_REGISTRY = ROOT / "config_registry"

LAYERS: list[set[str]] = [
    {"errors", "limits"},
    {"ids", "settings", "terminal", "logs", "aws", "disk"},
    {"db", "events", "context", "offline", "people", "stream_usage"},
    {"keys"},
    {"state", "migrations", "examples"},
    {"memory"},
    {"audit", "metering"},
    {"runtime"},
    {"export"},
    {"erasure"},
    {"app"},
    {"demo", "analytics"},
    {"cli"},
    {"__main__"},
]
LAYER = {package: rank for rank, packages in enumerate(LAYERS) for package in packages}


@dataclass(frozen=True)
class Import:
    """One import statement's target, seen from the module that holds it."""

    module: str
    target: str
    in_function: bool
    line: int


def _module_name(path: Path, base: Path) -> str:
    parts = path.relative_to(base.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path, base: Path) -> Iterator[Import]:
    module = _module_name(path, base)
    tree = ast.parse(path.read_text(encoding="utf-8"))
    functions = [n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)]
    inside = {id(node) for f in functions for node in ast.walk(f)}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            # `from teamstore.cli import cost` imports the module teamstore.cli.cost
            targets = [node.module, *(f"{node.module}.{alias.name}" for alias in node.names)]
        else:
            continue
        for target in targets:
            yield Import(module, target, id(node) in inside, node.lineno)


def _package(module: str) -> str | None:
    """``audit`` for ``teamstore.audit.ledger``, ``app`` for ``teamstore.app``; ``None`` for the root."""
    parts = module.split(".")
    return parts[1] if parts[0] == "teamstore" and len(parts) > 1 else None


def _teamstore_imports() -> list[Import]:
    found = []
    for path in sorted(TEAMSTORE.rglob("*.py")):
        for imp in _imports(path, TEAMSTORE):
            if imp.target.split(".")[0] == "teamstore" and _package(imp.module) is not None:
                found.append(imp)
    return found


def _crossing(imp: Import) -> tuple[str, str] | None:
    """The (importer, imported) packages of an import between two packages, else ``None``."""
    source, target = _package(imp.module), _package(imp.target)
    if source is None or target is None or source == target:
        return None
    return source, target


def test_every_teamstore_package_has_a_place_in_the_layers() -> None:
    packages = {_package(_module_name(p, TEAMSTORE)) for p in TEAMSTORE.rglob("*.py")} - {None}
    assert packages - LAYER.keys() == set()


def test_every_import_between_teamstore_packages_points_down_the_layers() -> None:
    upward = []
    for imp in _teamstore_imports():
        crossing = _crossing(imp)
        if crossing is None:
            continue
        source, target = crossing
        if LAYER[target] >= LAYER[source]:
            upward.append(f"{imp.module}:{imp.line} imports {imp.target} ({source} -> {target})")
    assert upward == []


def test_no_package_below_the_composition_root_reaches_it_not_even_when_called() -> None:
    reaching = [f"{imp.module}:{imp.line}" for imp in _teamstore_imports()
                if _package(imp.target) == "app" and LAYER[_package(imp.module) or "app"] < LAYER["app"]]
    assert reaching == []


def test_the_packages_import_each_other_in_no_cycle() -> None:
    edges: dict[str, set[str]] = {}
    for imp in _teamstore_imports():
        crossing = _crossing(imp)
        if crossing is not None:
            edges.setdefault(crossing[0], set()).add(crossing[1])
    assert _cycles(edges) == []


def _cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Every package from which a path of imports leads back to it, with that path."""
    found = []
    for start in sorted(edges):
        stack, seen = [(start, [start])], set()
        while stack:
            node, path = stack.pop()
            for nxt in sorted(edges.get(node, ())):
                if nxt == start:
                    found.append([*path, start])
                elif nxt not in seen:
                    seen.add(nxt)
                    stack.append((nxt, [*path, nxt]))
    return found


def test_the_config_registry_imports_nothing_of_teamstore() -> None:
    reaching = [f"{imp.module}:{imp.line} imports {imp.target}" for path in sorted(CONFIG_REGISTRY.rglob("*.py"))
                for imp in _imports(path, CONFIG_REGISTRY) if imp.target.split(".")[0] == "teamstore"]
    assert reaching == []


def test_the_rule_sees_an_upward_import_inside_a_function(tmp_path: Path) -> None:
    # The rule is only as good as the walk: an import tucked inside a function is found, and counted as one.
    package = tmp_path / "teamstore" / "audit"
    package.mkdir(parents=True)
    (package / "late.py").write_text("def f():\n    from teamstore.runtime.session import Session\n")
    (imp,) = [i for i in _imports(package / "late.py", tmp_path / "teamstore") if i.target.endswith("session")]
    assert imp.in_function and _crossing(imp) == ("audit", "runtime")
