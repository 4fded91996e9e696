"""User memory in a session: given to the participants the manifest names, written after the runs are saved.

    memory = MemoryService(MemoryStore(engine, keys=keys))   # keys: the users' data keys (App.keys)
    binding = bind_memory(built)                       # None: the team keeps no memory
    recall = await memory.recall(binding, "alice", fresh=True, persisted=built.persisted)
    key = await memory.writer_key("alice")            # as the session opens, under its lease
    since = await memory.said_after("alice", interrupted)  # before the recall: its writer's messages come after
    memory.schedule(binding, ctx, outcome, said, key, observers=..., limits=..., said_after=since)  # at block exit
    await memory.drain()                               # before the process ends (Platform.aclose does it)

When it is read: a participant is given the memory when its model context starts empty, in a new or
expired session (or one whose state was refused), and on every run for a participant whose context is not
persisted. A persisted participant of a resumed session already holds it, once, in its stored context;
that message is rewritten only once it gives what is no longer kept (a fact the user forgot).

When it is written: once per session, when its block exits, after its state is saved and its lease
released, from what its runs added (the previous memory plus those messages), sealed under the data key the
session opened with: a writer never makes one, so one started for a user erased meanwhile writes nothing. It
runs off the user's path,
in the background; :meth:`MemoryService.drain` awaits what is in flight. Because it is written while the
session is live, a session that later expires loses nothing its memory was to keep; docs/memory.md weighs
this against the other moments it could run.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Protocol

from autogen_core.model_context import ChatCompletionContext
from autogen_core.models import ChatCompletionClient

from config_registry.errors import RegistryError
from config_registry.manifest import MemoryDeclaration
from config_registry.types import BuiltTeam
from teamstore.errors import ConfigurationError, TeamstoreError
from teamstore.events import LaterCalls, RunContext, RunObserver, RunOutcome, notify_later_calls
from teamstore.keys.service import DataKey
from teamstore.memory.component import TeamstoreMemory
from teamstore.memory.facts import UserMemory
from teamstore.memory.store import MemoryStore
from teamstore.memory.writer import Said, WriteOutcome, write_memory
from teamstore.metering import MeteredChatCompletionClient, metered_run
from teamstore.runtime.checkpoints import InterruptedRun

log = logging.getLogger("teamstore.memory")


class MemoryLimits(Protocol):
    """The settings a memory write reads (a session's ``SessionLimits`` has them, and follows the platform's)."""

    memory_retention_days: float
    memory_writer_timeout_seconds: float


WRITER = "memory_writer"
"""The memory writer's agent name and purpose in the ledger, in spans and in ``teamstore cost``."""


@dataclass(frozen=True)
class MemoryBinding:
    """One session's memory: the declaration, the components it feeds, the client that writes it, and the
    model contexts of the participants it feeds."""

    declaration: MemoryDeclaration
    scope: str
    components: dict[str, list[TeamstoreMemory]]
    writer: ChatCompletionClient
    contexts: dict[str, ChatCompletionContext] = field(default_factory=dict)


@dataclass(frozen=True)
class MemoryRecall:
    """What a session gave its participants (``Session.memory``).

    Attributes:
        scope: The memory's name.
        given_to: The participants given it in this session.
        summary: Whether a summary was given.
        summary_cut: Whether it was given cut to a participant's budget (it is over it).
        facts: The facts given, by name.
        left_out: What is stored but was not given (damaged, or no longer declared as stored).
    """

    scope: str
    given_to: list[str] = field(default_factory=list)
    summary: bool = False
    facts: list[str] = field(default_factory=list)
    left_out: list[str] = field(default_factory=list)
    summary_cut: bool = False

    def as_dict(self) -> dict[str, Any]:
        """A JSON-ready view (``teamstore run --json``)."""
        return {"scope": self.scope, "given_to": self.given_to, "summary": self.summary,
                "summary_cut": self.summary_cut, "facts": self.facts, "left_out": self.left_out}


def bind_memory(built: BuiltTeam) -> MemoryBinding | None:
    """The memory of a freshly built team, or ``None`` when its manifest keeps none.

    Raises:
        ConfigurationError: The writer's agent has no model client to write with.
    """
    declaration = built.manifest.memory
    if declaration is None or not declaration.enabled:
        return None
    components = {
        # AssistantAgent keeps its memories in ``_memory`` and offers no accessor; ours were attached by
        # the build (teamstore.memory.component.attach_memory).
        name: [m for m in getattr(built.participants[name], "_memory", None) or [] if isinstance(m, TeamstoreMemory)]
        for name in declaration.participants
    }
    contexts = {  # AssistantAgent's, which the session's restored state fills
        name: context for name in declaration.participants
        if isinstance(context := getattr(built.participants[name], "_model_context", None), ChatCompletionContext)
    }
    return MemoryBinding(declaration, declaration.scope_of(built.name), components,
                         _writer_client(built, declaration.writer), contexts)


