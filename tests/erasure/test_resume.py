"""A coordinator killed after each step, and in the middle of the transcripts, resumes on a rerun of the same id."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncEngine

from config_registry import Registry
from teamstore.audit.transcripts.base import subject_prefix
from teamstore.audit.transcripts.local import LocalTranscriptStore
from teamstore.audit.transcripts.s3 import S3TranscriptStore
from teamstore.db.engine import create_engine
from teamstore.db.fence import user_holds
from teamstore.db.migrate import upgrade
from teamstore.erasure import Receipt, RequestStatus, StepStatus
from teamstore.erasure.steps import STEP_ORDER
from teamstore.errors import ErasureConflict, ErasureInProgress
from tests.erasure.conftest import KeyWaits, coordinator
from tests.erasure.seed import audited_platform, scan_database, seed_user

USER, CANARY = "bob@example.com", "CANARY-bob-0b1c"


class Killed(BaseException):
    """Stands in for the process dying: not an Exception, so nothing on the way out handles it."""


def _counts(receipt: Receipt) -> dict[str, dict[str, int]]:
    return {n: s.counts.model_dump(exclude={"retained"}) for n, s in receipt.stores.items()}


@pytest.mark.s3
@pytest.mark.parametrize("killed_after", STEP_ORDER)
async def test_killed_after_each_step_resumes_with_the_counts_of_an_uninterrupted_run(
    killed_after: str, engine: AsyncEngine, registry: Registry, s3_store: S3TranscriptStore
) -> None:
    platform = audited_platform(engine, registry, s3_store)
    seeded = await seed_user(platform, s3_store, USER, CANARY, sessions_n=1, runs=2)
    plan = await coordinator(engine, s3_store).run(USER, dry_run=True)

    def die(step: str) -> None:
        if step == killed_after:
            raise Killed(step)

    first = coordinator(engine, s3_store)
    first.after_step = die
    with pytest.raises(Killed):
        await first.run(USER, request_id="req-kill")
    open_ = await coordinator(engine, s3_store).status("req-kill")
    assert open_.status is RequestStatus.OPEN and open_.stores[killed_after].status is StepStatus.ERASED
    with pytest.raises(ErasureInProgress):  # the fence holds while the request is open
        async with platform.session(USER, "sess-9", team="support_triage"):
            pass

    receipt = await coordinator(engine, s3_store).run(USER, request_id="req-kill")
    assert receipt.ok and receipt.status is RequestStatus.COMPLETED
    assert _counts(receipt) == _counts(plan)
    assert await s3_store.list_keys(subject_prefix(seeded.subject_key)) == []
    assert all(v == [] for v in (await scan_database(engine, [USER, seeded.subject_key, CANARY])).values())


@pytest.mark.s3
async def test_killed_in_the_middle_of_the_transcripts_keeps_the_first_enumeration(
    engine: AsyncEngine, registry: Registry, s3_store: S3TranscriptStore
) -> None:
    platform = audited_platform(engine, registry, s3_store)
    await seed_user(platform, s3_store, USER, CANARY, sessions_n=1, runs=2)

    def die_after_first_batch(step: str, done: int, total: int | None) -> None:
        if step == "transcripts":
            raise Killed("mid-delete")

    with pytest.raises(Killed):
        await coordinator(engine, s3_store, progress=die_after_first_batch).run(USER, request_id="req-mid")
    halfway = await coordinator(engine, s3_store).status("req-mid")
    assert halfway.stores["transcripts"].status is StepStatus.ENUMERATED
    receipt = await coordinator(engine, s3_store).run(USER, request_id="req-mid")
    assert receipt.ok and receipt.stores["transcripts"].counts.versions == 3  # two runs + one overwrite


SCRIPT = textwrap.dedent("""
    import asyncio, os, sys
    from pathlib import Path
    from teamstore.audit.transcripts.local import LocalTranscriptStore
    from teamstore.db.engine import create_engine
    from teamstore.erasure import DeletionCoordinator, ErasureSettings

    async def main():
        engine = create_engine(sys.argv[1])
        knobs = ErasureSettings(fence_grace_seconds=0, lease_seconds=1)
        def die(step):
            if step == sys.argv[3]:
                os._exit(9)   # no finally, no lease release: a real kill
        c = DeletionCoordinator(engine, LocalTranscriptStore(Path(sys.argv[2])), knobs=knobs, after_step=die)
        await c.run("carol", request_id="req-sigkill")

    asyncio.run(main())
