"""Fresh teams from the registry, their definitions cached and checked once, every model client metered.

    teams = TeamBuilder(registry, refresh_seconds=5.0)
    built = await teams.build("support_triage@production")   # a NEW team object on every call
    definition = await teams.definition("support_triage@3f2a9c")

A pinned version is cached for good (it cannot change); a bare name or a label is looked up again after
``refresh_seconds``, so a moved label reaches every worker within that time. The lookup (git, in a thread)
is made once for all the requests that need it, and ahead of time: once half the interval has passed, the
next request starts it in the background and goes on with the cached definition.

A cached definition is checked for a build once (:func:`config_registry.build.prepare`: the allow-list,
the declared secrets, the persisted participants' bounds and the memory they name; the metering wrapper and the memory component applied); each build
then only resolves the secrets into a fresh copy and loads it. A label looked up again that still points
at the same version keeps its definition and its checks (a version's definition never changes); one
that moved is read and checked anew.

A definition built more than once has its next team built ahead (:meth:`TeamBuilder.build_ahead`, which a
closing session calls before it waits for its save): the next request's build then costs it nothing. A build
takes that team only on the loop it was built on and with the secrets' values a build now would resolve;
otherwise it builds its own. Either way, every build returns a team no one else was given.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import OrderedDict
from collections.abc import Callable, Collection
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any

from config_registry import Registry, TeamDefinition
from config_registry.build import PreparedDefinition, prepare
from config_registry.errors import RegistryError
from config_registry.types import BuiltTeam
from teamstore.memory.component import attach_memory
from teamstore.metering import wrap_model_clients

SpanRoute = Callable[[], AbstractContextManager[None]]
"""A block in which AutoGen's spans go where the platform sends them (``Platform.autogen_spans``)."""

log = logging.getLogger(__name__)

SPARES = 64
"""The most teams built ahead a builder keeps (one per definition, for those built most recently): a service
serving many definitions holds at most this many teams nobody asked for yet."""


@dataclass(frozen=True)
class _Spare:
    """A team built ahead of the request that takes it: on which loop, and with which secrets' values."""

    built: BuiltTeam
    loop: asyncio.AbstractEventLoop
    secrets: tuple[str | None, ...]


@dataclass
class _Entry:
    """A resolved definition, when its lookup started, its checks' result once a build needed them, and the
    team built ahead for the next build."""

    definition: TeamDefinition
    fetched: float  # time.monotonic() when the lookup began: the definition is at least that fresh
    pinned: bool
    prepared: PreparedDefinition | None = None
    builds: int = 0
    spare: _Spare | None = None
    restocking: bool = False