async def rebind_memory(binding: MemoryBinding, built: BuiltTeam) -> MemoryBinding:
    """The memory of ``built``, the session's team built again (after a run that failed or was cancelled):
    each of its components is given what the one it replaces was given as the session opened, so the runs
    after the failure are given the memory as the first was.

    Raises:
        ConfigurationError: The writer's agent has no model client to write with.
    """
    again = bind_memory(built)
    if again is None:
        return binding
    for name, components in again.components.items():
        for before, component in zip(binding.components.get(name, []), components, strict=False):
            for content in before.contents:
                await component.add(content)
    return again


async def _withdraw(binding: MemoryBinding, names: Sequence[str], stored: UserMemory | None) -> None:
    """Rewrite what the contexts of ``names`` hold of the memory to give nothing ``stored`` no longer keeps."""
    kept = stored if stored is not None and stored.written else None
    for name in names:
        for component in binding.components.get(name, []) if name in binding.contexts else []:
            await component.withdraw_forgotten(binding.contexts[name], kept)


def _writer_client(built: BuiltTeam, name: str) -> ChatCompletionClient:
    """The writer participant's model client, metered as the memory writer's (the participant's own calls
    stay metered as its)."""
    client = getattr(built.participants[name], "_model_client", None)  # AssistantAgent's, metered by the build
    if isinstance(client, MeteredChatCompletionClient):
        client = client.inner
    if not isinstance(client, ChatCompletionClient):
        raise ConfigurationError(f"memory writer {name!r} of team {built.name!r} has no model client",
                                 hint="name a participant with a model_client as memory.writer")
    return MeteredChatCompletionClient(client, agent=WRITER, purpose=WRITER)


