"""The retention sweep and the transcript outbox's claims on a host whose clock disagrees with the database's
(Postgres): quarantined states age, and claims stand or pass, on the server's clock. A skewed host is this process
with its clock moved (:func:`tests.clocks.host_clock`)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import SimpleNamespace

import pytest
from sqlalchemy import Interval, func, insert, literal, select
from sqlalchemy.ext.asyncio import AsyncEngine

from teamstore.audit import claims, outbox
from teamstore.audit.retention import sweep_all
from teamstore.audit.rewrites import SETTLED, record_rewrite
from teamstore.audit.schema import rewrites
from teamstore.audit.subjects import ensure_subject
from teamstore.audit.transcripts.local import LocalTranscriptStore
from teamstore.db.engine import create_engine
from teamstore.db.migrate import upgrade
from teamstore.settings import Settings
from teamstore.state.schema import quarantine
from tests.clocks import host_clock

pytestmark = pytest.mark.postgres
SKEW = timedelta(minutes=6)
CLAIM = outbox.in_flight_for(60)  # a claim on an upload on its way: shorter than the skew


@pytest.fixture
async def engine(postgres_url: str) -> AsyncIterator[AsyncEngine]:
    eng = create_engine(postgres_url)
    await upgrade(eng)
    yield eng
    await eng.dispose()


async def _quarantined(engine: AsyncEngine, session_id: str, age: timedelta) -> None:
    """A state set aside ``age`` ago by the database's clock."""
    async with engine.begin() as conn:
        await conn.execute(insert(quarantine).values(
            user_id="alice", session_id=session_id, reason="corrupt", detail="test", team="t", team_version="v",
            schema_version=1, agentchat_version="0.7.5", fingerprints={}, state="{}", state_bytes=2, row_version=1,
            quarantined_at=func.now() - literal(age, Interval())))


@pytest.mark.parametrize("offset", [-SKEW, SKEW], ids=["behind", "ahead"])
async def test_a_sweep_on_a_skewed_host_removes_quarantined_states_past_retention_by_the_database_clock(
    engine: AsyncEngine, tmp_path: Path, offset: timedelta
) -> None:
    retention = timedelta(days=Settings().quarantine_retention_days)
    await _quarantined(engine, "within", retention - timedelta(minutes=3))
    await _quarantined(engine, "past", retention + timedelta(minutes=3))
    with host_clock(offset):
        report = await sweep_all(Settings(), engine, LocalTranscriptStore(tmp_path / "t"))
    async with engine.connect() as conn:
        assert (await conn.scalars(select(quarantine.c.session_id))).all() == ["within"]
    assert report.quarantined == 1


async def _queued(engine: AsyncEngine) -> str:
    """A transcript queued in the outbox; its subject."""
    subject, _ = await ensure_subject(engine, "alice")
    await outbox.enqueue(engine, "run-1", f"subjects/{subject}/run-1", subject, b"gz", "S3 unreachable")
    return subject


async def test_a_flusher_on_a_host_whose_clock_runs_ahead_cannot_take_a_claimed_transcript(
    engine: AsyncEngine,
) -> None:
    await _queued(engine)
    assert await claims.claim_next(engine, "flusher-a", CLAIM) is not None
    with host_clock(SKEW):
        assert await claims.claim_next(engine, "flusher-b", CLAIM) is None
        assert not await claims.purge_settled(engine)
    assert await claims.renew(engine, "run-1", "flusher-a", CLAIM)


async def test_a_claim_taken_on_a_host_whose_clock_runs_behind_still_holds_against_others(
    engine: AsyncEngine,
) -> None:
    await _queued(engine)
    with host_clock(-SKEW):
        assert await claims.claim_next(engine, "flusher-b", CLAIM) is not None
    assert await claims.claim_next(engine, "flusher-a", CLAIM) is None


@pytest.mark.parametrize(("claimed_on", "read_on"), [(-SKEW, timedelta(0)), (timedelta(0), SKEW)],
                         ids=["claimed-behind", "read-ahead"])
async def test_an_erasure_sees_an_upload_that_may_still_land_whatever_the_hosts_clocks_say(
    engine: AsyncEngine, claimed_on: timedelta, read_on: timedelta
) -> None:
    subject, _ = await ensure_subject(engine, "alice")
    with host_clock(claimed_on):  # the worker whose upload S3 left unanswered
        await outbox.enqueue(engine, "run-1", f"subjects/{subject}/run-1", subject, b"gz", "S3 left it unanswered",
                             claim=outbox.Claim("worker-1", outbox.may_land_for(60)))
    with host_clock(read_on):  # the erasure of its user
        lands_by = await claims.in_doubt_until(engine, subject)
    async with engine.connect() as conn:
        now = (await conn.execute(select(func.now()))).scalar_one()
    assert lands_by is not None and timedelta(seconds=55) < lands_by - now <= timedelta(seconds=60)


async def test_a_transcript_written_again_on_a_host_whose_clock_runs_an_hour_behind_is_recorded_on_the_database_clock(
    engine: AsyncEngine,
) -> None:
    # Recorded an hour and more in the past, the record would look settled to the sweep while the write may land.
    s3 = SimpleNamespace(url="s3://audit/teamstore", capabilities=frozenset())  # counts retention from the upload
    with host_clock(-2 * SETTLED):
        await record_rewrite(engine, s3, "t/k1", "subject-1", written_at=datetime.now(UTC))  # type: ignore[arg-type]
    async with engine.connect() as conn:
        age = (await conn.execute(select(func.now() - rewrites.c.recorded_at))).scalar_one()
    assert timedelta(0) <= age < timedelta(seconds=5)
