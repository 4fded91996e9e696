"""The choice of where the test services come from: Docker where an engine answers, local binaries otherwise.

No Docker engine runs here: "an engine that answers" is a stand-in (:mod:`tests.docker_engine`) answering the
Engine API calls testcontainers makes, its containers' published ports forwarded to services running here, so
the container path runs end to end (create, readiness checks, published port, removal) without Docker.
"""

from __future__ import annotations

import importlib.metadata
import os
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from tests.docker_engine import FakeDockerEngine
from tests.services import Choice, Services, ServicesError, ServiceUnavailable, decide, free_port

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def engine() -> Iterator[FakeDockerEngine]:
    found = FakeDockerEngine()
    yield found
    found.stop()


def closed_port() -> str:
    return f"tcp://127.0.0.1:{free_port()}"


def test_auto_chooses_the_local_services_when_no_docker_engine_answers() -> None:
    host = closed_port()
    choice = decide({"DOCKER_HOST": host})
    assert choice.mode == "local"
    assert f"no Docker engine answered at {host}" in choice.reason


def test_auto_is_the_default_and_chooses_docker_when_an_engine_answers_its_ping(engine: FakeDockerEngine) -> None:
    choice = decide({"DOCKER_HOST": engine.host})
    assert choice == Choice("docker", f"TEAMSTORE_TEST_SERVICES=auto: a Docker engine answered at {engine.host}")
    assert "GET /_ping" in engine.paths


def test_docker_forced_without_an_engine_fails_saying_how_to_use_the_local_binaries() -> None:
    host = closed_port()
    with pytest.raises(ServicesError, match=f"TEAMSTORE_TEST_SERVICES=docker, but no Docker engine answered at {host}"
                       ) as refused:
        decide({"TEAMSTORE_TEST_SERVICES": "docker", "DOCKER_HOST": host})
    assert "set TEAMSTORE_TEST_SERVICES=local" in str(refused.value)


def test_docker_forced_with_an_engine_chooses_docker(engine: FakeDockerEngine) -> None:
    assert decide({"TEAMSTORE_TEST_SERVICES": "docker", "DOCKER_HOST": engine.host}).mode == "docker"


def test_local_forced_never_asks_docker(engine: FakeDockerEngine) -> None:
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


# --- the container path, on the stand-in engine ----------------------------------------------------------
StandIn = Callable[..., FakeDockerEngine]


@pytest.fixture
def stand_in(monkeypatch: pytest.MonkeyPatch) -> Iterator[StandIn]:
    """Start a stand-in engine (``FakeDockerEngine``'s arguments) and point testcontainers at it."""
    from testcontainers.core.config import ConnectionMode
    from testcontainers.core.config import testcontainers_config as config

    # Ryuk (the reaper) keeps a socket open to a container of its own, which the stand-in does not run; the
    # published ports are on loopback as an engine on this machine publishes them, so testcontainers is told
    # so instead of looking for the network of the container these tests may themselves run in.
    monkeypatch.setattr(config, "ryuk_disabled", True)
    monkeypatch.setattr(config, "connection_mode_override", ConnectionMode.docker_host)
    monkeypatch.setattr(config, "tc_host_override", None)
    monkeypatch.setattr(config, "tc_properties", {})
    engines: list[FakeDockerEngine] = []

    def start(publish: dict[int, tuple[str, int]] | None = None, refuse_create: bool = False) -> FakeDockerEngine:
        engines.append(FakeDockerEngine(publish, refuse_create))
        monkeypatch.setenv("DOCKER_HOST", engines[-1].host)
        return engines[-1]

    yield start
    for found in engines:
        found.stop()


def _address(url: str) -> tuple[str, int]:
    parts = urlsplit(url)
    assert parts.hostname and parts.port, url
    return parts.hostname, parts.port


@pytest.mark.postgres
def test_with_docker_chosen_postgres_is_a_postgres_16_container_the_tests_reach_on_its_published_port(
    stand_in: StandIn, postgres_server: str
) -> None:
    import psycopg

    engine = stand_in(publish={5432: _address(postgres_server)})  # what answers inside "the container"
    services = Services(decide({"DOCKER_HOST": engine.host}), database_url_variable="UNSET", environ={})
    url = services.url("postgres")
    with psycopg.connect(url, connect_timeout=5) as conn:
        assert conn.execute("SELECT 1").fetchone() == (1,)
    (created,) = engine.created
    assert created["Image"] == "postgres:16"
    assert {"POSTGRES_USER=postgres", "POSTGRES_PASSWORD=postgres"} <= set(created["Env"])
    assert created["Cmd"][:1] == ["postgres"] and "logging_collector=on" in created["Cmd"]
    assert "fsync=off" in created["Cmd"]  # the tests keep nothing; the benchmarks ask for durable
    assert url.startswith("postgresql://postgres:postgres@") and "+" not in url.split(":", 1)[0]
    services.close()
    assert len(engine.removed) == 1


