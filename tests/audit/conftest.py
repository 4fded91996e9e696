"""Fixtures of the audit suite: migrated databases, transcript stores of both kinds (the OTLP receiver is
the services plugin's)."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from sqlalchemy.ext.asyncio import AsyncEngine

from teamstore.audit.transcripts import TranscriptStore
from teamstore.audit.transcripts.local import LocalTranscriptStore
from teamstore.db.engine import create_engine
from teamstore.db.migrate import upgrade


@pytest.fixture
async def sqlite_engine(tmp_path: Path) -> AsyncIterator[AsyncEngine]:
    """A migrated SQLite database, for tests whose subject is not the database."""
    eng = create_engine(f"sqlite:///{(tmp_path / 'audit.db').as_posix()}")
    await upgrade(eng)
    yield eng
    await eng.dispose()


@pytest.fixture(params=["local", pytest.param("s3", marks=pytest.mark.s3)])
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[TranscriptStore]:
    """The transcript conformance fixture: a local folder and S3 over HTTP (moto's server)."""
    if request.param == "local":
        backend: TranscriptStore = LocalTranscriptStore(tmp_path / "transcripts")
    else:
        from teamstore.audit.transcripts.s3 import S3TranscriptStore

        bucket = request.getfixturevalue("s3_bucket")
        backend = S3TranscriptStore.from_url(f"s3://{bucket}/audit/{uuid.uuid4().hex[:6]}")
    yield backend
    await backend.close()
