"""The transcript outbox when the database, not the store, is what fails, and when its transcripts are huge."""

from __future__ import annotations

import os
import tracemalloc
from pathlib import Path

import pytest
from sqlalchemy.ext.asyncio import AsyncEngine

from teamstore.audit import outbox
from teamstore.audit.subjects import get_or_create_subject, session_key
from teamstore.audit.transcripts.base import run_key
from teamstore.audit.transcripts.local import LocalTranscriptStore
from teamstore.audit.transcripts.record import RunKeys
from teamstore.errors import StoreUnavailable
from tests.conftest import refusing, upgrade_database


@pytest.mark.postgres
async def test_a_flush_the_database_refuses_is_a_typed_error(postgres_url: str, tmp_path: Path) -> None:
    # `teamstore transcripts flush` (and the background drain) meeting a database that refuses: a typed
    # error that says so, never a driver traceback whose server message can quote stored values.
    await upgrade_database(postgres_url)
    async with refusing(postgres_url, "ts_transcript_outbox") as blocked:
        with pytest.raises(StoreUnavailable, match="outbox") as caught:
            await outbox.flush(blocked, LocalTranscriptStore(tmp_path))
    assert "LockNotAvailable" in caught.value.message


async def test_a_flush_holds_one_queued_transcript_in_memory_at_a_time(engine: AsyncEngine, tmp_path: Path) -> None:
    # Huge transcripts are the ones that miss the upload deadline and queue: a flush that read its whole
    # batch (500 bodies) at once needed gigabytes when the outbox held a few hundred of them.
    size, count = 4 << 20, 12
    subject = await get_or_create_subject(engine, "big")
    keys = RunKeys(subject, session_key(subject, "s1"))
    for n in range(count):
        run = f"run-{n}"
        await outbox.enqueue(engine, run, run_key(keys, run), subject, os.urandom(size), "upload took over 2s")
    store = LocalTranscriptStore(tmp_path / "t")
    tracemalloc.start()
    try:
        report = await outbox.flush(engine, store)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert (report.delivered, report.remaining) == (count, 0)
    assert peak < 5 * size, f"peak {peak >> 20} MiB for {count} transcripts of {size >> 20} MiB"
