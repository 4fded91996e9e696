"""The audit's per-run writes with a remembered subject, on SQLite and a real Postgres: the ledger's insert
checks the user's subject and the erasure fence itself, so a subject remembered from an earlier run is never
written to once it is no longer the user's, and a fenced user gets nothing written."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import delete, select
from sqlalchemy.ext.asyncio import AsyncEngine

from teamstore.audit.ledger_observer import LedgerObserver
from teamstore.audit.observer import TranscriptObserver
from teamstore.audit.pseudonyms import Pseudonyms
from teamstore.audit.schema import subjects, usage
from teamstore.audit.subjects import ensure_subject, find_subject, session_key
from teamstore.audit.transcripts import subject_prefix
from teamstore.audit.transcripts.local import LocalTranscriptStore
from teamstore.db.fence import user_holds
from teamstore.errors import ErasureInProgress
from teamstore.events import ModelCall, RunContext, RunOutcome, drain_observers
from tests.audit.conftest import still_running
from tests.audit.teams import context, observe_run, open_session, triage_team

# The audit fixture drains its observers as a platform does: no flush a run started outlives the engine.
pytestmark = pytest.mark.usefixtures("nothing_left_running")


async def _ledger(engine: AsyncEngine, run_id: str) -> set[tuple[str | None, str]]:
    async with engine.connect() as conn:
        rows = (await conn.execute(select(usage.c.subject_key, usage.c.session_key).where(usage.c.run_id == run_id)))
    return {(r.subject_key, r.session_key) for r in rows.all()}


async def _erase_subject(engine: AsyncEngine, user_id: str) -> None:
    """What a finished erasure leaves: the user's subject mapping gone (and no hold)."""
    async with engine.begin() as conn:
        await conn.execute(delete(subjects).where(subjects.c.user_id == user_id))


@pytest.fixture
async def audit(engine: AsyncEngine, tmp_path: Path) -> tuple[Pseudonyms, LedgerObserver, TranscriptObserver]:
    pseudonyms = Pseudonyms(engine)
    store = LocalTranscriptStore(tmp_path / "transcripts")
    observers = LedgerObserver(engine, pseudonyms), TranscriptObserver(store, engine, pseudonyms)
    yield pseudonyms, *observers
    await drain_observers(observers)  # as a platform closes: the outbox flush a run started ends first


async def test_the_ledger_of_a_user_seen_before_is_written_without_waiting_for_the_runs_lookup(
    engine: AsyncEngine, audit: tuple[Pseudonyms, LedgerObserver, TranscriptObserver], monkeypatch: pytest.MonkeyPatch
) -> None:
    pseudonyms, ledger, _ = audit
    first = context(user_id="ann")
    await observe_run([ledger], triage_team(), first)
    second = context(user_id="ann", session_id="s2")
    outcome = await observe_run([], triage_team(), second)

    async def no_lookup(ctx: object) -> None:
        raise AssertionError("the ledger waited for the run's lookup")

    monkeypatch.setattr(pseudonyms, "writable", no_lookup)
    await ledger.run_finished(second, outcome)
    subject, secret = await ensure_subject(engine, "ann")
    assert await _ledger(engine, second.run_id) == {(subject, session_key(secret, "s2"))}


async def test_an_erased_users_remembered_subject_is_never_written_to_again(
    engine: AsyncEngine, audit: tuple[Pseudonyms, LedgerObserver, TranscriptObserver]
) -> None:
    pseudonyms, ledger, transcripts = audit
    first = context(user_id="bea")
    await observe_run([ledger, transcripts], triage_team(), first)
    old = str(await find_subject(engine, "bea"))
    assert pseudonyms.remembered(first) is not None
    await _erase_subject(engine, "bea")  # the erasure finished; the user comes back

    second = context(user_id="bea")
    await observe_run([ledger, transcripts], triage_team(), second)
    new, secret = await ensure_subject(engine, "bea")
    assert new != old
    assert await _ledger(engine, second.run_id) == {(new, session_key(secret, second.session_id))}
    assert not any(second.run_id in key for key in await transcripts.store.list_keys(subject_prefix(old)))
    assert any(second.run_id in key for key in await transcripts.store.list_keys(subject_prefix(new)))


