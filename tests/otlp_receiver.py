"""Real OTLP receivers for tests, decoding the protobuf the exporters send: over HTTP (``/v1/traces`` and
``/v1/metrics``) and over gRPC (the collector's ``TraceService`` and ``MetricsService``).

receiver = OtlpReceiver().start()            # or GrpcOtlpReceiver().start()
os.environ["OTEL_EXPORTER_OTLP_ENDPOINT"] = receiver.endpoint
...
spans = receiver.wait_for(lambda spans: len(spans) >= 2)
points = receiver.wait_for_metrics(lambda points: any(p["name"] == "gen_ai.client.token.usage" for p in points))
assert b"CANARY" not in receiver.wire()
receiver.stop()
"""

from __future__ import annotations

import gzip
import threading
import time
from collections.abc import Callable
from concurrent import futures
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from opentelemetry.proto.collector.metrics.v1 import metrics_service_pb2_grpc
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
    ExportMetricsServiceResponse,
)
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2_grpc
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue

Point = dict[str, Any]


def _value(value: AnyValue) -> Any:
    kind = value.WhichOneof("value")
    if kind == "array_value":
        return [_value(v) for v in value.array_value.values]
    if kind == "kvlist_value":
        return {kv.key: _value(kv.value) for kv in value.kvlist_value.values}
    return getattr(value, kind) if kind else None


def _attributes(pairs: Any) -> dict[str, Any]:
    return {kv.key: _value(kv.value) for kv in pairs}


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
        "attributes": _attributes(span.attributes),
        "events": [{"name": e.name, "attributes": _attributes(e.attributes)} for e in span.events],
        "status_message": span.status.message,
    }


def _points(resource: dict[str, Any], scope: str, metric: Any) -> list[Point]:
    """One entry per data point: its metric's name, unit and kind, its attributes and its value (a sum or
    gauge's ``value``; a histogram's ``count``, ``sum`` and ``bounds``)."""
    kind = metric.WhichOneof("data")
    found = []
    for point in getattr(metric, kind).data_points:
        entry: Point = {"name": metric.name, "unit": metric.unit, "kind": kind, "scope": scope, "resource": resource,
                        "attributes": _attributes(point.attributes)}
        if kind == "histogram":
            entry.update(count=point.count, sum=point.sum, bounds=list(point.explicit_bounds))
        else:
            entry["value"] = point.as_int if point.WhichOneof("value") == "as_int" else point.as_double
        found.append(entry)
    return found


class _Collected:
    """What a receiver was sent, decoded, whichever transport brought it."""

    def __init__(self) -> None:
        self.spans: list[dict[str, Any]] = []
        self.metrics: list[Point] = []
        self.bodies: list[bytes] = []  # trace requests, as received
        self.metric_bodies: list[bytes] = []
        self._lock = threading.Lock()

    def wire(self) -> bytes:
        """Every request body received (traces and metrics), decompressed, concatenated."""
        with self._lock:
            return b"".join(self.bodies + self.metric_bodies)

    def wait_for(
        self, predicate: Callable[[list[dict[str, Any]]], bool], timeout: float = 10.0
    ) -> list[dict[str, Any]]:
        """Wait until ``predicate(spans)`` holds; return the spans (raises AssertionError on timeout)."""
        return self._wait(lambda: self.spans, predicate, timeout, "spans")

    def wait_for_metrics(self, predicate: Callable[[list[Point]], bool], timeout: float = 10.0) -> list[Point]:
        """Wait until ``predicate(points)`` holds over every metric data point received; return them."""
        return self._wait(lambda: self.metrics, predicate, timeout, "metric points")

    def _wait(self, items: Callable[[], list[Any]], predicate: Callable[[list[Any]], bool], timeout: float,
              what: str) -> list[Any]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self._lock:
                found = list(items())
            if predicate(found):
                return found
            time.sleep(0.05)
        raise AssertionError(f"OTLP receiver: condition not met within {timeout}s; got {len(items())} {what}")

    def _record(self, body: bytes) -> None:
        request = ExportTraceServiceRequest()
        request.ParseFromString(body)
        found = []
        for resource_spans in request.resource_spans:
            resource = _attributes(resource_spans.resource.attributes)
            for scope_spans in resource_spans.scope_spans:
                found.extend(_span(resource, scope_spans.scope.name, s) for s in scope_spans.spans)
        with self._lock:
            self.bodies.append(body)
            self.spans.extend(found)

    def _record_metrics(self, body: bytes) -> None:
        request = ExportMetricsServiceRequest()
        request.ParseFromString(body)
        found = []
        for resource_metrics in request.resource_metrics:
            resource = _attributes(resource_metrics.resource.attributes)
            for scope_metrics in resource_metrics.scope_metrics:
                for metric in scope_metrics.metrics:
                    found.extend(_points(resource, scope_metrics.scope.name, metric))
        with self._lock:
            self.metric_bodies.append(body)
            self.metrics.extend(found)


class OtlpReceiver(_Collected):
    """An OTLP/HTTP receiver: collects every span posted to ``/v1/traces`` and every metric posted to
    ``/v1/metrics``, and keeps the raw request bodies."""

    def __init__(self) -> None:
        super().__init__()
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

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        receiver = self
        routes = {
            "/v1/traces": (receiver._record, ExportTraceServiceResponse),
            "/v1/metrics": (receiver._record_metrics, ExportMetricsServiceResponse),
        }

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                if self.headers.get("Content-Encoding") == "gzip":
                    body = gzip.decompress(body)
                route = routes.get(self.path.rstrip("/"))
                if route is None:
                    self.send_response(404)
                    self.end_headers()
                    return
                record, response = route
                record(body)
                reply = response().SerializeToString()
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(reply)))
                self.end_headers()
                self.wfile.write(reply)

            def log_message(self, format: str, *args: Any) -> None:
                return

        return Handler


class GrpcOtlpReceiver(_Collected):
    """An OTLP/gRPC receiver: a grpcio server implementing the collector's ``TraceService`` and
    ``MetricsService`` on a loopback port, without TLS (the exporter's ``http://`` endpoint means insecure)."""

    def __init__(self) -> None:
        import grpc

        super().__init__()
        self._server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        receiver = self

        class Traces(trace_service_pb2_grpc.TraceServiceServicer):
            def Export(self, request: ExportTraceServiceRequest, context: Any) -> ExportTraceServiceResponse:
                receiver._record(request.SerializeToString())
                return ExportTraceServiceResponse()

        class Metrics(metrics_service_pb2_grpc.MetricsServiceServicer):
            def Export(self, request: ExportMetricsServiceRequest, context: Any) -> ExportMetricsServiceResponse:
                receiver._record_metrics(request.SerializeToString())
                return ExportMetricsServiceResponse()

        trace_service_pb2_grpc.add_TraceServiceServicer_to_server(Traces(), self._server)
        metrics_service_pb2_grpc.add_MetricsServiceServicer_to_server(Metrics(), self._server)
        self._port = self._server.add_insecure_port("127.0.0.1:0")

    @property
    def endpoint(self) -> str:
        """The URL to put in ``OTEL_EXPORTER_OTLP_ENDPOINT`` (with ``OTEL_EXPORTER_OTLP_PROTOCOL=grpc``)."""
        return f"http://127.0.0.1:{self._port}"

    def start(self) -> GrpcOtlpReceiver:
        """Serve on the server's own threads."""
        self._server.start()
        return self

    def stop(self) -> None:
        """Stop serving at once."""
        self._server.stop(grace=None).wait(5)
