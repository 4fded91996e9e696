"""Retention: the local sweep, transcripts written again (on S3 too), the ledger sweep and the resume-state sweep
in one command."""

from __future__ import annotations

import asyncio
import os
import stat
import threading
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from sqlalchemy import delete, event, func, insert, select, text, update
from sqlalchemy.ext.asyncio import AsyncEngine

from config_registry import Registry
from teamstore import examples
from teamstore.audit import outbox
from teamstore.audit.ledger import sweep_ledger, sweep_session_ids
from teamstore.audit.ledger_observer import LedgerObserver
from teamstore.audit.observer import TranscriptObserver
from teamstore.audit.pseudonyms import Pseudonyms
from teamstore.audit.retention import SweepReport, apply_transcript_retention, sweep_all
from teamstore.audit.rewrites import needs_record, record_rewrite
from teamstore.audit.schema import SUBJECT_STORES_SINCE, rewrites, subject_sessions, subject_stores, usage
from teamstore.audit.schema import outbox as outbox_table
from teamstore.audit.sealing import seal_stored_transcripts
from teamstore.audit.subjects import ensure_subject, record_store, session_key
from teamstore.audit.transcripts.base import SUBJECTS, run_key
from teamstore.audit.transcripts.local import INLINE_WRITE_BYTES, LocalTranscriptStore
from teamstore.audit.transcripts.record import RunKeys, encode
from teamstore.db.clock import database_now
from teamstore.db.engine import create_engine
from teamstore.db.fence import RETENTION, user_holds
from teamstore.db.identity import database_id
from teamstore.erasure import DeletionCoordinator, quiet
from teamstore.erasure.quiet import forget_quiet_users
from teamstore.errors import (
    ErasureConflict,
    ErasureInProgress,
    RetentionIncomplete,
    StorageError,
    StoreUnavailable,
    TranscriptFolderElsewhere,
)
from teamstore.events import drain_observers
from teamstore.export.schema import export_requests
from teamstore.keys import KeyService
from teamstore.settings import Settings
from teamstore.state.schema import quarantine, sessions, store_settings
from tests.audit import inotify
from tests.audit.teams import context, observe_run, triage_team
from tests.audit.transcript_backends import Backend, S3Backend
from tests.conftest import refusing, upgrade_database
from tests.erasure.seed import audited_platform, scan_database, seed_user


async def test_sweep_removes_old_local_transcripts_and_ledger_rows_and_keeps_recent_ones(
    engine: AsyncEngine, tmp_path: Path
) -> None:
    store = LocalTranscriptStore(tmp_path / "transcripts")
    pseudonyms = Pseudonyms(engine)
    observers = [LedgerObserver(engine, pseudonyms), TranscriptObserver(store, engine, pseudonyms)]
    old, new = context(run_id="old"), context(run_id="new")
    await observe_run(observers, triage_team(), old)
    await observe_run(observers, triage_team(), new)
    await drain_observers(observers)  # as a platform's close: nothing of the audit's is left running
    (old_file,) = [p for p in (tmp_path / "transcripts").rglob("old.jsonl.gz")]
    past = time.time() - 91 * 86400
    os.utime(old_file, (past, past))
    async with engine.begin() as conn:
        await conn.execute(
            update(usage)
            .where(usage.c.run_id == "old")
            .values(started_at=datetime.now(UTC) - timedelta(days=401),
                    finished_at=datetime.now(UTC) - timedelta(days=401),
                    day=(datetime.now(UTC) - timedelta(days=401)).date())
        )
    report = await sweep_all(Settings(), engine, store)
    assert (report.transcripts, report.ledger_rows, report.sessions, report.quarantined) == (1, 3, 0, 0)
    assert not old_file.exists()
    assert [p.name for p in (tmp_path / "transcripts").rglob("*.jsonl.gz")] == ["new.jsonl.gz"]
    async with engine.connect() as conn:
        assert await conn.scalar(select(func.count()).select_from(usage)) == 3


async def test_sweep_drops_transcripts_queued_in_the_outbox_past_transcript_retention(
    engine: AsyncEngine, tmp_path: Path
) -> None:
    # A store that refused them for months (a missing permission nobody fixed) must not keep users'
    # messages in the database past the retention they would have had once delivered.
    subject, _ = await ensure_subject(engine, "alice")  # a transcript is queued only for a live subject
    for run in ("queued-long-ago", "queued-today"):
        await outbox.enqueue(engine, run, run_key(RunKeys(subject, "b" * 32), run), subject, b"gz", "denied")
    async with engine.begin() as conn:
        await conn.execute(update(outbox_table).where(outbox_table.c.run_id == "queued-long-ago")
                           .values(created_at=datetime.now(UTC) - timedelta(days=91)))

    report = await sweep_all(Settings(), engine, LocalTranscriptStore(tmp_path / "t"))

    async with engine.connect() as conn:
        assert (await conn.scalars(select(outbox_table.c.run_id))).all() == ["queued-today"]
    assert report.outbox == 1


async def test_retention_apply_on_a_local_folder_says_the_sweep_enforces_it(tmp_path: Path) -> None:
    result = await apply_transcript_retention(LocalTranscriptStore(tmp_path), days=30)
    assert result["backend"] == "local" and result["days"] == 30 and "sweep" in result["note"]


