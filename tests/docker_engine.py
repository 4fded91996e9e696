"""A stand-in Docker engine: the few Engine API calls testcontainers makes to run a container, answered over
HTTP on a loopback port, with each container's published port forwarded to a service already running here.

    engine = FakeDockerEngine(publish={5432: ("127.0.0.1", 55432)})   # "postgres" = the local server
    os.environ["DOCKER_HOST"] = engine.host
    ...                                       # testcontainers creates, starts, waits for and removes containers
    engine.created[0]["Image"]                # what it asked the engine for
    engine.stop()

No Docker engine runs where the tests run; this one lets the container path of ``tests.services`` run end to
end (create, start, the readiness checks, the published port, remove) without one. Nothing is pulled or run:
what answers on a published port is whatever the test points it at.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import re
import socket
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

API_VERSION = "1.44"
VERSIONED = re.compile(r"^/v[0-9.]+")


class FakeDockerEngine:
    """Answers the version query, the ping, image and container calls and exec; records what it was asked.

    Args:
        publish: Container port -> the (host, port) a container's published port forwards to.
        refuse_create: Answer every container creation with a server error, as an engine out of disk does.
    """

    def __init__(self, publish: dict[int, tuple[str, int]] | None = None, refuse_create: bool = False) -> None:
        self.paths: list[str] = []
        self.created: list[dict[str, Any]] = []
        self.removed: list[str] = []
        self._publish = publish or {}
        self._refuse_create = refuse_create
        self._forwarders: dict[int, Forwarder] = {}
        self._ids = (f"{n:064x}" for n in itertools.count(1))
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._server.daemon_threads = True
        threading.Thread(target=self._server.serve_forever, args=(0.05,), daemon=True).start()

    @property
    def host(self) -> str:
        """The ``DOCKER_HOST`` that reaches this engine."""
        return f"tcp://127.0.0.1:{self._server.server_address[1]}"

    def stop(self) -> None:
        """Stop answering and forwarding."""
        self._server.shutdown()
        self._server.server_close()
        for forwarder in self._forwarders.values():
            forwarder.stop()

    def _ports(self) -> dict[str, list[dict[str, str]]]:
        """The published ports, as a container's inspection shows them; a forwarder is started on first use."""
        for port, target in self._publish.items():
            if port not in self._forwarders:
                self._forwarders[port] = Forwarder(target)
        return {f"{port}/tcp": [{"HostIp": "0.0.0.0", "HostPort": str(f.port)}] for port, f in self._forwarders.items()}

    def _answer(self, method: str, path: str, body: bytes) -> tuple[int, Any]:
        """The status and JSON body for one call (``None``: no body)."""
        routes: list[tuple[str, str, Callable[[re.Match[str]], tuple[int, Any]]]] = [
            ("GET", r"/_ping", lambda m: (200, "OK")),
            ("GET", r"/version", lambda m: (200, {"ApiVersion": API_VERSION, "Version": "25.0.0"})),
            ("GET", r"/images/(.+)/json", lambda m: (200, {"Id": "sha256:" + "0" * 64, "RepoTags": [m[1]]})),
            ("POST", r"/containers/create", lambda m: self._create(json.loads(body))),
            ("POST", r"/containers/(\w+)/start", lambda m: (204, None)),
            ("GET", r"/containers/(\w+)/json", lambda m: (200, self._inspect(m[1]))),
            ("GET", r"/containers/(\w+)/logs", lambda m: (200, b"")),  # read when a readiness check gives up
            ("POST", r"/containers/(\w+)/exec", lambda m: (201, {"Id": next(self._ids)})),
            ("POST", r"/exec/(\w+)/start", lambda m: (200, b"")),
            ("GET", r"/exec/(\w+)/json", lambda m: (200, {"ExitCode": 0, "Running": False})),
            ("DELETE", r"/containers/(\w+)", lambda m: self._remove(m[1])),
        ]
        for verb, pattern, answer in routes:
            if verb == method and (found := re.fullmatch(pattern, path)):
                return answer(found)
        return 404, {"message": f"the stand-in engine does not answer {method} {path}"}

    def _create(self, config: dict[str, Any]) -> tuple[int, Any]:
        self.created.append(config)
        if self._refuse_create:
            return 500, {"message": "no space left on device"}
        return 201, {"Id": next(self._ids), "Warnings": []}

    def _inspect(self, container: str) -> dict[str, Any]:
        return {"Id": container, "Name": "/stand-in", "State": {"Status": "running", "Running": True},
                "Config": self.created[-1] if self.created else {}, "HostConfig": {"NetworkMode": "default"},
                "NetworkSettings": {"Ports": self._ports()}}

    def _remove(self, container: str) -> tuple[int, Any]:
        self.removed.append(container)
        return 204, None

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        engine = self

        class Handler(BaseHTTPRequestHandler):
            def _serve(self) -> None:
                path = VERSIONED.sub("", self.path.split("?", 1)[0])
                engine.paths.append(f"{self.command} {path}")
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                status, answer = engine._answer(self.command, path, body)
                raw = answer if isinstance(answer, bytes) else b"" if answer is None else (
                    answer.encode() if isinstance(answer, str) else json.dumps(answer).encode())
                self.send_response(status)
                self.send_header("Content-Type", "text/plain" if isinstance(answer, str) else "application/json")
                self.send_header("Content-Length", str(len(raw)))
                self.end_headers()
                self.wfile.write(raw)

            do_GET = do_POST = do_DELETE = _serve

            def log_message(self, format: str, *args: Any) -> None:
                return

        return Handler


class Forwarder:
    """A published port: every connection to it is relayed to ``target``, as Docker's port proxy does."""

    def __init__(self, target: tuple[str, int]) -> None:
        self._target = target
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = int(self._listener.getsockname()[1])
        threading.Thread(target=self._accept, daemon=True).start()

    def stop(self) -> None:
        self._listener.close()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:  # the listener was closed: the engine stopped
                return
            upstream = socket.create_connection(self._target)
            for source, sink in ((client, upstream), (upstream, client)):
                threading.Thread(target=_relay, args=(source, sink), daemon=True).start()


def _relay(source: socket.socket, sink: socket.socket) -> None:
    """Copy ``source`` to ``sink`` until either side closes, then close both."""
    with source, sink:
        with contextlib.suppress(OSError):  # the other direction shut the pair: this copy is done too
            while data := source.recv(65536):
                sink.sendall(data)
        for end in (sink, source):  # wakes the other direction's recv, so both threads end
            with contextlib.suppress(OSError):  # already shut by the other direction
                end.shutdown(socket.SHUT_RDWR)
