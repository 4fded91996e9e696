"""Fixtures of the key suite: a key service on SQLite and a real Postgres, its key-encryption key in the local
key file or in KMS (moto's server over HTTP, the endpoint S3 uses too)."""

from __future__ import annotations

import signal
from collections.abc import Iterator

import pytest
from sqlalchemy.ext.asyncio import AsyncEngine

from teamstore.keys import KeyService
from teamstore.settings import Settings
from tests.keys.outage import Outage


@pytest.fixture(autouse=True)
def _ctrl_c_given_back() -> Iterator[None]:
    """Ctrl-C as it was before the test: ``keys rotate`` run in this process ignores it from the end of its
    rotation on, as it does in its own process until it exits, and pytest would stay deaf to it."""
    handler = signal.getsignal(signal.SIGINT)
    yield
    signal.signal(signal.SIGINT, handler)


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
