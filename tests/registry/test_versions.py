"""Versions, labels, history, and a repository that is not what it should be."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from config_registry import (
    DefinitionInvalid,
    Registry,
    RegistryCorrupt,
    RegistryError,
    RegistryNotFound,
    UnknownTeam,
    UnknownVersion,
)
from teamstore import examples
from tests.conftest import git
from tests.registry.conftest import dump, left_unchanged, triage_json, triage_manifest


def _two_versions(registry: Registry) -> tuple[str, str]:
    v1 = registry.add("support_triage", triage_json(), triage_manifest(), "v1")
    v2 = registry.add(
        "support_triage", dump(examples.support_triage_v2_prompt()), triage_manifest(), "v2 prompt"
    )
    return v1, v2


def test_resolve_by_name_version_prefix_and_label(registry: Registry) -> None:
    v1, v2 = _two_versions(registry)
    assert registry.resolve("support_triage").version == v2  # no production label: the latest
    assert registry.resolve(f"support_triage@{v1}").version == v1
    assert registry.resolve(f"support_triage@{v1[:7]}").version == v1
    registry.label("support_triage", v1, "production", reason="first release")
    assert registry.resolve("support_triage").version == v1  # bare name: production
    assert registry.resolve("support_triage@production").labels == ["production"]
    assert registry.resolve(f"support_triage@{v2}").labels == []


def test_unknown_and_short_versions(registry: Registry) -> None:
    v1, _ = _two_versions(registry)
    for selector in ("staging", v1[:6], "0000000", "deadbeefdeadbeef"):
        with pytest.raises(UnknownVersion) as caught:
            registry.resolve(f"support_triage@{selector}")
        assert "history support_triage" in (caught.value.hint or "")
    with pytest.raises(UnknownVersion) as caught:  # not the default label: an '@' must name something
        registry.resolve("support_triage@")
    assert "names no version or label" in caught.value.message
    with pytest.raises(UnknownTeam):
        registry.resolve("nobody@production")


def test_version_of_another_team_is_not_a_version_of_this_one(registry: Registry) -> None:
    _two_versions(registry)
    other = registry.add_from_factory(
        "teamstore.examples:single_assistant", examples.example_manifest("single_assistant"), "one"
    )
    with pytest.raises(UnknownVersion):
        registry.resolve(f"support_triage@{other}")


def test_label_move_records_who_when_why_and_keeps_versions(registry: Registry) -> None:
    v1, v2 = _two_versions(registry)
    registry.label("support_triage", v2, "production", reason="ship v2", who="alice")
    registry.label("support_triage", v1, "production", reason="rollback: v2 confused users", who="bob")
    assert registry.resolve("support_triage").version == v1
    assert registry.resolve(f"support_triage@{v2}").version == v2  # a label move is not a version
    history = registry.history("support_triage")
    versions = [h for h in history if h.kind == "version"]
    moves = [h for h in history if h.kind == "label"]
    assert [v.version for v in versions] == [v2, v1]
    assert [(m.author, m.version, m.previous, m.message) for m in moves] == [
        ("bob", v1, v2, "rollback: v2 confused users"),
        ("alice", v2, None, "ship v2"),
    ]
    assert all(m.time.tzinfo is not None for m in moves)
    log = (registry.path / "labels" / "support_triage.log.jsonl").read_text().splitlines()
    assert len(log) == 2
    assert json.loads((registry.path / "labels" / "support_triage.json").read_text()) == {"production": v1}


def test_label_by_label_and_add_with_label(registry: Registry) -> None:
    v1 = registry.add("support_triage", triage_json(), triage_manifest(), "v1", label="staging")
    registry.label("support_triage", "staging", "production", reason="promote")
    assert registry.resolve("support_triage@production").version == v1
    assert sorted(registry.resolve("support_triage").labels) == ["production", "staging"]


def test_label_needs_a_reason_and_a_valid_name(registry: Registry) -> None:
    v1, _ = _two_versions(registry)
    with left_unchanged(registry.path):
        with pytest.raises(DefinitionInvalid):
            registry.label("support_triage", v1, "production", reason="  ")
        for bad in ("../prod", "prod\n", "deadbee", v1, v1[:12]):  # a newline; names refs would read as versions
            with pytest.raises(DefinitionInvalid):
                registry.label("support_triage", v1, bad, reason="x")
        with pytest.raises(UnknownVersion):
            registry.label("support_triage", "nope", "production", reason="x")


def test_list_summarises_every_team(registry: Registry) -> None:
    _, v2 = _two_versions(registry)
    registry.label("support_triage", v2, "production", reason="x")
    registry.add_from_factory(
        "teamstore.examples:single_assistant", examples.example_manifest("single_assistant"), "1"
    )
    rows = {row.name: row for row in registry.list()}
    assert set(rows) == {"support_triage", "single_assistant"}
    assert rows["support_triage"].labels == {"production": v2}
    assert rows["support_triage"].persisted == ["researcher"]
    assert rows["single_assistant"].kind == "agent"


def test_malformed_json_in_the_repository_is_reported_by_file(registry: Registry) -> None:
    v1 = registry.add("support_triage", triage_json(), triage_manifest(), "v1")
    path = registry.path / "teams" / "support_triage" / "component.json"
    path.write_text(path.read_text()[:200])
    git(registry.path, "commit", "-qam", "hand edit gone wrong")
    with pytest.raises(RegistryCorrupt) as caught:
        registry.resolve("support_triage")
    assert "teams/support_triage/component.json" in caught.value.message
    assert registry.resolve(f"support_triage@{v1}").version == v1  # older versions still read


def test_a_version_is_not_committed_when_its_label_cannot_be_moved(registry: Registry) -> None:
    registry.add("support_triage", triage_json(), triage_manifest(), "v1", label="production")
    (registry.path / "labels" / "support_triage.json").write_text("[]")  # a hand edit, committed
    git(registry.path, "commit", "-qam", "hand edit")
    with left_unchanged(registry.path), pytest.raises(RegistryCorrupt) as caught:
        registry.add("support_triage", dump(examples.support_triage_v2_prompt()), triage_manifest(), "v2",
                     label="production")
    assert "labels/support_triage.json" in caught.value.message
    assert len(registry.history("support_triage")) == 2  # v1 and its label move: no v2 without its label


def test_history_lists_a_version_made_in_the_second_after_a_label_move_first(
    registry: Registry, monkeypatch: pytest.MonkeyPatch
) -> None:
    v1 = registry.add("support_triage", triage_json(), triage_manifest(), "v1")
    registry.label("support_triage", v1, "staging", reason="stage v1")
    moved = registry.history("support_triage")[0].time
    monkeypatch.setenv("GIT_AUTHOR_DATE", moved.replace(microsecond=0).isoformat())  # git keeps whole seconds
    v2 = registry.add("support_triage", dump(examples.support_triage_v2_prompt()), triage_manifest(), "v2")
    registry.label("support_triage", v2, "staging", reason="stage v2")
    assert [(e.kind, e.message) for e in registry.history("support_triage")] == [
        ("label", "stage v2"), ("version", "v2"), ("label", "stage v1"), ("version", "v1"),
    ]


def test_invalid_manifest_in_the_repository_is_corrupt(registry: Registry) -> None:
    registry.add("support_triage", triage_json(), triage_manifest(), "v1")
    path = registry.path / "teams" / "support_triage" / "manifest.json"
    path.write_text(json.dumps({"name": "support_triage", "surprise": 1}))
    git(registry.path, "commit", "-qam", "hand edit")
    with pytest.raises(RegistryCorrupt) as caught:
        registry.resolve("support_triage")
    assert "support_triage" in caught.value.message


def test_path_that_is_not_a_git_repository(tmp_path: Path) -> None:
    folder = tmp_path / "not_a_repo"
    folder.mkdir()
    (folder / "notes.txt").write_text("hello")
    with pytest.raises(RegistryCorrupt) as caught:
        Registry(folder)
    assert "not a git repository" in caught.value.message
    assert not (folder / ".git").exists()
    file = tmp_path / "file"
    file.write_text("x")
    with pytest.raises(RegistryCorrupt):
        Registry(file)


def test_folder_inside_another_repository_is_not_the_registry(tmp_path: Path) -> None:
    outer = tmp_path / "outer"
    Registry(outer, create=True)
    inner = outer / "sub"
    inner.mkdir()
    (inner / "x.txt").write_text("x")
    with pytest.raises(RegistryCorrupt):
        Registry(inner)


def _project(path: Path) -> str:
    """A git repository of someone's project, with one commit: its HEAD."""
    path.mkdir()
    git(path, "init", "-q")
    (path / "main.py").write_text("print('hello')\n")
    git(path, "add", "main.py")
    git(path, "commit", "-qm", "first")
    return git(path, "rev-parse", "HEAD")


