"""Whether a streamed model call asks for its usage: AutoGen's OpenAI clients report a stream's tokens only when the
request asks (``stream_options`` ``include_usage``), and an endpoint that does not know the field refuses it.

    from teamstore.stream_usage import asking_for_usage

    extra_create_args = asking_for_usage(client, extra_create_args, hosts={"vllm.internal:8000"})
    async for chunk in client.create_stream(messages, extra_create_args=extra_create_args): ...
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any
from urllib.parse import urlparse

from autogen_core.models import ChatCompletionClient

from teamstore.settings import host_key

_AZURE_STREAM_OPTIONS_SINCE = "2024-09-01"
"""The first Azure OpenAI API version that takes ``stream_options``: an earlier one refuses a request that has it."""
_DEFAULT_PORTS = {"http": 80, "https": 443}


def asking_for_usage(
    client: ChatCompletionClient, extra_create_args: Mapping[str, Any], stream_usage: bool | None = None,
    hosts: Collection[str] = (),
) -> Mapping[str, Any]:
    """``extra_create_args`` asking an OpenAI client's stream for its usage, unless the caller said either way.

    AutoGen 0.7's ``include_usage`` argument asks for usage even when given ``False``, and is not part of the
    interface a wrapped client is called through; ``stream_options`` is the request's own field. A client's
    configured ``stream_options`` is replaced whole by one in ``extra_create_args``, so its other options are
    kept in the one added. Only an endpoint known to take the field (:func:`_takes_stream_options`), or one the
    operator said takes it (``stream_usage``, or its host in ``hosts``), is asked.

    Args:
        client: The client the stream is asked of.
        extra_create_args: The call's own.
        stream_usage: ``True``: ask wherever an OpenAI client points; ``False``: never; ``None``: as ``hosts`` and
            :func:`_takes_stream_options` say.
        hosts: Hosts (``host`` or ``host:port``, as :func:`teamstore.settings.host_key` writes them) that take the
            field, matched against the SDK client's own base URL: the one it resolved from a secret or from
            ``OPENAI_BASE_URL`` too.

    Returns:
        ``extra_create_args``, with ``stream_options`` ``include_usage`` added when the stream is asked.
    """
    asks = (_takes_stream_options(client) or _on_listed_host(client, hosts) if stream_usage is None
            else stream_usage and _is_openai_client(client))
    if not asks:
        return extra_create_args
    configured = getattr(client, "_create_args", None)
    options = (extra_create_args if "stream_options" in extra_create_args
               else configured if isinstance(configured, Mapping) else {}).get("stream_options") or {}
    if not isinstance(options, Mapping) or "include_usage" in options:
        return extra_create_args  # the caller's choice
    return {**extra_create_args, "stream_options": {**options, "include_usage": True}}


def _takes_stream_options(client: ChatCompletionClient) -> bool:
    """Whether an AutoGen OpenAI client reaches an endpoint that takes ``stream_options``: OpenAI's own, or Azure
    OpenAI from API version 2024-09-01. An OpenAI-compatible server (``base_url``) may refuse a field it does not
    know, failing every streamed call, so it is not asked unless the operator says it takes the field
    (``stream_usage``, or the hosts of ``TEAMSTORE_STREAM_USAGE_URLS``)."""
    names = {k.__name__ for k in type(client).__mro__}
    api = getattr(client, "_client", None)  # the openai SDK client AutoGen's holds
    if not _is_openai_client(client):
        return False
    if "AzureOpenAIChatCompletionClient" in names:
        version = str(getattr(api, "_api_version", None) or "")
        return version[:4].isdigit() and version[:10] >= _AZURE_STREAM_OPTIONS_SINCE
    base_url = getattr(api, "base_url", None)
    return urlparse(str(base_url or "")).hostname == "api.openai.com"


def _is_openai_client(client: ChatCompletionClient) -> bool:
    """Whether ``client`` is one of AutoGen's OpenAI clients (Azure OpenAI's too): only they send
    ``stream_options`` from ``extra_create_args`` as the request's own field."""
    return any(k.__name__ == "BaseOpenAIChatCompletionClient" for k in type(client).__mro__)


def _on_listed_host(client: ChatCompletionClient, hosts: Collection[str]) -> bool:
    """Whether an AutoGen OpenAI client's SDK client sends to one of ``hosts``: its host, or its host and port,
    a port the URL leaves out being its scheme's (``http://llm.internal/v1`` is on ``llm.internal:80``)."""
    if not hosts or not _is_openai_client(client):
        return False
    try:
        parsed = urlparse(str(getattr(getattr(client, "_client", None), "base_url", None) or ""))
        host, port = parsed.hostname or "", parsed.port or _DEFAULT_PORTS.get(parsed.scheme)
    except ValueError:  # a port that is not one: no request reaches it anyway
        return False
    return bool(host) and not {host_key(host), host_key(host, port)}.isdisjoint(hosts)
