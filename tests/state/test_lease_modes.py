"""The database records how its sessions are leased; a worker of the other kind never runs beside it."""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, timedelta
from pathlib import Path

import pytest
from sqlalchemy import select
from typer.testing import CliRunner

from teamstore.cli import app
from teamstore.db.engine import create_engine
from teamstore.db.migrate import upgrade
from teamstore.errors import ConfigurationError, SessionBusy
from teamstore.state.base import Claim, SessionKey, StateStore
from teamstore.state.factory import store_for
from teamstore.state.lease_mode import lease_mode, set_lease_mode
from teamstore.state.postgres_lock import LockLeaseStore
from teamstore.state.schema import sessions
from teamstore.state.sweep import sweep_expired_sessions
from tests.state.test_store_conformance import record

CLAIM = Claim("support_triage", "v1", 1, "0.7.5", {"researcher": "fp-1"})
KEY = SessionKey("alice", "s1")
runner = CliRunner()


async def _rows(engine) -> int:  # type: ignore[no-untyped-def]
    async with engine.connect() as conn:
        return len((await conn.execute(select(sessions))).all())


@pytest.mark.postgres
async def test_a_worker_of_the_other_kind_refuses_to_start_and_writes_nothing(postgres_url: str) -> None:
    engine = create_engine(postgres_url)
    await upgrade(engine)
    assert await lease_mode(engine) == "lock"  # what every Postgres database was before row leases
    rows = store_for(engine, pool_size=2, lease="row")
    with pytest.raises(ConfigurationError) as info:
        await rows.acquire(KEY, CLAIM, owner="w1", lease_ttl=30, wait_seconds=1)
    assert "TEAMSTORE_SESSION_LEASE=lock" in (info.value.hint or "")
    assert await _rows(engine) == 0

    assert await set_lease_mode(engine, "row") == "lock"
    locks = LockLeaseStore(engine, pool_size=2)
    with pytest.raises(ConfigurationError, match="leased by 'row'"):
        await locks.acquire(KEY, CLAIM, owner="w1", lease_ttl=30, wait_seconds=1)
    with pytest.raises(ConfigurationError):  # the sweep is no way around it either
        await locks.sweep_expired()
    assert (await rows.acquire(KEY, CLAIM, owner="w1", lease_ttl=30, wait_seconds=1)).is_new
    await locks.aclose()
    await rows.aclose()
    await engine.dispose()


@pytest.mark.postgres
@pytest.mark.parametrize("start", ["lock", "row"])
async def test_no_switch_while_a_session_is_open(postgres_url: str, start: str) -> None:
    engine = create_engine(postgres_url)
    await upgrade(engine)
    await set_lease_mode(engine, start)
    other = "row" if start == "lock" else "lock"
    store = store_for(engine, pool_size=2, lease=start)
    row = await store.acquire(KEY, CLAIM, owner="w1", lease_ttl=30, wait_seconds=1)
    with pytest.raises(SessionBusy, match="1 session"):
        await set_lease_mode(engine, other)
    assert await lease_mode(engine) == start
    await store.save(KEY, owner="w1", expected_version=row.row_version, record=record(), release=True)
    assert await set_lease_mode(engine, other) == start
    assert await lease_mode(engine) == other
    # The saved session carries over: a worker of the new kind resumes it.
    switched = store_for(engine, pool_size=2, lease=other)
    assert (await switched.acquire(KEY, CLAIM, owner="w2", lease_ttl=30, wait_seconds=1)).state == record().state
    await store.aclose()
    await switched.aclose()
    await engine.dispose()


@pytest.mark.postgres
async def test_a_worker_left_running_across_a_switch_refuses_at_its_next_check(postgres_url: str) -> None:
    engine = create_engine(postgres_url)
    await upgrade(engine)
    store = store_for(engine, pool_size=2, lease="lock")
    row = await store.acquire(KEY, CLAIM, owner="w1", lease_ttl=30, wait_seconds=1)
    await store.save(KEY, owner="w1", expected_version=row.row_version, record=record(), release=True)
    await set_lease_mode(engine, "row")  # with this worker still running
    row = await store.acquire(KEY, CLAIM, owner="w1", lease_ttl=30, wait_seconds=1)  # its check is not due yet
    await store.release(KEY, owner="w1", discard_empty=False)
    store.lease_check.recheck_seconds = 0.05  # type: ignore[attr-defined]
    await asyncio.sleep(0.1)
    with pytest.raises(ConfigurationError, match="leased by 'row'"):
        await store.acquire(KEY, CLAIM, owner="w1", lease_ttl=30, wait_seconds=1)
    await store.aclose()
    await engine.dispose()