@pytest.mark.parametrize("create", [False, True])
def test_another_projects_git_repository_is_not_taken_for_a_registry(tmp_path: Path, create: bool) -> None:
    path = tmp_path / "proj"
    head = _project(path)
    with pytest.raises(RegistryNotFound) as caught:
        Registry(path, create=create)
    assert "not a teamstore registry" in caught.value.message
    assert "TEAMSTORE_REGISTRY_PATH" in (caught.value.hint or "")
    assert git(path, "rev-parse", "HEAD") == head
    assert git(path, "status", "--porcelain", "--untracked-files=all") == ""


def test_a_registry_is_known_by_its_readme_or_by_its_teams(registry: Registry) -> None:
    assert Registry(registry.path).list() == []  # a new one: only its README
    registry.add("support_triage", triage_json(), triage_manifest(), "v1", label="production")
    git(registry.path, "rm", "-q", "README.md")
    git(registry.path, "commit", "-qm", "no README")
    assert [t.name for t in Registry(registry.path).list()] == ["support_triage"]


def test_uncommitted_edits_are_refused(registry: Registry) -> None:
    registry.add("support_triage", triage_json(), triage_manifest(), "v1")
    path = registry.path / "teams" / "support_triage" / "manifest.json"
    path.write_text(path.read_text().replace("support-platform", "someone"))
    with pytest.raises(RegistryCorrupt) as caught:
        Registry(registry.path)
    assert "teams/support_triage/manifest.json" in caught.value.message
    head = git(registry.path, "rev-parse", "HEAD")
    with pytest.raises(RegistryCorrupt):
        registry.add("support_triage", dump(examples.support_triage_v2_prompt()), triage_manifest(), "v2")
    with pytest.raises(RegistryCorrupt):
        registry.label("support_triage", "HEAD", "production", reason="x")
    assert git(registry.path, "rev-parse", "HEAD") == head
    assert "someone" in path.read_text()  # the registry never discards someone's edit


