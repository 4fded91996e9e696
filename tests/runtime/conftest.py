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


@pytest.fixture
def registry(registry_path: Path) -> Registry:
    """A registry with the example teams registered and labelled production."""
    reg = Registry(registry_path)
    reg.add("support_triage", examples.support_triage().dump_component(),
            examples.example_manifest("support_triage"), "v1", label="production")
    reg.add("single_assistant", examples.single_assistant().dump_component(),
            examples.example_manifest("single_assistant"), "v1", label="production")
    return reg


def renamed_manifest() -> Manifest:
    """The renamed variant's manifest, registered under the support team's name."""
    return examples.example_manifest("support_triage_v2_renamed").model_copy(update={"name": "support_triage"})


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
