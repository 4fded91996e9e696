"""Fixtures of the audit suite: migrated databases, transcript stores of both kinds (the OTLP receiver is
the services plugin's)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from sqlalchemy.ext.asyncio import AsyncEngine

from teamstore.audit.transcripts import TranscriptStore
from teamstore.db.engine import create_engine
from teamstore.db.migrate import upgrade
from tests.audit.transcript_backends import BACKENDS, Backend, LocalBackend, S3Backend


def still_running() -> list[asyncio.Future[object]]:
    """The tasks of the running event loop that have not ended, but the caller's."""
    return [task for task in asyncio.all_tasks() if task is not asyncio.current_task() and not task.done()]


@pytest.fixture
async def nothing_left_running() -> AsyncIterator[None]:
    """Fail a test that leaves a task running once its databases are disposed (requested first, with
    ``pytest.mark.usefixtures``, its teardown comes after theirs): an audit built without a platform is drained as
    :meth:`teamstore.runtime.platform.Platform.aclose` drains it. Left running, an outbox flush holds a pooled
    connection across the engine's disposal; the event loop's shutdown cancels it mid-statement, and the
    connection is dropped unclosed (SQLAlchemy warns when the garbage collector finds it, tests later)."""
    yield
    assert not still_running(), f"tasks left running after the test: {still_running()}"


@pytest.fixture
async def sqlite_engine(tmp_path: Path) -> AsyncIterator[AsyncEngine]:
    """A migrated SQLite database, for tests whose subject is not the database."""
    eng = create_engine(f"sqlite:///{(tmp_path / 'audit.db').as_posix()}")
    await upgrade(eng)
    yield eng
    await eng.dispose()


@pytest.fixture(params=[pytest.param(name, marks=pytest.mark.s3) if name.startswith("s3") else name
                        for name in BACKENDS])
async def transcript_backend(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Backend]:
    """The transcript conformance fixture: a local folder, S3 over HTTP (moto's server) in a plain bucket,
    and in a versioned bucket with Object Lock."""
    if request.param == "local":
        backend: Backend = LocalBackend(tmp_path / "transcripts")
    else:
        request.getfixturevalue("s3_env")
        backend = S3Backend(locked=request.param == "s3-locked")
    yield backend
    await backend.store.close()


@pytest.fixture
def store(transcript_backend: Backend) -> TranscriptStore:
    """The store of each conformance backend."""
    return transcript_backend.store