async def test_sweep_removes_quarantined_states_past_their_retention(engine: AsyncEngine, tmp_path: Path) -> None:
    now = datetime.now(UTC)
    async with engine.begin() as conn:
        for session, days in (("old", 31), ("recent", 29)):
            await conn.execute(insert(quarantine).values(
                user_id="alice", session_id=session, reason="corrupt", detail="test", team="t", team_version="v",
                schema_version=1, agentchat_version="0.7.5", fingerprints={}, state="{}", state_bytes=2,
                row_version=1, quarantined_at=now - timedelta(days=days),
            ))
    report = await sweep_all(Settings(), engine, LocalTranscriptStore(tmp_path / "transcripts"), now=now)
    assert report.quarantined == 1 and report.quarantine_cutoff == now - timedelta(days=30)
    async with engine.connect() as conn:
        assert (await conn.execute(select(quarantine.c.session_id))).scalars().all() == ["recent"]
    shorter = Settings(quarantine_retention_days=7)
    assert (await sweep_all(shorter, engine, LocalTranscriptStore(tmp_path / "transcripts"), now=now)).quarantined == 1


async def test_local_sweeps_run_from_several_places_at_once_remove_each_object_once(tmp_path: Path) -> None:
    # docs/operations.md: `retention sweep` "is safe to run from several places at once". Sweepers that
    # meet objects and folders another one removed first must step over them, not die half-way.
    root = tmp_path / "transcripts"
    for i in range(300):
        path = root.joinpath(*run_key(RunKeys(f"s{i:04d}", "k" * 32), "r1").split("/"))
        path.parent.mkdir(parents=True)
        path.write_bytes(b"gz")
    stores = [LocalTranscriptStore(root) for _ in range(3)]
    cutoff = datetime.now(UTC) + timedelta(days=1)
    removed = await asyncio.gather(*(s.sweep(cutoff) for s in stores))
    assert sum(removed) == 300
    assert not list(root.rglob("*"))


async def test_the_sweep_never_touches_files_outside_the_transcript_layout(tmp_path: Path) -> None:
    # TEAMSTORE_TRANSCRIPTS_URL may name a folder that holds other things too (an export, a mount point):
    # the sweep removes old transcripts, never another tool's files or folders, however old or empty.
    root = tmp_path / "shared"
    store = LocalTranscriptStore(root)
    await store.put(run_key(RunKeys("a" * 32, "b" * 32), "r1"), b"transcript")
    (root / "exports" / "empty").mkdir(parents=True)
    others = [root / "exports" / "2024.jsonl.gz", root / "report.jsonl.gz", root / ".tmp-notes"]
    for other in others:
        other.write_bytes(b"someone else's")
    past = time.time() - 91 * 86400
    for path in [*others, *root.rglob("r1.jsonl.gz")]:
        os.utime(path, (past, past))

    assert await store.sweep(datetime.now(UTC) - timedelta(days=90)) == 1

    assert all(other.exists() for other in others) and (root / "exports" / "empty").is_dir()
    assert not (root / "subjects").exists()


async def test_a_failed_local_write_leaves_no_partial_copy_behind(tmp_path: Path) -> None:
    # A write that fails half-way (disk full; here: the object's path is taken by a folder) must not
    # leave its temporary file: it holds the user's messages, and nothing would ever remove it.
    store = LocalTranscriptStore(tmp_path / "transcripts")
    key = run_key(RunKeys("a" * 32, "b" * 32), "r1")
    blocked = (tmp_path / "transcripts").joinpath(*key.split("/"))
    blocked.mkdir(parents=True)
    with pytest.raises(StorageError):
        await store.put(key, b"CANARY transcript body")
    assert [p.name for p in blocked.parent.iterdir()] == [blocked.name]


async def test_the_sweep_removes_what_a_crashed_writer_left_past_retention(tmp_path: Path) -> None:
    store = LocalTranscriptStore(tmp_path / "transcripts")
    key = run_key(RunKeys("a" * 32, "b" * 32), "r1")
    await store.put(key, b"kept")
    runs = (tmp_path / "transcripts").joinpath(*key.split("/")).parent
    crashed = runs / ".tmp-abc123"  # a worker killed between writing and renaming
    crashed.write_bytes(b"CANARY half a transcript")
    past = time.time() - 91 * 86400
    os.utime(crashed, (past, past))
    assert await store.sweep(datetime.now(UTC) - timedelta(days=90)) == 0  # temp files are not transcripts
    assert sorted(p.name for p in runs.iterdir()) == ["r1.jsonl.gz"]


@pytest.mark.postgres
async def test_a_ledger_sweep_the_database_refuses_is_a_typed_error(postgres_url: str) -> None:
    await upgrade_database(postgres_url)
    async with refusing(postgres_url, "ts_usage") as blocked:
        with pytest.raises(StoreUnavailable, match="ledger") as caught:
            await sweep_ledger(blocked, datetime.now(UTC))
    assert "LockNotAvailable" in caught.value.message


async def test_sweep_removes_a_killed_writers_temporary_file_once_it_is_an_hour_old(
    engine: AsyncEngine, tmp_path: Path
) -> None:
    # Such a file holds a whole transcript no reader will ever see: it must not wait out the 90 days of
    # retention. One written a moment ago may belong to a writer still at work: it stays.
    runs = tmp_path / "transcripts" / "subjects" / "a" / "sessions" / "b" / "runs"
    runs.mkdir(parents=True)
    stale, fresh = runs / ".tmp-r1.jsonl.gz.x1", runs / ".tmp-r2.jsonl.gz.x2"
    for leftover in (stale, fresh):
        leftover.write_bytes(b"CANARY words")
    past = time.time() - 2 * 3600
    os.utime(stale, (past, past))

    report = await sweep_all(Settings(), engine, LocalTranscriptStore(tmp_path / "transcripts"))

    assert not stale.exists() and fresh.exists()
    assert report.transcripts == 0  # temporary files are no transcripts anyone could read: not counted


