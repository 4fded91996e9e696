"""The memory writer's model calls are metered like every other call: ledger rows under the run they follow,
spans (to a real OTLP receiver) and ``teamstore cost`` as the memory writer's. Its memory is erased with the
user (counts in the receipt), fenced while an erasure is open (a forget then deletes, and records nothing of the
user, nor once they are erased), and swept by retention on its own clock."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import delete, insert, select
from sqlalchemy.ext.asyncio import AsyncEngine

from config_registry import Registry
from teamstore.audit.cost import query_costs
from teamstore.audit.ledger_observer import LedgerObserver
from teamstore.audit.observer import TranscriptObserver
from teamstore.audit.prices import load_prices
from teamstore.audit.pseudonyms import Pseudonyms
from teamstore.audit.retention import sweep_all
from teamstore.audit.schema import subjects, usage
from teamstore.audit.span_observer import SpanObserver
from teamstore.audit.subjects import ensure_subject
from teamstore.audit.telemetry import setup_tracing
from teamstore.audit.transcripts.local import LocalTranscriptStore
from teamstore.db.clock import database_now
from teamstore.db.fence import RETENTION, user_holds
from teamstore.erasure.coordinator import DeletionCoordinator
from teamstore.erasure.quiet import forget_quiet_users
from teamstore.erasure.receipt import StepStatus
from teamstore.erasure.requests import open_request
from teamstore.erasure.settings import ErasureSettings
from teamstore.errors import ErasureInProgress, MemoryForgotten, MemoryNotFound
from teamstore.events import RunObserver
from teamstore.keys import KeyService
from teamstore.keys.schema import data_keys
from teamstore.memory.facts import MemoryUpdate
from teamstore.memory.schema import forgets
from teamstore.memory.store import Forgotten, MemoryStore
from teamstore.runtime.platform import Platform
from teamstore.settings import Settings
from tests.memory.conftest import make_platform
from tests.memory.team import GATES, TEAM, helpdesk, helpdesk_manifest
from tests.memory.test_sessions import FIRST, talk
from tests.memory.test_writer import stored
from tests.otlp_receiver import OtlpReceiver


@pytest.fixture
def otlp(monkeypatch: pytest.MonkeyPatch) -> Iterator[OtlpReceiver]:
    """A real OTLP/HTTP receiver, with OTEL_EXPORTER_OTLP_ENDPOINT pointing at it."""
    receiver = OtlpReceiver().start()
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.endpoint)
    yield receiver
    receiver.stop()


def audited(engine: AsyncEngine, registry: Registry, tmp_path: Path, tracer: Any = None, **settings: Any) -> Platform:
    pseudonyms = Pseudonyms(engine)
    observers: list[RunObserver] = [LedgerObserver(engine, pseudonyms),
                                    TranscriptObserver(LocalTranscriptStore(tmp_path / "transcripts"), engine, pseudonyms)]
    if tracer is not None:
        observers.append(SpanObserver(tracer, pseudonyms))
    return make_platform(engine, registry, tmp_path, observers, **settings)


async def last_run(engine: AsyncEngine) -> str:
    async with engine.connect() as conn:
        return str((await conn.execute(select(usage.c.run_id).where(usage.c.purpose == "agent"))).scalars().first())


@pytest.mark.otlp
async def test_the_writers_calls_are_in_the_ledger_spans_and_cost_as_the_memory_writers(
    engine: AsyncEngine, registry: Registry, tmp_path: Path, otlp: OtlpReceiver
) -> None:
    tracer = setup_tracing(Settings())
    assert tracer is not None
    async with audited(engine, registry, tmp_path, tracer) as platform:
        _, _, _ = await talk(platform, "alice", "s1", FIRST)
    run_id = (await last_run(engine))
    tracer.force_flush()
    async with engine.connect() as conn:
        rows = (await conn.execute(select(usage.c.run_id, usage.c.agent, usage.c.purpose, usage.c.calls))).all()
    assert {(r.agent, r.purpose) for r in rows} == {("triage", "agent"), ("researcher", "agent"),
                                                   ("memory_writer", "memory_writer")}
    assert {r.run_id for r in rows} == {run_id}  # the writer's calls are the run's: a session's cost holds them
    report = await query_costs(engine, load_prices(None), by="purpose")
    by_purpose = {r.key: r for r in report.rows}
    assert by_purpose["memory_writer"].calls == 1 and by_purpose["memory_writer"].input_tokens > 0
    assert report.total.runs_limited == 1 and report.total.runs_completed == 0  # one run (its message cap), counted once
    spans = otlp.wait_for(lambda s: any(x["name"] == "memory_writer helpdesk" for x in s))
    (writer,) = [x for x in spans if x["name"] == "memory_writer helpdesk"]
    assert writer["attributes"]["teamstore.run_id"] == run_id
    assert writer["attributes"]["teamstore.purpose"] == "memory_writer"
    (call,) = [x for x in spans if x.get("parent_span_id") == writer["span_id"]]
    assert call["attributes"]["teamstore.purpose"] == "memory_writer" and call["name"] == "chat offline-small"
    assert b"ZX-81" not in otlp.wire() and b"alice" not in otlp.wire()
    tracer.shutdown()


@pytest.mark.otlp
async def test_a_writer_that_asks_no_model_as_its_user_forgot_records_no_call_in_the_ledger_or_its_span(
    engine: AsyncEngine, registry: Registry, tmp_path: Path, otlp: OtlpReceiver
) -> None:
    tracer = setup_tracing(Settings())
    assert tracer is not None
    async with audited(engine, registry, tmp_path, tracer) as platform:
        async with platform.session("alice", "s1", team=TEAM) as s:
            await s.run(FIRST)
            await platform.forget_memory("alice")  # said before the forget: the writer must write none of it
        await platform.drain_memory()
        assert await platform.show_memory("alice") == []
    tracer.force_flush()
    async with engine.connect() as conn:
        purposes = (await conn.execute(select(usage.c.purpose))).scalars().all()
    assert purposes and "memory_writer" not in purposes  # the run's calls only: the writer paid for none
    spans = otlp.wait_for(lambda s: any(x["name"] == "memory_writer helpdesk" for x in s))
    (writer,) = [x for x in spans if x["name"] == "memory_writer helpdesk"]
    assert writer["attributes"]["teamstore.model_calls"] == 0 and "error.type" not in writer["attributes"]
    assert writer["attributes"]["gen_ai.usage.input_tokens"] == 0
    assert [x for x in spans if x.get("parent_span_id") == writer["span_id"]] == []  # no chat span
    tracer.shutdown()


async def test_a_writer_that_fails_unexpectedly_still_has_its_call_metered(
    engine: AsyncEngine, registry: Registry, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    async def broken(*args: Any, **kwargs: Any) -> int:
        raise RuntimeError("a fault of the writer itself")

    monkeypatch.setattr(MemoryStore, "write", broken)  # after the model call: the call was made and paid
    async with audited(engine, registry, tmp_path) as platform:
        await talk(platform, "alice", "s1", FIRST)
        await platform.drain_memory()
        assert await platform.show_memory("alice") == []
    async with engine.connect() as conn:
        purposes = (await conn.execute(select(usage.c.purpose))).scalars().all()
    assert "memory_writer" in purposes
    assert any("failed unexpectedly (RuntimeError)" in r.getMessage() for r in caplog.records)


async def test_erasing_a_user_removes_their_memory_and_the_record_of_their_forgets_with_counts_in_the_receipt(
    engine: AsyncEngine, registry: Registry, tmp_path: Path
) -> None:
    async with audited(engine, registry, tmp_path) as platform:
        await talk(platform, "alice", "s1", FIRST)
        await talk(platform, "bob", "s1", "My router QX-7 is fine (ticket 77)")
        for user in ("alice", "bob"):  # each forgets memory of another scope: a record holding their id
            await platform.forget_memory(user, team="billing")
    coordinator = DeletionCoordinator(engine, LocalTranscriptStore(tmp_path / "transcripts"),
                                      knobs=ErasureSettings(fence_grace_seconds=0))
    receipt = await coordinator.run("alice", reason="test")
    assert receipt.ok, receipt
    memory = receipt.stores["memory"]
    assert memory.status is StepStatus.ERASED and memory.counts.rows == 4  # the summary, two facts, the forget
    assert memory.verified_at is not None
    async with engine.connect() as conn:
        assert (await conn.execute(select(forgets.c.user_id))).scalars().all() == ["bob"]
    async with make_platform(engine, registry, tmp_path) as platform:
        assert await platform.show_memory("alice") == []
        assert [m.user_id for m in await platform.show_memory("bob")] == ["bob"]


async def test_no_memory_is_written_for_a_user_an_erasure_fences(
    engine: AsyncEngine, registry: Registry, channel: str, tmp_path: Path
) -> None:
    registry.add(TEAM, helpdesk(channel, "gated").dump_component(), helpdesk_manifest(), "gated", label="production")
    GATES[channel] = asyncio.Barrier(2)
    async with make_platform(engine, registry, tmp_path) as platform:
        await talk(platform, "alice", "s1", FIRST)  # saved; its writer waits at the gate, mid model call
        await open_request(engine, "er-fence", "alice", "test", 30)
        await GATES[channel].wait()
        await platform.drain_memory()
        assert await platform.show_memory("alice") == []  # neither the memory nor a failure was written


async def _forgetters(engine: AsyncEngine) -> list[str]:
    """The user ids the records of forgets hold."""
    async with engine.connect() as conn:
        return sorted((await conn.execute(select(forgets.c.user_id))).scalars().all())


async def test_a_forget_while_an_erasure_fences_the_user_deletes_their_memory_and_records_nothing_of_them(
    store: MemoryStore, engine: AsyncEngine
) -> None:
    await stored(store, home_address="12 Secret Lane")
    await open_request(engine, "er-fence", "alice", "test", 30)  # its memory step may have run already
    gone = await store.forget("alice")  # e.g. the app's forget button
    assert (gone.memories, gone.facts) == (1, 1) and gone.unrecorded is not None
    assert gone.unrecorded.startswith("nothing was recorded of the forget: an erasure")
    assert (await store.forget("alice", scope="billing")).unrecorded == gone.unrecorded
    assert await store.show("alice", held=True) == [] and await _forgetters(engine) == []


@pytest.mark.parametrize("sealed", [True, False], ids=["sealed", "unsealed"])
async def test_a_forget_after_the_user_was_erased_records_nothing_of_them_and_says_so(
    store: MemoryStore, engine: AsyncEngine, tmp_path: Path, sealed: bool
) -> None:
    """Sealed, the erased user has no data key; unsealed (a store built without a key service), nothing of theirs
    is stored: either way the forget deletes what it names and records nothing, where a live user's is recorded."""
    store = store if sealed else MemoryStore(engine)
    for user in ("alice", "bob"):
        await stored(store, user, home_address="12 Secret Lane")
    await store.writer_key("carol")  # opening a session: nothing of hers kept yet, her writer may be under way
    coordinator = DeletionCoordinator(engine, LocalTranscriptStore(tmp_path / "transcripts"),
                                      knobs=ErasureSettings(fence_grace_seconds=0))
    assert (await coordinator.run("alice", reason="test")).ok
    if not sealed:
        await ensure_subject(engine, "carol")  # the audit's, made as her session opened
    late = await store.forget("alice")  # a forget that came late
    assert (late.memories, late.facts) == (0, 0) and late.unrecorded is not None
    assert late.unrecorded.startswith("nothing was recorded of the forget: the user is erased")
    with pytest.raises(MemoryNotFound, match="the user is erased"):
        await store.forget("alice", fact="home_address")
    assert await store.forget("bob") == Forgotten(memories=1, facts=1)
    with pytest.raises(MemoryNotFound) as refused:
        await store.forget("carol", fact="home_address")
    assert "nothing was recorded" not in (refused.value.hint or "")
    assert await _forgetters(engine) == ["bob", "carol"]  # the erased id is nowhere, as the receipt says


