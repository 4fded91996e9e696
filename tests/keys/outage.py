"""A KMS endpoint that can go away: a proxy in front of moto's server that, switched off, cuts every connection
without an answer (as an unreachable KMS does), and switched on passes requests through again.

    proxy = Outage(kms_endpoint)
    monkeypatch.setenv("AWS_ENDPOINT_URL_KMS", proxy.endpoint)
    proxy.down = True     # every KMS request from now on fails to get an answer
"""

from __future__ import annotations

import http.client
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import urlsplit


class Outage:
    """A pass-through proxy to ``target`` that drops every request while :attr:`down`."""

    def __init__(self, target: str) -> None:
        self.down = False
        self.requests = 0
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
                if proxy.down:
                    self.close_connection = True
                    self.connection.close()  # no answer at all
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

        return Handler
