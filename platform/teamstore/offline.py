"""A deterministic, offline chat-completion client that never runs out of replies.

AutoGen's ``ReplayChatCompletionClient`` raises once its list of replies is used up, so it cannot serve a
demo or a benchmark of many runs. This client answers every call from the conversation it is given: the
same messages always give the same reply and the same token usage, with no network and no API key.

    from autogen_agentchat.agents import AssistantAgent
    from teamstore.offline import OfflineChatCompletionClient

    agent = AssistantAgent("assistant", model_client=OfflineChatCompletionClient(model="offline-small"))
    result = await agent.run(task="My router keeps dropping")

Its replies quote the earliest and the latest user request it can see, so a resumed session visibly
remembers what came before, and name the facts a kept memory gave it (a system message listing
``Facts:`` as ``- name: value`` lines, each value as JSON), so a new session visibly knows its user. Asked
to pick the next speaker (SelectorGroupChat), it names a participant: at once with AutoGen's selector prompt,
at the second attempt with a custom ``selector_prompt`` (AutoGen's retry names the candidates), so such a team
needs ``max_selector_attempts`` of 2 or more (3 by default); which one it names follows the conversation, so
turns go to different speakers. Told by its system message to "say TERMINATE" when done, it ends its reply
with TERMINATE. Told by its system message to "hand off to NAME" and offered that handoff (``Swarm``), it
hands off in its first reply to each request of the user; told to "call TOOL" and offered that tool, it calls
it once per request of the user, each string argument the latest word of the request holding a digit (an
order number), each number that digit run. Asked for MagenticOne's progress ledger, it answers in the JSON the
orchestrator expects: each participant speaks once per request of the user, in order, then the request is
satisfied.

Asked to write a user's memory (the request of :mod:`teamstore.memory.writer`: a user message holding a
JSON object with ``declared_facts`` and ``new_messages``), it answers with the JSON object the writer
expects: a summary of the previous one and the user's new requests, cut to the budget, and each declared
fact found in the new messages: the latest token after the fact's first word (``ticket`` for
``ticket_id``) that holds a digit, as the fact's type reads it.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import re
from collections.abc import AsyncGenerator, Mapping, Sequence
from typing import Any, Literal, Self

from autogen_core import CancellationToken, Component, FunctionCall
from autogen_core.models import (
    ChatCompletionClient,
    CreateResult,
    FunctionExecutionResultMessage,
    LLMMessage,
    ModelCapabilities,
    ModelFamily,
    ModelInfo,
    RequestUsage,
    SystemMessage,
    UserMessage,
)
from autogen_core.tools import Tool, ToolSchema
from pydantic import BaseModel, Field

PROVIDER = "teamstore.offline.OfflineChatCompletionClient"
_SELECT = re.compile(r"select the next role from \[?([^\]\n]+?)\]? to play", re.IGNORECASE)
# AutoGen's words when it asks again: a custom selector_prompt is not recognised, but its retry names the candidates.
_RESELECT = re.compile(r"select (?:only one |a different name )?from: \[([^\]\n]+)\]", re.IGNORECASE)
_HANDOFF = re.compile(r"\bhand off to (\w+)", re.IGNORECASE)
_CALL = re.compile(r"\bcall (\w+)", re.IGNORECASE)
_LEDGER = re.compile(r"Who should speak next\? \(select from: ([^)\n]+)\)")
_DIGITS = re.compile(r"[A-Za-z0-9][\w./-]*\d[\w./-]*|\d[\w./-]*")
_REMEMBERED = re.compile(r"^- (\w+): (.*?)(?: \(last confirmed [^)]*\))?$", re.MULTILINE)
_VALUE = {  # what follows a fact's first word, by the fact's type
    "str": r"[\s#:=]*(?:\w+\s+){0,2}?([A-Za-z0-9][\w./-]*\d[\w./-]*|\d[\w./-]*)",
    "int": r"\D{0,20}?(\d+)\b",
    "float": r"\D{0,20}?(\d+(?:\.\d+)?)\b",
    "date": r"\D{0,30}?(\d{4}-\d{2}-\d{2})\b",
}


class OfflineChatCompletionClientConfig(BaseModel):
    """Configuration of :class:`OfflineChatCompletionClient`."""

    model: str = Field(default="offline-small", description="The model name reported in usage and spans.")
    quote_chars: int = Field(default=80, gt=0, description="How much of a user request a reply quotes.")
    delay_seconds: float = Field(default=0.0, ge=0, le=60, description="How long each call takes, as a remote "
                                 "model's would (a demo of a long run, a benchmark); 0 answers at once.")


def _text(message: LLMMessage) -> str:
    content = getattr(message, "content", "")
    if isinstance(content, str):
        return content
    return " ".join(str(part) for part in content if isinstance(part, str))


def _remembered(value: str) -> str:
    """A fact's value as the memory message gives it (its JSON), said back: text as it is, the rest as given."""
    try:
        read = json.loads(value)
    except ValueError:
        return value
    return read if isinstance(read, str) else value