async def test_a_quiet_user_who_forgot_memory_is_forgotten_with_the_record_and_their_writer_under_way_writes_nothing(
    store: MemoryStore, engine: AsyncEngine, tmp_path: Path
) -> None:
    """The record of a forget no longer keeps a user's ids (and its own) for its 30 days: it goes with their data key,
    which stops the writer it was kept to stop."""
    key = await store.writer_key("alice")  # a session's, which opened before the forget
    said_after = await store.clock("alice")
    with pytest.raises(MemoryNotFound):
        await store.forget("alice", fact="home_address")  # nothing kept yet: recorded all the same
    assert await _forgetters(engine) == ["alice"]
    keys = KeyService.from_settings(engine, Settings(key_cache_seconds=0))
    later = await database_now(engine) + timedelta(days=1)  # past the hour a new user's key is spared
    quiet = await forget_quiet_users(engine, LocalTranscriptStore(tmp_path / "t"), keys, grace_seconds=0, now=later,
                                     memory_sealed=True)
    assert (quiet.forgotten, quiet.kept) == (1, 0)
    assert await _forgetters(engine) == []
    async with engine.connect() as conn:
        assert (await conn.execute(select(data_keys.c.user_id))).all() == []
    with pytest.raises(ErasureInProgress, match="erased"):  # its key is gone: nothing lands
        await store.write("alice", "helpdesk", MemoryUpdate("", {"home_address": "12 Secret Lane"}),
                          types={"home_address": "str"}, expected_version=0, run_id="r", team="helpdesk",
                          team_version="v1", retention_days=30, key=key, said_after=said_after)
    assert await store.show("alice", held=True) == []


