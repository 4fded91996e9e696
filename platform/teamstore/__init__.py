"""teamstore: the data platform for AutoGen agent teams.

    from teamstore import open_platform

    platform = open_platform()
    async with platform:                  # closing waits for the user-memory writes in flight
        async with platform.session("user-1", "session-1", team="support_triage") as s:
            result = await s.run("My router keeps dropping")
            print(s.resume.outcome, result.messages[-1].to_text())

A web service builds its platform in its lifespan and shares it: docs/services.md.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from config_registry.bounds import BoundProblem, register_bounding_context
from config_registry.extensions import register_provider_prefix
from teamstore.limits import BOUND_FIELDS, BOUNDING_PROVIDER


def _check_bound(config: Mapping[str, Any]) -> BoundProblem | None:
    from teamstore.context import BOUNDING

    assert BOUNDING.check is not None
    return BOUNDING.check(config)


# pyproject.toml declares both to the registry through entry points; registered here as well, for a process
# that runs teamstore from a source tree (or an install older than those entry points). The context's own
# module (AutoGen, pydantic) is imported only when the registry checks a context's sizes: importing
# teamstore, as every command of the command line does, stays light.
register_provider_prefix("teamstore.")
register_bounding_context(BOUNDING_PROVIDER, BOUND_FIELDS, _check_bound)

__version__ = "0.1.0"

__all__ = ["App", "Platform", "__version__", "erase_user", "open_platform"]


def __getattr__(name: str) -> object:
    # Lazy, so `import teamstore` (done by the registry's examples) stays light.
    if name == "Platform":
        from teamstore.runtime.platform import Platform

        return Platform
    if name in ("App", "open_platform", "erase_user"):
        from teamstore import app

        return getattr(app, name)
    raise AttributeError(f"module 'teamstore' has no attribute {name!r}")
