"""The pytest plugin of the services: the choice made once per session, and the fixtures that start them.

Loaded by ``tests/conftest.py`` (``pytest_plugins``). Fixtures: ``services``, ``postgres_server``,
``s3_endpoint``, ``s3_env``, ``s3_bucket``, ``fresh_moto``, ``otlp_receiver``, ``otlp_env``, ``otlp_protocol_env``.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator

import pytest

from tests.otlp_receiver import GrpcOtlpReceiver, OtlpReceiver
from tests.services.choice import decide
from tests.services.common import ServicesError, ServiceUnavailable, free_port, require_or_skip
from tests.services.session import Services

SERVICES = pytest.StashKey[Services]()


def pytest_configure(config: pytest.Config) -> None:
    """Choose the providers once, before any test: a forced ``docker`` without an engine stops the run here."""
    try:
        choice = decide(os.environ)
    except ServicesError as exc:
        raise pytest.UsageError(str(exc)) from exc
    config.stash[SERVICES] = Services(choice, database_url_variable="TEAMSTORE_TEST_DATABASE_URL")


def pytest_unconfigure(config: pytest.Config) -> None:
    """Stop what the session started."""
    if SERVICES in config.stash:
        config.stash[SERVICES].close()


def pytest_report_header(config: pytest.Config) -> list[str]:
    """The choice and where each service comes from, under pytest's own header lines."""
    return config.stash[SERVICES].describe()


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter, config: pytest.Config) -> None:
    """The choice again at the end when ``-q`` hid the header (``make test``): a CI log shows which it was."""
    if config.get_verbosity() < 0:
        terminalreporter.write_line(config.stash[SERVICES].describe()[0])


def _url(services: Services, name: str) -> str:
    try:
        return services.url(name)
    except ServiceUnavailable as exc:
        require_or_skip(str(exc))
        raise


@pytest.fixture(scope="session")
def services(request: pytest.FixtureRequest) -> Services:
    """The session's services (the providers chosen at start)."""
    return request.config.stash[SERVICES]


# --- PostgreSQL --------------------------------------------------------------------------------------------
@pytest.fixture(scope="session")
def postgres_server(services: Services) -> str:
    """The URL of a running PostgreSQL server as a superuser (sync driver form, ``postgresql://``):
    ``TEAMSTORE_TEST_DATABASE_URL``'s, else one the chosen provider starts."""
    return _url(services, "postgres")


# --- S3 over HTTP ------------------------------------------------------------------------------------------
@pytest.fixture(scope="session")
def s3_endpoint(services: Services) -> str:
    """moto's server (in this process, or its container): boto3 talks real HTTP to it."""
    return _url(services, "aws")


@pytest.fixture
def s3_env(s3_endpoint: str, monkeypatch: pytest.MonkeyPatch) -> str:
    """Standard AWS_* variables pointing boto3 at the test endpoint; returns the endpoint."""
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    monkeypatch.setenv("AWS_ENDPOINT_URL_S3", s3_endpoint)
    monkeypatch.setenv("AWS_ENDPOINT_URL", s3_endpoint)
    return s3_endpoint


@pytest.fixture
def fresh_moto() -> Iterator[str]:
    """A moto server in a process of its own, empty as a new container's (another S3 server: its buckets are
    not the suite's, whatever their names). The readiness check reads all of
    moto's data, and moto keeps its data per process, not per server: a server in this process would answer with
    the suite's writes, which can outlast the check's timeout, and with objects whose bucket a test has deleted,
    on which moto's data page fails."""
    port = free_port()
    server = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if server.poll() is not None or time.monotonic() > deadline:
                    raise
                time.sleep(0.1)
        yield f"http://127.0.0.1:{port}"
    finally:
        server.terminate()
        server.wait(timeout=30)


@pytest.fixture
def s3_bucket(s3_env: str) -> str:
    """A fresh, empty bucket on the test endpoint."""
    import boto3

    name = f"ts-{uuid.uuid4().hex[:12]}"
    boto3.client("s3").create_bucket(Bucket=name)
    return name


# --- KMS over HTTP: the same moto server ------------------------------------------------------------------
@pytest.fixture
def kms_key(s3_env: str, monkeypatch: pytest.MonkeyPatch) -> str:
    """A symmetric KMS key on moto's server over HTTP (``AWS_ENDPOINT_URL`` points boto3's KMS client at it as
    at S3), named by ``TEAMSTORE_KMS_KEY_ID``; returns its ARN."""
    import boto3

    arn: str = boto3.client("kms").create_key(Description="teamstore tests")["KeyMetadata"]["Arn"]
    monkeypatch.setenv("TEAMSTORE_KMS_KEY_ID", arn)
    return arn


# --- OTLP --------------------------------------------------------------------------------------------------
@pytest.fixture
def otlp_receiver(services: Services) -> Iterator[OtlpReceiver]:
    """A real OTLP/HTTP receiver on a loopback port, decoding the protobuf it receives."""
    with services.otlp(OtlpReceiver) as receiver:
        yield receiver


@pytest.fixture
def otlp_env(otlp_receiver: OtlpReceiver, monkeypatch: pytest.MonkeyPatch) -> OtlpReceiver:
    """Standard OTEL_* variables pointing the exporter at the receiver."""
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", otlp_receiver.endpoint)
    return otlp_receiver


@pytest.fixture(params=["http/protobuf", "grpc"])
def otlp_protocol_env(
    request: pytest.FixtureRequest, services: Services, monkeypatch: pytest.MonkeyPatch
) -> Iterator[OtlpReceiver | GrpcOtlpReceiver]:
    """A real receiver of each OTLP protocol (HTTP on /v1/*, gRPC's collector services), with the standard
    OTEL_* variables pointing the exporters at it over that protocol."""
    kind: type[OtlpReceiver | GrpcOtlpReceiver] = GrpcOtlpReceiver if request.param == "grpc" else OtlpReceiver
    with services.otlp(kind) as receiver:
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.endpoint)
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", request.param)
        yield receiver
