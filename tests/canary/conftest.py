"""Fixtures of the canary suite: a deployment on each database and transcript store, its receivers and
the canary book."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.canary.canaries import CanaryBook
from tests.canary.deployment import Deployment
from tests.canary.model_server import ModelServer
from tests.canary.receiver import CanaryReceiver
from tests.services import Services

DEPLOYMENTS = [
    pytest.param("sqlite+local", id="sqlite+local"),
    pytest.param("sqlite+s3", marks=pytest.mark.s3, id="sqlite+s3"),
    pytest.param("postgres+local", marks=pytest.mark.postgres, id="postgres+local"),
    pytest.param("postgres+s3", marks=[pytest.mark.postgres, pytest.mark.s3], id="postgres+s3"),
]


@pytest.fixture
def receiver(services: Services) -> Iterator[CanaryReceiver]:
    """The OTLP receiver teamstore's provider exports to."""
    with services.otlp(CanaryReceiver) as found:
        yield found


@pytest.fixture
def host_receiver(services: Services) -> Iterator[CanaryReceiver]:
    """The OTLP receiver a host service's own tracer provider exports to, beside teamstore's."""
    with services.otlp(CanaryReceiver) as found:
        yield found


@pytest.fixture
def model_server() -> Iterator[ModelServer]:
    """The gateway desk's OpenAI-compatible endpoint."""
    server = ModelServer()
    yield server
    server.stop()


@pytest.fixture
def book() -> CanaryBook:
    """The canaries one test plants."""
    return CanaryBook()


MakeDeployment = Callable[[str], Deployment]


@pytest.fixture
def make_deployment(request: pytest.FixtureRequest, tmp_path: Path, receiver: CanaryReceiver) -> MakeDeployment:
    """Build the deployment ``kind`` names (``sqlite+local``, ``postgres+s3`` ...), its services started."""

    def make(kind: str) -> Deployment:
        database, _, transcripts = kind.partition("+")
        url = server = endpoint = None
        if database == "postgres":
            url = request.getfixturevalue("postgres_url")
            server = request.getfixturevalue("postgres_server")
        if transcripts == "s3":
            endpoint = request.getfixturevalue("s3_endpoint")
        return Deployment(tmp_path / "home", receiver, database_url=url, server_url=server, s3_endpoint=endpoint)

    return make


@pytest.fixture(params=DEPLOYMENTS)
def deployment(request: pytest.FixtureRequest, make_deployment: MakeDeployment) -> Deployment:
    """The same scenario on SQLite and Postgres, with the local folder and S3."""
    return make_deployment(request.param)
