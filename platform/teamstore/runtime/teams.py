"""Fresh teams from the registry, their definitions cached, every model client metered.

    teams = TeamBuilder(registry, refresh_seconds=5.0)
    built = await teams.build("support_triage@production")   # a NEW team object on every call
    definition = await teams.definition("support_triage@3f2a9c")

A pinned version is cached for good (it cannot change); a bare name or a label is looked up again after
``refresh_seconds``, so a moved label reaches every worker within that time.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any

from config_registry import Registry, TeamDefinition
from config_registry.build import build_team
from config_registry.types import BuiltTeam
from teamstore.memory.component import attach_memory
from teamstore.metering import wrap_model_clients

SpanRoute = Callable[[], AbstractContextManager[None]]
"""A block in which AutoGen's spans go where the platform sends them (``Platform.autogen_spans``)."""


class TeamBuilder:
    """Builds fresh teams from one registry through a cache of resolved definitions.

    Args:
        registry: The config registry teams are built from.
        refresh_seconds: How long a NAME or NAME@LABEL resolution is trusted.
        spans: The block AutoGen objects are created in, so the runtimes built keep its span route.
    """

    def __init__(self, registry: Registry, *, refresh_seconds: float, spans: SpanRoute = contextlib.nullcontext) -> None:
        self.registry = registry
        self.refresh_seconds = refresh_seconds
        self.spans = spans
        self._definitions: dict[str, tuple[TeamDefinition, float]] = {}

    async def definition(self, ref: str) -> TeamDefinition:
        """The definition ``ref`` (``name``, ``name@version``, ``name@label``) resolves to, from the cache
        while it is fresh.

        Raises:
            RegistryError: The registry cannot resolve ``ref``.
        """
        cached = self._definitions.get(ref)
        now = time.monotonic()
        if cached is not None and (cached[1] == float("inf") or now - cached[1] < self.refresh_seconds):
            return cached[0]
        definition = await asyncio.to_thread(self.registry.resolve, ref)
        # A version never moves, so it is cached for good; a label (it resolved through one if it is
        # among the version's labels, since labels win over version prefixes) or a bare name is looked
        # up again after the refresh interval.
        selector = ref.partition("@")[2]
        pinned = bool(selector) and selector not in definition.labels
        self._definitions[ref] = (definition, float("inf") if pinned else now)
        return definition

    async def build(self, ref: str) -> BuiltTeam:
        """A fresh team for ``ref``, its model clients wrapped for metering, and a ``TeamstoreMemory`` on each
        participant its manifest gives user memory.

        Raises:
            RegistryError: ``ref`` does not resolve, a secret is unavailable, or the definition does not load.
        """
        definition = await self.definition(ref)
        memory, name = definition.manifest.memory, definition.name

        def transform(component: dict[str, Any]) -> dict[str, Any]:
            return attach_memory(wrap_model_clients(component), memory, name)

        with self.spans():  # the runtimes built here keep it; agent creation spans are started here
            return build_team(definition, transform=transform)