""")


async def test_a_killed_process_leaves_a_lease_that_expires_then_the_rerun_completes(
    tmp_path: Path, registry: Registry
) -> None:
    url = f"sqlite:///{(tmp_path / 'kill.db').as_posix()}"
    engine = create_engine(url)
    await upgrade(engine)
    store = LocalTranscriptStore(tmp_path / "transcripts")
    await seed_user(audited_platform(engine, registry, store), store, "carol", "CANARY-carol", 1, 1)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    done = subprocess.run([sys.executable, "-c", SCRIPT, url, str(tmp_path / "transcripts"), "transcripts"],
                          env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 9, done.stderr
    with pytest.raises(ErasureConflict, match="another coordinator"):
        await coordinator(engine, store, lease_seconds=1).run("carol", request_id="req-sigkill")
    await asyncio.sleep(1.1)  # the dead process's lease runs out
    receipt = await coordinator(engine, store).run("carol", request_id="req-sigkill")
    assert receipt.ok and receipt.stores["transcripts"].status is StepStatus.ERASED
    assert receipt.stores["transcripts"].counts.versions == 1  # a folder keeps no old versions
    assert await store.list_keys("") == []
    async with engine.connect() as conn:
        assert (await conn.execute(select(user_holds))).all() == []
    await engine.dispose()


async def test_a_finished_request_id_reused_for_another_user_with_data_is_a_conflict(
    engine: AsyncEngine, registry: Registry, tmp_path: Path
) -> None:
    folder = LocalTranscriptStore(tmp_path / "transcripts")
    platform = audited_platform(engine, registry, folder)
    await seed_user(platform, folder, "carol", "CANARY-carol", 1, 1)
    first = await coordinator(engine, folder).run("carol", request_id="req-1")
    assert first.ok
    dave = await seed_user(platform, folder, "dave", "CANARY-dave", 1, 1)
    with pytest.raises(ErasureConflict, match="finished") as info:
        await coordinator(engine, folder).run("dave", request_id="req-1")
    assert "new request id" in (info.value.hint or "")
    assert await folder.list_keys(subject_prefix(dave.subject_key))  # nothing of dave's was touched
    assert await coordinator(engine, folder).run("carol", request_id="req-1") == first  # reported, not rerun
    assert await coordinator(engine, folder).run("nobody", request_id="req-1") == first  # nothing to miss
    assert (await coordinator(engine, folder).run("dave", request_id="req-2")).ok


async def test_a_rerun_of_a_request_stopped_in_its_key_wait_waits_only_what_is_left_of_it(
    engine: AsyncEngine, tmp_path: Path
) -> None:
    """The key step waits TEAMSTORE_KEY_CACHE_SECONDS after destroying the key, so that no worker still holds it
    in memory when the fence comes down. A rerun waits what is left of that time, counted from when the first
    attempt began the wait: never less (the guarantee), and no longer."""
    waits = KeyWaits(engine, LocalTranscriptStore(tmp_path / "t"), cache_seconds=2.0)
    await waits.make_key("lee")
    await waits.stopped_in_its_wait("lee", "req-wait", after=1.2)
    stopped = await coordinator(engine, waits.store).status("req-wait")
    assert stopped.status is RequestStatus.OPEN and stopped.stores["keys"].status is StepStatus.DELETED

    receipt = await waits.rerun("lee", "req-wait")

    assert receipt.status is RequestStatus.COMPLETED and receipt.stores["keys"].counts.rows == 1
    began, (done,) = waits.began(), waits.keys_done
    assert done - began[0] >= waits.cache_seconds  # no cached copy of the key outlives the fence
    assert waits.waited_only_what_was_left(1.2), waits.said  # the 0.8 s left, not the whole 2 s again