async def test_a_session_id_recorded_for_reports_goes_once_no_ledger_row_names_its_session(
    engine: AsyncEngine,
) -> None:
    observer = LedgerObserver(engine, Pseudonyms(engine))
    await observe_run([observer], triage_team(), context(run_id="old", session_id="s-old"))
    await observe_run([observer], triage_team(), context(run_id="new", session_id="s-new"))
    await observe_run([observer], triage_team(), context(run_id="new-2", session_id="s-new"))
    async with engine.begin() as conn:
        assert await conn.scalar(select(func.count()).select_from(subject_sessions)) == 2  # once per session
        long_ago = datetime.now(UTC) - timedelta(days=401)
        await conn.execute(update(usage).where(usage.c.run_id == "old")
                           .values(started_at=long_ago, finished_at=long_ago, day=long_ago.date()))
        await conn.execute(update(subject_sessions).values(created_at=datetime.now(UTC) - timedelta(days=401)))
    store = LocalTranscriptStore(Path(Settings().home) / "t")
    # Runs older than the database's record of stores, as runs from before it read: their folder must be here.
    await store.make_here(await database_id(engine))
    report = await sweep_all(Settings(), engine, store)
    assert (report.ledger_rows, report.session_ids) == (3, 1)
    async with engine.connect() as conn:
        assert (await conn.execute(select(subject_sessions.c.session_id))).scalars().all() == ["s-new"]


def _session_ids(subject: str, names: list[str], created_at: datetime) -> list[dict[str, Any]]:
    return [{"session_key": f"key-{name}", "subject_key": subject, "session_id": name, "created_at": created_at}
            for name in names]


async def test_session_ids_are_swept_in_batches_past_old_sessions_whose_runs_are_still_kept(
    engine: AsyncEngine,
) -> None:
    # One DELETE of every session id past the cutoff held the table for as long as it took to delete tens of
    # millions of them, the first time a sweep ran.
    subject, _ = await ensure_subject(engine, "ines")
    now = datetime.now(UTC)
    still_run, gone, recent = [f"s{n:02d}" for n in range(4)], [f"s{n:02d}" for n in range(4, 12)], ["t1", "t2"]
    async with engine.begin() as conn:
        for n, name in enumerate(still_run + gone):  # the four oldest still have their runs in the ledger
            await conn.execute(insert(subject_sessions).values(
                _session_ids(subject, [name], now - timedelta(days=500 - n))))
        await conn.execute(insert(subject_sessions).values(_session_ids(subject, recent, now)))
        await conn.execute(insert(usage), [{
            "run_id": f"r-{name}", "agent": "triage", "model": "m", "purpose": "agent", "calls": 1, "failed_calls": 0,
            "input_tokens": 1, "output_tokens": 1, "team": "support", "team_version": "v1",
            "session_key": f"key-{name}", "subject_key": subject, "stop_reason": None, "ended_by_limit": False,
            "run_failed": False, "started_at": now, "finished_at": now, "day": now.date(), "interruptions": 0,
            "attempt": 0} for name in still_run])
    deletes: list[Any] = []

    def note(_conn: Any, _cursor: Any, statement: str, parameters: Any, *_: Any) -> None:
        if statement.lstrip().upper().startswith("DELETE"):
            deletes.append(parameters)

    event.listen(engine.sync_engine, "before_cursor_execute", note)
    try:
        removed = await sweep_session_ids(engine, now - timedelta(days=400), batch_size=3)
    finally:
        event.remove(engine.sync_engine, "before_cursor_execute", note)

    assert removed == len(gone) and len(deletes) == 3  # 3 + 3 + 2
    async with engine.connect() as conn:
        left = (await conn.execute(select(subject_sessions.c.session_id))).scalars().all()
    assert sorted(left) == sorted(still_run + recent)


@pytest.mark.postgres
async def test_the_session_id_sweep_reads_the_old_ones_through_their_index_not_the_whole_table(
    postgres_url: str,
) -> None:
    await upgrade_database(postgres_url)
    engine = create_engine(postgres_url)
    try:
        subject, _ = await ensure_subject(engine, "ines")
        async with engine.begin() as conn:
            await conn.execute(text(
                "INSERT INTO ts_subject_sessions (session_key, subject_key, session_id, created_at) "
                "SELECT 'key-' || n, :subject, 's' || n, now() - n * interval '1 hour' "
                "FROM generate_series(1, 20000) AS n"), {"subject": subject})
            await conn.execute(text("ANALYZE ts_subject_sessions"))
        sent: list[tuple[str, Any]] = []

        def note(_conn: Any, _cursor: Any, statement: str, parameters: Any, *_: Any) -> None:
            if statement.lstrip().upper().startswith("SELECT"):
                sent.append((statement, parameters))

        cutoff = datetime.now(UTC) - timedelta(days=700)
        async with engine.connect() as conn:
            old = await conn.scalar(select(func.count()).where(subject_sessions.c.created_at < cutoff))
        event.listen(engine.sync_engine, "before_cursor_execute", note)
        removed = await sweep_session_ids(engine, cutoff, batch_size=100)
        event.remove(engine.sync_engine, "before_cursor_execute", note)
        assert old and removed == old and len(sent) == old // 100 + 1
        statement, parameters = sent[-1]
        async with engine.connect() as conn:
            plan = "\n".join((await conn.exec_driver_sql("EXPLAIN " + statement, parameters)).scalars())
    finally:
        await engine.dispose()
    assert "ix_ts_subject_sessions_created_at" in plan and "Seq Scan on ts_subject_sessions" not in plan, plan


