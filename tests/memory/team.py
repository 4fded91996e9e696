"""The team the memory suites run: a helpdesk whose model client records every call and whose memory writer
can be told to misbehave.

``helpdesk``: ``triage`` (its context not persisted) and ``researcher`` (persisted, a bounded context),
round robin, three messages a run (the task and a reply each). Both are given the user's memory; triage's
model client writes it. The client is the offline one, recording each call under its ``channel``; as the
writer (``writer=...``) it answers as the offline client does, or fails in one of the ways a real model
can: :data:`WRITER_MODES`.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping, Sequence
from typing import Any, Literal, Self

from autogen_agentchat.agents import AssistantAgent
from autogen_agentchat.conditions import MaxMessageTermination
from autogen_agentchat.teams import RoundRobinGroupChat
from autogen_core import CancellationToken
from autogen_core.models import CreateResult, LLMMessage, RequestUsage, SystemMessage
from autogen_core.tools import Tool, ToolSchema
from pydantic import BaseModel

from config_registry import Manifest, MemoryDeclaration
from teamstore.context import BoundedChatCompletionContext
from teamstore.memory.component import HEADER
from teamstore.offline import OfflineChatCompletionClient, OfflineChatCompletionClientConfig, _memory_request

TEAM = "helpdesk"
WriterMode = Literal["offline", "raise", "prose", "bad_type", "over_budget", "undeclared", "surrogate_summary",
                     "surrogate_fact", "nul_summary", "nul_fact", "gated"]
WRITER_MODES: tuple[WriterMode, ...] = ("raise", "prose", "bad_type", "over_budget", "undeclared", "surrogate_summary",
                                        "surrogate_fact", "nul_summary", "nul_fact")
FACTS = {"ticket_id": "str", "router_model": "str", "visits": "int"}
BUDGET = 60
SECRET_WORDS = "the customer's words must stay out of every log"
"""What a failing writer's error quotes (as a provider's error may quote the request)."""
BREAKS = "the model endpoint breaks on this task"
"""A task holding this fails its run: every client's call (but the writer's) raises while it is in the context."""

CALLS: dict[str, list[list[LLMMessage]]] = {}
"""Every model call each channel's clients made, in order (the messages as sent)."""
GATES: dict[str, asyncio.Barrier] = {}
"""A ``gated`` writer's first request waits here until as many writers have arrived as the barrier counts."""


class ScriptedClientConfig(OfflineChatCompletionClientConfig):
    """The offline client's settings, a recording channel and how it answers as the memory writer."""

    channel: str = "default"
    writer: WriterMode = "offline"


class ScriptedClient(OfflineChatCompletionClient):
    """The offline client, recording its calls and answering the memory writer as ``writer`` says."""

    component_config_schema = ScriptedClientConfig  # type: ignore[assignment]
    component_provider_override = "tests.memory.team.ScriptedClient"

    def __init__(self, channel: str = "default", writer: WriterMode = "offline", model: str = "offline-small") -> None:
        super().__init__(model=model)
        self._channel, self._writer = channel, writer
        self._gated = False

    async def create(
        self, messages: Sequence[LLMMessage], *, tools: Sequence[Tool | ToolSchema] = (),
        tool_choice: Tool | Literal["auto", "required", "none"] = "auto",
        json_output: bool | type[BaseModel] | None = None, extra_create_args: Mapping[str, Any] = {},
        cancellation_token: CancellationToken | None = None,
    ) -> CreateResult:
        """Record the call, then answer (as the writer, as told)."""
        CALLS.setdefault(self._channel, []).append(list(messages))
        request = _memory_request(str(messages[-1].content)) if messages else None
        if request is None and any(BREAKS in str(m.content) for m in messages):
            raise RuntimeError("model endpoint down")
        if request is None or self._writer == "offline":
            return await super().create(messages)
        if self._writer == "gated":
            if not self._gated:  # the first attempt only: a retry after a conflict goes straight on
                self._gated = True
                await GATES[self._channel].wait()
            return await super().create(messages)
        if self._writer == "raise":
            raise RuntimeError(f"model endpoint down while asked: {messages[-1].content} ({SECRET_WORDS})")
        return CreateResult(finish_reason="stop", content=_bad_answer(self._writer, request), cached=False,
                            usage=RequestUsage(prompt_tokens=50, completion_tokens=20))

    def _to_config(self) -> ScriptedClientConfig:
        return ScriptedClientConfig(model=self.model, channel=self._channel, writer=self._writer)

    @classmethod
    def _from_config(cls, config: ScriptedClientConfig) -> Self:  # type: ignore[override]
        return cls(channel=config.channel, writer=config.writer, model=config.model)


