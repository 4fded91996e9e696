"""The choice of where the test services come from: Docker where an engine answers, local binaries otherwise.

No Docker engine runs here: "an engine that answers" is a small HTTP server answering the two requests the
docker client makes before anything else (``/version``, ``/_ping``); no container is started.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from tests.services import Choice, Services, ServicesError, decide, free_port

ROOT = Path(__file__).resolve().parent.parent


class FakeEngine:
    """Answers a Docker client's version query and ping, and records every path it was asked."""

    def __init__(self) -> None:
        self.paths: list[str] = []
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        threading.Thread(target=self._server.serve_forever, args=(0.05,), daemon=True).start()

    @property
    def host(self) -> str:
        return f"tcp://127.0.0.1:{self._server.server_address[1]}"

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        engine = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                engine.paths.append(self.path)
                if self.path.endswith("/_ping"):
                    self._reply(b"OK", "text/plain")
                elif self.path.endswith("/version"):
                    self._reply(json.dumps({"ApiVersion": "1.44", "Version": "25.0.0"}).encode(), "application/json")
                else:
                    self.send_error(404)

            def _reply(self, body: bytes, kind: str) -> None:
                self.send_response(200)
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:
                return

        return Handler


@pytest.fixture
def engine() -> Iterator[FakeEngine]:
    found = FakeEngine()
    yield found
    found.stop()


def closed_port() -> str:
    return f"tcp://127.0.0.1:{free_port()}"


def test_auto_chooses_the_local_services_when_no_docker_engine_answers() -> None:
    host = closed_port()
    choice = decide({"DOCKER_HOST": host})
    assert choice.mode == "local"
    assert f"no Docker engine answered at {host}" in choice.reason


def test_auto_is_the_default_and_chooses_docker_when_an_engine_answers_its_ping(engine: FakeEngine) -> None:
    choice = decide({"DOCKER_HOST": engine.host})
    assert choice == Choice("docker", f"TEAMSTORE_TEST_SERVICES=auto: a Docker engine answered at {engine.host}")
    assert any(path.endswith("/_ping") for path in engine.paths)


def test_docker_forced_without_an_engine_fails_saying_how_to_use_the_local_binaries() -> None:
    host = closed_port()
    with pytest.raises(ServicesError, match=f"TEAMSTORE_TEST_SERVICES=docker, but no Docker engine answered at {host}"
                       ) as refused:
        decide({"TEAMSTORE_TEST_SERVICES": "docker", "DOCKER_HOST": host})
    assert "set TEAMSTORE_TEST_SERVICES=local" in str(refused.value)


def test_docker_forced_with_an_engine_chooses_docker(engine: FakeEngine) -> None:
    assert decide({"TEAMSTORE_TEST_SERVICES": "docker", "DOCKER_HOST": engine.host}).mode == "docker"


def test_local_forced_never_asks_docker(engine: FakeEngine) -> None:
    choice = decide({"TEAMSTORE_TEST_SERVICES": "local", "DOCKER_HOST": engine.host})
    assert choice == Choice("local", "TEAMSTORE_TEST_SERVICES=local")
    assert engine.paths == []


def test_an_engine_that_never_answers_does_not_hold_the_session_up() -> None:
    with socket.socket() as silent:  # connections complete in the backlog; nothing ever replies
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        started = time.monotonic()
        choice = decide({"DOCKER_HOST": f"tcp://127.0.0.1:{silent.getsockname()[1]}"}, timeout=0.5)
    assert choice.mode == "local"
    assert time.monotonic() - started < 5


def test_an_unknown_choice_is_refused_naming_the_choices() -> None:
    with pytest.raises(ServicesError, match="'podman' is not a choice: set it to one of auto, docker, local"):
        decide({"TEAMSTORE_TEST_SERVICES": "podman"})


def test_a_given_database_url_is_used_whatever_the_choice_and_starts_nothing() -> None:
    given = "postgresql://postgres@127.0.0.1:1/postgres"
    services = Services(Choice("docker", "forced"), database_url_variable="DB", environ={"DB": given})
    assert services.url("postgres") == given  # no engine here: a container start would have failed
    services.close()


def test_the_header_names_the_choice_and_where_each_service_comes_from_without_the_url() -> None:
    services = Services(Choice("local", "TEAMSTORE_TEST_SERVICES=local"), database_url_variable="DB",
                        environ={"DB": "postgresql://postgres:secret@db/postgres"})
    header = services.describe()
    assert header[0] == "teamstore services: local (TEAMSTORE_TEST_SERVICES=local)"
    assert "postgres: DB (given); aws: moto's server in this process; otlp: a receiver in this process" in header[1]
    assert "secret" not in "".join(header)
    docker = Services(Choice("docker", "an engine answered"), database_url_variable="DB", environ={}).describe()
    assert "postgres: container postgres:16; aws: container motoserver/moto" in docker[1]


def _pytest(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    """pytest in a new process on this suite's services plugin, with ``env`` on top of this environment."""
    return subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *args],
                          cwd=ROOT, capture_output=True, text=True, timeout=120, env={**os.environ, **env})


def test_a_test_run_prints_its_choice_in_the_header() -> None:
    done = _pytest("--collect-only", "tests/test_services.py", TEAMSTORE_TEST_SERVICES="local")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "teamstore services: local (TEAMSTORE_TEST_SERVICES=local)" in done.stdout


def test_a_test_run_with_docker_forced_and_no_engine_stops_before_any_test_saying_why() -> None:
    host = closed_port()
    done = _pytest("--collect-only", "tests/test_services.py", TEAMSTORE_TEST_SERVICES="docker", DOCKER_HOST=host)
    assert done.returncode == pytest.ExitCode.USAGE_ERROR
    assert f"TEAMSTORE_TEST_SERVICES=docker, but no Docker engine answered at {host}" in done.stderr
