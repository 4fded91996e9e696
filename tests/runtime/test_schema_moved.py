"""A worker left running while its database is migrated by a newer release (or restored from an older backup), on
SQLite and a real Postgres with both kinds of lease: from its next check of the database it opens no session
(``SchemaNotReady``, naming the migration) and writes nothing of the user it refused; a session already open
finishes; it takes sessions again once the database is back at its migration."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from pathlib import Path

import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from config_registry import Registry
from teamstore.app import open_platform
from teamstore.db.engine import create_engine
from teamstore.db.migrate import head_revision, revision_before
from teamstore.errors import SchemaNotReady
from teamstore.runtime.platform import Platform
from teamstore.settings import Settings
from tests.conftest import prepare

TEAM = "support_triage"
CHECK_SECONDS = 0.2
PAST_THE_CHECK = 0.3
NEWER = "9999"  # what a newer release's `teamstore db upgrade` leaves in the version table

Worker = Callable[[float], AbstractAsyncContextManager[Platform]]


@pytest.fixture
async def state(backend: tuple[str, str]) -> AsyncIterator[AsyncEngine]:
    """The backend's database at this code's migration, and an engine to look at it (and move its migration) with."""
    url, lease = backend
    await prepare(url, lease)
    engine = create_engine(url)
    yield engine
    await engine.dispose()


@pytest.fixture
def worker(backend: tuple[str, str], registry: Registry, tmp_path: Path) -> Worker:
    """A worker as a service runs one (``open_platform``, audit included) that reads the database again every
    ``check_seconds``; all of them share one home (the key file, the transcripts)."""
    url, lease = backend

    @asynccontextmanager
    async def started(check_seconds: float) -> AsyncIterator[Platform]:
        settings = Settings(home=tmp_path / "home", registry_path=registry.path, database_url=url,
                            session_lease=lease, db_check_seconds=check_seconds, lease_timeout_seconds=0.3)
        async with open_platform(settings) as platform:
            yield platform

    return started


async def _stamp(engine: AsyncEngine, revision: str | None) -> None:
    async with engine.begin() as conn:
        await conn.execute(text("UPDATE alembic_version SET version_num = :v"), {"v": revision})


async def _counts(engine: AsyncEngine) -> tuple[int, int, int]:
    """Session rows, audit subjects and ledger rows."""
    async with engine.connect() as conn:
        return tuple([int((await conn.execute(text(f"SELECT count(*) FROM {table}"))).scalar_one())  # type: ignore[return-value]
                      for table in ("ts_sessions", "ts_subjects", "ts_usage")])


async def _talk(platform: Platform, user: str) -> None:
    async with platform.session(user, "s1", team=TEAM) as s:
        await s.run("my router drops every evening")


async def test_a_worker_refuses_new_sessions_from_its_first_check_after_a_newer_release_migrated_the_database(
    state: AsyncEngine, worker: Worker
) -> None:
    async with worker(3600) as unchecked, worker(CHECK_SECONDS) as checking:
        await _talk(checking, "alice")
        await _stamp(state, NEWER)
        await _talk(unchecked, "alice")  # its check is not due: it goes on as before (the hour it was set to)
        before = await _counts(state)
        await asyncio.sleep(PAST_THE_CHECK)
        with pytest.raises(SchemaNotReady) as refused:
            await _talk(checking, "bob")
        assert f"at migration {NEWER}" in refused.value.message and "newer teamstore" in refused.value.message
        assert "stop this process" in (refused.value.hint or "")
        with pytest.raises(SchemaNotReady):  # every opening from then on, each reading the database again
            await _talk(checking, "alice")
        assert await _counts(state) == before  # no row, subject or ledger entry of bob's; alice's untouched

        await _stamp(state, head_revision())  # the newer release's backup restored: this code's migration again
        await _talk(checking, "bob")


async def test_a_worker_refuses_new_sessions_once_the_database_is_restored_from_a_backup_older_than_its_version(
    state: AsyncEngine, worker: Worker
) -> None:
    older = revision_before(head_revision())
    async with worker(CHECK_SECONDS) as platform:
        await _talk(platform, "alice")
        await _stamp(state, older)
        await asyncio.sleep(PAST_THE_CHECK)
        with pytest.raises(SchemaNotReady) as refused:
            await _talk(platform, "bob")
        assert f"at migration {older}; this code needs migration {head_revision()}" in refused.value.message
        assert "teamstore db upgrade" in (refused.value.hint or "")


async def test_a_session_open_as_the_database_is_migrated_finishes_and_saves_and_the_next_opening_is_refused(
    state: AsyncEngine, worker: Worker
) -> None:
    async with worker(CHECK_SECONDS) as platform:
        async with platform.session("alice", "s1", team=TEAM) as s:
            await _stamp(state, NEWER)
            await asyncio.sleep(PAST_THE_CHECK)
            await s.run("my router drops every evening")
            await s.save()
        async with state.connect() as conn:
            saved = (await conn.execute(text("SELECT state FROM ts_sessions WHERE session_id = 's1'"))).scalar()
        assert saved is not None
        with pytest.raises(SchemaNotReady):
            await _talk(platform, "alice")
