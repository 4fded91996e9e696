"""The transcript outbox when the database, not the store, is what fails."""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy import text

from teamstore.audit import outbox
from teamstore.audit.transcripts.local import LocalTranscriptStore
from teamstore.db.engine import create_engine
from teamstore.db.migrate import upgrade
from teamstore.errors import StoreUnavailable


@pytest.mark.postgres
async def test_a_flush_the_database_refuses_is_a_typed_error(postgres_url: str, tmp_path: Path) -> None:
    # `teamstore transcripts flush` (and the background drain) meeting a database that refuses: a typed
    # error that says so, never a driver traceback whose server message can quote stored values.
    engine = create_engine(postgres_url)
    await upgrade(engine)
    blocked = create_engine(postgres_url, connect_args={"options": "-c lock_timeout=50"})
    try:
        async with engine.connect() as holder:
            await holder.execute(text("LOCK TABLE ts_transcript_outbox IN ACCESS EXCLUSIVE MODE"))
            with pytest.raises(StoreUnavailable, match="outbox") as caught:
                await outbox.flush(blocked, LocalTranscriptStore(tmp_path))
            await holder.rollback()
        assert "LockNotAvailable" in caught.value.message
    finally:
        await blocked.dispose()
        await engine.dispose()