async def test_a_forget_while_the_retention_sweep_holds_the_user_is_recorded_and_stops_their_writer_when_it_backs_off(
    store: MemoryStore, engine: AsyncEngine
) -> None:
    """The sweep's hold, unlike an erasure's, ends with the user kept when a session of theirs turns up: a forget it
    refused to record let that session's writer write what the user said before it."""
    key = await store.writer_key("alice")  # a session's, which opened before the forget
    said_after = await store.clock("alice")
    async with engine.begin() as conn:  # the sweep found alice quiet and holds her
        await conn.execute(insert(user_holds).values(user_id="alice", reason=RETENTION, created_at=datetime.now(UTC)))
    with pytest.raises(MemoryNotFound) as refused:
        await store.forget("alice", fact="home_address")
    assert "nothing was recorded" not in (refused.value.hint or "") and await _forgetters(engine) == ["alice"]
    async with engine.begin() as conn:  # it backs off: her session took its lease meanwhile
        await conn.execute(delete(user_holds).where(user_holds.c.user_id == "alice"))
    with pytest.raises(MemoryForgotten):
        await store.write("alice", "helpdesk", MemoryUpdate("", {"home_address": "12 Secret Lane"}),
                          types={"home_address": "str"}, expected_version=0, run_id="r", team="helpdesk",
                          team_version="v1", retention_days=30, key=key, said_after=said_after)
    assert await store.show("alice", held=True) == []


