"""OpenAI's chat-completions endpoint in process, behind an ``httpx.MockTransport``, for AutoGen's OpenAI clients:
a streamed answer carries its usage only when the request asks for it (``stream_options``), as OpenAI's does.

    endpoint = OpenAIEndpoint()
    client = endpoint.client()                 # an OpenAIChatCompletionClient for "gpt-4o"
    async for chunk in client.create_stream([UserMessage(content="hi", source="user")]): ...
    endpoint.requests[-1]["stream_options"]    # what the request asked for
"""

from __future__ import annotations

import json
from typing import Any

import httpx
from autogen_ext.models.openai import AzureOpenAIChatCompletionClient, OpenAIChatCompletionClient

ANSWERING = "gpt-4o-2024-08-06"
"""The model the endpoint says answered."""
USAGE = {"prompt_tokens": 12, "completion_tokens": 5, "total_tokens": 17}


class OpenAIEndpoint:
    """Answers every chat completion with "Hello"; keeps each request's JSON body in ``requests``."""

    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []

    def client(self, **config: Any) -> OpenAIChatCompletionClient:
        """AutoGen's OpenAI client for ``gpt-4o`` on this endpoint (``config`` added to its configuration)."""
        return OpenAIChatCompletionClient(**{"model": "gpt-4o", "api_key": "not-a-key", **self._http(), **config})

    def azure_client(self, **config: Any) -> AzureOpenAIChatCompletionClient:
        """AutoGen's Azure OpenAI client for a ``gpt-4o`` deployment on this endpoint."""
        return AzureOpenAIChatCompletionClient(**{
            "model": "gpt-4o", "azure_deployment": "gpt-4o", "api_version": "2024-10-21", "api_key": "not-a-key",
            "azure_endpoint": "https://example.openai.azure.com", **self._http(), **config})

    def serve(self, client: OpenAIChatCompletionClient) -> None:
        """Have an AutoGen OpenAI client built elsewhere (from its JSON, say) send to this endpoint, its SDK client's
        base URL kept as the client resolved it."""
        client._client = client._client.with_options(**self._http())  # type: ignore[attr-defined]

    def _http(self) -> dict[str, Any]:
        return {"http_client": httpx.AsyncClient(transport=httpx.MockTransport(self._answer)), "max_retries": 0}

    def _answer(self, request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        self.requests.append(body)
        base = {"id": "c1", "created": 1, "model": ANSWERING}
        if not body.get("stream"):
            return httpx.Response(200, json={**base, "object": "chat.completion", "usage": USAGE, "choices": [
                {"index": 0, "message": {"role": "assistant", "content": "Hello"}, "finish_reason": "stop"}]})
        chunk = {**base, "object": "chat.completion.chunk"}
        chunks = [{**chunk, "choices": [{"index": 0, "delta": {"role": "assistant", "content": "Hello"},
                                         "finish_reason": None}]},
                  {**chunk, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}]
        if (body.get("stream_options") or {}).get("include_usage"):
            chunks.append({**chunk, "choices": [], "usage": USAGE})
        text = "".join(f"data: {json.dumps(c)}\n\n" for c in chunks) + "data: [DONE]\n\n"
        return httpx.Response(200, text=text, headers={"content-type": "text/event-stream"})
