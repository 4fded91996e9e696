"""Two registrations at once: both commits land, nothing is lost or corrupted; a held lock times out."""

from __future__ import annotations

import fcntl
import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from config_registry import Registry, RegistryConflict
from config_registry.gitrepo import LOCK_FILE
from tests.conftest import git
from tests.registry.conftest import left_unchanged, triage_json, triage_manifest

_WRITER = """
import sys, teamstore
from config_registry import Registry
from teamstore.examples import example_manifest
path, factory, message = sys.argv[1:4]
registry = Registry(path, lock_timeout=60, create=True)
print(registry.add_from_factory("teamstore.examples:" + factory, example_manifest(factory), message))
"""


def test_two_processes_register_the_same_team_at_once(registry: Registry) -> None:
    root = str(Path(__file__).resolve().parents[2])
    jobs = [
        subprocess.Popen(
            [sys.executable, "-c", _WRITER, str(registry.path), factory, message],
            cwd=root,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for factory, message in (
            ("support_triage", "from process one"),
            ("support_triage_v2_prompt", "from two"),
        )
    ]
    outputs = [job.communicate(timeout=60) for job in jobs]
    assert [job.returncode for job in jobs] == [0, 0], outputs
    versions = {out.strip() for out, _err in outputs}
    history = [h.version for h in registry.history("support_triage") if h.kind == "version"]
    assert versions == set(history)
    assert len(history) == 2
    assert git(registry.path, "status", "--porcelain") == ""
    git(registry.path, "fsck", "--strict")
    for version in history:
        json.loads(git(registry.path, "show", f"{version}:teams/support_triage/component.json"))


def test_a_held_lock_times_out_with_a_conflict(registry: Registry) -> None:
    slow = Registry(registry.path, lock_timeout=0.3)
    with open(registry.path / ".git" / LOCK_FILE, "a+") as held:
        fcntl.flock(held.fileno(), fcntl.LOCK_EX)
        with left_unchanged(registry.path), pytest.raises(RegistryConflict) as caught:
            slow.add("support_triage", triage_json(), triage_manifest(), "blocked")
        assert "retry" in (caught.value.hint or "")
        fcntl.flock(held.fileno(), fcntl.LOCK_UN)
    assert slow.add("support_triage", triage_json(), triage_manifest(), "now free")


_OPENER = """
import sys, time
from config_registry import Registry
time.sleep(max(0.0, float(sys.argv[2]) - time.time()))  # all start together
Registry(sys.argv[1], create=True)
"""


def test_processes_opening_a_new_registry_path_at_once_make_one_repository(tmp_path: Path) -> None:
    root = str(Path(__file__).resolve().parents[2])
    for trial in range(3):
        path, start = tmp_path / f"registry-{trial}", str(time.time() + 3)
        jobs = [
            subprocess.Popen(
                [sys.executable, "-c", _OPENER, str(path), start], cwd=root, stderr=subprocess.PIPE, text=True
            )
            for _ in range(6)
        ]
        errors = [job.communicate(timeout=60)[1] for job in jobs]
        assert [job.returncode for job in jobs] == [0] * 6, errors
        assert git(path, "rev-list", "--count", "HEAD").strip() == "1"
        assert git(path, "status", "--porcelain") == ""
