"""The composition root builds each piece once, when first asked for, and closes what it built and only that."""

from __future__ import annotations

import contextlib
from pathlib import Path

import pytest

from config_registry import Registry
from teamstore import examples
from teamstore.app import App, open_platform
from teamstore.errors import SchemaNotReady
from teamstore.runtime.session import Session, SessionDeps, SessionLimits
from teamstore.runtime.teams import TeamBuilder
from teamstore.settings import Settings
from teamstore.state.base import SessionKey


def _registry(path: Path) -> Registry:
    registry = Registry(path, create=True)
    registry.add("support_triage", examples.support_triage().dump_component(),
                 examples.example_manifest("support_triage"), "v1", label="production")
    return registry


async def test_a_reading_app_on_a_new_home_makes_no_database_and_names_the_upgrade(tmp_path: Path) -> None:
    app = App(Settings(home=tmp_path / "home"), must_exist=True)
    with pytest.raises(SchemaNotReady) as raised:
        await app.ensure_schema()
    await app.aclose()
    assert "teamstore db upgrade" in (raised.value.hint or "")
    assert not (tmp_path / "home" / "teamstore.db").exists()


async def test_closing_an_app_builds_nothing_it_was_not_asked_for_and_twice_is_once(tmp_path: Path) -> None:
    app = App(Settings(home=tmp_path / "home"), must_exist=True)  # its engine would refuse the missing file
    await app.aclose()
    await app.aclose()
    assert not (tmp_path / "home").exists()


async def test_each_piece_is_built_once_and_the_platform_shares_them(tmp_path: Path) -> None:
    _registry(tmp_path / "home" / "registry")
    app = App(Settings(home=tmp_path / "home"))
    assert app.engine is app.engine and app.state_store is app.state_store
    platform = app.platform()
    assert platform.engine is app.engine and platform.store is app.state_store
    transcripts = [o for o in platform.observers if getattr(o, "store", None) is app.transcript_store]
    assert len(transcripts) == 1  # the transcript observer writes through the app's store, which the app closes
    async with platform, platform.session("alice", "s1", team="support_triage") as s:
        await s.run("My router ZX-81 drops every evening")
    await app.aclose()  # the platform closed it already: nothing left to close


async def test_a_session_runs_on_its_deps_alone_with_no_platform(tmp_path: Path) -> None:
    settings = Settings(home=tmp_path / "home")
    app = App(settings)
    try:
        await app.ensure_schema(lease=True)
        teams = TeamBuilder(_registry(tmp_path / "registry"), refresh_seconds=0)
        deps = SessionDeps(store=app.state_store, observers=(), limits=SessionLimits.from_settings(settings),
                           build_team=teams.build, autogen_spans=contextlib.nullcontext, worker_id="test")
        async with Session(deps, "alice", "s1", "support_triage", lease_timeout=1.0) as s:
            await s.run("My router ZX-81 drops every evening")
        assert s.resume is not None and s.resume.outcome == "new"
        row = await app.state_store.get(SessionKey("alice", "s1"))
        assert row is not None and row.row_version == 1
    finally:
        await app.aclose()


async def test_platform_from_settings_is_the_composition_roots_platform(tmp_path: Path) -> None:
    _registry(tmp_path / "home" / "registry")
    platform = open_platform(Settings(home=tmp_path / "home"), audit=False)
    await platform.aclose()
    assert platform.observers == [] and platform.settings.home == tmp_path / "home"


def test_a_platform_on_a_registry_path_with_nothing_there_says_so_and_makes_nothing(tmp_path: Path) -> None:
    from config_registry.errors import RegistryNotFound

    settings = Settings(home=tmp_path / "home", registry_path=tmp_path / "mistyped")
    with pytest.raises(RegistryNotFound, match="no registry at"):
        open_platform(settings)
    assert not (tmp_path / "mistyped").exists() and not (tmp_path / "home" / "teamstore.db").exists()
