"""Retention: the local sweep, the ledger sweep and the resume-state sweep in one command."""

from __future__ import annotations

import os
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

from sqlalchemy import func, insert, select, update
from sqlalchemy.ext.asyncio import AsyncEngine

from teamstore.audit.observer import LedgerObserver, Pseudonyms, TranscriptObserver
from teamstore.audit.retention import apply_transcript_retention, sweep_all
from teamstore.audit.schema import usage
from teamstore.audit.transcripts.local import LocalTranscriptStore
from teamstore.settings import Settings
from teamstore.state.schema import quarantine
from tests.audit.teams import context, observe_run, triage_team


async def test_sweep_removes_old_local_transcripts_and_ledger_rows_and_keeps_recent_ones(
    engine: AsyncEngine, tmp_path: Path
) -> None:
    store = LocalTranscriptStore(tmp_path / "transcripts")
    pseudonyms = Pseudonyms(engine)
    observers = [LedgerObserver(engine, pseudonyms), TranscriptObserver(store, engine, pseudonyms)]
    old, new = context(run_id="old"), context(run_id="new")
    await observe_run(observers, triage_team(), old)
    await observe_run(observers, triage_team(), new)
    (old_file,) = [p for p in (tmp_path / "transcripts").rglob("old.jsonl.gz")]
    past = time.time() - 91 * 86400
    os.utime(old_file, (past, past))
    async with engine.begin() as conn:
        await conn.execute(
            update(usage)
            .where(usage.c.run_id == "old")
            .values(finished_at=datetime.now(UTC) - timedelta(days=401))
        )
    report = await sweep_all(Settings(), engine, store)
    assert (report.transcripts, report.ledger_rows, report.sessions, report.quarantined) == (1, 3, 0, 0)
    assert not old_file.exists()
    assert [p.name for p in (tmp_path / "transcripts").rglob("*.jsonl.gz")] == ["new.jsonl.gz"]
    async with engine.connect() as conn:
        assert await conn.scalar(select(func.count()).select_from(usage)) == 3


async def test_retention_apply_on_a_local_folder_says_the_sweep_enforces_it(tmp_path: Path) -> None:
    result = await apply_transcript_retention(LocalTranscriptStore(tmp_path), days=30)
    assert result["backend"] == "local" and result["days"] == 30 and "sweep" in result["note"]


async def test_sweep_removes_quarantined_states_past_their_retention(engine: AsyncEngine, tmp_path: Path) -> None:
    now = datetime.now(UTC)
    async with engine.begin() as conn:
        for session, days in (("old", 31), ("recent", 29)):
            await conn.execute(insert(quarantine).values(
                user_id="alice", session_id=session, reason="corrupt", detail="test", team="t", team_version="v",
                schema_version=1, agentchat_version="0.7.5", fingerprints={}, state="{}", state_bytes=2,
                row_version=1, quarantined_at=now - timedelta(days=days),
            ))
    report = await sweep_all(Settings(), engine, LocalTranscriptStore(tmp_path / "transcripts"), now=now)
    assert report.quarantined == 1 and report.quarantine_cutoff == now - timedelta(days=30)
    async with engine.connect() as conn:
        assert (await conn.execute(select(quarantine.c.session_id))).scalars().all() == ["recent"]
    shorter = Settings(quarantine_retention_days=7)
    assert (await sweep_all(shorter, engine, LocalTranscriptStore(tmp_path / "transcripts"), now=now)).quarantined == 1
