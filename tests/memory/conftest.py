"""Fixtures for the memory suites: a migrated database on SQLite and a real Postgres, the memory store on it,
and a Platform whose registry holds the helpdesk team (tests/memory/team.py) with its memory declared."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from sqlalchemy.ext.asyncio import AsyncEngine

from config_registry import Registry
from teamstore.db.engine import create_engine
from teamstore.events import RunObserver
from teamstore.keys import KeyService
from teamstore.memory.store import MemoryStore
from teamstore.runtime.platform import Platform
from teamstore.settings import Settings
from tests.conftest import prepare
from tests.memory.team import TEAM, helpdesk, helpdesk_manifest


@pytest.fixture
async def engine(database_url: str) -> AsyncIterator[AsyncEngine]:
    """The migrated database, SQLite or a real Postgres (``database_url``, the conformance parametrisation);
    SQLite leases sessions in the row, Postgres with its advisory locks."""
    await prepare(database_url, "row" if database_url.startswith("sqlite") else "lock")
    found = create_engine(database_url)
    yield found
    await found.dispose()


@pytest.fixture
def store(engine: AsyncEngine) -> MemoryStore:
    """The memory store on the migrated database, sealing under users' data keys as the composition root
    builds it."""
    return MemoryStore(engine, keys=KeyService.from_settings(engine, Settings()))


@pytest.fixture
def channel() -> str:
    """A recording channel of this test's own (tests/memory/team.py CALLS)."""
    return uuid.uuid4().hex[:12]


@pytest.fixture
def registry(registry_path: Path, channel: str) -> Registry:
    """A registry holding the helpdesk, its memory declared, labelled production."""
    reg = Registry(registry_path, create=True)
    reg.add(TEAM, helpdesk(channel).dump_component(), helpdesk_manifest(), "v1", label="production")
    return reg


def make_platform(engine: AsyncEngine, registry: Registry, tmp_path: Path,
                  observers: list[RunObserver] | None = None, **settings: object) -> Platform:
    """A Platform on ``engine`` (the caller's) and ``registry``, with ``observers``."""
    lease = "row" if engine.dialect.name == "sqlite" else "lock"
    knobs = Settings(home=tmp_path / "home", lease_timeout_seconds=2, auto_migrate=True, registry_refresh_seconds=0,
                     session_lease=lease, **settings)  # type: ignore[arg-type]
    return Platform(engine, registry, settings=knobs, observers=observers or [])


@pytest.fixture
async def platform(engine: AsyncEngine, registry: Registry, tmp_path: Path) -> AsyncIterator[Platform]:
    """A Platform with no audit observers; closing it waits for the memory writes in flight."""
    p = make_platform(engine, registry, tmp_path)
    await p.ensure_schema()
    yield p
    await p.aclose()
