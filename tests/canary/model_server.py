"""A local OpenAI-compatible chat endpoint: the gateway desk's model calls reach it over real HTTP, with
the secrets the runtime resolved from the environment in their headers.

    server = ModelServer()
    env["GATEWAY_URL"] = server.base_url
    ...
    assert server.saw("x-functions-key", secret)     # the secret really went out
    server.rejecting = True                           # from now on a 400 that quotes the request's last message
    server.calling = ("lookup", {"query": "..."})     # a tool call first, its arguments a JSON object
    server.stop()
"""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

REPLY = "Your order is on its way. TERMINATE"


class ModelServer:
    """Answers every ``POST .../chat/completions`` with one short completion, and keeps the headers; or, while
    ``rejecting``, refuses it (or a ``POST .../responses``) with an error that quotes the request's last message,
    as a provider's content filter or validation does."""

    def __init__(self, model: str = "gpt-4o-mini") -> None:
        self.model = model  # the model the answers say they come from
        self.rejecting = False
        # A tool to call, with its arguments as a JSON object rather than the string OpenAI sends, as some
        # OpenAI-compatible gateways answer: asked while the conversation's last message is no tool's result.
        self.calling: tuple[str, dict[str, Any]] | None = None
        self.headers: list[dict[str, str]] = []
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._server.daemon_threads = True
        threading.Thread(target=self._server.serve_forever, daemon=True).start()

    @property
    def base_url(self) -> str:
        """The ``base_url`` an OpenAI client takes."""
        return f"http://127.0.0.1:{self._server.server_address[1]}/v1"

    def saw(self, header: str, value: str) -> bool:
        """Whether some request carried ``header`` with ``value`` in it."""
        with self._lock:
            return any(value in h.get(header.lower(), "") for h in self.headers)

    def stop(self) -> None:
        """Stop serving."""
        self._server.shutdown()
        self._server.server_close()

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                request = json.loads(self.rfile.read(int(self.headers.get("Content-Length", "0") or 0)) or b"{}")
                with server._lock:
                    server.headers.append({k.lower(): v for k, v in self.headers.items()})
                if server.rejecting:  # the last message of a chat completion, or of a response's input
                    last = (request.get("messages") or request.get("input") or [{}])[-1]
                    said = last.get("content", "") if isinstance(last, dict) else last
                    self._answer(400, {"error": {"message": f"provider rejected request: {said}",
                                                 "type": "invalid_request_error"}})
                    return
                last = (request.get("messages") or [{}])[-1]
                if server.calling is not None and last.get("role") != "tool":
                    name, arguments = server.calling
                    message: dict[str, Any] = {"role": "assistant", "content": None, "tool_calls": [
                        {"id": "call-1", "type": "function", "function": {"name": name, "arguments": arguments}}]}
                    finish = "tool_calls"
                else:
                    message, finish = {"role": "assistant", "content": REPLY}, "stop"
                self._answer(200, {
                    "id": "chatcmpl-canary", "object": "chat.completion", "created": int(time.time()),
                    "model": server.model,
                    "choices": [{"index": 0, "finish_reason": finish, "message": message}],
                    "usage": {"prompt_tokens": 21, "completion_tokens": 9, "total_tokens": 30},
                })

            def _answer(self, status: int, document: dict[str, Any]) -> None:
                body = json.dumps(document).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:
                return

        return Handler
