"""docs/registry.md run as written: building a labelled team from Python, recovering a registration killed before
its commit (looked at, discarded, then committed), and the entry points it shows teamstore declaring."""

from __future__ import annotations

import asyncio
import re
import shutil
import tomllib
from pathlib import Path

import pytest

from config_registry import Registry
from teamstore.examples import example_manifest
from tests.conftest import git
from tests.guides.guide import DOCS, Shell, commands, pieces

GUIDE = "registry.md"
ROOT = DOCS.parent


@pytest.fixture
def registry(shell: Shell, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The guide's ``path/to/registry`` (relative to the shell's folder), holding support_triage@production."""
    monkeypatch.setenv("TEAMSTORE_REGISTRY_PATH", "path/to/registry")
    shell.json("registry", "add", "support_triage", "--factory", "teamstore.examples:support_triage",
               "--persist", "researcher", "--context-bound", "20", "-m", "first version", "--label", "production")
    return shell.cwd / "path" / "to" / "registry"


def _a_registration_killed_before_its_commit(registry: Path, scratch: Path) -> None:
    """What a writer killed between writing the definition's two files and committing them leaves: the new
    prompt's component and manifest, uncommitted, in the working tree."""
    shutil.rmtree(scratch, ignore_errors=True)
    Registry(scratch, create=True).add_from_factory(
        "teamstore.examples:support_triage_v2_prompt", example_manifest("support_triage_v2_prompt"), "prompt change")
    for name in ("component.json", "manifest.json"):
        shutil.copyfile(scratch / "teams" / "support_triage" / name, registry / "teams" / "support_triage" / name)


def test_a_labelled_team_is_built_from_python(registry: Path) -> None:
    done = asyncio.run(pieces(GUIDE)["build.py"].run())
    assert done["result"].messages[0].to_text() == "hi"
    assert done["built"].version == Registry(registry).resolve("support_triage@production").version


def test_an_interrupted_registration_is_shown_discarded_and_committed(
    shell: Shell, registry: Path, tmp_path: Path
) -> None:
    look, discard, commit = commands(GUIDE)
    assert (look.args, discard.args[-1], commit.args[-3]) == (["registry", "recover"], "--discard", "--commit")
    head = git(registry, "rev-parse", "HEAD")
    _a_registration_killed_before_its_commit(registry, tmp_path / "scratch")
    shell.line(look, status=2, said="teams/support_triage/: passes every check a registration applies")
    shell.line(discard)
    assert git(registry, "status", "--porcelain", "--untracked-files=all") == ""
    assert git(registry, "rev-parse", "HEAD") == head

    _a_registration_killed_before_its_commit(registry, tmp_path / "scratch")
    shell.line(commit)
    assert git(registry, "status", "--porcelain", "--untracked-files=all") == ""
    recovered = Registry(registry).resolve(f"support_triage@{git(registry, 'rev-parse', 'HEAD').strip()}")
    assert recovered.message == "prompt change, recovered"


def test_the_entry_points_the_guide_shows_are_teamstore_s_own() -> None:
    (shown,) = re.findall(r"```toml\n(.*?)```", (DOCS / GUIDE).read_text(encoding="utf-8"), re.DOTALL)
    declared = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["entry-points"]
    assert tomllib.loads(shown)["project"]["entry-points"] == declared
