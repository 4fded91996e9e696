"""A KMS endpoint that can go away: a proxy in front of moto's server that, switched off, cuts every connection
without an answer (as an unreachable KMS does), and switched on passes requests through again. It also
answers chosen operations with the error real KMS gives (moto enforces neither a key's state nor IAM). Tests
take it, already in front of KMS, as the ``kms_outage`` fixture (``tests/keys/conftest.py``):

    kms_outage.down = True     # every KMS request from now on fails to get an answer
    kms_outage.answers = 2     # two more requests are answered, then it goes down
    kms_outage.refuse["Decrypt"] = "DisabledException"   # every Decrypt answered so, as KMS does for a disabled key
    kms_outage.unanswered.add("ListKeys")   # every ListKeys cut without an answer, the other operations answered
    kms_outage.slow["ListKeys"] = 6.0       # every ListKeys answered six seconds late
"""

from __future__ import annotations

import http.client
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import urlsplit


class Outage:
    """A pass-through proxy to ``target`` that drops every request while :attr:`down`."""

    def __init__(self, target: str) -> None:
        self.down = False
        self.requests = 0
        self.answers: int | None = None
        """How many more requests are answered before it goes down by itself (``None``: no limit)."""
        self.refuse: dict[str, str] = {}
        """KMS operation (``Decrypt``, ``CreateKey``, ...) -> the error code to answer it with."""
        self.unanswered: set[str] = set()
        """KMS operations whose requests are cut without an answer, as if KMS were down for them alone."""
        self.slow: dict[str, float] = {}
        """KMS operation -> how many seconds each of its requests waits before it is passed on."""
        self.target = urlsplit(target)
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._server.daemon_threads = True
        threading.Thread(target=self._server.serve_forever, daemon=True).start()

    @property
    def endpoint(self) -> str:
        """Where to point ``AWS_ENDPOINT_URL_KMS``."""
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def stop(self) -> None:
        """Stop serving."""
        self._server.shutdown()
        self._server.server_close()

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                proxy.requests += 1
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                if proxy.answers is not None:
                    proxy.down, proxy.answers = proxy.down or proxy.answers <= 0, proxy.answers - 1
                if proxy.down:
                    self.close_connection = True
                    self.connection.close()  # no answer at all
                    return
                operation = self.headers.get("X-Amz-Target", "").rpartition(".")[2]
                if operation in proxy.unanswered:
                    self.close_connection = True
                    self.connection.close()
                    return
                time.sleep(proxy.slow.get(operation, 0.0))
                if operation in proxy.refuse:
                    self._refuse(proxy.refuse[operation])
                    return
                upstream = http.client.HTTPConnection(proxy.target.hostname or "127.0.0.1", proxy.target.port, timeout=10)
                upstream.request("POST", self.path, body, {k: v for k, v in self.headers.items() if k.lower() != "host"})
                answer = upstream.getresponse()
                data = answer.read()
                self.send_response(answer.status)
                for key, value in answer.getheaders():
                    if key.lower() not in ("transfer-encoding", "connection", "content-length"):
                        self.send_header(key, value)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
                upstream.close()

            def _refuse(self, code: str) -> None:
                data = json.dumps({"__type": code, "message": f"refused by the test ({code})"}).encode()
                self.send_response(400)
                self.send_header("Content-Type", "application/x-amz-json-1.1")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        return Handler