@pytest.mark.parametrize(("size", "durable"), [(100, True), (100, False), (INLINE_WRITE_BYTES + 1, False)])
async def test_a_transcript_lands_whole_and_private_written_on_the_loop_or_off_it(
    tmp_path: Path, size: int, durable: bool
) -> None:
    # A small one a store that does not flush writes on the event loop (quicker than a thread); a large one, or any
    # one flushed to the disk, in a thread, so the loop's other sessions go on meanwhile. Either lands whole,
    # owner-only, in a root folder made private.
    store = LocalTranscriptStore(tmp_path / "transcripts", durable=durable)
    key = run_key(RunKeys("a" * 32, "b" * 32), "r1")
    body = os.urandom(size)
    threads: list[int] = []
    original = LocalTranscriptStore._put

    def spying(self: LocalTranscriptStore, path: Path, data: bytes, stamp: float | None = None) -> None:
        threads.append(threading.get_ident())
        original(self, path, data, stamp)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(LocalTranscriptStore, "_put", spying)
        await store.put(key, body)
    assert await store.get(key) == body
    assert (threads == [threading.get_ident()]) == (size <= INLINE_WRITE_BYTES and not durable)
    written = (tmp_path / "transcripts").joinpath(*key.split("/"))
    assert stat.S_IMODE(written.stat().st_mode) == 0o600
    assert stat.S_IMODE((tmp_path / "transcripts").stat().st_mode) == 0o700


@pytest.mark.skipif(not inotify.AVAILABLE, reason="inotify is Linux's")
async def test_a_transcript_is_flushed_under_a_temporary_name_renamed_into_place_and_its_folders_flushed_after(
    tmp_path: Path,
) -> None:
    # A power loss in the seconds after a run could lose a transcript only renamed into place (in the page cache).
    store = LocalTranscriptStore(tmp_path / "transcripts")
    first = run_key(RunKeys("a" * 32, "b" * 32), "r1")
    await store.put(first, b"first")  # makes the subject's folders
    runs = (tmp_path / "transcripts").joinpath(*first.split("/")).parent
    subjects = tmp_path / "transcripts" / "subjects"
    with inotify.FolderWatch(runs) as in_runs, inotify.FolderWatch(subjects) as in_subjects:
        await store.put(run_key(RunKeys("a" * 32, "b" * 32), "r2"), b"second")
        await store.put(run_key(RunKeys("c" * 32, "d" * 32), "r3"), b"a new subject's")
        seen, made = in_runs.events(), in_subjects.events()
    temporary = seen[0][1]
    assert temporary.startswith(".tmp-r2.jsonl.gz.")
    assert seen == [("create", temporary), ("close_write", temporary), ("moved_from", temporary),
                    ("moved_to", "r2.jsonl.gz"), ("open", "")]  # the folder opened after the rename: its fsync
    assert made == [("create", "c" * 32), ("open", "")]  # the new subject's folder flushed into its parent


async def _queued(engine: AsyncEngine, run: str, key: str, subject: str, at: datetime) -> None:
    """A plain transcript (an older release's) queued in the outbox at ``at``."""
    await outbox.enqueue(engine, run, key, subject, encode({"kind": "run", "run_id": run}, []), "S3 unreachable")
    async with engine.begin() as conn:
        await conn.execute(update(outbox_table).where(outbox_table.c.run_id == run).values(created_at=at))


async def test_a_transcript_written_again_goes_by_its_first_write_on_every_store(
    engine: AsyncEngine, transcript_backend: Backend
) -> None:
    # A late delivery from the outbox, then `keys migrate` sealing it: on S3 both are uploads the lifecycle
    # rule would count from, so each would live the whole retention again. Both go by the run's end instead.
    store, now = transcript_backend.store, datetime.now(UTC)
    subject, secret = await ensure_subject(engine, "alice")
    runs = ("old", "recent", "plain", "once")
    key = {run: run_key(RunKeys(subject, session_key(secret, "s1")), run) for run in runs}
    await _queued(engine, "old", key["old"], subject, now - timedelta(days=20))  # already past retention
    await _queued(engine, "recent", key["recent"], subject, now - timedelta(days=5))
    assert (await outbox.flush(engine, store)).delivered == 2
    await store.put(key["plain"], encode({"kind": "run", "run_id": "plain"}, []))  # an older release's, today
    assert await seal_stored_transcripts(engine, store, KeyService.from_settings(engine, Settings())) == 3
    await store.put(key["once"], b"gz")  # written once, today: on S3 the rule expires it, not the sweep
    ten_days = Settings(transcript_retention_days=10)

    assert (await sweep_all(ten_days, engine, store)).transcripts == 1
    assert not transcript_backend.stored(key["old"])  # nor an earlier version or a delete marker of it
    assert await store.list_keys(f"{SUBJECTS}/") == sorted(key[run] for run in runs[1:])

    # A write of it that was still on its way lands after the sweep: its record stays for the next one.
    await store.put(key["old"], b"gz", written_at=now - timedelta(days=20))
    # Six days on the next one's first write is 11 days old: gone, though it was uploaded today.
    assert (await sweep_all(ten_days, engine, store, now=now + timedelta(days=6))).transcripts == 2
    assert not transcript_backend.stored(key["recent"]) and not transcript_backend.stored(key["old"])
    assert await store.list_keys(f"{SUBJECTS}/") == sorted([key["plain"], key["once"]])

    # The one keys migrate sealed goes on its own first write's day too; the one written once only in a folder.
    left = [key["once"]] if needs_record(store) else []
    assert (await sweep_all(ten_days, engine, store, now=now + timedelta(days=11))).transcripts == 2 - len(left)
    assert not transcript_backend.stored(key["plain"]) and await store.list_keys(f"{SUBJECTS}/") == left
    async with engine.connect() as conn:  # every record dropped once its object is gone for good
        assert (await conn.execute(select(rewrites))).all() == []