@pytest.mark.s3
def test_the_fresh_moto_answers_its_data_page_after_this_process_deleted_a_bucket_whose_object_was_deleted(
    s3_endpoint: str, fresh_moto: str
) -> None:
    import urllib.request

    import boto3

    client = boto3.client("s3", endpoint_url=s3_endpoint, region_name="us-east-1", aws_access_key_id="testing",
                          aws_secret_access_key="testing")
    client.create_bucket(Bucket="gone-before-the-check")
    client.put_object(Bucket="gone-before-the-check", Key="k", Body=b"x")
    client.delete_object(Bucket="gone-before-the-check", Key="k")
    client.delete_bucket(Bucket="gone-before-the-check")
    with urllib.request.urlopen(f"{fresh_moto}/moto-api/data.json", timeout=30) as page:
        assert page.status == 200


@pytest.mark.s3
def test_with_docker_chosen_s3_is_moto_s_image_at_the_installed_version_waited_for_over_http(
    stand_in: StandIn, fresh_moto: str
) -> None:
    import boto3

    engine = stand_in(publish={5000: _address(fresh_moto)})
    services = Services(decide({"DOCKER_HOST": engine.host}), database_url_variable="UNSET", environ={})
    endpoint = services.url("aws")
    client = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1", aws_access_key_id="testing",
                          aws_secret_access_key="testing")
    client.create_bucket(Bucket="through-the-container")
    assert "through-the-container" in [b["Name"] for b in client.list_buckets()["Buckets"]]
    (created,) = engine.created
    assert created["Image"] == f"motoserver/moto:{importlib.metadata.version('moto')}"
    assert "5000/tcp" in created["ExposedPorts"]
    services.close()
    assert len(engine.removed) == 1


def test_a_container_the_engine_cannot_create_is_an_unavailable_service_saying_how_to_use_the_local_binaries(
    stand_in: StandIn,
) -> None:
    engine = stand_in(refuse_create=True)
    services = Services(decide({"DOCKER_HOST": engine.host}), database_url_variable="UNSET", environ={})
    with pytest.raises(ServiceUnavailable, match="postgres:16 did not start on the Docker engine") as refused:
        services.url("postgres")
    assert "no space left on device" in str(refused.value)
    assert "set TEAMSTORE_TEST_SERVICES=local" in str(refused.value)
    services.close()


def _pytest(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    """pytest in a new process on this suite's services plugin, with ``env`` on top of this environment."""
    return subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *args],
                          cwd=ROOT, capture_output=True, text=True, timeout=120, env={**os.environ, **env})


def test_a_test_run_prints_its_choice_in_the_header() -> None:
    done = _pytest("--collect-only", "tests/test_services.py", TEAMSTORE_TEST_SERVICES="local")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "teamstore services: local (TEAMSTORE_TEST_SERVICES=local)" in done.stdout


def test_a_test_run_where_an_engine_answers_chooses_docker_by_default(engine: FakeDockerEngine) -> None:
    done = _pytest("--collect-only", "tests/test_services.py", TEAMSTORE_TEST_SERVICES="", DOCKER_HOST=engine.host,
                   TEAMSTORE_TEST_DATABASE_URL="")  # collecting starts nothing: the header says what would start
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"teamstore services: docker (TEAMSTORE_TEST_SERVICES=auto: a Docker engine answered at {engine.host})" \
        in done.stdout
    assert "postgres: container postgres:16; aws: container motoserver/moto" in done.stdout


def test_a_test_run_with_docker_forced_and_no_engine_stops_before_any_test_saying_why() -> None:
    host = closed_port()
    done = _pytest("--collect-only", "tests/test_services.py", TEAMSTORE_TEST_SERVICES="docker", DOCKER_HOST=host)
    assert done.returncode == pytest.ExitCode.USAGE_ERROR
    assert f"TEAMSTORE_TEST_SERVICES=docker, but no Docker engine answered at {host}" in done.stderr
