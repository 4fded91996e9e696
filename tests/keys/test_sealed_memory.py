"""User memory sealed at rest, on SQLite and a real Postgres: rows written before sealing still read, the next
write seals them (a fact confirmed with the value it had keeps the run that first stated it), and
``teamstore keys migrate`` seals them at once."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncEngine

from teamstore.audit.transcripts.local import LocalTranscriptStore
from teamstore.db.engine import create_engine
from teamstore.keys import KeyService
from teamstore.keys.passed_over import PassedOver
from teamstore.memory.facts import MemoryUpdate
from teamstore.memory.schema import facts, memories
from teamstore.memory.sealing import seal_saved_memory
from teamstore.memory.store import MemoryStore
from teamstore.settings import Settings
from teamstore.state.envelope import SEALED_PREFIX
from tests.conftest import prepare
from tests.keys.damaged import with_damaged_key
from tests.keys.fenced import ErasedOnFirstKey, FencedOnFirstKey, data_key_users

SUMMARY = "CANARY alice's router ZX-81 drops every evening"


@pytest.fixture
async def engine(database_url: str) -> AsyncIterator[AsyncEngine]:
    await prepare(database_url, "row" if database_url.startswith("sqlite") else "lock")
    eng = create_engine(database_url)
    yield eng
    await eng.dispose()


async def _write(store: MemoryStore, version: int, run_id: str, router: str = "ZX-81") -> int:
    update = MemoryUpdate(SUMMARY, {"router_model": router})
    return await store.write("alice", "support_triage", update, types={"router_model": "str"},
                             expected_version=version, run_id=run_id, team="support_triage", team_version="v1",
                             retention_days=30)


async def _stored(engine: AsyncEngine) -> list[str]:
    async with engine.connect() as conn:
        return [*(await conn.execute(select(memories.c.summary))).scalars(),
                *(await conn.execute(select(facts.c.value))).scalars()]


async def test_memory_written_before_sealing_reads_and_its_next_write_seals_it_keeping_the_confirmed_facts_run(
    engine: AsyncEngine,
) -> None:
    plain, sealed = MemoryStore(engine), MemoryStore(engine, keys=KeyService.from_settings(engine, Settings()))
    version = await _write(plain, 0, "run-1")
    assert await _stored(engine) == [SUMMARY, '"ZX-81"']  # as an older release wrote it
    (before,) = await sealed.show("alice")
    assert before.summary == SUMMARY and before.facts["router_model"].value == "ZX-81" and not before.damaged

    version = await _write(sealed, version, "run-2")  # the same router: confirmed, not restated

    assert all(text.startswith(SEALED_PREFIX) and "ZX-81" not in text for text in await _stored(engine))
    (after,) = await sealed.show("alice")
    fact = after.facts["router_model"]
    assert after.summary == SUMMARY and fact.value == "ZX-81" and fact.source_run_id == "run-1"
    assert fact.confirmed_at > before.facts["router_model"].confirmed_at
    await _write(sealed, version, "run-3", router="ZX-82")  # a new value: it comes from the run that stated it
    (changed,) = await sealed.show("alice")
    assert changed.facts["router_model"].value == "ZX-82" and changed.facts["router_model"].source_run_id == "run-3"


async def test_keys_migrate_seals_memory_written_before_sealing_once(engine: AsyncEngine) -> None:
    keys = KeyService.from_settings(engine, Settings())
    await _write(MemoryStore(engine), 0, "run-1")
    await MemoryStore(engine).record_failure("bob", "support_triage", "the writer timed out", team="support_triage",
                                             team_version="v1", retention_days=30)

    assert await seal_saved_memory(engine, keys) == {"memories": 1, "facts": 1}  # bob's empty summary: no words

    assert not [text for text in await _stored(engine) if "ZX-81" in text]
    assert await seal_saved_memory(engine, keys) == {"memories": 0, "facts": 0}
    (kept,) = await MemoryStore(engine, keys=keys).show("alice")
    assert kept.summary == SUMMARY and kept.facts["router_model"].value == "ZX-81" and kept.version == 1


async def test_keys_migrate_passes_over_a_user_whose_key_row_is_damaged_and_seals_everyone_elses_memory(
    engine: AsyncEngine,
) -> None:
    await _write(MemoryStore(engine), 0, "run-1")  # alice's summary and fact, read before carol's
    await MemoryStore(engine).write("carol", "support_triage", MemoryUpdate("carol's modem", {}), types={},
                                    expected_version=0, run_id="run-c", team="support_triage", team_version="v1",
                                    retention_days=30)
    damaged = await with_damaged_key(engine, "alice")
    passed = PassedOver()
    keys = KeyService.from_settings(engine, Settings())
    assert await seal_saved_memory(engine, keys, passed=passed) == {"memories": 1, "facts": 0}
    assert passed.as_dict() == {"damaged": [damaged], "unusable": []}, "her row, once, by its key id"
    async with engine.connect() as conn:
        summaries = dict((await conn.execute(select(memories.c.user_id, memories.c.summary))).all())
        values = (await conn.execute(select(facts.c.value))).scalars().all()
    assert summaries["alice"] == SUMMARY and values == ['"ZX-81"'], "left as it was, for a rerun once restored"
    assert summaries["carol"].startswith(SEALED_PREFIX)


async def test_keys_migrate_leaves_memory_of_a_user_fenced_meanwhile_to_the_erasure_and_seals_the_others(
    engine: AsyncEngine,
) -> None:
    await _write(MemoryStore(engine), 0, "run-1")
    await MemoryStore(engine).write("carol", "support_triage", MemoryUpdate("carol's modem", {}), types={},
                                    expected_version=0, run_id="run-c", team="support_triage", team_version="v1",
                                    retention_days=30)
    # alice has no data key yet, and none is made for a fenced user: her memory is the erasure's to delete.
    assert await seal_saved_memory(engine, FencedOnFirstKey(engine, "alice")) == {"memories": 1, "facts": 0}
    async with engine.connect() as conn:
        summaries = dict((await conn.execute(select(memories.c.user_id, memories.c.summary))).all())
    assert summaries["carol"].startswith(SEALED_PREFIX) and summaries["alice"] == SUMMARY


async def test_keys_migrate_makes_no_data_key_for_a_user_whose_erasure_ended_after_it_read_their_memory(
    engine: AsyncEngine, tmp_path: Path
) -> None:
    await _write(MemoryStore(engine), 0, "run-1")
    await MemoryStore(engine).write("carol", "support_triage", MemoryUpdate("carol's modem", {}), types={},
                                    expected_version=0, run_id="run-c", team="support_triage", team_version="v1",
                                    retention_days=30)
    keys = ErasedOnFirstKey(engine, LocalTranscriptStore(tmp_path / "transcripts"), "alice")
    assert await seal_saved_memory(engine, keys) == {"memories": 1, "facts": 0}
    assert keys.receipt is not None
    assert await data_key_users(engine) == ["carol"]
