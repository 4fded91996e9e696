"""Two coordinators on one request: a slow step keeps its lease, and a request finished meanwhile is only reported;
and two officers filing twin request ids at once open one request."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import func, insert, select, text
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from config_registry import Registry
from teamstore.audit.transcripts.local import LocalTranscriptStore
from teamstore.erasure import RequestStatus, StepStatus, record, requests
from teamstore.erasure.schema import erasure_requests, folded_id
from teamstore.erasure.steps import StepContext
from teamstore.erasure.steps.database import resume_step
from teamstore.errors import ErasureConflict
from teamstore.memory.erasure import UserMemoryRows
from teamstore.memory.schema import facts
from tests.erasure.conftest import coordinator
from tests.erasure.seed import audited_platform, seed_user


class SlowDelete(LocalTranscriptStore):
    """A folder whose first delete waits until the test lets it go (a transcript step with many versions)."""

    def __init__(self, root: Path) -> None:
        super().__init__(root)
        self.entered = asyncio.Event()
        self.go = asyncio.Event()

    async def delete_prefix(self, prefix: str) -> int:
        if not self.entered.is_set():
            self.entered.set()
            await self.go.wait()
        return await super().delete_prefix(prefix)


async def test_a_step_longer_than_the_lease_keeps_it_and_a_second_coordinator_is_refused(
    engine: AsyncEngine, registry: Registry, tmp_path: Path
) -> None:
    store = SlowDelete(tmp_path / "transcripts")
    await seed_user(audited_platform(engine, registry, store), store, "olga", "CANARY-olga", 1, 2)
    first = asyncio.create_task(coordinator(engine, store, lease_seconds=0.4).run("olga", request_id="req-slow"))
    await store.entered.wait()
    await asyncio.sleep(1.0)  # well past the lease the first coordinator took: it is alive, so it renewed it

    with pytest.raises(ErasureConflict, match="another coordinator"):
        await coordinator(engine, store, lease_seconds=0.4).run("olga", request_id="req-slow")

    store.go.set()
    receipt = await first
    assert receipt.ok and receipt.stores["ledger"].status is StepStatus.ERASED
    assert receipt.stores["ledger"].counts.rows > 0 and receipt.stores["resume_state"].counts.rows == 1
    assert await coordinator(engine, store).status("req-slow") == receipt


async def test_a_request_finished_while_a_rerun_waited_for_its_lease_is_never_run_again(
    engine: AsyncEngine, registry: Registry, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = LocalTranscriptStore(tmp_path / "transcripts")
    platform = audited_platform(engine, registry, store)
    await seed_user(platform, store, "pia", "CANARY-pia", 1, 1)
    done: list[Any] = []
    real_open = requests.open_request

    async def open_then_let_the_other_finish(*args: Any, **kwargs: Any) -> requests.RequestRow:
        row = await real_open(*args, **kwargs)
        if not done:  # the second coordinator has read the request; the first one finishes it now
            monkeypatch.setattr(requests, "open_request", real_open)
            done.append(await coordinator(engine, store).run("pia", request_id="req-race"))
            async with platform.session("pia", "back-again", team="support_triage") as s:
                await s.run("CANARY-pia-new hello again")  # the fence is lifted: the user starts over
        return row

    await coordinator(engine, store).run("pia", request_id="req-race", dry_run=True)
    first_open = await real_open(engine, "req-race", "pia", None, 30)  # opened by a process that then died
    assert first_open.created_now
    monkeypatch.setattr(requests, "open_request", open_then_let_the_other_finish)

    with pytest.raises(ErasureConflict, match="finished"):  # as for any finished request and a user with data
        await coordinator(engine, store).run("pia", request_id="req-race")

    assert done and done[0].ok
    async with engine.connect() as conn:  # the completed receipt was not rewritten (it was turned 'failed')
        row = (await conn.execute(select(erasure_requests))).one()
    assert row.status == RequestStatus.COMPLETED and row.user_id is None
    assert await coordinator(engine, store).status("req-race") == done[0]


async def test_a_coordinator_that_lost_its_lease_mid_step_commits_nothing_of_that_step(
    engine: AsyncEngine, registry: Registry, tmp_path: Path
) -> None:
    # A coordinator stopped longer than its lease (a paused process) resumes in the middle of a step after
    # another one took the request over: its step must neither delete nor record anything.
    store = LocalTranscriptStore(tmp_path / "transcripts")
    await seed_user(audited_platform(engine, registry, store), store, "petra", "CANARY-petra", 1, 1)
    await requests.open_request(engine, "req-paused", "petra", None, due_days=30)
    assert await requests.claim(engine, "req-paused", "paused", lease_seconds=0.01)
    await asyncio.sleep(0.05)
    assert await requests.claim(engine, "req-paused", "other", lease_seconds=30)  # the lease ran out: taken over
    ctx = StepContext(engine, store, "req-paused", "petra", None, owner="paused")

    with pytest.raises(ErasureConflict, match="taken over"):
        await resume_step().erase(ctx, prior=None)

    assert (await resume_step().enumerate(ctx)).rows == 1  # the delete rolled back with the refused record
    assert await record.load_steps(engine, "req-paused") == {}


async def test_a_fact_a_memory_write_lands_as_the_memory_step_begins_is_counted_on_the_receipt(
    engine: AsyncEngine, registry: Registry, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A memory write that passed the fence before the erasure began commits its fact while the step runs:
    the step deletes it, so the receipt must count it too."""
    store = LocalTranscriptStore(tmp_path / "transcripts")
    await seed_user(audited_platform(engine, registry, store), store, "rita", "CANARY-rita", 1, 1)
    async with engine.connect() as conn:
        held = await conn.scalar(select(func.count()).select_from(facts).where(facts.c.user_id == "rita"))
    real_delete = UserMemoryRows.delete

    async def a_fact_lands_first(self: UserMemoryRows, conn: AsyncConnection, user_id: str) -> Any:
        now = datetime.now(UTC)
        async with engine.begin() as writer:  # the write's own connection, committed before the delete runs
            await writer.execute(insert(facts).values(
                user_id=user_id, scope="support_triage", name="late_fact", type="string", value='"CANARY-rita"',
                source_run_id="run-late", created_at=now, confirmed_at=now))
        return await real_delete(self, conn, user_id)

    monkeypatch.setattr(UserMemoryRows, "delete", a_fact_lands_first)
    receipt = await coordinator(engine, store).run("rita", request_id="req-late-fact")

    assert receipt.ok and receipt.stores["memory"].counts.rows == 1 + held + 1  # the summary, its facts, the late one
    async with engine.connect() as conn:
        assert await conn.scalar(select(func.count()).select_from(facts).where(facts.c.user_id == "rita")) == 0


