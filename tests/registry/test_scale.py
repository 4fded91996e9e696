"""A registry of many teams: reads that cover every team take a fixed number of git processes, and read what
one git process a file would."""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from typing import Any

import pytest

from config_registry import MemoryDeclaration, Registry
from config_registry.gitrepo import GitRepo
from config_registry.layout import read_definition, versions
from teamstore import examples
from tests.conftest import git
from tests.registry.conftest import triage_json


def _register(registry: Registry, first: int, last: int) -> None:
    """Teams first..last-1, every one sharing the memory scope "customer", each labelled production."""
    for index in range(first, last):
        memory = MemoryDeclaration(participants=["triage"], writer="triage", facts={"ticket_id": "str"},
                                   scope="customer")
        manifest = examples.example_manifest("support_triage").model_copy(
            update={"name": f"desk-{index}", "memory": memory})
        registry.add(f"desk-{index}", triage_json(), manifest, "v1", label="production")


def _git_commands(monkeypatch: pytest.MonkeyPatch, call: Callable[[], Any]) -> list[list[str]]:
    started: list[list[str]] = []
    run = subprocess.run

    def counting(command: list[str], *args: Any, **kwargs: Any) -> Any:
        started.append(command)
        return run(command, *args, **kwargs)

    with monkeypatch.context() as patched:
        patched.setattr(subprocess, "run", counting)
        call()
    return [command for command in started if command[0] == "git"]


def _git_processes(monkeypatch: pytest.MonkeyPatch, call: Callable[[], Any]) -> int:
    return len(_git_commands(monkeypatch, call))


def test_list_memory_facts_and_the_shared_memory_check_do_not_start_a_git_process_per_team(
    registry: Registry, monkeypatch: pytest.MonkeyPatch
) -> None:
    def counts() -> tuple[int, int, int]:
        _register(registry, len(registry.names()), len(registry.names()) + 1)  # a new HEAD for memory_facts
        return (
            _git_processes(monkeypatch, registry.list),
            _git_processes(monkeypatch, lambda: registry.memory_facts("customer")),
            _git_processes(monkeypatch, lambda: _register(registry, 100, 101)),
        )

    _register(registry, 0, 2)
    few = counts()
    _register(registry, 3, 9)
    assert counts() == few  # 3 teams, then 10: a process a file or a history a team would grow with them
    assert registry.memory_facts("customer") == {"ticket_id"}
    for row in registry.list():  # as each team's own history and files say
        latest = registry.resolve(f"{row.name}@{versions(registry.repo, row.name)[0]['commit']}")
        assert (row.version, row.time, row.labels) == (latest.version, latest.time, {"production": latest.version})


def test_resolving_a_label_walks_the_teams_history_once(registry: Registry, monkeypatch: pytest.MonkeyPatch) -> None:
    _register(registry, 0, 1)
    commands = _git_commands(monkeypatch, lambda: registry.resolve("desk-0@production"))
    walks = [command for command in commands if "log" in command and "-1" not in command]
    assert len(walks) == 1  # every version of the team, from all history; the version's own commit is one


def test_a_label_moved_while_a_worker_resolves_it_is_read_before_or_after_the_move_never_as_corrupt(
    registry: Registry, monkeypatch: pytest.MonkeyPatch
) -> None:
    _register(registry, 0, 1)
    before = registry.resolve("desk-0@production").version
    log = GitRepo.log

    def registered_meanwhile(repo: GitRepo, *paths: str, **kwargs: Any) -> list[dict[str, str]]:
        rows = log(repo, *paths, **kwargs)  # the worker has read the team's versions; now a registration lands
        monkeypatch.setattr(GitRepo, "log", log)
        manifest = registry.resolve("desk-0").manifest.model_copy(update={"description": "v2"})
        Registry(registry.path).add("desk-0", triage_json(), manifest, "v2", label="production")
        return rows

    monkeypatch.setattr(GitRepo, "log", registered_meanwhile)
    assert registry.resolve("desk-0@production").version == before
    assert registry.resolve("desk-0@production").version != before  # the next lookup sees the move


def test_a_history_with_a_merge_lists_each_teams_latest_version_as_its_own_history_says(
    registry: Registry,
) -> None:
    _register(registry, 0, 1)
    git(registry.path, "checkout", "-q", "-b", "side")
    _register(registry, 1, 2)
    git(registry.path, "checkout", "-q", "main")
    _register(registry, 2, 3)
    git(registry.path, "-c", "user.name=t", "-c", "user.email=t@t", "merge", "-q", "--no-ff", "-m", "merge", "side")
    rows = {row.name: row.version for row in Registry(registry.path).list()}
    assert rows == {name: versions(registry.repo, name)[0]["commit"] for name in ("desk-0", "desk-1", "desk-2")}


def test_files_read_in_one_batch_read_as_one_at_a_time(registry: Registry) -> None:
    _register(registry, 0, 1)
    version = registry.resolve("desk-0").version
    wanted = [("HEAD", "README.md"), (version, "teams/desk-0/manifest.json"), ("HEAD", "teams/desk-0"),
              ("HEAD", "no-such-file"), ("HEAD\nHEAD", "README.md"), ("0" * 40, "README.md"), ("HEAD", "labels")]
    assert registry.repo.show_many(wanted) == [registry.repo.show(*pair) for pair in wanted]
    assert read_definition(registry.repo, "desk-0", version) == registry.resolve(f"desk-0@{version}")
