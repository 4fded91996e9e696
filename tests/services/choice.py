"""Where the test services come from: containers where a Docker engine answers, local binaries otherwise.

    choice = decide(os.environ)      # once per session (the pytest plugin, the benchmarks)
    choice.mode                      # "docker" or "local"
    choice.reason                    # why, for the session header

``TEAMSTORE_TEST_SERVICES`` forces it: ``auto`` (the default) asks the engine, ``docker`` fails when none
answers, ``local`` never asks.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

from tests.services.common import ServicesError

SETTING = "TEAMSTORE_TEST_SERVICES"
CHOICES = ("auto", "docker", "local")
PING_TIMEOUT = 3.0
"""Seconds the engine has to answer: an engine that hangs must not hold the session up."""

Mode = Literal["docker", "local"]


@dataclass(frozen=True)
class Choice:
    """The providers a session uses, and why (printed in pytest's header)."""

    mode: Mode
    reason: str


def decide(environ: Mapping[str, str], timeout: float = PING_TIMEOUT) -> Choice:
    """Choose the providers from ``TEAMSTORE_TEST_SERVICES`` and, unless ``local`` is forced, a ping.

    Args:
        environ: The environment to read (``os.environ``): the setting, ``DOCKER_HOST`` and docker's TLS
            variables.
        timeout: Seconds the engine has to answer.

    Returns:
        ``docker`` when forced or when an engine answered; ``local`` when forced or when none answered.

    Raises:
        ServicesError: The setting is not one of the choices, or ``docker`` is forced and no engine answered.
    """
    asked = environ.get(SETTING, "").strip().lower() or "auto"
    if asked not in CHOICES:
        raise ServicesError(f"{SETTING}={asked!r} is not a choice: set it to one of {', '.join(CHOICES)} "
                            "(auto uses Docker when an engine answers, the local binaries otherwise)")
    if asked == "local":
        return Choice("local", f"{SETTING}=local")
    problem = docker_problem(environ, timeout)
    if problem is None:
        return Choice("docker", f"{SETTING}={asked}: a Docker engine answered at {_where(environ)}")
    if asked == "docker":
        raise ServicesError(f"{SETTING}=docker, but {problem}. Start a Docker engine or point DOCKER_HOST at "
                            f"one, or set {SETTING}=local (or auto) to use the local binaries")
    return Choice("local", f"{SETTING}=auto: {problem}")


def docker_problem(environ: Mapping[str, str], timeout: float = PING_TIMEOUT) -> str | None:
    """Why the Docker engine cannot serve containers, or ``None`` when it answered the ping in time."""
    if importlib.util.find_spec("testcontainers") is None:
        return "testcontainers is not installed (pip install -e '.[dev]')"
    import docker
    import requests

    environment = _engine_environment(environ)
    where = environment.get("DOCKER_HOST") or "the default socket"
    try:
        client = docker.from_env(environment=environment, timeout=timeout)
    except docker.errors.DockerException as exc:  # the client asks the engine its API version first
        return f"no Docker engine answered at {where} ({_first_line(exc)})"
    try:
        answered = client.ping()
    except (docker.errors.DockerException, requests.RequestException) as exc:
        return f"the Docker engine at {where} did not answer its ping ({_first_line(exc)})"
    finally:
        client.close()
    return None if answered else f"the Docker engine at {where} answered its ping with no OK"


def _engine_environment(environ: Mapping[str, str]) -> dict[str, str]:
    """``environ``, with the engine testcontainers would use when ``DOCKER_HOST`` names none (its
    properties file, the current docker context): the ping asks the engine the containers would run on."""
    found = dict(environ)
    if not found.get("DOCKER_HOST"):
        from testcontainers.core.docker_client import get_docker_host

        if host := get_docker_host():
            found["DOCKER_HOST"] = host
    return found


def _where(environ: Mapping[str, str]) -> str:
    """The engine's address, for messages (only called once testcontainers is known to be installed)."""
    return _engine_environment(environ).get("DOCKER_HOST") or "the default socket"


def _first_line(exc: BaseException) -> str:
    return str(exc).splitlines()[0] if str(exc) else type(exc).__name__