class MemoryService:
    """Reads users' memory into sessions and writes it after them, in the background.

    Args:
        store: The memory store.
        declared: Scope -> the facts teams declare under it (:meth:`config_registry.Registry.memory_facts`):
            a write deletes a user's facts that no team declares any more. Without it, none are deleted.
    """

    def __init__(self, store: MemoryStore, declared: Callable[[str], Collection[str]] | None = None) -> None:
        self.store = store
        self._declared = declared
        self._writes: set[asyncio.Task[None]] = set()

    async def recall(
        self, binding: MemoryBinding, user_id: str, *, fresh: bool, persisted: Sequence[str]
    ) -> MemoryRecall:
        """Give the user's memory to each receiving participant whose context starts empty; in a resumed
        session, rewrite a persisted participant's stored memory message that gives what is no longer kept.

        Args:
            binding: The session's memory.
            user_id: The user.
            fresh: The session starts with no stored state (new, expired, or refused).
            persisted: The participants whose contexts a resumed session restored.

        Raises:
            StoreUnavailable: The database failed.
        """
        receivers = [n for n in binding.declaration.participants if fresh or n not in persisted]
        holders = [] if fresh else [n for n in binding.declaration.participants if n in persisted]
        stored = await self.store.load(user_id, binding.scope) if receivers or holders else None
        await _withdraw(binding, holders, stored)
        if stored is None or not stored.written:
            return MemoryRecall(binding.scope)
        given, summary, cut, facts, left_out = [], False, False, set(), set()
        for name in receivers:
            for component in binding.components.get(name, []):
                left_out |= set(component.recall(stored))
                given += [name] if component.contents else []
                kinds = [(c.metadata or {}) for c in component.contents]
                summary = summary or any(k.get("kind") == "summary" for k in kinds)
                cut = cut or any(k.get("kind") == "summary" and k.get("cut") for k in kinds)
                facts |= {str(k["name"]) for k in kinds if k.get("kind") == "fact"}
        return MemoryRecall(binding.scope, given, summary, sorted(facts), sorted(left_out), summary_cut=cut)

    async def withdraw_forgotten(self, binding: MemoryBinding, user_id: str, *, restored: Sequence[str]) -> None:
        """Rewrite the memory message that the contexts of ``restored`` hold once it gives what is no longer
        kept: after the team was built again and given the state the session opened with, or given an
        interrupted run's checkpoint, each holding the message as it was then.

        Raises:
            StoreUnavailable: The database failed.
        """
        names = [n for n in binding.declaration.participants if n in restored]
        if names:
            await _withdraw(binding, names, await self.store.load(user_id, binding.scope))

    async def writer_key(self, user_id: str) -> DataKey | None:
        """The data key the user's memory is sealed under (``None``: stored unsealed). A session takes it as it
        opens, under its lease, and hands it to the writer it starts (:meth:`schedule`); it is never made here:
        the session made it before its lease, so one missing now was destroyed by an erasure since.

        Raises:
            ErasureInProgress: An erasure fences the user, or erased them since the session opened.
            KeyUnavailable, DataKeyDamaged: The key cannot be had.
        """
        return await self.store.writer_key(user_id, create=False)

    async def said_after(self, user_id: str, interrupted: InterruptedRun | None) -> datetime:
        """The earliest time what a session's runs say can have been said, read as it opens, before its recall: the
        database's clock once no forget of ``user_id``'s memory is under way (:meth:`MemoryStore.clock`: the clock
        a forget is dated by; this host's need not agree), or the earlier bound of the ``interrupted`` run it may
        continue, whose first messages were said in an earlier session: the bound that session read as it opened,
        kept in the run's checkpoint (:attr:`InterruptedRun.said_after`, on the same clock). A checkpoint written
        before it was kept gives the run's start instead, on the clock of the host that started it: the best it
        has, and one that misses a forget made while that clock ran ahead.

        Raises:
            StoreUnavailable: The database could not be reached.
        """
        opened = await self.store.clock(user_id)
        if interrupted is None:
            return opened
        began = interrupted.said_after if interrupted.said_after is not None else interrupted.started_at
        return min(opened, began)

    def schedule(
        self, binding: MemoryBinding, ctx: RunContext, outcome: RunOutcome, said: Sequence[Said],
        key: DataKey | None, *, observers: Sequence[RunObserver], limits: MemoryLimits, said_after: datetime,
    ) -> None:
        """Write the user's memory from ``said`` in the background (the run ``ctx`` is the last they end with),
        sealed under ``key`` (:meth:`writer_key`, as the session opened): the write lands only while that key
        exists, and no key is made for it; nor when the user forgot memory of the scope after ``said_after``
        (:meth:`said_after`, as the session opened)."""
        task = asyncio.get_running_loop().create_task(
            self._write(binding, ctx, outcome, list(said), key, observers, limits, said_after))
        self._writes.add(task)
        task.add_done_callback(self._done)

    def _done(self, task: asyncio.Task[None]) -> None:
        self._writes.discard(task)
        if task.cancelled():
            # Nothing of teamstore's cancels a write: its event loop ended under it (asyncio.run cancels what is
            # left), the platform never closed, and the user's update is gone without a trace but this.
            log.warning("a memory write was cancelled before it ended; the user's memory keeps what it had. Close "
                        "the platform before its event loop ends (async with platform, or await platform.aclose()): "
                        "closing waits for the memory writes in flight")
        elif (exc := task.exception()) is not None:
            # A fault of the writer itself (its expected failures are recorded on the memory): the type only,
            # since its message may quote the request.
            log.error("memory writer failed unexpectedly (%s); the user's memory is unchanged", type(exc).__name__)

    async def _write(
        self, binding: MemoryBinding, ctx: RunContext, outcome: RunOutcome, said: list[Said], key: DataKey | None,
        observers: Sequence[RunObserver], limits: MemoryLimits, said_after: datetime,
    ) -> None:
        started = datetime.now(UTC)
        retention = binding.declaration.retention_days or limits.memory_retention_days
        declared = await self._declared_facts(binding.scope)
        with metered_run(ctx.interruptions) as meter:
            try:
                result = await write_memory(
                    self.store, binding.writer, user_id=ctx.user_id, team=ctx.team, team_version=ctx.team_version,
                    declaration=binding.declaration, run_id=ctx.run_id, messages=said, retention_days=retention,
                    call_seconds=limits.memory_writer_timeout_seconds, key=key, declared=declared,
                    said_after=said_after)
            except TeamstoreError as exc:  # the database failed: not even the failure could be recorded
                result = WriteOutcome("failed", reason=exc.message)
            except Exception as exc:  # a fault of the writer itself: logged (the type only: its message may
                # quote the request), and its calls metered all the same
                result = WriteOutcome("failed", reason=f"the memory writer failed unexpectedly ({type(exc).__name__})")
        _log(ctx, result)
        later = LaterCalls(outcome, list(meter.calls), WRITER, started, datetime.now(UTC),
                           error_type="MemoryWriteRefused" if result.status == "failed" else None)
        await notify_later_calls(observers, ctx, later)

    async def _declared_facts(self, scope: str) -> Collection[str] | None:
        """The facts teams declare under ``scope``; ``None`` (delete none) when the registry cannot say."""
        if self._declared is None:
            return None
        try:
            return await asyncio.to_thread(self._declared, scope)
        except RegistryError as exc:
            log.warning("memory facts no team declares are kept for now: the registry could not be read (%s)",
                        type(exc).__name__)
            return None

    async def drain(self) -> None:
        """Wait for the memory writes in flight (each ends on its own: its model call has a timeout)."""
        while self._writes:
            await asyncio.gather(*list(self._writes), return_exceptions=True)


def _log(ctx: RunContext, result: WriteOutcome) -> None:
    if result.status == "failed":
        # The reason names what was wrong, never what the user said.
        log.warning("memory of team %s not updated for run %s: %s", ctx.team, ctx.run_id, result.reason)
    elif result.status == "fenced":
        log.info("memory of team %s not written for run %s: an erasure holds or erased its user", ctx.team, ctx.run_id)
    elif result.status == "forgotten":
        log.info("memory of team %s not written for run %s: %s", ctx.team, ctx.run_id, result.reason)
