"""Fixtures of the guides' suite: a shell in a fresh home, on the embedded default or a throwaway Postgres."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.guides.guide import Shell


@pytest.fixture
def shell(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Shell:
    """Where the reader types the guide's commands: a folder of its own (the current one, where relative paths
    land), the example teams' offline model client (no network, no key), the embedded database."""
    monkeypatch.setenv("OPENAI_API_KEY", "")
    cwd = tmp_path / "shell"
    cwd.mkdir()
    monkeypatch.chdir(cwd)
    return Shell(cwd)


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def on_database(request: pytest.FixtureRequest, shell: Shell, monkeypatch: pytest.MonkeyPatch) -> Shell:
    """The shell on the embedded default, or on a throwaway Postgres database migrated as production is
    (``teamstore db upgrade``, as the operations guide says, before anything else)."""
    if request.param == "postgres":
        monkeypatch.setenv("TEAMSTORE_DATABASE_URL", request.getfixturevalue("postgres_url"))
        shell.json("db", "upgrade")
    return shell
