"""Fixtures for the resume-state suites: a migrated store on every backend and kind of lease.

The state suites run on SQLite (row leases), Postgres with advisory-lock leases (``lock``, the default)
and Postgres with row leases (``row``).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from teamstore.db.engine import create_engine
from teamstore.db.migrate import upgrade
from teamstore.state.sql import SqlStateStore, lease_mode, set_lease_mode, store_for


@pytest.fixture(params=[
    "sqlite",
    pytest.param("postgres", marks=pytest.mark.postgres),
    pytest.param("postgres-row", marks=pytest.mark.postgres),
])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[str, str]:
    """(database URL, session lease) for each backend the state suites run on."""
    if request.param == "sqlite":
        return f"sqlite:///{(tmp_path / 'conformance.db').as_posix()}", "row"
    url: str = request.getfixturevalue("postgres_url")
    return url, "row" if request.param == "postgres-row" else "lock"


@pytest.fixture
def database_url(backend: tuple[str, str]) -> str:
    """The backend's database (empty until migrated)."""
    return backend[0]


@pytest.fixture
def lease(backend: tuple[str, str]) -> str:
    """The backend's kind of session lease; :func:`prepare` sets its database to it."""
    return backend[1]


async def prepare(url: str, lease: str) -> None:
    """Migrate ``url`` and record ``lease`` as the way its sessions are leased."""
    engine = create_engine(url)
    await upgrade(engine)
    if await lease_mode(engine) != lease:
        await set_lease_mode(engine, lease)
    await engine.dispose()


@pytest.fixture
async def store(database_url: str, lease: str) -> AsyncIterator[SqlStateStore]:
    """A migrated store on the backend, with its kind of lease."""
    await prepare(database_url, lease)
    engine = create_engine(database_url)
    store = store_for(engine, lease=lease)
    yield store
    await store.aclose()
    await engine.dispose()
