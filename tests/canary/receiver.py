"""The OTLP/HTTP receiver of the test suite, taking metrics and logs too, so whatever is exported later
is searched the day it is.

    receiver = CanaryReceiver().start()
    env["OTEL_EXPORTER_OTLP_ENDPOINT"] = receiver.endpoint
    for path, body in receiver.all_bodies(): ...
"""

from __future__ import annotations

import gzip
import threading
from http.server import BaseHTTPRequestHandler
from typing import Any

from tests.otlp_receiver import OtlpReceiver


class CanaryReceiver(OtlpReceiver):
    """Decodes traces like :class:`OtlpReceiver`, and keeps the body of a post to any other path
    (``/v1/metrics``, ``/v1/logs``) as it came, answering it with an empty success."""

    def __init__(self) -> None:
        self.other: list[tuple[str, bytes]] = []
        self._other_lock = threading.Lock()
        super().__init__()

    def all_bodies(self) -> list[tuple[str, bytes]]:
        """Every body received, decompressed, with the path it was posted to."""
        with self._other_lock:
            other = list(self.other)
        return [("/v1/traces", body) for body in self._trace_bodies()] + other

    def _trace_bodies(self) -> list[bytes]:
        with self._lock:
            return list(self.bodies)

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                if self.headers.get("Content-Encoding") == "gzip":
                    body = gzip.decompress(body)
                path = self.path.rstrip("/")
                if path == "/v1/traces":
                    receiver._record(body)
                else:
                    with receiver._other_lock:
                        receiver.other.append((path, body))
                self.send_response(200)  # an empty protobuf message is a full success of every kind
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, format: str, *args: Any) -> None:
                return

        return Handler