def test_new_registry_is_a_git_repository_with_one_commit(registry_path: Path) -> None:
    Registry(registry_path, create=True)
    assert git(registry_path, "log", "--format=%s").strip() == "Create the teamstore registry"
    assert Registry(registry_path).list() == []


@pytest.mark.parametrize("made", ["nothing", "an empty folder"])
def test_opening_a_path_with_no_registry_says_so_and_leaves_nothing_behind(tmp_path: Path, made: str) -> None:
    # A worker given a mistyped path must not start on an empty registry it made there.
    path = tmp_path / "registry"
    if made == "an empty folder":
        path.mkdir()
    with pytest.raises(RegistryNotFound) as caught:
        Registry(path)
    assert "no registry at" in caught.value.message
    with pytest.raises(RegistryNotFound):
        Registry.from_path(path)
    assert (list(path.iterdir()) == []) if made == "an empty folder" else not path.exists()
    Registry(path, create=True)  # made only when asked
    assert git(path, "log", "--format=%s").strip() == "Create the teamstore registry"


def test_a_commit_message_holding_separator_characters_keeps_its_version(registry: Registry) -> None:
    v1, v2 = _two_versions(registry)
    v3 = registry.add("support_triage", triage_json(), triage_manifest(), "third\x1fversion\x1e!", label="production")
    assert [h.version for h in registry.history("support_triage") if h.kind == "version"] == [v3, v2, v1]
    assert registry.resolve("support_triage").version == v3
    assert [t.name for t in registry.list()] == ["support_triage"]