async def test_a_transcript_written_again_while_an_erasure_fences_its_user_is_not_recorded(
    engine: AsyncEngine, transcript_backend: Backend
) -> None:
    store = transcript_backend.store
    subject, secret = await ensure_subject(engine, "alice")
    key = run_key(RunKeys(subject, session_key(secret, "s1")), "r1")
    async with engine.begin() as conn:
        await conn.execute(insert(user_holds).values(user_id="alice", reason="erasure", created_at=datetime.now(UTC)))
    if needs_record(store):
        with pytest.raises(ErasureInProgress):
            await record_rewrite(engine, store, key, subject, datetime.now(UTC))
    else:  # a folder keeps the first write as the file's own time: nothing to record, nothing refused
        await record_rewrite(engine, store, key, subject, datetime.now(UTC))
    async with engine.connect() as conn:
        assert (await conn.execute(select(rewrites))).all() == []


@pytest.mark.s3
async def test_a_transcript_written_again_that_a_legal_hold_keeps_goes_at_the_first_sweep_after_the_hold(
    engine: AsyncEngine, s3_env: str
) -> None:
    # Past retention but under a legal hold: S3 refuses to delete it, and every other sweep's work goes on.
    backend = S3Backend(locked=True)
    store, now = backend.store, datetime.now(UTC)
    subject, secret = await ensure_subject(engine, "alice")
    key = run_key(RunKeys(subject, session_key(secret, "s1")), "held")
    await _queued(engine, "held", key, subject, now - timedelta(days=20))
    assert (await outbox.flush(engine, store)).delivered == 1
    assert backend.hold(key)
    await _queued(engine, "stale", key.replace("held", "stale"), subject, now - timedelta(days=40))  # never sent
    ten_days = Settings(transcript_retention_days=10)

    report = await sweep_all(ten_days, engine, store)
    assert (report.transcripts, report.held_transcripts, report.outbox) == (0, 1, 1)
    assert await store.list_keys(f"{SUBJECTS}/") == [key]

    backend.hold(key, on=False)
    report = await sweep_all(ten_days, engine, store, now=now + timedelta(hours=2))
    assert (report.transcripts, report.held_transcripts) == (1, 0) and not backend.stored(key)
    async with engine.connect() as conn:
        assert (await conn.execute(select(rewrites))).all() == []
    await store.close()


@pytest.mark.parametrize("transcript_backend", ["local", pytest.param("s3", marks=pytest.mark.s3)], indirect=True)
async def test_once_every_retention_has_passed_a_user_is_forgotten_whole(
    engine: AsyncEngine, registry_path: Path, transcript_backend: Backend
) -> None:
    # Every store a run, a memory writer, a refused state, an outage, a rewrite and an export fill, then a
    # sweep past every retention. What survives it outlives any retention by design (docs/operations.md,
    # Retention): a store added without a sweep, or a sweep that misses a table, shows up here. Nothing left of
    # the user, the sweep forgets their ids and destroys their data key too.
    registry = support_registry(registry_path)
    store = transcript_backend.store
    platform = audited_platform(engine, registry, store)
    user = await seed_user(platform, store, "quiet-user", "CANARY-retained")
    await platform.aclose()
    async with engine.begin() as conn:  # expired on the database's clock, which the session sweep reads
        await conn.execute(update(sessions).values(expires_at=await database_now(engine) - timedelta(days=1)))
        # The seeded export was killed long since: its lease passed (the same clock), so it keeps no one.
        await conn.execute(update(export_requests).values(lease_until=export_requests.c.started_at))
    keys = KeyService.from_settings(engine, Settings())
    later = await database_now(engine) + timedelta(days=4000)

    async def forget(now: datetime) -> tuple[int, int]:
        quiet = await forget_quiet_users(engine, store, keys, grace_seconds=0, now=now)
        return quiet.forgotten, quiet.kept

    report = await sweep_all(Settings(), engine, store, now=later, keys=keys, forget=forget)

    prefix = f"{SUBJECTS}/{user.subject_key}/"
    if transcript_backend.stored(prefix):  # S3: the transcripts written once are its lifecycle rule's to expire
        assert (report.forgotten_users, report.quiet_users_kept) == (0, 1)  # listed, as an erasure verifies
        found = await scan_database(engine, [user.user_id])
        assert sorted(found[user.user_id]) == ["ts_data_keys.user_id", "ts_subjects.user_id"]
        for copy in transcript_backend.stored(prefix):  # as the rule expires them
            key, version = copy.rsplit("@", 1)
            assert isinstance(transcript_backend, S3Backend)
            transcript_backend.client.delete_object(Bucket=transcript_backend.bucket,
                                                    Key=f"{transcript_backend.prefix}/{key}", VersionId=version)
        report = await sweep_all(Settings(), engine, store, now=later, keys=keys, forget=forget)
    assert (report.forgotten_users, report.quiet_users_kept) == (1, 0)

    found = await scan_database(engine, [user.user_id, user.subject_key, user.canary])
    assert found == {user.user_id: [], user.subject_key: [], user.canary: []}
    async with engine.connect() as conn:
        assert (await conn.execute(select(user_holds))).all() == []  # the sweep's fence is lifted
    assert transcript_backend.stored(f"{SUBJECTS}/") == []
    # Another sweep finds no one; a later erasure of the id finds nothing held.
    assert (await sweep_all(Settings(), engine, store, now=later, keys=keys, forget=forget)).forgotten_users == 0


