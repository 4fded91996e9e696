"""Fixtures for the runtime suites: a registry holding the example teams and a Platform over a real database."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from config_registry import Manifest, Registry
from teamstore import examples
from teamstore.db.engine import create_engine
from teamstore.runtime.platform import Platform
from teamstore.settings import Settings
from tests.conftest import prepare


def without_memory(manifest: Manifest) -> Manifest:
    """``manifest`` keeping no user memory: the resume suites tell a fresh session by what the team no longer
    knows, which a kept memory would tell it again (tests/memory runs the team with its memory)."""
    return manifest.model_copy(update={"memory": None})


@pytest.fixture
def registry(registry_path: Path) -> Registry:
    """A registry with the example teams registered (without user memory) and labelled production."""
    reg = Registry(registry_path, create=True)
    reg.add("support_triage", examples.support_triage().dump_component(),
            without_memory(examples.example_manifest("support_triage")), "v1", label="production")
    reg.add("single_assistant", examples.single_assistant().dump_component(),
            examples.example_manifest("single_assistant"), "v1", label="production")
    return reg


def renamed_manifest() -> Manifest:
    """The renamed variant's manifest, registered under the support team's name (without user memory)."""
    return examples.example_manifest("support_triage_v2_renamed").model_copy(
        update={"name": "support_triage", "memory": None})


@pytest.fixture
def database_url(backend: tuple[str, str]) -> str:
    """The backend's database."""
    return backend[0]


@pytest.fixture
async def platform(backend: tuple[str, str], registry: Registry, tmp_path: Path) -> AsyncIterator[Platform]:
    """A Platform over SQLite, or a real Postgres with either kind of lease; no audit observers."""
    url, lease = backend
    await prepare(url, lease)
    settings = Settings(
        home=tmp_path / "home", lease_timeout_seconds=0.3, auto_migrate=True, registry_refresh_seconds=0,
        session_lease=lease,
    )
    engine = create_engine(url)
    p = Platform(engine, registry, settings=settings)
    await p.ensure_schema()
    yield p
    await p.aclose()  # closes the store's connection pool; the engine is the test's
    await engine.dispose()
