"""Fixtures of the key suite: a key service on SQLite and a real Postgres, its key-encryption key in the local
key file or in KMS (moto's server over HTTP, the endpoint S3 uses too); a live database with its backups."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from sqlalchemy.ext.asyncio import AsyncEngine

from teamstore.db.engine import create_engine
from teamstore.db.migrate import upgrade
from teamstore.keys import KeyService
from teamstore.settings import Settings
from tests.keys.backups import Backups
from tests.keys.outage import Outage


@pytest.fixture(params=["local", pytest.param("kms", marks=pytest.mark.s3)])
def kek(request: pytest.FixtureRequest) -> str:
    """Where the key-encryption key lives: ``local`` (the key file in the test's home) or ``kms``."""
    if request.param == "kms":
        request.getfixturevalue("kms_key")
    return str(request.param)


@pytest.fixture
def keys(engine: AsyncEngine, kek: str) -> KeyService:
    """The key service on the migrated database, as the environment (and ``kek``) describe it."""
    return KeyService.from_settings(engine, Settings())


@pytest.fixture
def kms_outage(kms_key: str, s3_env: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[Outage]:
    """KMS (with ``kms_key`` as ``TEAMSTORE_KMS_KEY_ID``) reached through an :class:`Outage` proxy, which starts
    up and passing requests through: a test sets its ``down``, ``answers`` or ``refuse`` to make KMS fail."""
    proxy = Outage(s3_env)
    monkeypatch.setenv("AWS_ENDPOINT_URL_KMS", proxy.endpoint)
    yield proxy
    proxy.stop()


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
async def live(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[tuple[AsyncEngine, Backups]]:
    """The live database (migrated) and how to back it up and restore it."""
    if request.param == "sqlite":
        url, server = f"sqlite:///{(tmp_path / 'live.db').as_posix()}", None
    else:
        url, server = request.getfixturevalue("postgres_url"), request.getfixturevalue("postgres_server")
    engine = create_engine(url)
    await upgrade(engine)
    yield engine, Backups(url, tmp_path, server)
    await engine.dispose()