async def test_an_erasure_filed_while_the_sweep_forgets_its_user_says_so_and_to_rerun(
    engine: AsyncEngine, tmp_path: Path
) -> None:
    # The sweep's fence has no request: "another erasure request (unknown) is open" named none to resume.
    await ensure_subject(engine, "quiet-user")
    async with engine.begin() as conn:
        await conn.execute(insert(user_holds).values(user_id="quiet-user", reason=RETENTION,
                                                     created_at=datetime.now(UTC)))
    coordinator = DeletionCoordinator(engine, LocalTranscriptStore(tmp_path / "t"), Settings())
    with pytest.raises(ErasureConflict, match="retention sweep is forgetting this user") as caught:
        await coordinator.run("quiet-user", "REQ-2026-7")
    assert "unknown" not in caught.value.message and "in a minute" in (caught.value.hint or "")


async def test_a_user_returning_while_the_sweep_forgets_them_waits_and_starts_afresh(
    engine: AsyncEngine, registry_path: Path, tmp_path: Path
) -> None:
    # The sweep's hold refused the returning user's opening as if an erasure were open ("an erasure request is
    # open for this user"); the opening now waits for the sweep to end, then makes the user anew.
    registry = support_registry(registry_path)
    store = LocalTranscriptStore(tmp_path / "t")
    before = (await ensure_subject(engine, "quiet-user")).key
    keys = KeyService.from_settings(engine, Settings(key_cache_seconds=0.5))
    later = await database_now(engine) + timedelta(days=1)
    sweep = asyncio.create_task(forget_quiet_users(engine, store, keys, grace_seconds=1.0, now=later))
    while not (await _holds(engine)):  # the sweep's hold is up: the user's ids are about to go
        await asyncio.sleep(0.02)
    platform = audited_platform(engine, registry, store)
    try:
        async with platform.session("quiet-user", "back", team="support_triage") as s:
            assert sweep.done()  # it opened once the sweep had forgotten the user
            await s.run("I am back")
    finally:
        await platform.aclose()
    assert (await sweep).forgotten == 1
    after = (await ensure_subject(engine, "quiet-user")).key
    assert after != before and await _holds(engine) == []
    async with engine.connect() as conn:
        assert (await conn.execute(select(sessions.c.session_id).where(sessions.c.user_id == "quiet-user"))).all()