class TeamBuilder:
    """Builds fresh teams from one registry through a cache of resolved, checked definitions.

    Args:
        registry: The config registry teams are built from.
        refresh_seconds: How long a NAME or NAME@LABEL resolution is trusted.
        spans: The block AutoGen objects are created in, so the runtimes built keep its span route.
        spares: The most teams built ahead it keeps (:data:`SPARES`).
        stream_usage_hosts: Hosts whose OpenAI-compatible endpoints take ``stream_options``: a model client
            pointed at one has its streams asked for their usage (``Settings.stream_usage_hosts``).
    """

    def __init__(
        self, registry: Registry, *, refresh_seconds: float, spans: SpanRoute = contextlib.nullcontext,
        spares: int = SPARES, stream_usage_hosts: Collection[str] = (),
    ) -> None:
        self.registry = registry
        self.stream_usage_hosts = frozenset(stream_usage_hosts)
        self.refresh_seconds = refresh_seconds
        self.spans = spans
        self.spares = spares
        self._entries: dict[str, _Entry] = {}
        self._lookups: dict[str, asyncio.Task[_Entry]] = {}
        self._restocks: set[asyncio.Task[None]] = set()
        self._stocked: OrderedDict[int, _Entry] = OrderedDict()  # the entries holding a team built ahead, oldest first

    async def definition(self, ref: str) -> TeamDefinition:
        """The definition ``ref`` (``name``, ``name@version``, ``name@label``) resolves to, from the cache
        while it is fresh.

        Raises:
            RegistryError: The registry cannot resolve ``ref``.
        """
        return (await self._entry(ref)).definition

    async def build(self, ref: str) -> BuiltTeam:
        """A fresh team for ``ref``, its model clients wrapped for metering, and a ``TeamstoreMemory`` on each
        participant its manifest gives user memory.

        Raises:
            RegistryError: ``ref`` does not resolve, a secret is unavailable, or the definition does not load.
        """
        entry = await self._entry(ref)
        prepared = self._prepared(entry)
        spare, entry.spare = entry.spare, None
        self._stocked.pop(id(entry), None)
        entry.builds += 1
        # Taken only where a build now would make the same team: on its loop, with the same secrets.
        if spare is not None and spare.loop is asyncio.get_running_loop() and spare.secrets == prepared.secrets_in():
            return spare.built
        with self.spans():  # the runtimes built here keep it; agent creation spans are started here
            return prepared.build()

    def build_ahead(self, ref: str) -> None:
        """Build the next team for ``ref`` when the loop next waits, for the build after it to take: a session
        asks as it waits for its save, so the next request's build costs it nothing. Only for a definition built
        more than once, one team at a time; a build ahead that fails is dropped (the build that needs it fails
        the same way, and says why).
        """
        entry = self._entries.get(ref)
        if entry is None or entry.prepared is None or entry.builds < 2 or entry.spare is not None or entry.restocking:
            return
        entry.restocking = True
        task = asyncio.get_running_loop().create_task(self._build_spare(entry, entry.prepared))
        self._restocks.add(task)
        task.add_done_callback(self._restocks.discard)

    def _prepared(self, entry: _Entry) -> PreparedDefinition:
        if entry.prepared is None:
            # Checked on the first build only; a definition that fails is not kept as checked, so every
            # build of it fails the same way.
            memory, name, hosts = entry.definition.manifest.memory, entry.definition.name, self.stream_usage_hosts

            def transform(component: dict[str, Any]) -> dict[str, Any]:
                return attach_memory(wrap_model_clients(component, stream_usage_hosts=hosts), memory, name)

            entry.prepared = prepare(entry.definition, transform=transform)
        return entry.prepared

    async def _build_spare(self, entry: _Entry, prepared: PreparedDefinition) -> None:
        try:
            secrets = prepared.secrets_in()
            with self.spans():
                built = prepared.build()
        except Exception as exc:  # the request that needs it builds it itself, and gets the error then
            # By its type: a build's error may quote the definition's values, a secret's among them.
            log.debug("building %s ahead failed: %s", entry.definition.name, type(exc).__name__)
            return
        finally:
            entry.restocking = False
        entry.spare = _Spare(built, asyncio.get_running_loop(), secrets)
        self._stocked[id(entry)] = entry
        while len(self._stocked) > self.spares:  # the definitions least recently built give theirs up
            self._stocked.popitem(last=False)[1].spare = None

    async def _entry(self, ref: str) -> _Entry:
        entry = self._entries.get(ref)
        if entry is not None:
            age = time.monotonic() - entry.fetched
            if entry.pinned or age < self.refresh_seconds:
                if not entry.pinned and age >= self.refresh_seconds / 2:
                    self._lookup(ref)  # ahead of time: the requests after this one find it done
                return entry
        # Shielded: a request cancelled while it waits leaves the lookup to the others that wait for it.
        return await asyncio.shield(self._lookup(ref))

    def _lookup(self, ref: str) -> asyncio.Task[_Entry]:
        """The lookup of ``ref`` in flight, or a new one: one at a time per reference."""
        task, loop = self._lookups.get(ref), asyncio.get_running_loop()
        if task is None or task.get_loop() is not loop:  # one left on a loop that has ended never finishes
            task = loop.create_task(self._resolve(ref))
            self._lookups[ref] = task
            task.add_done_callback(lambda done: self._finished(ref, done))
        return task

    async def _resolve(self, ref: str) -> _Entry:
        started = time.monotonic()
        cached = self._entries.get(ref)
        # A label looked up again: if it points where it did, its definition (a version's never changes) and
        # that definition's checks stand, and the lookup read two files rather than six.
        if cached is not None and not cached.pinned and (
            await asyncio.to_thread(self.registry.version_of, ref) == cached.definition.version
        ):
            cached.fetched = started
            return cached
        definition = await asyncio.to_thread(self.registry.resolve, ref)
        # A version never moves, so it is cached for good; a label (it resolved through one if it is
        # among the version's labels, since labels win over version prefixes) or a bare name is looked
        # up again after the refresh interval.
        selector = ref.partition("@")[2]
        entry = _Entry(definition, started, pinned=bool(selector) and selector not in definition.labels)
        self._entries[ref] = entry
        return entry

    async def aclose(self) -> None:
        """Stop the lookups still in flight (one made ahead of time has no request waiting for it) and the
        builds ahead, and drop the teams built ahead."""
        tasks = [*self._lookups.values(), *self._restocks]
        self._lookups, self._restocks = {}, set()
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        for entry in self._stocked.values():  # a replaced definition's entry too
            entry.spare = None
        self._stocked.clear()

    def _finished(self, ref: str, task: asyncio.Task[_Entry]) -> None:
        if self._lookups.get(ref) is task:
            del self._lookups[ref]
        if task.cancelled():
            return
        error = task.exception()
        if isinstance(error, RegistryError):
            # Whoever awaits it gets the error itself; a lookup started ahead of time has no one waiting,
            # and the request after the interval looks it up again and gets it then.
            log.debug("registry lookup of %s failed: %s", ref, error)
        elif error is not None:
            log.warning("registry lookup of %s failed: %s: %s", ref, type(error).__name__, error)
