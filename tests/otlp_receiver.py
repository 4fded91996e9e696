"""A real OTLP/HTTP trace receiver for tests: decodes the protobuf the exporter sends.

receiver = OtlpReceiver().start()
os.environ["OTEL_EXPORTER_OTLP_ENDPOINT"] = receiver.endpoint
...
spans = receiver.wait_for(lambda spans: len(spans) >= 2)
assert b"CANARY" not in receiver.wire()
receiver.stop()
"""

from __future__ import annotations

import gzip
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue


def _value(value: AnyValue) -> Any:
    kind = value.WhichOneof("value")
    if kind == "array_value":
        return [_value(v) for v in value.array_value.values]
    if kind == "kvlist_value":
        return {kv.key: _value(kv.value) for kv in value.kvlist_value.values}
    return getattr(value, kind) if kind else None


def _span(resource: dict[str, Any], scope: str, span: Any) -> dict[str, Any]:
    return {
        "name": span.name,
        "scope": scope,
        "resource": resource,
        "trace_id": span.trace_id.hex(),
        "span_id": span.span_id.hex(),
        "parent_span_id": span.parent_span_id.hex(),
        "start_ns": span.start_time_unix_nano,
        "end_ns": span.end_time_unix_nano,
        "attributes": {kv.key: _value(kv.value) for kv in span.attributes},
        "events": [
            {"name": e.name, "attributes": {kv.key: _value(kv.value) for kv in e.attributes}}
            for e in span.events
        ],
        "status_message": span.status.message,
    }


class OtlpReceiver:
    """Collects every span posted to ``/v1/traces`` and keeps the raw request bodies."""

    def __init__(self) -> None:
        self.spans: list[dict[str, Any]] = []
        self.bodies: list[bytes] = []
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def endpoint(self) -> str:
        """The base URL to put in ``OTEL_EXPORTER_OTLP_ENDPOINT``."""
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def start(self) -> OtlpReceiver:
        """Serve in a background thread."""
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving."""
        self._server.shutdown()
        self._server.server_close()

    def wire(self) -> bytes:
        """Every request body received, decompressed, concatenated."""
        with self._lock:
            return b"".join(self.bodies)

    def wait_for(
        self, predicate: Callable[[list[dict[str, Any]]], bool], timeout: float = 10.0
    ) -> list[dict[str, Any]]:
        """Wait until ``predicate(spans)`` holds; return the spans (raises AssertionError on timeout)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self._lock:
                spans = list(self.spans)
            if predicate(spans):
                return spans
            time.sleep(0.05)
        raise AssertionError(
            f"OTLP receiver: condition not met within {timeout}s; got {len(self.spans)} spans"
        )

    def _record(self, body: bytes) -> None:
        request = ExportTraceServiceRequest()
        request.ParseFromString(body)
        found = []
        for resource_spans in request.resource_spans:
            resource = {kv.key: _value(kv.value) for kv in resource_spans.resource.attributes}
            for scope_spans in resource_spans.scope_spans:
                found.extend(_span(resource, scope_spans.scope.name, s) for s in scope_spans.spans)
        with self._lock:
            self.bodies.append(body)
            self.spans.extend(found)

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                if self.headers.get("Content-Encoding") == "gzip":
                    body = gzip.decompress(body)
                if self.path.rstrip("/") != "/v1/traces":
                    self.send_response(404)
                    self.end_headers()
                    return
                receiver._record(body)
                reply = ExportTraceServiceResponse().SerializeToString()
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(reply)))
                self.end_headers()
                self.wfile.write(reply)

            def log_message(self, format: str, *args: Any) -> None:
                return

        return Handler
