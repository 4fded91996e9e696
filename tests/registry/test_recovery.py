"""A registration killed mid-write, and ``teamstore registry recover``: what it left is shown, then discarded or
committed only if it passes every check a registration applies; never silently."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from config_registry import Registry, RegistryCorrupt
from config_registry.gitrepo import dump_json
from teamstore import examples
from teamstore.cli import app
from tests.conftest import git
from tests.registry.conftest import dump, triage_json, triage_manifest

runner = CliRunner()
ROOT = Path(__file__).resolve().parents[2]
RECOVER = "teamstore registry recover"

_WRITER = """
import sys
from config_registry import Registry
from teamstore.examples import example_manifest
Registry(sys.argv[1], lock_timeout=60).add_from_factory(
    "teamstore.examples:support_triage_v2_prompt", example_manifest("support_triage_v2_prompt"), "prompt change")
"""


def _kill_a_writer(registry: Registry, tmp_path: Path, stop_in: str) -> None:
    """Register a new version in another process, hold it inside ``git add`` or ``git commit``, and kill it.

    In ``git add`` (a ``git`` first on its PATH that waits there) the definition's files are written and
    nothing is staged: the writer stopped between writing and committing. In ``git commit`` (a
    prepare-commit-msg hook that waits; the registry's ``--no-verify`` skips only pre-commit and commit-msg)
    the files are staged and git holds its lock files, which the kill leaves behind.
    """
    stopped = tmp_path / "stopped"
    wait_there = f'#!/bin/sh\ntouch "{stopped}"\nexec sleep 600\n'
    env = dict(os.environ)
    if stop_in == "add":
        shim = tmp_path / "bin"
        shim.mkdir()
        real = shutil.which("git")
        (shim / "git").write_text(
            f'#!/bin/sh\nfor arg; do [ "$arg" = add ] && {{ touch "{stopped}"; exec sleep 600; }}; done\n'
            f'exec "{real}" "$@"\n'
        )
        (shim / "git").chmod(0o755)
        env["PATH"] = f"{shim}{os.pathsep}{env['PATH']}"
    hook = registry.path / ".git" / "hooks" / "prepare-commit-msg"
    if stop_in == "commit":
        hook.write_text(wait_there)
        hook.chmod(0o755)
    writer = subprocess.Popen([sys.executable, "-c", _WRITER, str(registry.path)], cwd=ROOT, env=env,
                              stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        deadline = time.monotonic() + 60
        while not stopped.exists():
            assert writer.poll() is None, writer.communicate()[1]
            assert time.monotonic() < deadline, "the writer never reached the point to kill it at"
            time.sleep(0.05)
    finally:
        os.killpg(writer.pid, signal.SIGKILL)  # the writer and the git (and hook) it is running
        writer.communicate()
        hook.unlink(missing_ok=True)


def _recover(*args: str) -> Any:
    return runner.invoke(app, ["registry", "recover", *args], env={"COLUMNS": "300"})


def _left(*args: str) -> dict[str, Any]:
    result = _recover(*args, "--json")
    assert result.exit_code in (0, 2), result.output
    return json.loads(result.stdout)  # type: ignore[no-any-return]


def test_a_writer_killed_between_writing_and_committing_is_recovered_by_discarding(
    registry: Registry, tmp_path: Path
) -> None:
    v1 = registry.add("support_triage", triage_json(), triage_manifest(), "v1", label="production")
    head = git(registry.path, "rev-parse", "HEAD")
    _kill_a_writer(registry, tmp_path, "add")
    assert git(registry.path, "rev-parse", "HEAD") == head  # nothing was committed

    with pytest.raises(RegistryCorrupt) as caught:  # every registry operation is refused ...
        Registry(registry.path)
    assert "teams/support_triage/component.json" in caught.value.message
    assert RECOVER in (caught.value.hint or "")  # ... and names the way out
    refused = runner.invoke(app, ["registry", "list"], env={"COLUMNS": "300"})
    assert refused.exit_code == 1 and f"fix: see what is left with `{RECOVER}`" in refused.output

    shown = _recover()
    assert shown.exit_code == 2  # something is left
    assert "teams/support_triage/component.json" in shown.stdout
    assert "teams/support_triage/: passes every check a registration applies" in shown.stdout
    assert f"`{RECOVER} --commit -m WHY` commits the definitions left" in shown.stdout
    left = _left()
    assert left["locks"] == [] and left["definitions"] == [{"team": "support_triage", "passes": True, "problem": None}]
    assert git(registry.path, "status", "--porcelain") != ""  # looking changed nothing

    discarded = _recover("--discard")
    assert discarded.exit_code == 0, discarded.output
    assert git(registry.path, "status", "--porcelain", "--untracked-files=all") == ""
    assert git(registry.path, "rev-parse", "HEAD") == head
    assert Registry(registry.path).resolve("support_triage").version == v1
    again = Registry(registry.path).add_from_factory(  # the registration, made again, goes through
        "teamstore.examples:support_triage_v2_prompt", examples.example_manifest("support_triage_v2_prompt"), "again")
    assert again != v1
    assert _recover().exit_code == 0 and "nothing to recover" in _recover().stdout


def test_what_a_killed_writer_left_is_committed_as_a_registration_would_have(
    registry: Registry, tmp_path: Path
) -> None:
    v1 = registry.add("support_triage", triage_json(), triage_manifest(), "v1")
    _kill_a_writer(registry, tmp_path, "add")
    assert _recover("--commit").exit_code == 1  # a commit says why
    done = _recover("--commit", "-m", "the prompt change, recovered", "--json")
    assert done.exit_code == 0, done.output
    version = json.loads(done.stdout)["versions"]["support_triage"]
    assert git(registry.path, "status", "--porcelain", "--untracked-files=all") == ""

    recovered = Registry(registry.path).resolve("support_triage")
    assert recovered.version == version != v1 and recovered.message == "the prompt change, recovered"
    other = Registry(tmp_path / "other", create=True)  # the same registration, not interrupted
    uninterrupted = other.add_from_factory("teamstore.examples:support_triage_v2_prompt",
                                           examples.example_manifest("support_triage_v2_prompt"), "x")
    normal = other.resolve(f"support_triage@{uninterrupted}")
    assert recovered.component == normal.component and recovered.manifest == normal.manifest


def test_a_git_commit_killed_holding_its_lock_files_is_recovered(registry: Registry, tmp_path: Path) -> None:
    v1 = registry.add("support_triage", triage_json(), triage_manifest(), "v1")
    _kill_a_writer(registry, tmp_path, "commit")
    assert (registry.path / ".git" / "index.lock").exists()  # left by the killed git

    left = _left()
    assert "index.lock" in left["locks"]
    assert "teams/support_triage/component.json" in {row["path"] for row in left["files"]}
    assert left["definitions"] == [{"team": "support_triage", "passes": True, "problem": None}]
    done = _recover("--commit", "-m", "recovered after a killed commit", "--json")
    assert done.exit_code == 0, done.output
    assert not (registry.path / ".git" / "index.lock").exists()
    assert Registry(registry.path).resolve("support_triage").version not in (v1, None)
    git(registry.path, "fsck", "--strict")


def test_a_lock_file_a_killed_git_left_refuses_registrations_by_name(registry: Registry) -> None:
    # Git leaves .git/index.lock behind when it is killed while rewriting the index (as above); alone, it
    # made every registration fail inside 'git add' with git's own message, its files written and not committed.
    registry.add("support_triage", triage_json(), triage_manifest(), "v1")
    (registry.path / ".git" / "index.lock").write_bytes(b"")
    with pytest.raises(RegistryCorrupt) as caught:
        registry.add("support_triage", dump(examples.support_triage_v2_prompt()), triage_manifest(), "v2")
    assert ".git: index.lock" in caught.value.message and RECOVER in (caught.value.hint or "")
    assert git(registry.path, "status", "--porcelain", "--untracked-files=all") == ""  # nothing was written
    assert _left()["locks"] == ["index.lock"]
    assert _recover("--discard").exit_code == 0
    assert registry.add("support_triage", dump(examples.support_triage_v2_prompt()), triage_manifest(), "v2")


def test_a_half_written_definition_is_never_committed(registry: Registry) -> None:
    registry.add("support_triage", triage_json(), triage_manifest(), "v1")
    path = registry.path / "teams" / "support_triage" / "component.json"
    committed = path.read_text()
    whole = dump_json(dump(examples.support_triage_v2_prompt()))
    path.write_text(whole[: len(whole) // 2])  # what a writer killed inside write_text() leaves
    head = git(registry.path, "rev-parse", "HEAD")

    (definition,) = _left()["definitions"]
    assert not definition["passes"] and "is not valid JSON" in definition["problem"]
    refused = _recover("--commit", "-m", "keep it")
    assert refused.exit_code == 1 and "error: nothing was committed: teams/support_triage/" in refused.output
    assert git(registry.path, "rev-parse", "HEAD") == head and path.read_text() == whole[: len(whole) // 2]
    assert _recover("--discard").exit_code == 0
    assert path.read_text() == committed


def test_an_edit_that_fails_a_registration_check_is_not_committed(registry: Registry) -> None:
    registry.add("support_triage", triage_json(), triage_manifest(), "v1")
    path = registry.path / "teams" / "support_triage" / "component.json"
    component = json.loads(path.read_text())
    component["config"]["termination_condition"]["provider"] = "os.system"  # not on the allow-list
    path.write_text(dump_json(component))
    head = git(registry.path, "rev-parse", "HEAD")
    refused = _recover("--commit", "-m", "keep it")
    assert refused.exit_code == 1 and "os.system" in refused.output and "fix:" in refused.output
    assert git(registry.path, "rev-parse", "HEAD") == head and "os.system" in path.read_text()


def test_a_label_move_left_uncommitted_is_discarded_and_made_again(registry: Registry) -> None:
    v1 = registry.add("support_triage", triage_json(), triage_manifest(), "v1", label="production")
    labels = registry.path / "labels" / "support_triage.json"
    labels.write_text(labels.read_text().replace(v1, "0" * 40))
    shown = " ".join(_recover().stdout.split())
    assert "nothing left can be committed as it is" in shown and "--commit" not in shown  # it would be refused
    refused = _recover("--commit", "-m", "keep it")
    assert refused.exit_code == 1 and "a label move is made again" in refused.output
    assert _recover("--discard").exit_code == 0
    assert Registry(registry.path).resolve("support_triage@production").version == v1


def test_recover_on_a_clean_registry_changes_nothing(registry: Registry) -> None:
    registry.add("support_triage", triage_json(), triage_manifest(), "v1")
    head = git(registry.path, "rev-parse", "HEAD")
    assert _recover().exit_code == 0 and "nothing to recover" in _recover().stdout
    discarded = _recover("--discard")
    assert discarded.exit_code == 0 and "nothing to recover" in discarded.stdout
    assert "discarded" not in discarded.stdout  # there was nothing to throw away
    nothing = _recover("--commit", "-m", "x")
    assert nothing.exit_code == 1 and "nothing to recover" in nothing.output
    assert "lock files" not in nothing.output  # none are there: the fix names no way out of nothing
    assert _recover("--discard", "--commit", "-m", "x").exit_code == 1
    assert git(registry.path, "rev-parse", "HEAD") == head