@asynccontextmanager
async def holds_waiting(engine: AsyncEngine) -> AsyncIterator[Callable[[int], Awaitable[None]]]:
    """Writes to ``ts_user_holds`` wait while the block runs (on SQLite, every write): a filing that has read the
    stored ids stops at its insert. Yields a wait until ``n`` connections wait on a lock (on SQLite, a pause)."""
    async with engine.connect() as holder:
        if engine.dialect.name == "sqlite":
            await holder.exec_driver_sql("BEGIN IMMEDIATE")
        else:
            await holder.begin()
            await holder.exec_driver_sql("LOCK TABLE ts_user_holds IN SHARE MODE")

        async def waiting(n: int) -> None:
            if engine.dialect.name == "sqlite":
                await asyncio.sleep(0.5)
                return
            for _ in range(500):
                async with engine.connect() as watcher:  # the holder's transaction would see one snapshot of it
                    if await watcher.scalar(text("SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = "
                                                 "'Lock' AND datname = current_database()")) >= n:
                        return
                await asyncio.sleep(0.01)
            raise AssertionError(f"fewer than {n} filings waited")

        yield waiting
        await holder.rollback()


@pytest.mark.parametrize("first, second, twins", [
    ("REQ-9", "req-9", True), ("req-9", "Req-9", True),
    ("id-9", "İD-9", False), ("İD-9", "id-9", False), ("Ä-9", "ä-9", False), ("ǅ-9", "ǆ-9", False),
])
async def test_request_ids_are_twins_by_ascii_letter_case_alone_on_every_database_whichever_was_filed_first(
    engine: AsyncEngine, first: str, second: str, twins: bool
) -> None:
    """Beyond ASCII the databases' ``lower`` and Python's disagree (``İ``: ``i`` on a Postgres whose locale is
    UTF-8's, ``i̇`` in Python, itself on SQLite and under a ``C`` locale; ``Ä`` is ``ä`` but on SQLite): twins
    are the ids whose ASCII letters alone differ in case, on SQLite and Postgres alike."""
    await requests.open_request(engine, first, "ivy", None, 30)

    if twins:
        with pytest.raises(ErasureConflict, match="only in letter case"):
            await requests.open_request(engine, second, "jo", None, 30)
    else:
        await requests.open_request(engine, second, "jo", None, 30)
    async with engine.connect() as conn:
        stored = dict((await conn.execute(select(erasure_requests.c.request_id, erasure_requests.c.folded_id))).all())
    assert stored == {request_id: folded_id(request_id) for request_id in ([first] if twins else [first, second])}


async def test_a_twin_filed_after_the_check_looked_is_refused_by_the_database_as_the_check_refuses_it(
    engine: AsyncEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another process files ``REQ-9`` between this filing's look for twins and its insert: the unique folded id
    skips the insert, and the filing is refused naming the twin (never a database error, nor a second request)."""
    check = requests.check_new_request

    async def twin_filed_meanwhile(engine: AsyncEngine, request_id: str | None, user_id: str) -> None:
        await check(engine, request_id, user_id)
        if request_id == "req-9":
            await requests.open_request(engine, "REQ-9", "ivy", None, 30)

    monkeypatch.setattr(requests, "check_new_request", twin_filed_meanwhile)
    with pytest.raises(ErasureConflict, match=r"differs from one stored request id\(s\) only in letter case") as refused:
        await requests.open_request(engine, "req-9", "jo", None, 30)

    assert "teamstore erase status REQ-9" in (refused.value.hint or "")
    async with engine.connect() as conn:
        assert (await conn.execute(select(erasure_requests.c.request_id))).scalars().all() == ["REQ-9"]
    assert await requests.open_request_of(engine, "jo") is None  # nor was jo fenced


async def test_twin_request_ids_filed_at_the_same_instant_open_one_request_and_the_other_is_refused_naming_it(
    engine: AsyncEngine,
) -> None:
    async with holds_waiting(engine) as waiting:
        filings = [asyncio.create_task(requests.open_request(engine, request_id, user, None, 30))
                   for request_id, user in (("REQ-9", "ivy"), ("req-9", "jo"))]
        await waiting(2)  # each has looked for the other's id, or waits to look
    outcomes = await asyncio.gather(*filings, return_exceptions=True)

    opened = [o for o in outcomes if isinstance(o, requests.RequestRow)]
    refused = [o for o in outcomes if isinstance(o, ErasureConflict)]
    assert len(opened) == 1 and len(refused) == 1, outcomes
    assert repr(opened[0].request_id) in (refused[0].hint or "") and "only in letter case" in refused[0].message
    async with engine.connect() as conn:
        assert (await conn.execute(select(erasure_requests.c.request_id))).scalars().all() == [opened[0].request_id]