def _bad_answer(mode: str, request: dict[str, Any]) -> str:
    if mode == "prose":
        return f"Sure! The customer said: {request['new_messages'][-1]['content']} ({SECRET_WORDS})"
    summary, facts = f"a fine summary ({SECRET_WORDS})", {}
    if mode == "bad_type":
        facts = {"visits": f"two, {SECRET_WORDS}"}
    elif mode == "over_budget":
        summary = f"{SECRET_WORDS} " * 20
    elif mode == "undeclared":
        facts = {f"mood {SECRET_WORDS}": "angry"}
    elif mode == "surrogate_summary":  # JSON may escape a lone surrogate, which no UTF-8 encodes
        summary += " \ud800"
    elif mode == "surrogate_fact":
        facts = {"ticket_id": "T-\ud800"}
    elif mode == "nul_summary":  # JSON may escape NUL too, which no Postgres text column holds
        summary += " \x00"
    elif mode == "nul_fact":
        facts = {"ticket_id": "T-\x00"}
    return json.dumps({"summary": summary, "facts": facts})


def helpdesk(channel: str = "default", writer: WriterMode = "offline", messages: int = 3) -> RoundRobinGroupChat:
    """The helpdesk team on scripted clients recording under ``channel``; triage's writes the memory. A run
    ends after ``messages`` messages (the task, then turns in order: 5 gives each agent two turns)."""
    triage = AssistantAgent("triage", model_client=ScriptedClient(channel, writer),
                            system_message="You are triage. Say what kind of problem it is.")
    researcher = AssistantAgent(
        "researcher", model_client=ScriptedClient(channel),
        model_context=BoundedChatCompletionContext(max_messages=20, keep_first=1),
        system_message="You are researcher. Find the likely cause.",
    )
    return RoundRobinGroupChat([triage, researcher], termination_condition=MaxMessageTermination(messages))


def helpdesk_manifest(**memory: Any) -> Manifest:
    """The helpdesk's manifest: researcher persisted, both given memory, triage writing it; ``memory``
    changes its declaration (``None`` as ``memory=None`` keeps no memory)."""
    if "memory" in memory:
        declaration = memory["memory"]
    else:
        declaration = MemoryDeclaration(participants=["triage", "researcher"], writer="triage",
                                        summary_tokens=BUDGET, facts=FACTS).model_copy(update=memory)
    return Manifest(name=TEAM, persist=["researcher"], context_bound=20, allowed_providers=["tests."],
                    memory=declaration)


def memory_messages(messages: Sequence[Any]) -> list[str]:
    """The kept-memory system messages among ``messages`` (model messages, or their JSON)."""
    found = []
    for m in messages:
        content = m.get("content") if isinstance(m, dict) else getattr(m, "content", None)
        kind = m.get("type") if isinstance(m, dict) else type(m).__name__
        if kind == "SystemMessage" and isinstance(content, str) and content.startswith(HEADER):
            found.append(content)
    return found


def first_call_with_memory(channel: str, since: int = 0) -> str:
    """The memory message of the first model call on ``channel`` (after call number ``since``) that had one."""
    for call in CALLS.get(channel, [])[since:]:
        held = [str(m.content) for m in call if isinstance(m, SystemMessage) and str(m.content).startswith(HEADER)]
        if held:
            return held[0]
    return ""
