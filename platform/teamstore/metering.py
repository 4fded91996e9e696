"""Meter every model call at the model-client boundary, including calls ``TaskResult`` never counts.

``TaskResult`` usage omits SelectorGroupChat's speaker-selection calls; wrapping each model client in the
team's component JSON before it is built catches every call:

    from teamstore.metering import wrap_model_clients, metered_run

    component = wrap_model_clients(definition_json)   # before load_component
    with metered_run() as meter:
        await team.run(task="...")
    print(meter.calls)
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import logging
import time
from collections.abc import AsyncGenerator, Collection, Iterator, Mapping, Sequence
from contextvars import ContextVar
from datetime import UTC, datetime
from typing import Any, Literal, Self
from urllib.parse import urlparse

from autogen_core import EVENT_LOGGER_NAME, CancellationToken, Component, ComponentModel
from autogen_core._component_config import WELL_KNOWN_PROVIDERS
from autogen_core.logging import LLMCallEvent
from autogen_core.models import (
    ChatCompletionClient,
    CreateResult,
    LLMMessage,
    ModelCapabilities,
    ModelInfo,
    RequestUsage,
)
from autogen_core.tools import Tool, ToolSchema
from pydantic import BaseModel, Field

from teamstore.events import ModelCall
from teamstore.stream_usage import asking_for_usage

PROVIDER = "teamstore.metering.MeteredChatCompletionClient"
log = logging.getLogger(__name__)


class Meter:
    """Collects the model calls of one run. Listeners (spans) are told of each call as it ends."""

    def __init__(self, attempt: int = 0) -> None:
        self.calls: list[ModelCall] = []
        self.listeners: list[Any] = []
        self.attempt = attempt  # the attempt at the run its calls are made in (ModelCall.attempt)

    def record(self, call: ModelCall) -> None:
        """Add a call and tell the listeners."""
        self.calls.append(call)
        for listener in self.listeners:
            listener(call)


_current: ContextVar[Meter | None] = ContextVar("teamstore_meter", default=None)

# --- which provider a client calls, and which model answered ----------------------------------------------
# The GenAI semantic conventions' `gen_ai.provider.name` for AutoGen's clients, by class name (a subclass
# keeps its base's name); a client not listed gets its class name, lower-cased, without "ChatCompletionClient".
_PROVIDERS = {
    "AzureOpenAIChatCompletionClient": "azure.ai.openai",
    "OpenAIChatCompletionClient": "openai",
    "AnthropicBedrockChatCompletionClient": "aws.bedrock",
    "AnthropicChatCompletionClient": "anthropic",
    "AzureAIChatCompletionClient": "azure.ai.inference",
    "OllamaChatCompletionClient": "ollama",
    "LlamaCppChatCompletionClient": "llama_cpp",
    "SKChatCompletionAdapter": "semantic_kernel",
}
# OpenAI-compatible endpoints of other providers, which AutoGen's OpenAI client reaches through `base_url`.
_OPENAI_COMPATIBLE_HOSTS = {
    "generativelanguage.googleapis.com": "gcp.gemini",
    "aiplatform.googleapis.com": "gcp.vertex_ai",
    "api.anthropic.com": "anthropic",
    "api.deepseek.com": "deepseek",
    "api.groq.com": "groq",
    "api.mistral.ai": "mistral_ai",
    "api.perplexity.ai": "perplexity",
    "api.x.ai": "x_ai",
}


def provider_name(client: ChatCompletionClient) -> str:
    """The ``gen_ai.provider.name`` of a model client: its provider as the GenAI conventions name it.

    An OpenAI client pointed at another provider's OpenAI-compatible endpoint (``base_url``; AutoGen
    points ``gemini-*`` models at Gemini's by itself) is named for that provider.
    """
    name = next((_PROVIDERS[k.__name__] for k in type(client).__mro__ if k.__name__ in _PROVIDERS), None)
    if name == "openai":
        raw = getattr(client, "_raw_config", None)
        config = raw if isinstance(raw, dict) else {}
        host = urlparse(str(config.get("base_url") or "")).hostname or ""
        if host in _OPENAI_COMPATIBLE_HOSTS:
            return _OPENAI_COMPATIBLE_HOSTS[host]
        if not host and str(config.get("model", "")).startswith("gemini-"):
            return "gcp.gemini"
    return name or type(client).__name__.removesuffix("ChatCompletionClient").lower() or "unknown"


_answering: ContextVar[list[str] | None] = ContextVar("teamstore_answering_model", default=None)


class _ResponseModelTap(logging.Filter):
    """Reads the model that answered each call from AutoGen's ``LLMCallEvent``.

    AutoGen's ``CreateResult`` does not carry the model that answered, but every AutoGen client reports
    the provider's raw response (with its ``model``) on the ``autogen_core.events`` logger. The tap sits
    on that logger as a filter and keeps only the model's name, for the call metered in this context.
    Where the logger would not have logged at INFO, the tap enables INFO for itself and drops every
    record the logger's own level would have dropped: nothing more reaches any handler (AutoGen's events
    hold users' messages).
    """

    def __init__(self, logger: logging.Logger) -> None:
        super().__init__()
        self.logger = logger
        self.enabled_by_tap = False

    def filter(self, record: logging.LogRecord) -> bool:
        """Note the answering model, then let the record through only where it would have gone anyway."""
        found = _answering.get()
        if found is not None and isinstance(record.msg, LLMCallEvent):
            response = record.msg.kwargs.get("response")
            model = response.get("model") if isinstance(response, dict) else None
            if isinstance(model, str) and model:
                found.append(model)
        if not self.enabled_by_tap or self.logger.level != _TAPS_LEVEL or self.logger.parent is None:
            return True
        return record.levelno >= self.logger.parent.getEffectiveLevel()

    def info(self, msg: object, *args: Any, **kwargs: Any) -> None:
        """The logger's ``info`` while INFO is on for the tap alone: a record is made only for a model call, or
        where INFO was wanted anyway (the logger's level changed since, or a logger above it logs INFO).

        AutoGen logs an event for every message it delivers, tens per run; each record costs ~9 µs to make
        and would only be dropped.
        """
        if (
            isinstance(msg, LLMCallEvent)
            or self.logger.level != _TAPS_LEVEL
            or (self.logger.parent is not None and self.logger.parent.isEnabledFor(logging.INFO))
        ):
            logging.Logger.info(self.logger, msg, *args, **kwargs)


_TAPS_LEVEL = logging.INFO - 1
"""The level the tap sets on AutoGen's events logger for itself: INFO's records pass it, and a level a host sets
since (INFO included) is told apart from it."""


@functools.cache
def _tap_response_models() -> _ResponseModelTap:
    logger = logging.getLogger(EVENT_LOGGER_NAME)
    tap = _ResponseModelTap(logger)
    logger.addFilter(tap)
    if logger.level == logging.NOTSET and not logger.isEnabledFor(logging.INFO):
        logger.setLevel(_TAPS_LEVEL)
        tap.enabled_by_tap = True
        logger.info = tap.info  # type: ignore[method-assign]
    return tap


@contextlib.contextmanager
def metered_run(attempt: int = 0) -> Iterator[Meter]:
    """Make a fresh :class:`Meter` current for the calls made inside the block (made in ``attempt`` at their run:
    0 the first, ``n`` its ``n``-th continuation from a checkpoint)."""
    meter = Meter(attempt)
    token = _current.set(meter)
    try:
        yield meter
    finally:
        _current.reset(token)


class MeteredChatCompletionClientConfig(BaseModel):
    """The wrapped client, the participant it serves, and whether its streams are asked for their usage
    (``stream_usage``, ``stream_usage_hosts``: see :class:`MeteredChatCompletionClient`)."""

    inner: ComponentModel
    agent: str
    purpose: str = "agent"
    stream_usage: bool | None = None
    stream_usage_hosts: list[str] = Field(default_factory=list)


class MeteredChatCompletionClient(ChatCompletionClient, Component[MeteredChatCompletionClientConfig]):
    """Delegates to ``inner`` and records each call's usage on the current :class:`Meter`.

    Args:
        inner: The client called.
        agent: The agent or team it serves.
        purpose: What its calls are for (``agent``, ``speaker_selection``, ``memory_writer``).
        stream_usage: Whether an AutoGen OpenAI or Azure OpenAI client's streams ask for their usage
            (``stream_options`` ``include_usage``): ``None`` only where the endpoint is known to take the field
            (OpenAI's API, Azure OpenAI from API version 2024-09-01); ``True`` wherever the client points (an
            OpenAI-compatible server or an Azure API version the operator knows takes it); ``False`` never. The
            call's or the client's own ``include_usage`` always stands.
        stream_usage_hosts: With ``stream_usage`` ``None``, hosts (``host`` or ``host:port``) said to take the
            field too (``TEAMSTORE_STREAM_USAGE_URLS``, which :func:`wrap_model_clients` adds): matched at each
            call against the base URL the OpenAI SDK client resolved (from a secret or ``OPENAI_BASE_URL`` too).
    """

    component_type = "model"
    component_config_schema = MeteredChatCompletionClientConfig
    component_provider_override = PROVIDER
    component_version = 1

    def __init__(
        self, inner: ChatCompletionClient, agent: str, purpose: str = "agent", *, stream_usage: bool | None = None,
        stream_usage_hosts: Collection[str] = (),
    ) -> None:
        self._inner = inner
        self._agent = agent
        self._purpose = purpose
        self._stream_usage = stream_usage
        self._stream_usage_hosts = frozenset(stream_usage_hosts)
        self._provider = provider_name(inner)
        self._warned = False
        _tap_response_models()

    @property
    def inner(self) -> ChatCompletionClient:
        """The wrapped client."""
        return self._inner

    def _requested_model(self) -> str | None:
        name = getattr(self._inner, "model", None) or getattr(self._inner, "_model", None)
        if not name:
            raw = getattr(self._inner, "_raw_config", None)
            name = raw.get("model") if isinstance(raw, dict) else None
        return str(name) if name else None

    def _model_name(self) -> str:
        return self._requested_model() or type(self._inner).__name__

    def _record(
        self, started: datetime, t0: float, result: CreateResult | None, error: str | None, answered: list[str],
        meter: Meter | None,
    ) -> None:
        if meter is None:
            return
        usage = result.usage if result is not None else None
        # A stream's end event names no model (AutoGen's CreateResult carries none): the one asked for stands in.
        answering = answered[-1] if answered else self._requested_model() if result is not None else None
        call = ModelCall(
            agent=self._agent,
            model=self._model_name(),
            input_tokens=usage.prompt_tokens if usage else 0,
            output_tokens=usage.completion_tokens if usage else 0,
            started_at=started,
            duration_s=time.perf_counter() - t0,
            purpose=self._purpose,
            error=error,
            provider=self._provider,
            response_model=answering,
            finish_reason=str(result.finish_reason) if result is not None and error is None else None,
            attempt=meter.attempt,
        )
        if error is None and not call.usage_known and not self._warned:
            self._warned = True  # once per client: each of its calls says the same
            _warn_usage_missing(call)
        meter.record(call)

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
        """Delegate, then record usage (or the error type, with zero tokens: a call cancelled while it waited for
        its answer, as a stopped run's is, was made all the same, and is on record as ``CancelledError``)."""
        started, t0 = datetime.now(UTC), time.perf_counter()
        answered: list[str] = []
        token = _answering.set(answered)
        try:
            result = await self._inner.create(
                messages,
                tools=tools,
                tool_choice=tool_choice,
                json_output=json_output,
                extra_create_args=extra_create_args,
                cancellation_token=cancellation_token,
            )
        except BaseException as exc:  # a cancellation too: the request went out, and may be billed
            self._record(started, t0, None, type(exc).__name__, answered, _current.get())
            raise
        finally:
            _answering.reset(token)
        self._record(started, t0, result, None, answered, _current.get())
        return result

    async def create_stream(
        self,
        messages: Sequence[LLMMessage],
        *,
        tools: Sequence[Tool | ToolSchema] = (),
        tool_choice: Tool | Literal["auto", "required", "none"] = "auto",
        json_output: bool | type[BaseModel] | None = None,
        extra_create_args: Mapping[str, Any] = {},
        cancellation_token: CancellationToken | None = None,
    ) -> AsyncGenerator[str | CreateResult, None]:
        """Delegate the stream; record usage from the final result (a stream cancelled, or left by its reader,
        before its final result is on record with the error type, as :meth:`create` records a failed call).

        AutoGen's OpenAI clients report a stream's usage only when the request asks for it: on OpenAI's API and
        Azure OpenAI's, or wherever ``stream_usage`` says, unless the caller chose (``stream_options`` in
        ``extra_create_args`` or the client's config), it is asked for."""
        started, t0 = datetime.now(UTC), time.perf_counter()
        extra_create_args = asking_for_usage(
            self._inner, extra_create_args, self._stream_usage, self._stream_usage_hosts)
        meter = _current.get()  # the run that asked: a stream left unread is closed from wherever it is collected
        final: CreateResult | None = None
        answered: list[str] = []  # a stream's end event carries no model: the one asked for is recorded
        try:
            async for chunk in self._inner.create_stream(
                messages,
                tools=tools,
                tool_choice=tool_choice,
                json_output=json_output,
                extra_create_args=extra_create_args,
                cancellation_token=cancellation_token,
            ):
                if isinstance(chunk, CreateResult):
                    final = chunk
                yield chunk
        except GeneratorExit:  # its reader stopped reading: answered if the final result came first
            self._record(started, t0, final, None if final is not None else "GeneratorExit", answered, meter)
            raise
        except BaseException as exc:  # a failure, or a cancellation: the request went out, and may be billed
            self._record(started, t0, final, type(exc).__name__, answered, meter)
            raise
        self._record(started, t0, final, None, answered, meter)

    async def close(self) -> None:
        """Close the wrapped client."""
        await self._inner.close()

    def actual_usage(self) -> RequestUsage:
        """The wrapped client's last usage."""
        return self._inner.actual_usage()

    def total_usage(self) -> RequestUsage:
        """The wrapped client's total usage."""
        return self._inner.total_usage()

    def count_tokens(self, messages: Sequence[LLMMessage], *, tools: Sequence[Tool | ToolSchema] = ()) -> int:
        """Delegated."""
        return self._inner.count_tokens(messages, tools=tools)

    def remaining_tokens(self, messages: Sequence[LLMMessage], *, tools: Sequence[Tool | ToolSchema] = ()) -> int:
        """Delegated."""
        return self._inner.remaining_tokens(messages, tools=tools)

    @property
    def capabilities(self) -> ModelCapabilities:
        """Delegated."""
        return self._inner.capabilities

    @property
    def model_info(self) -> ModelInfo:
        """Delegated."""
        return self._inner.model_info

    def _to_config(self) -> MeteredChatCompletionClientConfig:
        return MeteredChatCompletionClientConfig(
            inner=self._inner.dump_component(), agent=self._agent, purpose=self._purpose,
            stream_usage=self._stream_usage, stream_usage_hosts=sorted(self._stream_usage_hosts),
        )

    @classmethod
    def _from_config(cls, config: MeteredChatCompletionClientConfig) -> Self:
        inner = ChatCompletionClient.load_component(config.inner)
        return cls(inner=inner, agent=config.agent, purpose=config.purpose, stream_usage=config.stream_usage,
                   stream_usage_hosts=config.stream_usage_hosts)


def _warn_usage_missing(call: ModelCall) -> None:
    """Say that an answered call reported no usage (it counts as unknown): the model, never the call's words."""
    log.warning(
        "a call to %s (%s) was answered without its token usage: it counts as a call of unknown usage, and its "
        "cost is unknown; if the client streams, have it ask for usage (OpenAI: stream_options include_usage)",
        call.model, call.provider)


def _wrap(client: dict[str, Any], agent: str, purpose: str, stream_usage_hosts: Collection[str]) -> dict[str, Any]:
    config: dict[str, Any] = {"inner": client, "agent": agent, "purpose": purpose}
    return _asking_on(
        {"provider": PROVIDER, "component_type": "model", "version": 1, "component_version": 1, "config": config},
        stream_usage_hosts)


def _asking_on(metered: dict[str, Any], hosts: Collection[str]) -> dict[str, Any]:
    """``metered`` with ``hosts`` among its ``stream_usage_hosts``. Only hosts are written, not whether the client
    is on one: its base URL may be a secret reference, or come from ``OPENAI_BASE_URL``, until it is built."""
    config = dict(metered.get("config") or {})
    if not hosts or config.get("stream_usage") is not None:
        return metered  # nothing listed, or the definition said either way itself
    config["stream_usage_hosts"] = sorted({*(config.get("stream_usage_hosts") or ()), *hosts})
    return {**metered, "config": config}


def wrap_model_clients(
    component: dict[str, Any], owner: tuple[str, str] | None = None, *, stream_usage_hosts: Collection[str] = (),
) -> dict[str, Any]:
    """Return a copy of a team or agent component JSON with every model client metered.

    Every model client in the tree is wrapped, wherever it sits: an agent's own, a group chat's
    (speaker selection), and those of agents nested in other components (a ``SocietyOfMindAgent``'s inner
    team, an ``AgentTool``'s agent). Each is labelled with the nearest agent or team around it; a team's
    own client has purpose ``speaker_selection``.

    A model client is recognised by what it is, a ``ChatCompletionClient``, whatever ``component_type`` it
    dumps (AutoGen's ``ReplayChatCompletionClient`` dumps its own). So each ``provider`` is imported, as
    ``load_component()`` would: check the JSON against a provider allow-list first (the registry's build
    does). A client that holds other clients (``ChatCompletionCache``) is not wrapped itself: the clients
    it holds are, so a call is metered where it reaches a model, once, and a cache hit spends nothing.

    Args:
        component: The component JSON (``dump_component().model_dump()``).
        owner: The (name, component type) of the agent or team around ``component``, when nested.
        stream_usage_hosts: Hosts (``host`` or ``host:port``, as ``Settings.stream_usage_hosts`` gives them) of
            OpenAI-compatible servers and Azure OpenAI resources that take ``stream_options``: every metered client
            whose ``stream_usage`` is unset, one metered in the definition too, asks for a stream's usage when its
            OpenAI client sends to one (``stream_usage_hosts``).
    """
    node = dict(component)
    config = dict(node.get("config") or {})
    if node.get("component_type") in ("agent", "team"):
        owner = (str(config.get("name") or node.get("label") or "team"), str(node["component_type"]))
    node["config"] = {key: _metered(value, owner or ("team", "team"), stream_usage_hosts)
                      for key, value in config.items()}
    return node


def _metered(value: Any, owner: tuple[str, str], hosts: Collection[str]) -> Any:
    if isinstance(value, list):
        return [_metered(item, owner, hosts) for item in value]
    if not _is_component(value):
        return value  # plain configuration, never a component
    if value.get("provider") == PROVIDER:
        return _asking_on(value, hosts)  # metered already
    if is_model_client(value) and not _holds_model_client(value.get("config")):
        name, kind = owner
        return _wrap(value, name, "speaker_selection" if kind == "team" else "agent", hosts)
    return wrap_model_clients(value, owner, stream_usage_hosts=hosts)


def _is_component(value: Any) -> bool:
    return isinstance(value, dict) and "provider" in value and "component_type" in value


def is_model_client(component: Mapping[str, Any]) -> bool:
    """True when ``component`` (JSON) builds a ``ChatCompletionClient``, whatever its ``component_type``.

    Imports the module its ``provider`` names (once per provider). A provider that does not import is
    judged by ``component_type == "model"``; ``load_component()`` then reports why it does not load.
    """
    provider = component.get("provider")
    found = _component_class(provider) if isinstance(provider, str) else None
    if found is None:
        return component.get("component_type") == "model"
    return issubclass(found, ChatCompletionClient)


def _holds_model_client(config: Any) -> bool:
    if isinstance(config, list):
        return any(_holds_model_client(item) for item in config)
    if not isinstance(config, dict):
        return False
    if _is_component(config) and is_model_client(config):
        return True
    return any(_holds_model_client(item) for item in config.values())


@functools.cache
def _component_class(provider: str) -> type | None:
    module_name, _, class_name = WELL_KNOWN_PROVIDERS.get(provider, provider).rpartition(".")
    try:
        found = getattr(importlib.import_module(module_name), class_name, None)
    except Exception:  # whatever stops the import, load_component() meets it too and reports it with its cause
        return None
    return found if isinstance(found, type) else None
