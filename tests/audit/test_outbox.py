"""The transcript outbox when the database, not the store, is what fails."""

from __future__ import annotations

from pathlib import Path

import pytest

from teamstore.audit import outbox
from teamstore.audit.transcripts.local import LocalTranscriptStore
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
