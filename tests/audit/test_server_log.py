"""What our statements make a real Postgres write to its own log: never a raw user id.

A statement that fails on a unique key is an ERROR, and the server logs its ``DETAIL`` (``Key (user_id)=(...)
already exists``), a copy erasure never reaches. These tests race what can collide and read the log after.
"""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path

import pytest

from config_registry import Registry
from teamstore import examples
from teamstore.audit.ledger_observer import LedgerObserver
from teamstore.audit.observer import TranscriptObserver
from teamstore.audit.pseudonyms import Pseudonyms
from teamstore.audit.subjects import get_or_create_subject
from teamstore.audit.transcripts.local import LocalTranscriptStore
from teamstore.db.engine import create_engine
from teamstore.runtime.platform import Platform
from teamstore.settings import Settings
from tests.conftest import prepare
from tests.services import postgres_server_log, postgres_server_log_size

pytestmark = pytest.mark.postgres
ENGINES, SESSIONS = 4, 3


@pytest.fixture
def registry(registry_path: Path) -> Registry:
    """A registry holding the example support team."""
    reg = Registry(registry_path, create=True)
    reg.add("support_triage", examples.support_triage().dump_component(),
            examples.example_manifest("support_triage"), "v1", label="production")
    return reg


def _platform(url: str, registry: Registry, lease: str, store: LocalTranscriptStore, home: Path) -> Platform:
    """A worker of its own (its own engine and pools) that writes transcripts and ledger rows."""
    engine = create_engine(url)
    pseudonyms = Pseudonyms(engine)
    settings = Settings(home=home, registry_refresh_seconds=0, session_lease=lease, lease_timeout_seconds=30,
                        auto_migrate=False)
    return Platform(engine, registry, settings=settings,
                    observers=[LedgerObserver(engine, pseudonyms), TranscriptObserver(store, engine, pseudonyms)])


async def _first_session(platform: Platform, user: str, session: str) -> None:
    async with platform.session(user, session, team="support_triage") as s:
        await s.run("my router drops every evening")


@pytest.mark.parametrize("lease", ["lock", "row"])
async def test_racing_first_sessions_of_a_new_user_write_no_raw_id_to_the_server_log(
    postgres_server: str, postgres_url: str, registry: Registry, tmp_path: Path, lease: str
) -> None:
    await prepare(postgres_url, lease)
    user = f"racer-{uuid.uuid4().hex}@example.com"
    store = LocalTranscriptStore(tmp_path / "transcripts")
    workers = [_platform(postgres_url, registry, lease, store, tmp_path / "home") for _ in range(ENGINES)]
    start = postgres_server_log_size(postgres_server)
    try:
        await asyncio.gather(*(_first_session(w, user, f"s{i}-{j}")
                               for i, w in enumerate(workers) for j in range(SESSIONS)))
        # The subject mapping alone, from every worker's engine at once: the first use of the user.
        other = f"racer-{uuid.uuid4().hex}@example.com"
        keys = await asyncio.gather(*(get_or_create_subject(w.engine, other) for w in workers for _ in range(4)))
    finally:
        for worker in workers:
            await worker.aclose()
            await worker.engine.dispose()
    assert len(set(keys)) == 1
    log = postgres_server_log(postgres_server, start)
    leaked = [line for line in log.splitlines() if user in line or other in line]
    assert not leaked
