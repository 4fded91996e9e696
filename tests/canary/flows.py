"""The users, teams and steps the canary scenarios are made of, each input a canary.

    alice = User.plant(book, "alice")
    register_teams(deployment, book)
    data = run(deployment, alice, alice.sessions[0], alice.tasks[0])
"""

from __future__ import annotations

import json
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from config_registry import Manifest, Registry
from teamstore.examples import example_manifest, support_triage
from tests.canary.canaries import CanaryBook, Kind
from tests.canary.deployment import Deployment
from tests.canary.teams import gateway_desk, gateway_secrets, order_desk

TRIAGE = "support_triage"
ON_EACH_DATABASE = [
    pytest.param("sqlite+local", id="sqlite+local"),
    pytest.param("postgres+local", marks=pytest.mark.postgres, id="postgres+local"),
]
"""A scenario's deployments when what it checks is in the database (``indirect`` to the ``deployment`` fixture)."""


@dataclass(frozen=True)
class User:
    """A user whose id, session ids and words are canaries."""

    alias: str
    user_id: str
    sessions: tuple[str, ...]
    tasks: tuple[str, ...]

    @classmethod
    def plant(cls, book: CanaryBook, alias: str, sessions: int = 3, tasks: int = 3) -> User:
        """A new user: a unique id (non-ASCII, as ids may be), sessions and task texts."""
        user_id = book.plant(Kind.USER_ID, f"{alias}'s user id", owner=alias, shape=alias + ".{}.Zoë@example.com")
        session_ids = tuple(book.plant(Kind.SESSION_ID, f"{alias}'s session {n}", owner=alias, shape="ticket-{}-ø")
                            for n in range(sessions))
        words = tuple(book.plant(Kind.MESSAGE, f"{alias}'s task {n}", owner=alias,
                                 shape="My router {} drops every evening, says Zoë")
                      for n in range(tasks))
        return cls(alias, user_id, session_ids, words)


def register_teams(registry_path: Path, gateway_url: str) -> None:
    """Register, as a deploy does (``teamstore demo`` too): the example support team, the order desk (a
    tool) and the gateway desk (its secrets references to the environment, its model at ``gateway_url``)."""
    registry = Registry(registry_path, create=True)
    registry.add(TRIAGE, support_triage().dump_component(), example_manifest(TRIAGE), "support triage",
                 label="production")
    desk = Manifest(name="order_desk", persist=["desk"], context_bound=20, allow_source_code_tools=True)
    registry.add("order_desk", order_desk().dump_component(), desk, "order desk", label="production")
    gateway = Manifest(name="gateway_desk", persist=["desk"], context_bound=20, secrets={
        path: f"env:{variable}" for path, variable in gateway_secrets().items()})
    registry.add("gateway_desk", gateway_desk(base_url=gateway_url).dump_component(), gateway, "gateway desk",
                 label="production")


def gateway_env(book: CanaryBook) -> dict[str, str | None]:
    """The gateway desk's secrets, each a canary, as the worker's environment holds them."""
    env: dict[str, str | None] = {}
    for path, variable in gateway_secrets().items():
        env[variable] = book.plant(Kind.SECRET, f"{path} (resolved from ${variable})")
    return env


def start_run(deployment: Deployment, user: User, session: str, text: str, team: str = TRIAGE,
              env: dict[str, str | None] | None = None) -> subprocess.Popen[str]:
    """Start ``teamstore run`` for ``user`` in a new process."""
    return deployment.start("run", "--team", team, "--user", user.user_id, "--session", session, text, "--json",
                            env=env)


def finish_run(deployment: Deployment, proc: subprocess.Popen[str]) -> dict[str, Any]:
    """The JSON a ``teamstore run`` printed."""
    data: dict[str, Any] = json.loads(deployment.finish(proc).stdout)
    return data


def run(deployment: Deployment, user: User, session: str, text: str, team: str = TRIAGE,
        env: dict[str, str | None] | None = None) -> dict[str, Any]:
    """``teamstore run`` for ``user`` in a new process; its JSON."""
    return finish_run(deployment, start_run(deployment, user, session, text, team, env))


def first_run(deployment: Deployment, user: User, gateway_url: str) -> dict[str, Any]:
    """The teams registered, the schema migrated by ``teamstore db upgrade``, and ``user``'s first run."""
    register_teams(deployment.registry, gateway_url)
    deployment.cli("db", "upgrade", level="INFO")
    return run(deployment, user, user.sessions[0], user.tasks[0])


Run = tuple[User, str, str] | tuple[User, str, str, str, dict[str, str | None]]


def runs_at_once(deployment: Deployment, *runs: Run) -> list[dict[str, Any]]:
    """Several ``teamstore run`` processes at the same time: (user, session, text[, team, environment])."""
    started = [start_run(deployment, *run) for run in runs]
    return [finish_run(deployment, proc) for proc in started]


def erase(deployment: Deployment, book: CanaryBook, user: User, ok: tuple[int, ...] = (0,),
          env: dict[str, str | None] | None = None, request_id: str | None = None) -> dict[str, Any]:
    """``teamstore erase`` of ``user`` with canaries as the operator's reason and as who asked; the receipt."""
    reason = book.plant(Kind.ERASE_REASON, f"the reason given to erase {user.alias}",
                        shape="privacy desk ticket {} (Zoë)")
    asked = book.plant(Kind.ERASE_REASON, f"who asked to erase {user.alias}", shape="desk ticket {} by mail")
    extra = ["--request-id", request_id] if request_id else []
    receipt: dict[str, Any] = deployment.cli_json("erase", "--user", user.user_id, "--reason", reason, "--yes",
                                                  "--requested-by", asked, *extra, ok=ok, env=env)
    return receipt


def export(deployment: Deployment, book: CanaryBook, user: User, target: Path,
           ok: tuple[int, ...] = (0,)) -> dict[str, Any]:
    """``teamstore export`` of ``user`` into ``target`` (outside the deployment's home: the archive is handed
    over, not kept), with a canary as who asked; the manifest it printed."""
    asked = book.plant(Kind.ERASE_REASON, f"who asked for {user.alias}'s data", shape="access request {} by mail")
    manifest: dict[str, Any] = deployment.cli_json("export", "--user", user.user_id, "--output", str(target),
                                                   "--requested-by", asked, ok=ok)
    return manifest
