"""Fixtures of the analytics suite: the hand-worked ledger on each database, and the environment that
points the command line and the Python API at it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from sqlalchemy.ext.asyncio import AsyncEngine

from tests.analytics.seed import seed_ledger

PRICE_FILE = {"version": "hand-1", "currency": "USD", "models": {
    "m-big": [{"effective_from": "2020-01-01", "input": 3, "output": 15}],
    "m-small-*": [{"effective_from": "2020-01-01", "input": 0.15, "output": 0.60}],
    "m-free": [{"effective_from": "2020-01-01", "input": 0, "output": 0}],
}}


@pytest.fixture
async def ledger(engine: AsyncEngine) -> AsyncEngine:
    """The hand-worked ledger of ``seed.py`` on each database."""
    await seed_ledger(engine)
    return engine


@pytest.fixture
def ledger_env(ledger: AsyncEngine, database_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> AsyncEngine:
    """TEAMSTORE_DATABASE_URL and TEAMSTORE_PRICES_PATH naming the seeded database and its price table."""
    prices = tmp_path / "prices.json"
    prices.write_text(json.dumps(PRICE_FILE), encoding="utf-8")
    monkeypatch.setenv("TEAMSTORE_DATABASE_URL", database_url)
    monkeypatch.setenv("TEAMSTORE_PRICES_PATH", str(prices))
    return ledger
