"""An HTTP endpoint that misbehaves like S3 can: answers 403 AccessDenied, answers too slowly, hangs, or
drops the connection half-way through an object it is sending.

Used where moto cannot reproduce the fault (moto's server does not enforce bucket policies); boto3 still
talks real HTTP to it, so the client, its timeouts and its error parsing are what is tested.
"""

from __future__ import annotations

import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

DENIED = (
    b'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>AccessDenied</Code>'
    b"<Message>Access Denied</Message><RequestId>T1</RequestId></Error>"
)


class FaultServer:
    """``mode`` is ``"deny"`` (403 AccessDenied), ``"slow"`` (sleep ``delay`` seconds, then 200), ``"hang"``
    (answer nothing until :meth:`stop`) or ``"truncate"`` (promise an object, send a few bytes, hang up)."""

    def __init__(self, mode: str, delay: float = 3.0) -> None:
        self.mode = mode
        self.delay = delay
        self.requests = 0
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
                    status, payload = 403, DENIED
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