def test_readers_see_only_what_is_committed(registry: Registry) -> None:
    # What a reader in another process sees while a writer has written its files but not yet committed.
    v1 = registry.add("support_triage", triage_json(), triage_manifest(), "v1")
    (registry.path / "teams" / "incoming").mkdir()
    (registry.path / "teams" / "incoming" / "manifest.json").write_text("{}")
    (registry.path / "labels").mkdir(exist_ok=True)
    (registry.path / "labels" / "support_triage.json").write_text(json.dumps({"production": v1}))
    assert [t.name for t in registry.list()] == ["support_triage"]
    assert registry.resolve("support_triage").labels == []  # the label is not committed yet


def test_a_label_that_is_not_a_version_sha_is_corrupt(registry: Registry) -> None:
    v1 = registry.add("support_triage", triage_json(), triage_manifest(), "v1", label="production")
    (registry.path / "labels" / "support_triage.json").write_text(json.dumps({"production": "HEAD~1"}))
    git(registry.path, "commit", "-qam", "hand edit")
    with pytest.raises(RegistryCorrupt, match="full version sha"):
        registry.resolve("support_triage@production")
    git(registry.path, "revert", "--no-edit", "HEAD")  # what the hint says: then it reads again
    assert registry.resolve("support_triage@production").version == v1


@pytest.mark.parametrize(("when", "readable"), [("yesterday", False), ("2026-11-01T10:00:00", True)])
def test_a_hand_edited_label_log_time_is_corrupt_or_read_as_utc(registry: Registry, when: str, readable: bool) -> None:
    registry.add("support_triage", triage_json(), triage_manifest(), "v1", label="production")
    log = registry.path / "labels" / "support_triage.log.jsonl"
    entry = json.loads(log.read_text().splitlines()[0])
    log.write_text(log.read_text() + json.dumps({**entry, "when": when}) + "\n")
    git(registry.path, "commit", "-qam", "hand edit")
    if readable:
        assert len([h for h in registry.history("support_triage") if h.kind == "label"]) == 2
    else:
        with pytest.raises(RegistryCorrupt, match="line 2 is malformed"):
            registry.history("support_triage")


def test_a_git_repository_without_commits_is_an_empty_registry(tmp_path: Path) -> None:
    path = tmp_path / "reg"
    path.mkdir()
    git(path, "init", "-q")
    registry = Registry(path)
    assert registry.list() == []
    with pytest.raises(UnknownTeam):
        registry.resolve("support_triage")


def test_a_label_pointing_at_a_commit_that_is_not_a_version_is_corrupt(registry: Registry) -> None:
    v1 = registry.add("support_triage", triage_json(), triage_manifest(), "v1", label="production")
    other = registry.add("other", triage_json(), triage_manifest(name="other"), "another team's version")
    (registry.path / "labels" / "support_triage.json").write_text(json.dumps({"production": v1, "canary": other}))
    git(registry.path, "commit", "-qam", "hand edit")
    # Read at the other team's commit, the files are v1's: it would build and report a version that is none.
    with pytest.raises(RegistryCorrupt, match="'canary' of team 'support_triage' points at") as caught:
        registry.resolve("support_triage@canary")
    assert "registry label support_triage <version> canary" in (caught.value.hint or "")
    assert registry.resolve("support_triage@production").version == v1
    registry.label("support_triage", v1, "canary", reason="repair")  # what the hint says
    assert registry.resolve("support_triage@canary").version == v1