async def test_a_sweep_lifts_the_holds_a_stopped_sweep_left_up_only_once_the_workers_caches_have_expired(
    engine: AsyncEngine, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A sweep killed while it outwaited the workers' caches of the keys it had destroyed left its holds up; the
    # next sweep lifted them at once, and a user opening a session meanwhile could be served the destroyed key
    # from a worker's memory. It waits the cache's time again first.
    from teamstore.erasure import quiet

    async with engine.begin() as conn:
        await conn.execute(insert(user_holds).values(user_id="quiet-user", reason=RETENTION,
                                                     created_at=datetime.now(UTC)))
    said: list[str] = []
    real_sleep = asyncio.sleep

    async def sleep(seconds: float) -> None:
        async with engine.connect() as conn:
            held = (await conn.execute(select(user_holds.c.user_id))).scalars().all()
        said.append(f"slept {seconds:g} with {list(held)} held")
        await real_sleep(0)

    monkeypatch.setattr(quiet, "asyncio", SimpleNamespace(sleep=sleep))
    keys = KeyService.from_settings(engine, Settings(key_cache_seconds=7))
    await forget_quiet_users(engine, LocalTranscriptStore(tmp_path / "t"), keys, grace_seconds=0)
    assert said[0] == "slept 7 with ['quiet-user'] held" and await _holds(engine) == []
    said.clear()
    await forget_quiet_users(engine, LocalTranscriptStore(tmp_path / "t"), keys, grace_seconds=0)
    assert said == []  # none left up: no wait


def support_registry(path: Path) -> Registry:
    """A registry holding the example support team, labelled production."""
    registry = Registry(path, create=True)
    registry.add("support_triage", examples.support_triage().dump_component(),
                 examples.example_manifest("support_triage"), "v1", label="production")
    return registry


async def _holds(engine: AsyncEngine) -> list[Any]:
    async with engine.connect() as conn:
        return list((await conn.execute(select(user_holds.c.user_id, user_holds.c.reason))).all())


async def test_a_sweep_goes_on_past_the_quiet_users_it_keeps_and_ends(
    engine: AsyncEngine, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Users kept (a transcript of theirs is still in the store) were fenced again batch after batch: with a full
    # batch of them, the sweep never ended.
    monkeypatch.setattr(quiet, "BATCH", 2)
    store = LocalTranscriptStore(tmp_path / "t")
    for n in range(5):
        subject = await ensure_subject(engine, f"quiet-{n}")
        await store.put(run_key(RunKeys(subject.key, "b" * 32), "r1"), b"transcript")
    keys = KeyService.from_settings(engine, Settings(key_cache_seconds=0))
    later = await database_now(engine) + timedelta(days=1)
    report = await asyncio.wait_for(forget_quiet_users(engine, store, keys, grace_seconds=0, now=later), 30)
    assert (report.forgotten, report.kept) == (0, 5) and await _holds(engine) == []


async def test_a_sweep_of_a_folder_no_user_is_recorded_for_is_refused_elsewhere_once_transcripts_were_written_there(
    engine: AsyncEngine, tmp_path: Path
) -> None:
    # With no user recorded for the folder it swept nothing and reported "removed 0" on a machine without it:
    # runs from before stores were recorded wrote there too, and a user an erasure emptied it of was written there.
    folder = tmp_path / "workers-disk"
    store = LocalTranscriptStore(folder)
    assert (await sweep_all(Settings(), engine, store)).transcripts == 0  # never written to anywhere: 0 is right
    assert not folder.exists()  # and the sweep did not make it here
    pseudonyms = Pseudonyms(engine)
    observers = [LedgerObserver(engine, pseudonyms), TranscriptObserver(store, engine, pseudonyms)]
    await observe_run(observers, triage_team(), context(run_id="old"))
    await drain_observers(observers)
    async with engine.begin() as conn:  # as if it ran before migration 0010: no store recorded for it
        await conn.execute(delete(subject_stores))
        await conn.execute(update(store_settings).where(store_settings.c.name == SUBJECT_STORES_SINCE)
                           .values(updated_at=datetime.now(UTC) + timedelta(days=1)))
    folder.rename(tmp_path / "unmounted")  # the sweep's machine, as it sees the workers' folder
    with pytest.raises(TranscriptFolderElsewhere, match="a folder this machine does not have"):
        await sweep_all(Settings(), engine, store)
    with pytest.raises(TranscriptFolderElsewhere, match="a folder this machine does not have"):
        await seal_stored_transcripts(engine, store, KeyService.from_settings(engine, Settings()))
    subject, _secret = await ensure_subject(engine, "ida")
    await record_store(engine, subject, store.url)
    async with engine.begin() as conn:  # no run before stores were recorded; an erasure emptied the folder of ida
        await conn.execute(delete(usage))
        await conn.execute(update(subject_stores).values(erased_at=datetime.now(UTC)))
    with pytest.raises(TranscriptFolderElsewhere, match="a folder this machine does not have"):
        await sweep_all(Settings(), engine, store)
    (tmp_path / "unmounted").rename(folder)  # on the workers' machine it sweeps
    assert (await sweep_all(Settings(), engine, store)).transcripts == 0
    assert list(folder.rglob("old.jsonl.gz"))  # within retention: kept


async def test_a_sweep_of_a_folder_written_to_that_this_machine_lacks_or_another_database_made_is_refused(
    engine: AsyncEngine, tmp_path: Path
) -> None:
    # It swept nothing and reported "removed 0": the workers' folder, elsewhere, kept everything.
    store = LocalTranscriptStore(tmp_path / "workers-disk")
    assert (await sweep_all(Settings(), engine, store)).transcripts == 0  # written to by nobody: nothing to sweep
    subject, _secret = await ensure_subject(engine, "ida")
    await record_store(engine, subject, store.url)
    with pytest.raises(TranscriptFolderElsewhere, match="a folder this machine does not have"):
        await sweep_all(Settings(), engine, store)
    await store.make_here("f" * 32)  # another database's folder at the same path
    with pytest.raises(TranscriptFolderElsewhere, match="another teamstore database"):
        await sweep_all(Settings(), engine, store)
    (tmp_path / "workers-disk" / ".teamstore-folder").unlink()  # made by hand: taken as ours, and marked
    assert (await sweep_all(Settings(), engine, store)).transcripts == 0
    assert await store.owner() == await database_id(engine)


async def _cache_wait_then(
    engine: AsyncEngine, store: LocalTranscriptStore, monkeypatch: pytest.MonkeyPatch, meanwhile: Any,
) -> quiet.Quiet:
    """Forget ``u1`` (a subject and a data key, a day old) with a 5 s key cache, running ``meanwhile`` as the
    sweep outwaits the workers' caches of the key it destroyed."""
    await ensure_subject(engine, "u1")
    keys = KeyService.from_settings(engine, Settings(key_cache_seconds=5))
    await keys.data_key("u1", create=True)
    real_sleep = asyncio.sleep

    async def sleep(seconds: float) -> None:
        if seconds == 5:
            await meanwhile()
        await real_sleep(0)

    monkeypatch.setattr(quiet, "asyncio", SimpleNamespace(sleep=sleep))
    return await forget_quiet_users(engine, store, keys, grace_seconds=0,
                                    now=await database_now(engine) + timedelta(days=1))


async def _session_row(engine: AsyncEngine, user_id: str) -> None:
    """A stored session of the user's (its lease taken), as a session opening for them makes it."""
    at = datetime.now(UTC)
    async with engine.begin() as conn:
        await conn.execute(insert(sessions).values(
            user_id=user_id, session_id="back", team="t", team_version="v", schema_version=1,
            agentchat_version="0.7.5", fingerprints={}, state='{"x":1}', state_bytes=7, row_version=1,
            created_at=at, updated_at=at, expires_at=at + timedelta(days=7)))


async def test_a_sweep_started_while_another_forgets_leaves_it_the_users_and_lifts_none_of_its_holds(
    engine: AsyncEngine, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Overlapping sweeps (a CronJob's default concurrencyPolicy): the second took the first one's live holds for
    # a stopped sweep's and lifted them; a session waiting on them opened, and the first sweep then deleted the
    # user's subject mapping all the same, so what that session wrote sat under a subject no mapping named.
    store = LocalTranscriptStore(tmp_path / "t")
    second: list[quiet.Quiet] = []

    async def another_sweep() -> None:
        keys = KeyService.from_settings(engine, Settings(key_cache_seconds=5))
        second.append(await forget_quiet_users(engine, store, keys, grace_seconds=0,
                                               now=await database_now(engine) + timedelta(days=1)))
        assert await _holds(engine) == [("u1", RETENTION)]  # the first sweep's hold still stands

    first = await _cache_wait_then(engine, store, monkeypatch, another_sweep)
    assert second == [quiet.Quiet(0, 0, busy=True)] and (first.forgotten, first.kept) == (1, 0)
    # The lock goes with the sweep: the next one forgets again (none left to forget).
    keys = KeyService.from_settings(engine, Settings(key_cache_seconds=0))
    assert await forget_quiet_users(engine, store, keys, grace_seconds=0) == quiet.Quiet(0, 0)


async def test_a_user_whose_hold_went_while_the_sweep_outwaited_the_caches_keeps_their_ids(
    engine: AsyncEngine, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The hold lifted by another (an operator, a sweep that lost its lock with its connection) and a session of
    # the user's stored meanwhile: the sweep deleted their subject mapping anyway.
    store = LocalTranscriptStore(tmp_path / "t")
    before = (await ensure_subject(engine, "u1")).key

    async def hold_lifted_and_user_back() -> None:
        async with engine.begin() as conn:
            await conn.execute(delete(user_holds))
        await _session_row(engine, "u1")

    report = await _cache_wait_then(engine, store, monkeypatch, hold_lifted_and_user_back)
    assert (report.forgotten, report.kept) == (0, 1) and (await ensure_subject(engine, "u1")).key == before


async def test_a_user_stored_again_under_the_sweeps_hold_keeps_their_ids_and_the_hold_is_lifted(
    engine: AsyncEngine, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A write that passed the fence's check before the hold went up and landed after the grace: the mapping stays
    # (checked again as the hold is lifted), and the hold goes all the same, so the user's sessions open.
    store = LocalTranscriptStore(tmp_path / "t")
    before = (await ensure_subject(engine, "u1")).key
    report = await _cache_wait_then(engine, store, monkeypatch, lambda: _session_row(engine, "u1"))
    assert (report.forgotten, report.kept) == (0, 1) and await _holds(engine) == []
    assert (await ensure_subject(engine, "u1")).key == before


async def test_a_sweep_whose_forgetting_another_sweep_holds_says_it_skipped_that_step(
    engine: AsyncEngine, tmp_path: Path
) -> None:
    from teamstore.db.exclusive import exclusive

    store = LocalTranscriptStore(tmp_path / "t")
    await ensure_subject(engine, "u1")
    keys = KeyService.from_settings(engine, Settings(key_cache_seconds=0))
    later = await database_now(engine) + timedelta(days=1)

    async def forget(now: datetime) -> tuple[int, int] | None:
        quiet = await forget_quiet_users(engine, store, keys, grace_seconds=0, now=now)
        return None if quiet.busy else (quiet.forgotten, quiet.kept)

    async with exclusive(engine, quiet.LOCK) as mine:
        assert mine
        report = await sweep_all(Settings(), engine, store, now=later, keys=keys, forget=forget)
    assert report.forgotten_users is None and "another retention sweep" in report.skipped_steps["forget_quiet_users"]
    report = await sweep_all(Settings(), engine, store, now=later, keys=keys, forget=forget)
    assert (report.forgotten_users, report.skipped_steps) == (1, {})


async def test_a_transcript_store_that_fails_its_sweep_leaves_the_other_stores_swept_and_no_one_forgotten(
    engine: AsyncEngine, tmp_path: Path
) -> None:
    # The steps ran one after another: the transcript step's failure (here ``subjects/`` a symbolic link, which
    # the sweep refuses to walk) stopped the sweep, and quarantined states, memory and the ledger stayed past
    # their retention every day until the transcript store was fixed.
    now = await database_now(engine)
    async with engine.begin() as conn:
        await conn.execute(insert(quarantine).values(
            user_id="alice", session_id="old", reason="corrupt", detail="test", team="t", team_version="v",
            schema_version=1, agentchat_version="0.7.5", fingerprints={}, state="{}", state_bytes=2,
            row_version=1, quarantined_at=now - timedelta(days=300)))
    subject = (await ensure_subject(engine, "quiet-user")).key
    store = LocalTranscriptStore(tmp_path / "t")
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "t").mkdir()
    (tmp_path / "t" / SUBJECTS).symlink_to(tmp_path / "elsewhere")
    keys = KeyService.from_settings(engine, Settings(key_cache_seconds=0))

    async def forget(at: datetime) -> tuple[int, int]:
        quiet = await forget_quiet_users(engine, store, keys, grace_seconds=0, now=at)
        return quiet.forgotten, quiet.kept

    with pytest.raises(RetentionIncomplete, match="step\\(s\\) transcripts failed") as caught:
        await sweep_all(Settings(), engine, store, now=now + timedelta(days=1), keys=keys, forget=forget)
    report = caught.value.report
    assert isinstance(report, SweepReport) and report.quarantined == 1 and report.ledger_rows == 0
    assert list(report.failed_steps) == ["transcripts"] and (report.transcripts, report.held_transcripts) == (None,
                                                                                                             None)
    assert "transcript step failed" in report.skipped_steps["forget_quiet_users"] and report.forgotten_users is None
    assert "then run `teamstore retention sweep` again" in (caught.value.hint or "")
    async with engine.connect() as conn:
        assert (await conn.execute(select(quarantine.c.session_id))).all() == []
    assert (await ensure_subject(engine, "quiet-user")).key == subject  # not forgotten: the store did not answer


async def test_a_sweep_stopped_while_it_forgets_leaves_its_holds_but_not_its_lock(
    engine: AsyncEngine, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Stopped mid-way (cancelled, as Ctrl-C or SIGTERM stop the command), the sweep's lock goes with it: the next
    # sweep is not turned away, and lifts the holds left up once the workers' caches have expired.
    store = LocalTranscriptStore(tmp_path / "t")
    waiting = asyncio.Event()

    async def stopped_here() -> None:
        waiting.set()
        await asyncio.Event().wait()  # until cancelled

    stopped = asyncio.create_task(_cache_wait_then(engine, store, monkeypatch, stopped_here))
    await waiting.wait()
    stopped.cancel()
    with pytest.raises(asyncio.CancelledError):
        await stopped
    assert await _holds(engine) == [("u1", RETENTION)]
    keys = KeyService.from_settings(engine, Settings(key_cache_seconds=0))
    assert await forget_quiet_users(engine, store, keys, grace_seconds=0,
                                    now=await database_now(engine) + timedelta(days=1)) == quiet.Quiet(1, 0)
    assert await _holds(engine) == []
