"""The AutoGen ``Memory`` that gives a participant what is kept about its user: summary and facts.

    from teamstore.memory.component import TeamstoreMemory

    memory = TeamstoreMemory(scope="support_triage", summary_tokens=150, facts={"ticket_id": "str"})
    memory.recall(stored)                               # a UserMemory read from the store
    agent = AssistantAgent("triage", model_client=client, memory=[memory])
    TeamstoreMemory.load_component(memory.dump_component())   # the declaration, never a user's memory

The runtime attaches one to each participant the team's manifest names (:func:`attach_memory`, on the
component JSON before it is loaded) and gives it the user's memory when the participant's model context
starts empty: in a new or expired session, and on every run for a participant whose context is not
persisted. ``AssistantAgent`` calls :meth:`TeamstoreMemory.update_context` before each model call; it adds
the memory as one system message, and never a second (an older copy a context holds is replaced in its
place), so a persisted context holds at most one and what is stored stays flat run after run.

Its component config is the declaration alone (scope, budget, fact types): a dumped team never carries a
user's memory. What :meth:`add` is given lives in this object, for this session only; the memory writer is
what stores memory.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Callable, Mapping
from typing import Any, Self, TypeGuard

from autogen_core import CancellationToken, Component
from autogen_core.memory import Memory, MemoryContent, MemoryMimeType, MemoryQueryResult, UpdateContextResult
from autogen_core.model_context import ChatCompletionContext, ChatCompletionContextState
from autogen_core.models import LLMMessage, SystemMessage
from pydantic import BaseModel, Field

from config_registry.manifest import MemoryDeclaration
from teamstore.memory.facts import UserMemory, cut_to_budget, fact_text, shown

PROVIDER = "teamstore.memory.component.TeamstoreMemory"
HEADER = "What this team knows about the user from earlier sessions (kept memory; it may be out of date):"
# A fact's line: its name and value, then when it was last confirmed (which moves without the fact changing).
_FACT_LINE = re.compile(r"^- ([^:\s]+): (.*?)(?: \(last confirmed [^()\n]*\))?$", re.MULTILINE)


def _is_memory(message: LLMMessage) -> TypeGuard[SystemMessage]:
    return isinstance(message, SystemMessage) and message.content.startswith(HEADER)


async def _rewrite_held(model_context: ChatCompletionContext, rewrite: Callable[[str], str | None]) -> bool:
    """Rewrite each memory message ``model_context`` stores to ``rewrite(its text)`` in its place (``None``: drop
    it), keeping one copy of each text; whether anything changed."""
    held = ChatCompletionContextState.model_validate(await model_context.save_state()).messages
    kept: list[LLMMessage] = []
    for message in held:
        if _is_memory(message):
            text = rewrite(message.content)
            if text is None or any(_is_memory(m) and m.content == text for m in kept):
                continue
            message = message if text == message.content else SystemMessage(content=text)
        kept.append(message)
    if kept == held:
        return False
    await model_context.load_state(ChatCompletionContextState(messages=kept).model_dump())
    return True


def _gives(text: str) -> tuple[bool, set[tuple[str, str]]]:
    """Whether a memory message gives a summary, and the facts it gives, each by name and value as given (a
    summary line that reads like a fact counts as one: both sides of a comparison count it alike)."""
    return text.startswith(f"{HEADER}\nSummary: "), set(_FACT_LINE.findall(text))


class TeamstoreMemoryConfig(BaseModel):
    """The declaration a :class:`TeamstoreMemory` serves (never a user's memory)."""

    scope: str = Field(description="The memory's name: the team's, or one several teams share.")
    summary_tokens: int = Field(default=150, gt=0, description="The summary's budget; a longer one is given cut to it.")
    facts: dict[str, str] = Field(default_factory=dict, description="Declared fact name -> type.")


class TeamstoreMemory(Memory, Component[TeamstoreMemoryConfig]):
    """A user's summary and facts, given to a participant before its model calls.

    Args:
        scope: The memory's name.
        summary_tokens: The summary's budget.
        facts: Declared fact name -> type; only these, of these types, are given.
    """

    component_type = "memory"
    component_config_schema = TeamstoreMemoryConfig
    component_provider_override = PROVIDER
    component_version = 1

    def __init__(self, scope: str, summary_tokens: int = 150, facts: Mapping[str, str] | None = None) -> None:
        self._config = TeamstoreMemoryConfig(scope=scope, summary_tokens=summary_tokens, facts=dict(facts or {}))
        self._contents: list[MemoryContent] = []

    @property
    def scope(self) -> str:
        """The memory's name."""
        return self._config.scope

    @property
    def contents(self) -> list[MemoryContent]:
        """What this participant is given in this session."""
        return list(self._contents)

    def recall(self, memory: UserMemory) -> list[str]:
        """Give the participant ``memory``: its summary, cut to the budget, and every declared fact of its
        declared type; returns what was left out, by name (damaged or no longer declared as stored).

        Args:
            memory: What the store holds about the user under :attr:`scope`.
        """
        left_out = [d.name for d in memory.damaged]
        contents: list[MemoryContent] = []
        if summary := memory.summary.strip():
            # Over today's budget (written by a team sharing the scope under a larger one, the budget lowered
            # since, or edited by hand): given cut to it, as the budget bounds what a model call is sent.
            given = cut_to_budget(summary, self._config.summary_tokens)
            contents.append(MemoryContent(content=given, mime_type=MemoryMimeType.TEXT,
                                          metadata={"kind": "summary", "scope": self.scope,
                                                    "cut": given != summary}))
        for name, fact in memory.facts.items():
            if self._config.facts.get(name) != fact.type:
                left_out.append(name)
                continue
            contents.append(MemoryContent(
                content=f"{name}: {fact_text(fact.value)}", mime_type=MemoryMimeType.TEXT,
                metadata={"kind": "fact", "name": name, "type": fact.type, "value": shown(fact.value),
                          "confirmed_at": fact.confirmed_at.isoformat(), "source_run_id": fact.source_run_id},
            ))
        self._contents = contents
        return left_out

    def message_text(self) -> str:
        """The system message :meth:`update_context` adds ('' when there is nothing to give)."""
        if not self._contents:
            return ""
        lines = [HEADER]
        for item in self._contents:
            meta = item.metadata or {}
            if meta.get("kind") == "summary":
                lines.append(f"Summary: {item.content!s}")
        known = [item for item in self._contents if (item.metadata or {}).get("kind") != "summary"]
        if known:
            lines.append("Facts:")
            for item in known:
                confirmed = str((item.metadata or {}).get("confirmed_at", ""))[:10]
                lines.append(f"- {item.content!s}" + (f" (last confirmed {confirmed})" if confirmed else ""))
        return "\n".join(lines)

    async def update_context(self, model_context: ChatCompletionContext) -> UpdateContextResult:
        """Add the memory as one system message, unless the context holds that message already; in place of an
        older copy it holds (the one an interrupted run's checkpoint was given), never beside it.

        Returns:
            What was added (empty when nothing was: AutoGen then emits no ``MemoryQueryEvent``).
        """
        text = self.message_text()
        if not text:
            return UpdateContextResult(memories=MemoryQueryResult(results=[]))
        held = [m for m in await model_context.get_messages() if _is_memory(m)]
        if any(m.content == text for m in held):
            return UpdateContextResult(memories=MemoryQueryResult(results=[]))
        if held:  # an older copy (an interrupted run's checkpoint holds the one it was given): this one instead
            await _rewrite_held(model_context, lambda _: text)
        else:
            await model_context.add_message(SystemMessage(content=text))
        return UpdateContextResult(memories=MemoryQueryResult(results=list(self._contents)))

    async def withdraw_forgotten(self, model_context: ChatCompletionContext, memory: UserMemory | None) -> bool:
        """Rewrite a memory message ``model_context`` holds that gives what is no longer kept (a fact forgotten or
        no longer given, a fact's value no longer kept (forgotten, then learnt again), a summary forgotten) to
        what is kept now, in its place, or drop it when nothing is.

        A persisted participant of a resumed session is not given the memory again: its stored context holds
        the message it was given. One that still gives only what is kept (each fact by name and value) stays as
        it is, however the memory moved on since (a new summary, a fact confirmed again, a fact learnt), so the
        stored context (and a provider's prompt cache) is rewritten only once what it gives is no longer kept.

        Args:
            model_context: The participant's context, as the session restored it.
            memory: What the store holds now (``None``: nothing).

        Returns:
            Whether the context changed.
        """
        if not any(_is_memory(m) for m in await model_context.get_messages()):
            return False  # nothing to rewrite: the state is not copied
        now = TeamstoreMemory(self.scope, self._config.summary_tokens, self._config.facts)
        if memory is not None:
            now.recall(memory)
        text = now.message_text()
        summary, facts = _gives(text)

        def renewed(held: str) -> str | None:
            had_summary, had_facts = _gives(held)
            return (text or None) if (had_summary and not summary) or had_facts - facts else held

        return await _rewrite_held(model_context, renewed)

    async def query(
        self, query: str | MemoryContent = "", cancellation_token: CancellationToken | None = None, **kwargs: Any
    ) -> MemoryQueryResult:
        """Everything this participant is given (a summary and a few facts need no search)."""
        return MemoryQueryResult(results=list(self._contents))

    async def add(self, content: MemoryContent, cancellation_token: CancellationToken | None = None) -> None:
        """Give the participant more, for this session only (the memory writer stores what lasts)."""
        self._contents.append(content)

    async def clear(self) -> None:
        """Give the participant nothing more in this session (the stored memory stays: ``forget`` removes it)."""
        self._contents = []

    async def close(self) -> None:
        """Nothing to release: the store is the runtime's."""

    def _to_config(self) -> TeamstoreMemoryConfig:
        return self._config.model_copy()

    @classmethod
    def _from_config(cls, config: TeamstoreMemoryConfig) -> Self:
        return cls(scope=config.scope, summary_tokens=config.summary_tokens, facts=config.facts)


def memory_component(declaration: MemoryDeclaration, team: str) -> dict[str, Any]:
    """The component JSON of the :class:`TeamstoreMemory` serving ``declaration`` for ``team``."""
    return TeamstoreMemory(
        declaration.scope_of(team), declaration.summary_tokens, dict(declaration.facts)
    ).dump_component().model_dump(mode="json")


def attach_memory(component: dict[str, Any], declaration: MemoryDeclaration | None, team: str) -> dict[str, Any]:
    """A copy of a team's (or agent's) component JSON whose receiving participants each take a
    :class:`TeamstoreMemory` after the memories they declare themselves; unchanged when the team keeps none.

    Args:
        component: The runnable JSON (the registry checked the participants can take memory).
        declaration: The manifest's memory declaration.
        team: The team's name (the default scope).
    """
    if declaration is None or not declaration.enabled:
        return component
    node = copy.deepcopy(component)
    members = node["config"]["participants"] if node.get("component_type") == "team" else [node]
    for member in members:
        config = member.get("config") or {}
        if config.get("name") in declaration.participants:
            config["memory"] = [*(config.get("memory") or []), memory_component(declaration, team)]
    return node