def test_nothing_is_committed_on_a_detached_head(registry: Registry) -> None:
    v1 = registry.add("support_triage", triage_json(), triage_manifest(), "v1", label="production")
    git(registry.path, "checkout", "-q", "--detach")
    head = git(registry.path, "rev-parse", "HEAD")
    with pytest.raises(RegistryCorrupt, match="detached HEAD") as caught:
        registry.add("support_triage", dump(examples.support_triage_v2_prompt()), triage_manifest(), "v2")
    assert f"git -C {registry.path} checkout main" in (caught.value.hint or "")
    with pytest.raises(RegistryCorrupt, match="detached HEAD"):
        registry.label("support_triage", v1, "canary", reason="x")
    assert git(registry.path, "rev-parse", "HEAD") == head
    assert git(registry.path, "status", "--porcelain") == ""
    assert registry.resolve("support_triage").version == v1  # reading a detached HEAD is fine
    git(registry.path, "checkout", "-q", "main")
    v2 = registry.add("support_triage", dump(examples.support_triage_v2_prompt()), triage_manifest(), "v2")
    assert [h.version for h in registry.history("support_triage") if h.kind == "version"] == [v2, v1]


def test_on_a_detached_head_the_fix_names_the_registrys_own_branch(registry: Registry) -> None:
    git(registry.path, "branch", "-m", "main", "master")
    v1 = registry.add("support_triage", triage_json(), triage_manifest(), "v1", label="production")
    git(registry.path, "branch", "review")  # another branch at the same commit
    git(registry.path, "checkout", "-q", "--detach", "master")
    with pytest.raises(RegistryCorrupt, match="detached HEAD") as caught:
        registry.label("support_triage", v1, "canary", reason="x")
    hint = caught.value.hint or ""
    assert f"git -C {registry.path} checkout master" in hint and "checkout main" not in hint
    command = hint[hint.index("(") + 1:hint.index(")")]
    subprocess.run(shlex.split(command), check=True, capture_output=True)  # what the fix says
    registry.label("support_triage", v1, "canary", reason="on master again")
    assert git(registry.path, "branch", "--show-current").strip() == "master"


def test_a_long_ref_is_not_echoed(registry: Registry) -> None:
    registry.add("support_triage", triage_json(), triage_manifest(), "v1")
    for ref in (f"support_triage@{'a' * 10_000}", f"{'x' * 10_000}@"):
        with pytest.raises((UnknownVersion, DefinitionInvalid)) as caught:
            registry.resolve(ref)
        assert "a" * 10 not in caught.value.message and "x" * 10 not in caught.value.message  # nor in part
        assert len(caught.value.message) < 300


@pytest.mark.parametrize("who", ["<>", " ", "Ada\nLovelace", " <ada@example.com>"])
def test_an_author_git_cannot_record_is_refused_before_anything_is_written(registry: Registry, who: str) -> None:
    v1 = registry.add("support_triage", triage_json(), triage_manifest(), "v1")
    with left_unchanged(registry.path), pytest.raises(DefinitionInvalid) as caught:
        registry.label("support_triage", v1, "production", reason="release", who=who)
    assert caught.value.field == "who"
    with left_unchanged(registry.path), pytest.raises(DefinitionInvalid) as caught:
        registry.add("support_triage", dump(examples.support_triage_v2_prompt()), triage_manifest(), "v2", author=who)
    assert caught.value.field == "author"


def test_a_name_without_ascii_letters_gets_a_readable_address(registry: Registry) -> None:
    v1 = registry.add("support_triage", triage_json(), triage_manifest(), "v1")
    registry.label("support_triage", v1, "production", reason="release", who="名前")
    assert git(registry.path, "log", "-1", "--format=%an <%ae>").strip() == "名前 <unknown@teamstore.invalid>"


@pytest.mark.skipif(os.geteuid() != 0, reason="handing the repository to another user needs root")
def test_a_registry_owned_by_another_user_says_so(registry: Registry, monkeypatch: pytest.MonkeyPatch) -> None:
    registry.add("support_triage", triage_json(), triage_manifest(), "v1")
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", os.devnull)  # no safe.directory from this machine's config
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")
    for folder, _dirs, files in os.walk(registry.path):
        for entry in [folder, *(os.path.join(folder, f) for f in files)]:
            os.chown(entry, 12345, 12345)
    with pytest.raises(RegistryError) as caught:
        Registry(registry.path)
    assert "owned by another user" in caught.value.message
    assert f"safe.directory {registry.path}" in (caught.value.hint or "")


