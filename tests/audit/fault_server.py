"""An HTTP endpoint that misbehaves like S3 can: answers 403 AccessDenied, answers too slowly, hangs, or
drops the connection half-way through an object it is sending; and a proxy in front of a real one that
lets an upload land late.

Used where moto cannot reproduce the fault (moto's server does not enforce bucket policies); boto3 still
talks real HTTP to it, so the client, its timeouts and its error parsing are what is tested.
"""

from __future__ import annotations

import http.client
import re
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import urlsplit


def refusal(code: str = "AccessDenied", message: str = "Access Denied") -> bytes:
    """S3's error document for ``code``."""
    return (f'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>{code}</Code><Message>{message}</Message>'
            "<RequestId>T1</RequestId></Error>").encode()


DENIED = refusal()


class _LocalServer:
    """An HTTP server on a free local port, serving in a daemon thread; ``released`` lets held
    requests go, and is set by :meth:`stop`."""

    def __init__(self) -> None:
        self.released = threading.Event()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._server.daemon_threads = True
        threading.Thread(target=self._server.serve_forever, daemon=True).start()

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def stop(self) -> None:
        self.released.set()
        self._server.shutdown()
        self._server.server_close()

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        raise NotImplementedError


class FaultServer(_LocalServer):
    """``mode`` is ``"deny"`` (403 with ``refused``, AccessDenied's document by default), ``"slow"`` (sleep
    ``delay`` seconds, then 200), ``"hang"`` (answer nothing until :meth:`stop`) or ``"truncate"`` (promise an
    object, send a few bytes, hang up)."""

    def __init__(self, mode: str, delay: float = 3.0, refused: bytes = DENIED) -> None:
        self.mode = mode
        self.delay = delay
        self.refused = refused
        self.requests = 0
        super().__init__()

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            def _answer(self) -> None:
                server.requests += 1
                length = int(self.headers.get("Content-Length", "0") or 0)
                if length:
                    self.rfile.read(length)
                if server.mode == "truncate":
                    self._truncated()
                    return
                if server.mode == "hang":
                    server.released.wait()
                    return
                if server.mode == "slow":
                    time.sleep(server.delay)
                    status, payload = 200, b""
                else:
                    status, payload = 403, server.refused
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", "application/xml")
                    self.send_header("Content-Length", str(len(payload)))
                    self.end_headers()
                    self.wfile.write(payload)
                except OSError:
                    pass  # the client gave up (timeout): nothing to answer

            def _truncated(self) -> None:
                self.send_response(200)
                self.send_header("Content-Type", "application/gzip")
                self.send_header("Content-Length", "100000")
                self.end_headers()
                self.wfile.write(b"\x1f\x8b" + b"\x00" * 64)
                self.wfile.flush()
                self.close_connection = True  # the connection drops mid-object

            do_PUT = do_GET = do_POST = do_HEAD = _answer

            def log_message(self, format: str, *args: Any) -> None:
                return

        return Handler


class HoldingProxy(_LocalServer):
    """Forwards every request to a real S3 endpoint (moto's server), but holds each object PUT, its body
    received, until :meth:`release`: an upload that reaches S3 and lands long after its client gave up
    waiting, when the test says so. With ``refuse_deletes`` set to an error code, it answers every
    ``DeleteObjects`` itself, refusing each version with that code (S3's per-key errors)."""

    def __init__(self, upstream: str, refuse_deletes: str | None = None) -> None:
        self.upstream = urlsplit(upstream)
        self.refuse_deletes = refuse_deletes
        self.arrived = threading.Event()
        self.landed = threading.Event()
        super().__init__()

    def release(self) -> None:
        self.released.set()

    def _forward(self, method: str, path: str, headers: dict[str, str], body: bytes) -> tuple[int, list[Any], bytes]:
        if method == "POST" and self.refuse_deletes and "?delete" in path:
            return 200, [("Content-Type", "application/xml")], self._refused(body)
        held = method == "PUT" and "/runs/" in path
        if held:
            self.arrived.set()
            self.released.wait(timeout=30)
        conn = http.client.HTTPConnection(self.upstream.hostname or "127.0.0.1", self.upstream.port, timeout=30)
        try:
            conn.request(method, path, body=body, headers=headers)
            response = conn.getresponse()
            answer = response.status, response.getheaders(), response.read()
        finally:
            conn.close()
        if held:
            self.landed.set()
        return answer

    def _refused(self, request: bytes) -> bytes:
        objects = re.findall(rb"<Object><Key>(.*?)</Key>(?:<VersionId>(.*?)</VersionId>)?</Object>", request)
        errors = b"".join(
            b"<Error><Key>%s</Key><VersionId>%s</VersionId><Code>%s</Code><Message>refused</Message></Error>"
            % (key, version, (self.refuse_deletes or "").encode())
            for key, version in objects
        )
        return b'<?xml version="1.0" encoding="UTF-8"?><DeleteResult>%s</DeleteResult>' % errors

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def _relay(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", "0") or 0))
                headers = {k: v for k, v in self.headers.items() if k.lower() not in ("expect", "connection")}
                status, answer_headers, answer = proxy._forward(self.command, self.path, headers, body)
                self.send_response(status)
                for name, value in answer_headers:
                    if name.lower() not in ("content-length", "connection", "transfer-encoding", "server", "date"):
                        self.send_header(name, value)
                self.send_header("Content-Length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

            do_PUT = do_GET = do_POST = do_HEAD = do_DELETE = _relay

            def log_message(self, format: str, *args: Any) -> None:
                return

        return Handler
