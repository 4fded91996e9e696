"""Commands on a home where nothing exists yet: those that only read, or act on what is stored, create
nothing there and say what would create it."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

from teamstore.cli import app

runner = CliRunner()

ON_THE_DATABASE = [
    ["db", "current"],
    ["db", "current", "--json"],
    ["db", "lease-mode"],
    ["db", "lease-mode", "row"],
    ["sessions", "list"],
    ["sessions", "show", "--user", "alice", "--session", "s1"],
    ["sessions", "quarantine"],
    ["sessions", "delete", "--user", "alice", "--session", "s1"],
    ["sessions", "restore", "1"],
    ["transcripts", "show", "--user", "alice", "--session", "s1"],
    ["transcripts", "flush"],  # from a cron job, 'delivered 0' would hide a mistyped TEAMSTORE_HOME
    ["retention", "sweep"],
    ["cost"],
    ["memory", "show", "--user", "alice"],
    ["memory", "forget", "--user", "alice", "--all"],
    ["erase", "--user", "alice", "--dry-run"],
    ["erase", "--user", "alice", "--request-id", "REQ-1", "--yes"],  # a receipt 'no_match' everywhere would mislead
    ["erase", "list"],
    ["erase", "extend", "REQ-1", "--by", "2m", "--reason", "complex"],
    ["export", "--user", "alice"],  # an archive saying 'nothing held' would mislead as much
    ["erase", "status", "REQ-1"],
]


@pytest.mark.parametrize("args", ON_THE_DATABASE, ids=" ".join)
def test_a_command_on_a_database_that_does_not_exist_yet_creates_nothing(args: list[str]) -> None:
    home = Path(os.environ["TEAMSTORE_HOME"])
    result = runner.invoke(app, args, env={"COLUMNS": "300"})
    assert result.exit_code == 1, result.output
    assert "error: the SQLite database" in result.output and "does not exist yet" in result.output
    assert "fix: `teamstore db upgrade` creates it" in result.output
    assert not home.exists()


ON_THE_REGISTRY = [
    ["registry", "list"],
    ["registry", "list", "--json"],
    ["registry", "show", "support_triage"],
    ["registry", "history", "support_triage"],
    ["registry", "diff", "support_triage", "production", "staging"],
    ["registry", "check", "support_triage", "--from", "production", "--to", "staging"],
    ["registry", "label", "support_triage", "production", "staging", "--reason", "ship"],
    ["registry", "recover"],
]


@pytest.mark.parametrize("args", ON_THE_REGISTRY, ids=" ".join)
def test_a_command_on_a_registry_that_does_not_exist_yet_creates_nothing(args: list[str]) -> None:
    home = Path(os.environ["TEAMSTORE_HOME"])
    result = runner.invoke(app, args, env={"COLUMNS": "300"})
    assert result.exit_code == 1, result.output
    assert "error: no registry at" in result.output and "does not exist yet" in result.output
    assert "fix: `teamstore registry add` creates it" in result.output
    assert not home.exists()


def test_an_empty_folder_is_no_registry_yet_and_is_left_empty(tmp_path: Path) -> None:
    folder = tmp_path / "registry"
    folder.mkdir()
    result = runner.invoke(app, ["registry", "list"], env={"TEAMSTORE_REGISTRY_PATH": str(folder)})
    assert result.exit_code == 1 and "error: no registry at" in result.output
    assert list(folder.iterdir()) == []


def test_restoring_a_quarantined_state_reads_the_registry_and_never_creates_it() -> None:
    home = Path(os.environ["TEAMSTORE_HOME"])
    assert runner.invoke(app, ["db", "upgrade"]).exit_code == 0
    result = runner.invoke(app, ["sessions", "restore", "1"], env={"COLUMNS": "300"})
    assert result.exit_code == 1 and "error: no registry at" in result.output, result.output
    assert not (home / "registry").exists()
