"""Write access to the registry is code execution on the workers: what teamstore makes in it (and what git
makes for it) is writable by its owner only whatever the umask, and a registry others may write is warned of."""

from __future__ import annotations

import logging
import os
import shutil
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from config_registry import Registry
from tests.conftest import git
from tests.registry.conftest import triage_json, triage_manifest


@pytest.fixture
def umask_of(request: pytest.FixtureRequest) -> Iterator[int]:
    previous = os.umask(request.param)
    try:
        yield request.param
    finally:
        os.umask(previous)


def _modes(top: Path) -> dict[str, int]:
    """The permission bits of ``top`` and everything under it, links aside."""
    found = {".": stat.S_IMODE(top.stat().st_mode)}
    for path in top.rglob("*"):
        if not path.is_symlink():
            found[str(path.relative_to(top))] = stat.S_IMODE(path.lstat().st_mode)
    return found


def _registered(path: Path) -> Registry:
    registry = Registry(path, create=True)
    registry.add("support_triage", triage_json(), triage_manifest(), "first", label="production")
    return registry


@pytest.mark.parametrize("umask_of", [0o000], indirect=True)
def test_a_registry_made_under_an_open_umask_is_writable_by_its_owner_only(registry_path: Path, umask_of: int) -> None:
    _registered(registry_path)
    modes = _modes(registry_path)
    assert {name: oct(mode) for name, mode in modes.items() if mode & 0o022} == {}
    assert modes["."] == 0o755 and modes["teams"] == 0o755 and modes[".git/objects"] == 0o755
    assert modes["teams/support_triage/component.json"] == 0o644
    assert modes["labels/support_triage.log.jsonl"] == 0o644 and modes[".git/config"] == 0o644


@pytest.mark.parametrize("umask_of", [0o077], indirect=True)
def test_a_stricter_umask_is_kept(registry_path: Path, umask_of: int) -> None:
    _registered(registry_path)
    modes = _modes(registry_path)
    assert modes["."] == 0o700 and modes["teams/support_triage/component.json"] == 0o600
    assert {name: oct(mode) for name, mode in modes.items() if mode & 0o077} == {}


def _warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name.startswith("config_registry") and r.levelno >= logging.WARNING]


def test_opening_a_registry_others_may_write_warns_once_with_the_fix(
    registry_path: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    _registered(registry_path)
    existing = tmp_path / "existing"
    shutil.copytree(registry_path, existing, symlinks=True)  # a registry this process has not opened yet
    (existing / ".git" / "hooks").chmod(0o777)
    (existing / "teams" / "support_triage" / "component.json").chmod(0o666)

    with caplog.at_level(logging.WARNING):
        Registry(existing).resolve("support_triage@production")
        Registry(existing)
    (said,) = _warnings(caplog)
    assert said.startswith(f"everyone may write to the registry {existing} (")
    assert ".git/hooks" in said and "component.json" in said and "code execution on the workers" in said and f"chmod -R go-w {existing}" in said
    assert "router" not in said.lower()  # names and modes, never what the definitions say


def test_a_registry_shared_with_a_group_by_git_is_warned_of_only_where_everyone_may_write(
    registry_path: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    _registered(registry_path)
    shared, open_to_all = tmp_path / "shared", tmp_path / "open"
    for copy in (shared, open_to_all):
        shutil.copytree(registry_path, copy, symlinks=True)
        git(copy, "config", "core.sharedRepository", "group")
        (copy / ".git" / "objects").chmod(0o2775)
    (open_to_all / ".git" / "refs").chmod(0o777)

    with caplog.at_level(logging.WARNING):
        Registry(shared)
        assert _warnings(caplog) == []
        Registry(open_to_all)
    (said,) = _warnings(caplog)
    assert said.startswith(f"everyone may write to the registry {open_to_all} (.git/refs);")
