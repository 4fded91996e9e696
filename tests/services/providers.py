"""Each service the tests need, from each source: a provider starts one and returns its URL.

    provider = PROVIDERS["postgres"]["docker"](Options(durable=False))
    url = provider.start()           # postgresql://postgres:postgres@127.0.0.1:32771/postgres
    provider.stop()

A new service is one entry in :data:`PROVIDERS`: a :class:`Provider` per mode. moto's server answers every
AWS API it mocks on one endpoint, so KMS (for encryption) needs none: point ``AWS_ENDPOINT_URL_KMS`` at the
``aws`` endpoint, as the S3 fixtures point ``AWS_ENDPOINT_URL_S3``.

The ``docker`` providers follow testcontainers' documented API (``DockerContainer``, ``PostgresContainer``,
``HttpWaitStrategy``); testcontainers' reaper removes their containers if the process dies before ``stop``.
"""

from __future__ import annotations

import importlib.metadata
import os
import subprocess
from abc import ABC, abstractmethod
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from tests.services.choice import Mode
from tests.services.common import ServiceUnavailable, free_port

ROOT = Path(__file__).resolve().parents[2]
POSTGRES_IMAGE = "postgres:16"
MOTO_PORT = 5000


@dataclass(frozen=True)
class Options:
    """What the caller asks of its services."""

    durable: bool = False
    """Postgres with fsync on, as in production (the benchmarks); tests keep nothing and run with it off."""


class Provider(ABC):
    """One service from one source; ``about`` says which, in the session header."""

    about: ClassVar[str]

    def __init__(self, options: Options) -> None:
        self.options = options

    @abstractmethod
    def start(self) -> str:
        """Start the service; its URL. Raises :class:`ServiceUnavailable` saying what to install or start."""

    @abstractmethod
    def stop(self) -> None:
        """End what :meth:`start` began."""


# --- local binaries and servers ----------------------------------------------------------------------------
class LocalPostgres(Provider):
    """``infra/postgres.sh``'s server from Debian's binaries; ``durable`` runs it on its own port with fsync."""

    about = "infra/postgres.sh (local server binaries)"

    def start(self) -> str:
        env = {**os.environ, "TEAMSTORE_PG_DURABLE": "1" if self.options.durable else "0"}
        try:
            done = subprocess.run([str(ROOT / "infra" / "postgres.sh"), "start"], capture_output=True, text=True,
                                  timeout=120, env=env, check=False)
        except (OSError, subprocess.SubprocessError) as exc:
            raise ServiceUnavailable(f"infra/postgres.sh could not run ({exc})") from exc
        for line in done.stdout.splitlines():
            if "TEAMSTORE_TEST_DATABASE_URL=" in line:
                return line.split("=", 1)[1].strip()
        raise ServiceUnavailable(f"no PostgreSQL: infra/postgres.sh failed ({done.stderr.strip() or done.returncode});"
                                 " apt-get install postgresql, set TEAMSTORE_TEST_DATABASE_URL, or run a Docker engine")

    def stop(self) -> None:
        """Left running on purpose: later runs reuse the server, ``infra/postgres.sh stop`` ends it."""


class MotoInProcess(Provider):
    """moto's server on a loopback port, in a thread of this process."""

    about = "moto's server in this process"
    _server: Any = None

    def start(self) -> str:
        try:
            from moto.server import ThreadedMotoServer
        except ImportError as exc:
            raise ServiceUnavailable("moto[server] is not installed: pip install -e '.[dev]'") from exc
        port = free_port()
        self._server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
        self._server.start()
        return f"http://127.0.0.1:{port}"

    def stop(self) -> None:
        if self._server is not None:
            self._server.stop()


# --- containers (testcontainers) ---------------------------------------------------------------------------
def postgres_flags(durable: bool) -> list[str]:
    """The container's server settings: ``infra/postgres.sh``'s, and the log in one file the tests read over
    SQL (``postgres_log``); on the container's stderr it could not be read."""
    flags = ["-c", "max_connections=200", "-c", "logging_collector=on",
             "-c", "log_rotation_age=0", "-c", "log_rotation_size=0"]
    return flags if durable else [*flags, "-c", "fsync=off"]


def moto_image() -> str:
    """moto's image at the version installed here: both modes serve the same S3."""
    return f"motoserver/moto:{importlib.metadata.version('moto')}"


class PostgresInDocker(Provider):
    """A ``postgres:16`` container; its superuser is ``postgres``, as on the local server."""

    about = f"container {POSTGRES_IMAGE}"
    _container: Any = None

    def start(self) -> str:
        from testcontainers.community.postgres import PostgresContainer

        container = PostgresContainer(POSTGRES_IMAGE, username="postgres", password="postgres",
                                      dbname="postgres", driver=None)
        self._container = _started(container.with_command(["postgres", *postgres_flags(self.options.durable)]))
        return str(container.get_connection_url())

    def stop(self) -> None:
        if self._container is not None:
            self._container.stop()


class MotoInDocker(Provider):
    """A ``motoserver/moto`` container (moto's server listens on port 5000 in its image)."""

    about = "container motoserver/moto"
    _container: Any = None

    def start(self) -> str:
        from testcontainers.core.container import DockerContainer
        from testcontainers.core.wait_strategies import HttpWaitStrategy

        container = DockerContainer(moto_image()).with_exposed_ports(MOTO_PORT)
        self._container = _started(container.waiting_for(HttpWaitStrategy(MOTO_PORT, "/moto-api/data.json")))
        return f"http://{container.get_container_host_ip()}:{container.get_exposed_port(MOTO_PORT)}"

    def stop(self) -> None:
        if self._container is not None:
            self._container.stop()


def _started(container: Any) -> Any:
    """``container`` started and ready; removed again, and :class:`ServiceUnavailable`, when it is not."""
    import docker
    import requests

    try:
        return container.start()
    except (docker.errors.DockerException, requests.RequestException, RuntimeError, TimeoutError) as exc:
        container.stop()
        raise ServiceUnavailable(f"{container.image} did not start on the Docker engine ({exc}); "
                                 "set TEAMSTORE_TEST_SERVICES=local to use the local binaries") from exc


PROVIDERS: dict[str, dict[Mode, type[Provider]]] = {
    "postgres": {"local": LocalPostgres, "docker": PostgresInDocker},
    # moto's server: S3 for the transcript stores, and every other AWS API moto mocks on the same endpoint.
    "aws": {"local": MotoInProcess, "docker": MotoInDocker},
}