async def test_a_subject_replaced_by_another_workers_lookup_is_not_written_to(
    engine: AsyncEngine, audit: tuple[Pseudonyms, LedgerObserver, TranscriptObserver]
) -> None:
    _, ledger, _ = audit
    await observe_run([ledger], triage_team(), context(user_id="cy"))
    await _erase_subject(engine, "cy")
    other = Pseudonyms(engine)  # another worker: the user's next session there makes a new subject
    try:
        replaced = (await other.open_session("cy", "elsewhere")).key
    finally:
        await other.aclose()
    run = context(user_id="cy", opening=None)  # no opening's subject: the ledger goes by the remembered one
    await observe_run([ledger], triage_team(), run)
    subject, secret = await ensure_subject(engine, "cy")
    assert subject == replaced
    assert await _ledger(engine, run.run_id) == {(replaced, session_key(secret, run.session_id))}


async def test_a_fenced_user_gets_no_ledger_row_even_with_the_subject_remembered(
    engine: AsyncEngine, audit: tuple[Pseudonyms, LedgerObserver, TranscriptObserver]
) -> None:
    pseudonyms, ledger, _ = audit
    first = context(user_id="dee")
    await observe_run([ledger], triage_team(), first)
    async with engine.begin() as conn:  # an erasure opens while the next run is in flight
        await conn.execute(user_holds.insert().values(user_id="dee", reason="erasure", created_at=datetime.now(UTC)))
    second = context(user_id="dee")
    outcome = await observe_run([], triage_team(), second)
    assert pseudonyms.remembered(second) is not None
    with pytest.raises(ErasureInProgress):
        await ledger.run_finished(second, outcome)
    assert await _ledger(engine, second.run_id) == set()
    assert pseudonyms.remembered(second) is None


async def _hold(engine: AsyncEngine, user_id: str) -> None:
    async with engine.begin() as conn:  # an erasure opens
        await conn.execute(user_holds.insert().values(user_id=user_id, reason="erasure", created_at=datetime.now(UTC)))


async def test_the_transcript_is_written_beside_the_end_of_run_fence_not_after_it(
    audit: tuple[Pseudonyms, LedgerObserver, TranscriptObserver], monkeypatch: pytest.MonkeyPatch
) -> None:
    pseudonyms, _, transcripts = audit
    run = context(user_id="fay")
    await open_session([transcripts], run)
    events: list[str] = []
    lookup = pseudonyms.writes.subject

    async def slow_lookup(user_id: str) -> tuple[str | None, bool]:
        found = await lookup(user_id)
        events.append("lookup")
        if len(events) > 1:  # the end-of-run fence: the upload must not be waiting for it
            await asyncio.sleep(0.3)
            events.append("fence checked")
        return found

    put = transcripts.store.put

    async def recorded_put(key: str, body: bytes) -> None:
        events.append("upload")
        await put(key, body)

    monkeypatch.setattr(pseudonyms.writes, "subject", slow_lookup)
    monkeypatch.setattr(transcripts.store, "put", recorded_put)
    await observe_run([transcripts], triage_team(), run)
    assert events == ["lookup", "lookup", "upload", "fence checked"]
    assert len(await transcripts.store.list_keys(subject_prefix(str(pseudonyms.remembered(run).subject_key)))) == 1


async def _started(audit: tuple[Pseudonyms, LedgerObserver, TranscriptObserver], run: RunContext) -> str:
    """Open ``run``'s session and start ``run`` in the transcript and ledger observers; the subject looked up as
    it started."""
    pseudonyms, ledger, transcripts = audit
    await open_session((transcripts, ledger), run)
    for observer in (transcripts, ledger):
        await observer.run_started(run)
    return (await pseudonyms.run_keys(run)).subject_key