async def _ledger(engine: AsyncEngine) -> list[Any]:
    async with engine.connect() as conn:
        return sorted((await conn.execute(select(usage.c.run_id, usage.c.purpose, usage.c.calls))).all())


@pytest.mark.parametrize("before", [False, True], ids=["first_write", "update"])
async def test_a_writer_mid_call_through_a_whole_erasure_brings_nothing_back(
    engine: AsyncEngine, registry: Registry, channel: str, tmp_path: Path, before: bool
) -> None:
    """The erasure opens, deletes, destroys the key and lifts its fence while the writer waits for its model:
    the write that follows lands nowhere, under no key, and records no failure; its call is not in the ledger
    (the user has no subject any more, and none is made for them)."""
    async with audited(engine, registry, tmp_path) as platform:
        if before:
            await talk(platform, "alice", "s0", FIRST)  # memory kept, under alice's data key
            await platform.drain_memory()
            assert await platform.show_memory("alice") != []
        registry.add(TEAM, helpdesk(channel, "gated").dump_component(), helpdesk_manifest(), "gated",
                     label="production")
        GATES[channel] = asyncio.Barrier(2)
        await talk(platform, "alice", "s1", FIRST)  # saved; its writer waits at the gate, mid model call
        coordinator = DeletionCoordinator(engine, LocalTranscriptStore(tmp_path / "transcripts"),
                                          knobs=ErasureSettings(fence_grace_seconds=0))
        receipt = await coordinator.run("alice", reason="test")
        assert receipt.ok, receipt
        ledger = await _ledger(engine)  # the runs' rows stay, no longer linkable to alice
        await GATES[channel].wait()
        await platform.drain_memory()
        assert await platform.show_memory("alice") == []  # neither the memory nor a failure came back
        assert await _ledger(engine) == ledger
    async with engine.connect() as conn:
        assert (await conn.execute(select(data_keys.c.user_id).where(data_keys.c.user_id == "alice"))).first() is None
        assert (await conn.execute(select(subjects.c.user_id).where(subjects.c.user_id == "alice"))).first() is None


async def test_retention_sweeps_memory_on_its_teams_clock(
    engine: AsyncEngine, registry: Registry, channel: str, tmp_path: Path
) -> None:
    registry.add("helpdesk_short", helpdesk(channel).dump_component(),
                 helpdesk_manifest(retention_days=2).model_copy(update={"name": "helpdesk_short"}), "short",
                 label="production")
    async with make_platform(engine, registry, tmp_path) as platform:
        await talk(platform, "alice", "s1", FIRST)  # the default retention: 180 days
        async with platform.session("alice", "s2", team="helpdesk_short") as s:
            await s.run(FIRST)
    store = LocalTranscriptStore(tmp_path / "transcripts")
    report = await sweep_all(Settings(), engine, store, now=datetime.now(UTC) + timedelta(days=3))
    assert (report.memories, report.memory_facts) == (1, 2)
    async with make_platform(engine, registry, tmp_path) as platform:
        assert [m.scope for m in await platform.show_memory("alice")] == ["helpdesk"]
        (kept,) = await platform.show_memory("alice")
        assert kept.expires_at is not None and kept.expires_at - kept.updated_at == timedelta(days=180)  # type: ignore[operator]
