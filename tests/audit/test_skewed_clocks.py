"""The retention sweep and the transcript outbox's claims on a host whose clock disagrees with the database's
(Postgres): quarantined states, queued transcripts and session ids age, and claims stand or pass, on the server's
clock. A skewed host is this process with its clock moved (:func:`tests.clocks.host_clock`)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import SimpleNamespace

import pytest
from sqlalchemy import Interval, func, insert, literal, select
from sqlalchemy.ext.asyncio import AsyncEngine

from teamstore.audit import claims, outbox
from teamstore.audit.ledger import record_usage, usage_rows
from teamstore.audit.pseudonyms import run_writes
from teamstore.audit.retention import sweep_all
from teamstore.audit.rewrites import SETTLED, record_rewrite
from teamstore.audit.schema import outbox as outbox_table
from teamstore.audit.schema import rewrites, subject_sessions
from teamstore.audit.subjects import ensure_subject, session_key
from teamstore.audit.transcripts.local import LocalTranscriptStore
from teamstore.audit.transcripts.record import RunKeys
from teamstore.db.engine import create_engine
from teamstore.db.migrate import upgrade
from teamstore.events import ModelCall, RunContext, RunOutcome
from teamstore.settings import Settings
from teamstore.state.schema import quarantine
from tests.clocks import host_clock

pytestmark = pytest.mark.postgres
SKEW = timedelta(minutes=6)
DAY = timedelta(days=1)
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


async def _ages(engine: AsyncEngine) -> dict[str, list[timedelta]]:
    """How long ago, by the database's clock, each row of the tables retention sweeps by ``created_at`` was made."""
    async with engine.connect() as conn:
        return {table.name: list((await conn.scalars(select(func.now() - table.c.created_at))).all())
                for table in (outbox_table, subject_sessions)}


@pytest.mark.parametrize("offset", [-DAY, DAY], ids=["behind", "ahead"])
async def test_rows_retention_sweeps_by_when_they_were_made_are_stamped_on_the_database_clock_on_a_skewed_host(
    engine: AsyncEngine, offset: timedelta
) -> None:
    """Stamped a day ahead, a queued transcript or a session's id would outlive its retention by a day; a day
    behind, the sweep would take it a day early."""
    subject, secret = await ensure_subject(engine, "alice")
    started = datetime.now(UTC)
    ctx = RunContext("run-1", "alice", "s1", "support_triage", "v1", started)
    calls = [ModelCall("triage", "gpt-4o", 10, 5, started, 0.5)]
    writes = run_writes(engine)
    with host_clock(offset):
        await outbox.enqueue(engine, "run-1", f"subjects/{subject}/run-1", subject, b"gz", "S3 unreachable")
        await claims.hold(engine, "upload-2", f"subjects/{subject}/run-2", subject, "worker-1", CLAIM)
        await record_usage(engine, usage_rows(ctx, RunOutcome(started, model_calls=calls),
                                              RunKeys(subject, session_key(secret, "s1"))), "s1")
        await writes.name_session(user_id="alice", subject_key=subject, session_key=session_key(secret, "s2"),
                                  session_id="s2")
    await writes.aclose()

    ages = await _ages(engine)
    assert len(ages["ts_transcript_outbox"]) == 2 and len(ages["ts_subject_sessions"]) == 2
    assert all(timedelta(0) <= age < timedelta(seconds=5) for table in ages.values() for age in table), ages