@pytest.mark.parametrize("first", ["transcript", "ledger"])
async def test_a_transcript_uploaded_beside_a_fence_that_went_up_mid_run_is_deleted_again(
    engine: AsyncEngine, audit: tuple[Pseudonyms, LedgerObserver, TranscriptObserver], first: str
) -> None:
    # Whichever observer ends first makes the end-of-run fence (the ledger's, with its rows in the statement).
    _, ledger, transcripts = audit
    run = context(user_id=f"gus-{first}")
    subject = await _started(audit, run)  # looked up as the run started: not fenced then
    await _hold(engine, run.user_id)
    outcome = await observe_run([], triage_team(), run)
    for observer in ([transcripts, ledger] if first == "transcript" else [ledger, transcripts]):
        with pytest.raises(ErasureInProgress):
            await observer.run_finished(run, outcome)
    assert await transcripts.store.list_keys(subject_prefix(subject)) == []
    assert await _ledger(engine, run.run_id) == set()


async def test_the_runs_ledger_rows_are_written_by_the_end_of_run_fence_itself(
    engine: AsyncEngine, audit: tuple[Pseudonyms, LedgerObserver, TranscriptObserver], monkeypatch: pytest.MonkeyPatch
) -> None:
    # The run's keys were looked up as it started; at its end one statement (on Postgres) checks the fence again
    # and writes the ledger rows: the transcript's upload waits on that, and the ledger writes nothing more.
    pseudonyms, ledger, transcripts = audit
    calls: list[str] = []
    run = context(user_id="hal")
    await open_session([ledger, transcripts], run)  # before the run's statements are counted
    for name in ("subject", "insert_usage", "end_of_run"):
        sent = getattr(pseudonyms.writes, name)

        async def counted(*args: object, _sent: Any = sent, _name: str = name, **kwargs: object) -> Any:
            calls.append(_name)
            return await _sent(*args, **kwargs)

        monkeypatch.setattr(pseudonyms.writes, name, counted)
    await observe_run([ledger, transcripts], triage_team(), run)
    subject, secret = await ensure_subject(engine, "hal")
    assert await _ledger(engine, run.run_id) == {(subject, session_key(secret, run.session_id))}
    assert len(await transcripts.store.list_keys(subject_prefix(subject))) == 1
    assert calls.count("end_of_run") == 1
    assert calls[:1] == ["subject"]  # as the run started
    if engine.dialect.name == "postgresql":
        assert calls == ["subject", "end_of_run"]


async def test_a_record_sent_again_adds_nothing_and_a_continuation_adds_only_the_calls_not_yet_recorded(
    engine: AsyncEngine, audit: tuple[Pseudonyms, LedgerObserver, TranscriptObserver]
) -> None:
    # The run ended and was recorded, and its worker died before the save that clears its checkpoint (turn 5):
    # the continuation carries turns 1-5's calls, recorded already, and makes turn 6's again.
    _, ledger, _ = audit

    def calls(attempt: int, count: int) -> list[ModelCall]:
        return [ModelCall("triage", "offline-small", 10, 5, datetime.now(UTC), 0.1, attempt=attempt)] * count

    run = context(user_id="ivy")
    await open_session([ledger], run)
    ended = RunOutcome(datetime.now(UTC), model_calls=calls(0, 6))
    continued = replace(run, interruptions=1)
    carried = RunOutcome(datetime.now(UTC), model_calls=[*calls(0, 5), *calls(1, 1)])
    for ctx, outcome in ((run, ended), (run, ended), (continued, carried), (continued, carried)):
        await ledger.run_finished(ctx, outcome)
    async with engine.connect() as conn:
        rows = (await conn.execute(select(usage.c.attempt, usage.c.interruptions, usage.c.calls).where(
            usage.c.run_id == run.run_id))).all()
    assert sorted(tuple(r) for r in rows) == [(0, 0, 6), (1, 1, 1)]


async def test_a_subject_replaced_mid_run_gets_nothing_written_under_the_old_one(
    engine: AsyncEngine, audit: tuple[Pseudonyms, LedgerObserver, TranscriptObserver]
) -> None:
    # Erased and back while the run was in flight (in another worker): the keys looked up as it started are no
    # longer the user's. The fence says so; nothing is written where the finished erasure will never look.
    _, ledger, transcripts = audit
    run = context(user_id="jo")
    old = await _started(audit, run)
    await _erase_subject(engine, "jo")
    other = Pseudonyms(engine)
    try:
        await other.open_session("jo", "elsewhere")  # the user's next session elsewhere makes a new subject
    finally:
        await other.aclose()
    outcome = await observe_run([], triage_team(), run)
    await asyncio.gather(ledger.run_finished(run, outcome), transcripts.run_finished(run, outcome),
                         return_exceptions=True)
    assert await _ledger(engine, run.run_id) == set()
    assert await transcripts.store.list_keys(subject_prefix(old)) == []