@pytest.fixture
def read_only_view(registry: Registry, tmp_path: Path) -> Iterator[Path]:
    """The registry mounted read-only elsewhere, as a worker's volume would be."""
    view = tmp_path / "read-only"
    view.mkdir()
    mounted = subprocess.run(["mount", "--bind", str(registry.path), str(view)], capture_output=True, check=False)
    if mounted.returncode != 0:
        pytest.skip("a read-only bind mount needs root")
    try:
        subprocess.run(["mount", "-o", "remount,ro,bind", str(view)], check=True, capture_output=True)
        yield view
    finally:
        subprocess.run(["umount", str(view)], check=True)


def test_a_read_only_checkout_can_be_read_and_refuses_writes_clearly(
    registry: Registry, read_only_view: Path
) -> None:
    version = registry.add("support_triage", triage_json(), triage_manifest(), "v1", label="production")
    reader = Registry(read_only_view)
    assert reader.resolve("support_triage@production").version == version
    assert reader.build("support_triage").version == version
    with pytest.raises(RegistryError) as caught:
        reader.label("support_triage", version, "canary", reason="try")
    assert "Read-only file system" in caught.value.message
    assert "writable checkout" in (caught.value.hint or "")


def test_git_variables_of_another_repository_do_not_redirect_the_registry(
    registry_path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # What a git hook or a CI step inside an application's checkout has in its environment.
    app = tmp_path / "app"
    app.mkdir()
    git(app, "init", "-q")
    git(app, "-c", "user.name=a", "-c", "user.email=a@a", "commit", "-q", "--allow-empty", "-m", "app")
    monkeypatch.setenv("GIT_DIR", str(app / ".git"))
    monkeypatch.setenv("GIT_WORK_TREE", str(app))
    monkeypatch.setenv("GIT_INDEX_FILE", str(app / ".git" / "index"))
    registry = Registry(registry_path, create=True)
    version = registry.add("support_triage", triage_json(), triage_manifest(), "v1", label="production")
    assert registry.resolve("support_triage@production").version == version
    for name in ("GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE"):
        monkeypatch.delenv(name)
    assert git(app, "log", "--format=%s").split() == ["app"]
    assert git(registry_path, "rev-list", "--count", "HEAD").strip() == "3"


@pytest.mark.parametrize(("key", "value"), [("version", 5), ("who", 7), ("why", ["x"]), ("previous", {})])
def test_a_hand_edited_label_log_entry_of_the_wrong_type_is_corrupt(registry: Registry, key: str, value: Any) -> None:
    registry.add("support_triage", triage_json(), triage_manifest(), "v1", label="production")
    log = registry.path / "labels" / "support_triage.log.jsonl"
    entry = json.loads(log.read_text().splitlines()[0])
    log.write_text(log.read_text() + json.dumps({**entry, key: value}) + "\n")
    git(registry.path, "commit", "-qam", "hand edit")
    with pytest.raises(RegistryCorrupt, match=f"line 2 is malformed: '{key}' is not text"):
        registry.history("support_triage")


def test_diff_of_a_hand_edited_shape_is_corrupt_not_a_traceback(registry: Registry) -> None:
    v1 = registry.add("support_triage", triage_json(), triage_manifest(), "v1")
    path = registry.path / "teams" / "support_triage" / "component.json"
    component = json.loads(path.read_text())
    component["config"]["participants"][1]["config"]["tools"] = [1]
    path.write_text(json.dumps(component))
    git(registry.path, "commit", "-qam", "hand edit")
    v2 = registry.history("support_triage")[0].version
    with pytest.raises(RegistryCorrupt, match="not a registered definition") as caught:
        registry.diff("support_triage", v1, v2)
    assert "revert" in (caught.value.hint or "")
