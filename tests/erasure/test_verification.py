"""Verification is independent of deletion: a store that silently keeps data fails the request loudly."""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy.ext.asyncio import AsyncEngine

from teamstore import erase_user
from teamstore.audit import outbox
from teamstore.audit.subjects import get_or_create_subject
from teamstore.audit.transcripts.base import subject_prefix
from teamstore.audit.transcripts.local import LocalTranscriptStore
from teamstore.db.engine import create_engine
from teamstore.erasure import Receipt, RequestStatus, StepStatus
from teamstore.errors import ErasureIncomplete, ErasureInProgress, SchemaNotReady
from teamstore.settings import Settings
from tests.conftest import upgrade_database
from tests.erasure.conftest import coordinator
from tests.services import free_port


class KeepsEverything(LocalTranscriptStore):
    """A folder whose delete reports success and removes nothing (a misbehaving backend)."""

    async def delete_prefix(self, prefix: str) -> int:
        return len(await self.list_keys(prefix))


async def test_data_left_behind_fails_the_request_and_keeps_the_fence(engine: AsyncEngine, tmp_path: Path) -> None:
    store = KeepsEverything(tmp_path / "t")
    subject = await get_or_create_subject(engine, "ivan")
    await store.put(f"{subject_prefix(subject)}sessions/s/runs/r.jsonl.gz", b"kept")

    receipt = await coordinator(engine, store).run("ivan", request_id="req-keep")

    assert receipt.status is RequestStatus.FAILED and not receipt.ok
    assert receipt.stores["transcripts"].status is StepStatus.FAILED
    assert "verification found 1 item" in (receipt.stores["transcripts"].detail or "")
    assert receipt.stores["subject"].status is StepStatus.PENDING  # the mapping is kept to resume
    with pytest.raises(ErasureInProgress):
        await outbox.enqueue(engine, "run-x", "k", subject, b"x", "S3 down")  # still fenced


async def test_erase_user_raises_unless_every_store_is_erased(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TEAMSTORE_ERASURE_FENCE_GRACE_SECONDS", "0")
    settings = Settings(home=tmp_path / "home", auto_migrate=True)
    with pytest.raises(SchemaNotReady, match="does not exist yet"):  # no receipt for a database never made
        await erase_user("nobody", settings=settings)
    assert not (tmp_path / "home").exists()
    await upgrade_database(settings.resolved_database_url)
    assert (await erase_user("nobody", settings=settings)).ok
    for key, value in {"AWS_ENDPOINT_URL_S3": f"http://127.0.0.1:{free_port()}", "AWS_ACCESS_KEY_ID": "x",
                       "AWS_SECRET_ACCESS_KEY": "x", "AWS_DEFAULT_REGION": "us-east-1"}.items():
        monkeypatch.setenv(key, value)
    down = settings.model_copy(update={"transcripts_url": "s3://nowhere/audit"})
    engine = create_engine(down.resolved_database_url)
    await get_or_create_subject(engine, "judy")
    await engine.dispose()
    with pytest.raises(ErasureIncomplete, match="ended failed") as raised:
        await erase_user("judy", settings=down, request_id="gdpr-canary-881@example.com")
    receipt = raised.value.receipt
    assert isinstance(receipt, Receipt) and receipt.stores["transcripts"].status is StepStatus.FAILED
    # A service logs the message: the id given (an email, as one may be) is named as log lines name it.
    assert raised.value.message == f"erasure {receipt.logged_as} ended failed" and "canary" not in str(raised.value)