async def test_a_run_fenced_from_its_start_leaves_nothing_running_once_its_audit_is_drained(
    engine: AsyncEngine, audit: tuple[Pseudonyms, LedgerObserver, TranscriptObserver]
) -> None:
    # The user's data key, fetched as the run started, is never used: the run's end finds the user fenced. The
    # drain (a platform's close) waits for the fetch, so its connection is back in the pool before the engine is
    # disposed, not dropped unclosed when the event loop's shutdown cancels it mid-statement.
    _, ledger, transcripts = audit
    await _hold(engine, "kit")
    with pytest.raises(ErasureInProgress):
        await observe_run([ledger, transcripts], triage_team(), context(user_id="kit"))
    await drain_observers([ledger, transcripts])
    assert still_running() == []
    assert engine.pool.checkedout() == 0


async def test_the_audits_close_waits_for_the_key_lookups_under_way_so_their_connections_go_back_to_the_pool(
    engine: AsyncEngine,
) -> None:
    # A run's keys are looked up as it starts; a close before anything awaits them (a run cut off before its end)
    # used to leave the lookup running while the engine was disposed, its connection then dropped unclosed. So
    # may a session's opening, cut off by the close as it looks up (and makes) the user's subject.
    pseudonyms = Pseudonyms(engine)
    await ensure_subject(engine, "kit")
    opening = asyncio.ensure_future(pseudonyms.open_session("lena", "opening-1"))
    await asyncio.sleep(0)  # the opening's lookup is under way
    pseudonyms.prefetch(context(user_id="kit"))
    await pseudonyms.aclose()
    assert still_running() == []
    assert engine.pool.checkedout() == 0
    assert await find_subject(engine, "lena") == (await opening).key  # the opening ended: the subject is made


def test_a_process_that_never_closes_its_audit_writes_still_exits(tmp_path: Path) -> None:
    # The audit's own SQLite connections each have a thread; an application that never closes its platform
    # must not be held open by them at exit (as SQLAlchemy's engine is not).
    script = (
        "import asyncio\n"
        "from teamstore.audit.run_writes import SqliteRunWrites\n"
        "from teamstore.db.engine import create_engine\n"
        "async def main():\n"
        f"    engine = create_engine('sqlite+aiosqlite:///{tmp_path / 'exit.db'}')\n"
        "    from teamstore.db.migrate import upgrade\n"
        "    await upgrade(engine)\n"
        "    print(await SqliteRunWrites(engine).subject('alice'))\n"
        "asyncio.run(main())\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "(None, False)"


async def test_a_session_sends_the_runs_end_of_run_statement_before_it_snapshots_the_team(
    database_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The snapshot is CPU work; the end-of-run statement is the database's: sent first, they overlap.
    from config_registry import Registry
    from teamstore import examples
    from teamstore.app import open_platform
    from teamstore.audit.pseudonyms import Pseudonyms as Resolver
    from teamstore.runtime import session_runs
    from teamstore.settings import Settings

    order: list[str] = []
    sent = Resolver._check_again

    async def checked(self: Resolver, *args: Any, **kwargs: Any) -> Any:
        order.append("end of run")
        return await sent(self, *args, **kwargs)

    taken = session_runs.snapshot

    async def snapshot(*args: Any) -> Any:
        order.append("snapshot")
        return await taken(*args)

    monkeypatch.setattr(Resolver, "_check_again", checked)
    monkeypatch.setattr(session_runs, "snapshot", snapshot)
    registry = Registry(tmp_path / "registry", create=True)
    registry.add("support_triage", examples.support_triage().dump_component(),
                 examples.example_manifest("support_triage"), "v1")
    settings = Settings(home=tmp_path / "home", registry_path=registry.path, auto_migrate=True, database_url=database_url)
    async with open_platform(settings) as platform, platform.session("ida", "s1", team="support_triage") as s:
        await s.run("My router keeps dropping")
    assert order == ["end of run", "snapshot"]
