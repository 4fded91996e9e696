"""Fixtures for the resume-state suites: a migrated store on every backend."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from teamstore.db.engine import create_engine
from teamstore.db.migrate import upgrade
from teamstore.state.sql import SqlStateStore, store_for


@pytest.fixture
async def store(database_url: str) -> AsyncIterator[SqlStateStore]:
    """A migrated SqlStateStore on SQLite or a real Postgres (the conformance parameter)."""
    engine = create_engine(database_url)
    await upgrade(engine)
    store = store_for(engine)
    yield store
    await store.aclose()
    await engine.dispose()