async def test_sqlite_only_leases_in_the_row(tmp_path) -> None:  # type: ignore[no-untyped-def]
    engine = create_engine(f"sqlite:///{(tmp_path / 'ts.db').as_posix()}")
    await upgrade(engine)
    assert await lease_mode(engine) == "row"
    with pytest.raises(ConfigurationError, match="advisory locks need Postgres"):
        await set_lease_mode(engine, "lock")
    with pytest.raises(ConfigurationError, match="not one of"):
        await set_lease_mode(engine, "table")
    with pytest.raises(ConfigurationError, match="not one of"):
        store_for(engine, lease="table")
    # The setting's default names Postgres's advisory locks; on SQLite it means the row.
    assert store_for(engine, lease="lock").lease == "row"
    await engine.dispose()


@pytest.mark.postgres
async def test_a_sweep_caught_by_a_switch_reads_the_mode_again(
    postgres_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # `db lease-mode` lands between the sweep reading the mode and sweeping: the sweep reads it again
    # instead of failing with a message about a setting it does not read.
    engine = create_engine(postgres_url)
    await upgrade(engine)
    await set_lease_mode(engine, "row")
    store = store_for(engine, lease="row")
    row = await store.acquire(KEY, CLAIM, owner="w1", lease_ttl=30, wait_seconds=1)
    await store.save(KEY, owner="w1", expected_version=row.row_version, record=record(days=-1.0), release=True)
    reads = iter(["lock", "row"])  # the first read is from just before the switch to row

    async def mode_then_switched(_engine: object) -> str:
        return next(reads)

    monkeypatch.setattr("teamstore.state.sweep.lease_mode", mode_then_switched)
    assert await sweep_expired_sessions(engine) == 1
    await store.aclose()
    await engine.dispose()


@pytest.mark.postgres
async def test_the_sweep_follows_the_database(postgres_url: str) -> None:
    engine = create_engine(postgres_url)
    await upgrade(engine)
    await set_lease_mode(engine, "row")
    store = store_for(engine, lease="row")
    for session, days in (("old", -1.0), ("new", 1.0)):
        key = SessionKey("alice", session)
        row = await store.acquire(key, CLAIM, owner="w1", lease_ttl=30, wait_seconds=1)
        await store.save(key, owner="w1", expected_version=row.row_version, record=record(days=days), release=True)
    assert await sweep_expired_sessions(engine) == 1
    assert [s.session_id for s in await store.list_sessions("alice")] == ["new"]
    await engine.dispose()


@pytest.mark.postgres
def test_cli_shows_and_switches_the_mode(postgres_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TEAMSTORE_DATABASE_URL", postgres_url)
    assert runner.invoke(app, ["db", "upgrade"]).exit_code == 0
    shown = runner.invoke(app, ["db", "lease-mode", "--json"])
    assert shown.exit_code == 0 and json.loads(shown.stdout)["mode"] == "lock"
    switched = runner.invoke(app, ["db", "lease-mode", "row"])
    assert switched.exit_code == 0 and "lock -> row" in switched.stdout
    # This process is still set to lock leases: the output says what every worker needs before it starts.
    assert "set TEAMSTORE_SESSION_LEASE=row on every worker" in " ".join(switched.stdout.split())
    refused = runner.invoke(app, ["db", "lease-mode", "exclusive"])
    said = " ".join(refused.output.split())
    assert refused.exit_code != 0 and "Invalid value for 'MODE': it takes lock or row" in said
    assert "exclusive" not in said
    assert json.loads(runner.invoke(app, ["db", "lease-mode", "--json"]).stdout)["from"] == "row"


async def _abandon_a_new_session(store: StateStore, key: SessionKey, ttl: float, *, settled: bool = False) -> None:
    """A worker takes a lease on a new session and dies before its first save: a row with no state. ``settled``:
    its first write's answer was lost and it read the row back (which moves the row's version on) before it
    died."""
    row = await store.acquire(key, CLAIM, owner="crashed", lease_ttl=ttl, wait_seconds=1)
    assert row.is_new
    if settled:
        assert (await store.settle(key, owner="crashed")) is not None


@pytest.mark.postgres
@pytest.mark.parametrize("settled", [False, True], ids=["fresh", "settled"])
async def test_a_switch_to_locks_clears_new_sessions_a_crashed_row_worker_left(postgres_url: str, settled: bool) -> None:
    engine = create_engine(postgres_url)
    await upgrade(engine)
    await set_lease_mode(engine, "row")
    await _abandon_a_new_session(store_for(engine, lease="row"), KEY, ttl=0.2, settled=settled)
    await asyncio.sleep(0.3)
    assert await _rows(engine) == 1
    await set_lease_mode(engine, "lock")
    assert await _rows(engine) == 0
    locks = store_for(engine, lease="lock")  # the session's first save would have met the leftover row
    row = await locks.acquire(KEY, CLAIM, owner="w1", lease_ttl=30, wait_seconds=1)
    assert await locks.save(KEY, owner="w1", expected_version=row.row_version, record=record(), release=True) == 1
    await locks.aclose()
    await engine.dispose()


@pytest.mark.postgres
async def test_a_switch_a_killed_row_workers_lease_holds_up_says_when_that_lease_runs_out(postgres_url: str) -> None:
    engine = create_engine(postgres_url)
    await upgrade(engine)
    await set_lease_mode(engine, "row")
    await _abandon_a_new_session(store_for(engine, lease="row"), KEY, ttl=120)  # every worker stopped since
    async with engine.connect() as conn:
        until = (await conn.execute(select(sessions.c.lease_until))).scalar_one()
    with pytest.raises(SessionBusy) as info:
        await set_lease_mode(engine, "lock")
    assert f"the last runs out at {until.astimezone(UTC):%Y-%m-%d %H:%M:%S} UTC" in (info.value.hint or "")
    assert await lease_mode(engine) == "row"
    await engine.dispose()


@pytest.mark.parametrize("settled", [False, True], ids=["fresh", "settled"])
async def test_the_sweep_removes_a_new_session_whose_worker_died_once_its_lease_runs_out(
    tmp_path: Path, settled: bool
) -> None:
    engine = create_engine(f"sqlite:///{(tmp_path / 'ts.db').as_posix()}")
    await upgrade(engine)
    store = store_for(engine, lease="row")
    await _abandon_a_new_session(store, KEY, ttl=0.3, settled=settled)
    await _abandon_a_new_session(store, SessionKey("alice", "s2"), ttl=60)  # still leased: kept
    assert await sweep_expired_sessions(engine) == 0
    await asyncio.sleep(0.4)
    assert await sweep_expired_sessions(engine) == 1
    assert await _rows(engine) == 1
    await engine.dispose()


@pytest.mark.postgres
async def test_a_sweep_never_deletes_a_row_saved_after_it_read_its_victims(postgres_url: str) -> None:
    # With row leases a worker may lease and save an expired row while a sweep is deleting it. (With lock
    # leases the sweep holds the session's lock from the moment it picks the row, so the worker waits.)
    lease = "row"
    from sqlalchemy import text, update

    engine = create_engine(postgres_url)
    await upgrade(engine)
    await set_lease_mode(engine, lease)
    store = store_for(engine, lease=lease)
    row = await store.acquire(KEY, CLAIM, owner="w1", lease_ttl=30, wait_seconds=1)
    await store.save(KEY, owner="w1", expected_version=row.row_version, record=record(), release=True)
    async with engine.begin() as conn:  # expired an hour ago
        await conn.execute(update(sessions).values(expires_at=sessions.c.expires_at - timedelta(days=30)))
    async with engine.connect() as holder:
        # Holds the sweep between reading its victims and deleting this one (a slow sweep, made certain).
        await holder.execute(text("SELECT 1 FROM ts_sessions FOR KEY SHARE"))
        sweep = asyncio.create_task(sweep_expired_sessions(engine))
        await asyncio.sleep(0.5)
        row = await store.acquire(KEY, CLAIM, owner="w2", lease_ttl=30, wait_seconds=5)
        assert await store.save(KEY, owner="w2", expected_version=row.row_version, record=record(),
                                release=True) == 2
        await holder.rollback()
    assert await sweep == 0
    saved = await store.get(KEY)
    assert saved is not None and saved.row_version == 2
    await store.aclose()
    await engine.dispose()
