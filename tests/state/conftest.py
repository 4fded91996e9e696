"""Fixtures for the resume-state suites: a migrated store on every backend and kind of lease.

The state suites run on SQLite (row leases), Postgres with advisory-lock leases (``lock``, the default)
and Postgres with row leases (``row``).
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from teamstore.db.engine import create_engine
from teamstore.state.base import StateStore
from teamstore.state.factory import store_for
from tests.conftest import prepare


@pytest.fixture
def database_url(backend: tuple[str, str]) -> str:
    """The backend's database (empty until migrated)."""
    return backend[0]


@pytest.fixture
def lease(backend: tuple[str, str]) -> str:
    """The backend's kind of session lease; :func:`prepare` sets its database to it."""
    return backend[1]


@pytest.fixture
async def store(database_url: str, lease: str) -> AsyncIterator[StateStore]:
    """A migrated store on the backend, with its kind of lease."""
    await prepare(database_url, lease)
    engine = create_engine(database_url)
    store = store_for(engine, lease=lease)
    yield store
    await store.aclose()
    await engine.dispose()
