"""A row whose values no save can build on fails closed when judged, before any model call, on every backend.

A row version at the column's maximum can never be incremented, a negative one (or 0 beside a saved state)
is never matched by a save, a byte count that is not the state's misleads the size cap and erasure's counts:
each made every run spend its model calls and then fail to save, forever. Each is quarantined with its
reason when the session opens; the session starts fresh, saves, and resumes after.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import text, update
from typer.testing import CliRunner

from config_registry import Registry
from teamstore.cli import app
from teamstore.db.engine import create_engine
from teamstore.runtime.platform import Platform
from teamstore.settings import Settings
from teamstore.state.base import ROW_VERSION_MAX, SessionKey
from teamstore.state.schema import sessions
from tests.conftest import prepare

DAMAGES: dict[str, dict[str, Any]] = {
    "row_version at its maximum": {"row_version": ROW_VERSION_MAX},
    "row_version negative": {"row_version": -3},
    "row_version 0 beside a state": {"row_version": 0},
    "state_bytes not the state's": {"state_bytes": 5},
    "state_bytes negative": {"state_bytes": -1},
    "cleared row at the maximum row_version": {"row_version": ROW_VERSION_MAX, "state": None, "state_bytes": 0},
}


async def _damage(platform: Platform, values: dict[str, Any]) -> None:
    async with platform.engine.begin() as conn:
        await conn.execute(update(sessions).where(sessions.c.user_id == "alice").values(**values))


async def _open_and_run(platform: Platform, text: str) -> tuple[str, str | None, int]:
    async with platform.session("alice", "s1", team="support_triage") as s:
        assert s.resume is not None
        outcome, detail = s.resume.outcome, s.resume.detail  # judged at open, before the team ran
        await s.run(text)
    row = await platform.store.get(SessionKey("alice", "s1"))
    assert row is not None
    return outcome, detail, row.row_version


@pytest.mark.parametrize("damage", list(DAMAGES))
async def test_a_row_no_save_can_build_on_is_quarantined_at_open_and_the_next_run_saves(
    platform: Platform, damage: str
) -> None:
    await _open_and_run(platform, "My router ZX-81 drops every evening")
    values = DAMAGES[damage]
    await _damage(platform, values)

    outcome, detail, version = await _open_and_run(platform, "hello again")
    column = next(iter(values))
    assert outcome == "corrupt" and column in (detail or ""), detail
    assert 0 < version < ROW_VERSION_MAX  # the fresh run's state was saved
    (kept,) = await platform.store.list_quarantined("alice")
    assert kept.reason == "corrupt" and column in kept.detail

    outcome, _, after = await _open_and_run(platform, "and again")
    assert outcome == "resumed" and after == version + 1


@pytest.mark.parametrize("column", ["team", "team_version", "agentchat_version", "state"])
async def test_a_text_column_holding_bytes_fails_closed_and_is_repaired_on_sqlite(
    registry: Registry, tmp_path: Path, column: str
) -> None:
    # SQLite only: it keeps a blob in any column, where Postgres holds only text.
    engine = create_engine(f"sqlite:///{tmp_path / 'damaged.db'}")
    platform = Platform(engine, registry, settings=Settings(home=tmp_path / "home", auto_migrate=True,
                                                           lease_timeout_seconds=0.3))
    await platform.ensure_schema()
    try:
        await _open_and_run(platform, "My router ZX-81 drops every evening")
        async with engine.begin() as conn:
            await conn.execute(text(f"UPDATE ts_sessions SET {column} = X'302e372e35'"))  # the bytes of '0.7.5'
        outcome, detail, _ = await _open_and_run(platform, "hello again")
        assert outcome == "corrupt" and f"{column} holds a bytes" in (detail or ""), detail
        outcome, _, _ = await _open_and_run(platform, "and again")
        assert outcome == "resumed"
    finally:
        await platform.aclose()
        await engine.dispose()


def test_a_row_version_at_its_maximum_is_quarantined_by_the_command_line(
    backend: tuple[str, str], registry: Registry, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    url, lease = backend
    asyncio.run(prepare(url, lease))
    monkeypatch.setenv("TEAMSTORE_DATABASE_URL", url)
    monkeypatch.setenv("TEAMSTORE_SESSION_LEASE", lease)
    runner = CliRunner()

    def run(words: str) -> dict[str, Any]:
        out = runner.invoke(app, ["run", "--team", "support_triage", "--user", "alice", "--session", "s1", words,
                                  "--json"])
        assert out.exit_code == 0, out.output
        return json.loads(out.stdout)  # type: ignore[no-any-return]

    run("My router ZX-81 drops every evening")
    asyncio.run(_set_row_version(url, ROW_VERSION_MAX))
    refused = run("hello again")
    assert refused["resume"]["outcome"] == "corrupt" and refused["resume"]["quarantined"]
    assert "row_version" in refused["resume"]["detail"]
    assert run("and again")["resume"]["outcome"] == "resumed"
    (kept,) = json.loads(runner.invoke(app, ["sessions", "quarantine", "--json"]).stdout)
    assert kept["reason"] == "corrupt" and "row_version" in kept["detail"]


async def _set_row_version(url: str, version: int) -> None:
    from teamstore.db.engine import create_engine

    engine = create_engine(url)
    async with engine.begin() as conn:
        await conn.execute(update(sessions).values(row_version=version))
    await engine.dispose()