def count_tokens(messages: Sequence[LLMMessage]) -> int:
    """A stable token estimate: one token per four characters plus framing per message."""
    return sum(4 + len(_text(m)) // 4 for m in messages)


def _memory_request(text: str) -> dict[str, Any] | None:
    """The memory writer's request, if ``text`` is one."""
    if not text.startswith("{"):
        return None
    try:
        found = json.loads(text)
    except ValueError:
        return None
    return found if isinstance(found, dict) and {"declared_facts", "new_messages"} <= found.keys() else None


def _write_memory(request: dict[str, Any]) -> str:
    """The memory writer's answer: the summary carried on with the user's new requests, and the declared
    facts the new messages state."""
    said = [m for m in request.get("new_messages") or [] if isinstance(m, dict)]
    texts = [str(m.get("content", "")) for m in said if m.get("source") == "user"] or [
        str(m.get("content", "")) for m in said]
    facts = {}
    for name, kind in dict(request.get("declared_facts") or {}).items():
        value = _fact(str(name), str(kind), texts)
        if value is not None:
            facts[name] = value
    budget = int(request.get("summary_budget_tokens") or 150) * 4
    parts = [str(request.get("previous_summary") or "").strip(), *(t.strip() for t in texts)]
    summary = ""
    for part in reversed([p for p in parts if p]):  # the newest first: the oldest is dropped to fit
        joined = f"{part} | {summary}" if summary else part
        if len(joined) > budget:
            break
        summary = joined
    return json.dumps({"summary": summary or (parts[-1][:budget] if parts else ""), "facts": facts})


def _fact(name: str, kind: str, texts: Sequence[str]) -> Any:
    """The latest value of fact ``name`` in ``texts``, read as ``kind``; ``None`` if none is stated."""
    word = re.escape(name.split("_")[0])
    if kind == "bool":
        return True if any(re.search(rf"\b{word}\b", t, re.IGNORECASE) for t in texts) else None
    found = [m.group(1) for t in texts for m in re.finditer(rf"\b{word}\b{_VALUE.get(kind, _VALUE['str'])}", t,
                                                            re.IGNORECASE)]
    if not found:
        return None
    value = found[-1].rstrip(".,;:")
    return int(value) if kind == "int" else float(value) if kind == "float" else value


def _since_request(messages: Sequence[LLMMessage]) -> Sequence[LLMMessage] | None:
    """What followed the user's latest request (agents' turns also arrive as UserMessages, from their
    names), or ``None`` when the user has made none."""
    latest = [i for i, m in enumerate(messages) if isinstance(m, UserMessage) and m.source == "user"]
    return messages[latest[-1] + 1:] if latest else None


def _tool_named(tools: Sequence[Tool | ToolSchema], name: str) -> ToolSchema | None:
    """The schema of the offered tool called ``name`` (case ignored), if one is."""
    for tool in tools:
        schema = tool.schema if isinstance(tool, Tool) else tool
        if schema["name"].lower() == name.lower():
            return schema
    return None


def _arguments(schema: ToolSchema, request: str) -> dict[str, Any]:
    """A tool's required arguments read from the user's request: strings as its latest word holding a digit
    (the request itself when none does), numbers as that word's first digit run, booleans as true."""
    found = _DIGITS.findall(request)
    word = found[-1].rstrip(".,;:") if found else request
    digits = re.search(r"\d+", word)
    parameters: Mapping[str, Any] = schema.get("parameters") or {}
    arguments: dict[str, Any] = {}
    for name in parameters.get("required", []):
        kind = dict(parameters.get("properties", {}).get(name, {})).get("type", "string")
        number = int(digits.group()) if digits else 0
        arguments[name] = number if kind in ("integer", "number") else True if kind == "boolean" else word
    return arguments


def _ledger(names: Sequence[str], messages: Sequence[LLMMessage]) -> str:
    """MagenticOne's progress ledger: the participants speak once each, in order, then it is satisfied."""
    spoken = {m.source for m in messages if isinstance(m, UserMessage)}
    waiting = [name for name in names if name not in spoken]

    def answer(value: bool | str) -> dict[str, Any]:
        return {"reason": "offline", "answer": value}

    return json.dumps({
        "is_request_satisfied": answer(not waiting), "is_in_loop": answer(False),
        "is_progress_being_made": answer(True), "next_speaker": answer(waiting[0] if waiting else names[0]),
        "instruction_or_question": answer("Work on the request."),
    })


class OfflineChatCompletionClient(ChatCompletionClient, Component[OfflineChatCompletionClientConfig]):
    """Deterministic replies computed from the conversation; reports token usage like a real client.

    Args:
        model: The model name this client reports.
        quote_chars: How many characters of a user request a reply quotes.
        delay_seconds: How long each call takes (0: at once).
    """

    component_type = "model"
    component_config_schema = OfflineChatCompletionClientConfig
    component_provider_override = PROVIDER
    component_version = 1

    def __init__(self, model: str = "offline-small", quote_chars: int = 80, delay_seconds: float = 0.0) -> None:
        self._config = OfflineChatCompletionClientConfig(model=model, quote_chars=quote_chars,
                                                         delay_seconds=delay_seconds)
        self._total = RequestUsage(prompt_tokens=0, completion_tokens=0)
        self._last = RequestUsage(prompt_tokens=0, completion_tokens=0)

    @property
    def model(self) -> str:
        """The model name this client reports."""
        return self._config.model

    def _reply(self, messages: Sequence[LLMMessage]) -> str:
        last = _text(messages[-1]) if messages else ""
        request = _memory_request(last) if messages and isinstance(messages[-1], UserMessage) else None
        if request is not None:
            return _write_memory(request)
        ledger = _LEDGER.search(last)
        if ledger:
            return _ledger([n.strip() for n in ledger.group(1).split(",") if n.strip()], messages)
        choice = _SELECT.search(last) or _RESELECT.search(last)
        if choice:
            names = [n.strip(" '\"") for n in choice.group(1).split(",") if n.strip(" '\"")]
            # The whole request, history and all: a count of messages alone picks the same speaker every turn.
            history = "\n".join(_text(m) for m in messages)
            digest = int(hashlib.sha256(history.encode()).hexdigest(), 16)
            return names[digest % len(names)] if names else ""
        asked = [m for m in messages if isinstance(m, UserMessage)]
        # Other agents' turns also arrive as UserMessages; prefer what the human said.
        human = [m for m in asked if m.source == "user"] or asked
        users = [_text(m) for m in human]
        persona = next((_text(m).split(".")[0] for m in messages if isinstance(m, SystemMessage)), "assistant")
        n = self._config.quote_chars
        first = users[0][:n] if users else ""
        latest = users[-1][:n] if users else ""
        reply = (
            f"[{self.model}] ({persona[:40]}) I see {len(messages)} messages; "
            f'earliest request: "{first}"; latest: "{latest}".'
        )
        remembered = [f"{name}={_remembered(value)}" for m in messages[1:] if isinstance(m, SystemMessage)
                      for name, value in _REMEMBERED.findall(_text(m))]
        if remembered:
            reply += f" Remembered: {', '.join(remembered)}."
        # Follow a system message's instruction to close the conversation, as a real model would.
        if any("say TERMINATE" in _text(m) for m in messages if isinstance(m, SystemMessage)):
            reply += " TERMINATE"
        return reply

    def _call(self, messages: Sequence[LLMMessage], tools: Sequence[Tool | ToolSchema]) -> list[FunctionCall]:
        """The handoff or tool call the system message asks for, in the first reply to the user's request
        (a tool: until its result is in)."""
        since = _since_request(messages)
        if not tools or since is None:
            return []
        told = " ".join(_text(m) for m in messages if isinstance(m, SystemMessage))
        asked = [(f"transfer_to_{n}", not since) for n in _HANDOFF.findall(told)]
        asked += [(n, not any(isinstance(m, FunctionExecutionResultMessage) for m in since)) for n in _CALL.findall(told)]
        request = _text(messages[-len(since) - 1])
        for name, due in asked:
            schema = _tool_named(tools, name)
            if due and schema is not None:
                call_id = "call_" + hashlib.sha256(f"{len(messages)}:{name}".encode()).hexdigest()[:16]
                return [FunctionCall(id=call_id, name=schema["name"], arguments=json.dumps(_arguments(schema, request)))]
        return []

    def _result(self, messages: Sequence[LLMMessage], tools: Sequence[Tool | ToolSchema] = ()) -> CreateResult:
        calls = self._call(messages, tools)
        content: str | list[FunctionCall] = calls or self._reply(messages)
        said = " ".join(f"{c.name}({c.arguments})" for c in calls) if calls else str(content)
        usage = RequestUsage(prompt_tokens=count_tokens(messages), completion_tokens=4 + len(said) // 4)
        self._last = usage
        self._total = RequestUsage(
            prompt_tokens=self._total.prompt_tokens + usage.prompt_tokens,
            completion_tokens=self._total.completion_tokens + usage.completion_tokens,
        )
        return CreateResult(finish_reason="function_calls" if calls else "stop", content=content, usage=usage,
                            cached=False)

    async def create(
        self,
        messages: Sequence[LLMMessage],
        *,
        tools: Sequence[Tool | ToolSchema] = (),
        tool_choice: Tool | Literal["auto", "required", "none"] = "auto",
        json_output: bool | type[BaseModel] | None = None,
        extra_create_args: Mapping[str, Any] = {},
        cancellation_token: CancellationToken | None = None,
    ) -> CreateResult:
        """Answer deterministically from ``messages`` (after ``delay_seconds``, cancelled with the token)."""
        if self._config.delay_seconds:
            waiting = asyncio.ensure_future(asyncio.sleep(self._config.delay_seconds))
            if cancellation_token is not None:
                cancellation_token.link_future(waiting)
            await waiting
        return self._result(messages, tools)

    async def create_stream(
        self,
        messages: Sequence[LLMMessage],
        *,
        tools: Sequence[Tool | ToolSchema] = (),
        tool_choice: Tool | Literal["auto", "required", "none"] = "auto",
        json_output: bool | type[BaseModel] | None = None,
        extra_create_args: Mapping[str, Any] = {},
        cancellation_token: CancellationToken | None = None,
        include_usage: bool | None = None,
    ) -> AsyncGenerator[str | CreateResult, None]:
        """Stream the same reply as :meth:`create`, word by word (a call: none), then the result."""
        result = self._result(messages, tools)
        if isinstance(result.content, str):
            for word in result.content.split(" "):
                yield word + " "
        yield result

    async def close(self) -> None:
        """Nothing to release."""

    def actual_usage(self) -> RequestUsage:
        """Usage of the last call."""
        return self._last

    def total_usage(self) -> RequestUsage:
        """Usage since this client was built."""
        return self._total

    def count_tokens(self, messages: Sequence[LLMMessage], *, tools: Sequence[Tool | ToolSchema] = ()) -> int:
        """The same estimate the reported usage uses."""
        return count_tokens(messages)

    def remaining_tokens(self, messages: Sequence[LLMMessage], *, tools: Sequence[Tool | ToolSchema] = ()) -> int:
        """A nominal 128k window."""
        return max(0, 128_000 - count_tokens(messages))

    @property
    def capabilities(self) -> ModelCapabilities:
        """Deprecated in AutoGen; kept for the interface."""
        return ModelCapabilities(vision=False, function_calling=True, json_output=False)

    @property
    def model_info(self) -> ModelInfo:
        """Text only, no JSON mode; function calling (AssistantAgent refuses tools and handoffs without it)."""
        return ModelInfo(
            vision=False,
            function_calling=True,
            json_output=False,
            family=ModelFamily.UNKNOWN,
            structured_output=False,
        )

    def _to_config(self) -> OfflineChatCompletionClientConfig:
        return self._config.model_copy()

    @classmethod
    def _from_config(cls, config: OfflineChatCompletionClientConfig) -> Self:
        return cls(model=config.model, quote_chars=config.quote_chars, delay_seconds=config.delay_seconds)
