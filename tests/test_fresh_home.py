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
    ["transcripts", "mark", "--as-reached-at", "aws"],
    ["retention", "sweep"],
    ["cost"],
    ["memory", "show", "--user", "alice"],
    ["memory", "forget", "--user", "alice", "--all"],
    ["erase", "--user", "alice", "--dry-run"],
    ["erase", "--user", "alice", "--request-id", "REQ-1", "--yes"],  # a receipt 'no_match' everywhere would mislead
    ["erase", "list"],
    ["erase", "extend", "REQ-1", "--by", "2m", "--reason", "complex"],
    ["export", "--user", "alice"],  # an archive saying 'nothing held' would mislead as much
    ["export", "status", "ex-0123456789abcdef01234567"],
    ["erase", "status", "REQ-1"],
    ["keys", "status"],  # a health check: it must not make the database, nor a key file, to look at
]


@pytest.mark.parametrize("args", ON_THE_DATABASE, ids=" ".join)
def test_a_command_on_a_database_that_does_not_exist_yet_creates_nothing(args: list[str]) -> None:
    home = Path(os.environ["TEAMSTORE_HOME"])
    result = runner.invoke(app, args, env={"COLUMNS": "300"})
    assert result.exit_code == 1, result.output
    assert "error: the SQLite database" in result.output and "does not exist yet" in result.output
    assert "fix: `teamstore db upgrade` creates it" in result.output
    assert not home.exists()


def _crm(tmp_path: Path) -> Path:
    """Another application's SQLite database, named by mistake."""
    import sqlite3

    other = tmp_path / "crm.sqlite"
    with sqlite3.connect(other) as conn:
        conn.execute("CREATE TABLE customers (id INTEGER PRIMARY KEY, name TEXT)")
    return other


def _tables(path: Path) -> list[str]:
    import sqlite3

    with sqlite3.connect(path) as conn:
        return [name for (name,) in conn.execute("SELECT name FROM sqlite_master")]


# `sessions restore` reads the registry first (a test below takes its platform's path); `db` is about the schema.
@pytest.mark.parametrize("args", [a for a in ON_THE_DATABASE if a[0] != "db" and a[1:2] != ["restore"]], ids=" ".join)
def test_a_command_on_a_database_without_teamstores_tables_makes_none(args: list[str], tmp_path: Path) -> None:
    other = _crm(tmp_path)
    result = runner.invoke(app, args, env={"COLUMNS": "300", "TEAMSTORE_DATABASE_URL": f"sqlite:///{other}"})
    assert result.exit_code == 1 and "has no teamstore tables" in result.output, result.output
    assert _tables(other) == ["customers"]


async def test_a_platform_for_what_is_stored_makes_no_tables_where_there_are_none(tmp_path: Path) -> None:
    from teamstore.app import App
    from teamstore.errors import SchemaNotReady
    from teamstore.settings import Settings

    other = _crm(tmp_path)
    settings = Settings(database_url=f"sqlite:///{other}", home=tmp_path / "home")
    App(settings).registry(create=True)
    platform = App(settings, must_exist=True).platform(audit=False)  # as `sessions restore` opens it
    try:
        with pytest.raises(SchemaNotReady, match="has no teamstore tables"):
            await platform.ensure_schema()
    finally:
        await platform.aclose()
    assert _tables(other) == ["customers"]
    async with App(settings).platform(audit=False) as platform:  # one that runs teams makes them, as ever
        await platform.ensure_schema()
    assert "ts_sessions" in _tables(other)


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
