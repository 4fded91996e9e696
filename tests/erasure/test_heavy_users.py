"""Erasing a user with thousands of sessions and runs: the statements an erasure sends do not grow with the
user's sessions, and it sizes their transcripts in a folder without reading them, on SQLite and a real
Postgres."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from sqlalchemy import event, func, insert, select
from sqlalchemy.ext.asyncio import AsyncEngine

from teamstore.audit.schema import usage
from teamstore.audit.subjects import ensure_subject, session_key
from teamstore.audit.transcripts.base import run_key, subject_prefix
from teamstore.audit.transcripts.local import LocalTranscriptStore
from teamstore.audit.transcripts.record import RunKeys
from teamstore.erasure.receipt import StepStatus
from teamstore.erasure.steps.base import StepContext
from teamstore.erasure.steps.database import UNLINK_BATCH, ledger_step
from teamstore.erasure.steps.transcripts import TranscriptStep


def _ledger_rows(subject: str, secret: str, sessions: int, runs_each: int) -> list[dict[str, Any]]:
    started = datetime(2026, 11, 2, 10, tzinfo=UTC)
    return [{"run_id": f"{subject[:8]}-{s}-{r}", "agent": "triage", "model": "m", "purpose": "agent", "calls": 1,
             "failed_calls": 0, "input_tokens": 10, "output_tokens": 1, "team": "support", "team_version": "v1",
             "session_key": session_key(secret, f"s{s}"), "subject_key": subject, "stop_reason": None,
             "ended_by_limit": False, "run_failed": False, "started_at": started, "finished_at": started,
             "day": started.date(), "interruptions": 0, "attempt": 0}
            for s in range(sessions) for r in range(runs_each)]


async def test_the_ledger_of_a_user_with_thousands_of_sessions_is_unlinked_in_a_few_statements(
    engine: AsyncEngine, tmp_path: Path
) -> None:
    # One UPDATE per session was one round trip per session: tens of thousands for a heavy user, in the
    # erasure's one transaction.
    sessions = UNLINK_BATCH + 500
    heavy, heavy_secret = await ensure_subject(engine, "heavy")
    other, other_secret = await ensure_subject(engine, "other")
    async with engine.begin() as conn:
        await conn.execute(insert(usage), _ledger_rows(heavy, heavy_secret, sessions, 2))
        await conn.execute(insert(usage), _ledger_rows(other, other_secret, 3, 2))
    sent: list[str] = []

    def note(_conn: Any, _cursor: Any, statement: str, *_: Any) -> None:
        if statement.lstrip().upper().startswith("UPDATE"):
            sent.append(statement)

    ctx = StepContext(engine, LocalTranscriptStore(tmp_path), "req-heavy", "heavy", heavy)
    event.listen(engine.sync_engine, "before_cursor_execute", note)
    try:
        async with engine.begin() as conn:
            counts = await ledger_step().rows.delete(conn, ctx)
    finally:
        event.remove(engine.sync_engine, "before_cursor_execute", note)

    assert counts.rows == 2 * sessions
    assert len(sent) == 2, f"{len(sent)} UPDATE statements for {sessions} sessions"
    u = usage.c
    async with engine.connect() as conn:
        linked = await conn.scalar(select(func.count()).where(u.subject_key == heavy))
        unlinked = (await conn.execute(select(u.session_key, func.count()).where(u.subject_key.is_(None))
                                       .group_by(u.session_key))).all()
        kept = await conn.scalar(select(func.count()).where(u.subject_key == other))
    # Each session's rows share one new key of their own, which no session key of the user's is.
    assert linked == 0 and kept == 6 and len(unlinked) == sessions and {n for _, n in unlinked} == {2}
    assert not {key for key, _ in unlinked} & {session_key(heavy_secret, f"s{s}") for s in range(sessions)}


class CountedReads(LocalTranscriptStore):
    """A transcript folder that counts the objects read from it."""

    reads = 0

    async def get(self, key: str) -> bytes:
        self.reads += 1
        return await super().get(key)


async def test_an_erasure_sizes_a_users_transcripts_in_a_folder_by_listing_them_never_by_reading_them(
    engine: AsyncEngine, tmp_path: Path
) -> None:
    # Each of an erasure's listings read every transcript whole to learn its size: for a user with tens of
    # thousands of runs, gigabytes read each time, before anything was deleted.
    store = CountedReads(tmp_path / "t")
    subject, secret = await ensure_subject(engine, "heavy")
    written = 0
    for n in range(300):
        body = bytes(100 + n)
        await store.put(run_key(RunKeys(subject, session_key(secret, f"s{n % 7}")), f"r{n}"), body)
        written += len(body)
    ctx = StepContext(engine, store, "req-heavy", "heavy", subject)

    found = await TranscriptStep().enumerate(ctx)
    result = await TranscriptStep().erase(ctx, None)
    left = await TranscriptStep().remaining(ctx)

    assert (found.objects, found.versions, found.bytes) == (300, 300, written)
    assert result.status is StepStatus.DELETED and result.counts.bytes == written
    assert left.objects == 0 and await store.list_keys(subject_prefix(subject)) == []
    assert store.reads == 0
