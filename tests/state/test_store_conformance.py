"""The resume-state store's conformance suite, run in full against SQLite and a real Postgres."""

from __future__ import annotations

import asyncio
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import insert, select, text

from teamstore.db.engine import create_engine
from teamstore.db.fence import user_holds
from teamstore.errors import (
    ErasureInProgress,
    InvalidIdentifier,
    SessionBusy,
    StaleStateVersion,
    StoreUnavailable,
    TooManySessions,
)
from teamstore.state.base import Claim, SaveRecord, SessionKey, StateStore
from teamstore.state.envelope import is_sealed_text
from teamstore.state.factory import store_for
from teamstore.state.lease_mode import lease_mode
from teamstore.state.schema import quarantine, sessions
from tests.services import free_port

CLAIM = Claim("support_triage", "v1", 1, "0.7.5", {"researcher": "fp-1"})


def record(state: str = '{"x":1}', days: float = 1.0) -> SaveRecord:
    return SaveRecord("support_triage", "v1", 1, "0.7.5", {"researcher": "fp-1"}, state,
                      datetime.now(UTC) + timedelta(days=days))


async def acquire(
    store: StateStore, key: SessionKey, owner: str = "w1", timeout: float = 0.2, ttl: float = 60,
    max_sessions: int | None = None,
):
    return await store.acquire(key, CLAIM, owner=owner, lease_ttl=ttl, wait_seconds=timeout,
                               max_sessions=max_sessions)


async def test_new_session_is_an_empty_leased_row(store: StateStore) -> None:
    row = await acquire(store, SessionKey("alice", "s1"))
    assert row.is_new and row.row_version == 0 and row.state is None
    assert row.team == "support_triage" and dict(row.fingerprints) == {"researcher": "fp-1"}


async def test_save_then_load_round_trips_and_bumps_version(store: StateStore) -> None:
    key = SessionKey("alice", "s1")
    await acquire(store, key)
    assert await store.save(key, owner="w1", expected_version=0, record=record('{"a":1}'), release=True) == 1
    row = await acquire(store, key, owner="w2")
    assert row.state == '{"a":1}' and row.row_version == 1 and row.state_bytes == 7
    assert row.expires_at is not None and row.expires_at > datetime.now(UTC)


async def test_second_worker_waits_then_gets_session_busy(store: StateStore) -> None:
    key = SessionKey("alice", "s1")
    await acquire(store, key, owner="w1")
    started = asyncio.get_running_loop().time()
    with pytest.raises(SessionBusy) as info:
        await acquire(store, key, owner="w2", timeout=0.3)
    assert asyncio.get_running_loop().time() - started >= 0.3
    # It named "lease_timeout_seconds", which is neither the variable nor the argument a service sets.
    assert "TEAMSTORE_LEASE_TIMEOUT_SECONDS" in (info.value.hint or "") and "lease_timeout=" in (info.value.hint or "")


async def test_waiting_worker_gets_the_lease_once_released(store: StateStore) -> None:
    key = SessionKey("alice", "s1")
    await acquire(store, key, owner="w1")

    async def release_soon() -> None:
        await asyncio.sleep(0.1)
        await store.save(key, owner="w1", expected_version=0, record=record(), release=True)

    task = asyncio.create_task(release_soon())
    row = await acquire(store, key, owner="w2", timeout=3)
    await task
    assert row.row_version == 1


async def test_save_with_old_version_is_a_typed_conflict_and_keeps_newer_state(store: StateStore) -> None:
    key = SessionKey("alice", "s1")
    await acquire(store, key)
    await store.save(key, owner="w1", expected_version=0, record=record('{"v":1}'), release=False)
    with pytest.raises(StaleStateVersion):
        await store.save(key, owner="w1", expected_version=0, record=record('{"v":"lost?"}'), release=True)
    row = await store.get(key)
    assert row is not None and row.state == '{"v":1}'


async def test_expired_lease_is_taken_over_and_the_old_holder_cannot_save(store: StateStore) -> None:
    key = SessionKey("alice", "s1")
    await acquire(store, key, owner="w1", ttl=0.05)
    await asyncio.sleep(0.1)
    await acquire(store, key, owner="w2")
    with pytest.raises(StaleStateVersion):
        await store.save(key, owner="w1", expected_version=0, record=record(), release=True)
    await store.save(key, owner="w2", expected_version=0, record=record('{"w":2}'), release=True)
    row = await store.get(key)
    assert row is not None and row.state == '{"w":2}'


async def test_release_of_a_never_saved_session_leaves_no_row(store: StateStore) -> None:
    key = SessionKey("alice", "s1")
    await acquire(store, key)
    await store.release(key, owner="w1", discard_empty=True)
    assert await store.get(key) is None


async def test_release_keeps_a_saved_row_and_frees_the_lease(store: StateStore) -> None:
    key = SessionKey("alice", "s1")
    await acquire(store, key)
    await store.save(key, owner="w1", expected_version=0, record=record(), release=False)
    await store.release(key, owner="w1", discard_empty=False)
    row = await acquire(store, key, owner="w2", timeout=0)
    assert row.row_version == 1


async def test_quarantine_moves_the_state_aside_with_reason(store: StateStore) -> None:
    key = SessionKey("alice", "s1")
    await acquire(store, key)
    await store.save(key, owner="w1", expected_version=0, record=record('{"garbage": 1}'), release=True)
    row = await acquire(store, key, owner="w2")
    await store.quarantine(row, owner="w2", reason="corrupt", detail="researcher: not an agent state")
    kept = await store.list_quarantined("alice")
    async with store.engine.connect() as conn:
        raw = (await conn.execute(select(quarantine.c.state))).scalar_one()
    assert is_sealed_text(raw) and "garbage" not in raw  # set aside sealed, as the row held it
    assert [(q.reason, q.session_id, q.state_bytes) for q in kept] == [("corrupt", "s1", len(raw))]  # its size
    current = await store.get(key)
    assert current is not None and current.state is None and current.row_version == 1


async def test_user_hold_refuses_new_sessions_and_in_flight_saves(store: StateStore) -> None:
    key = SessionKey("alice", "s1")
    await acquire(store, key)
    async with store.engine.begin() as conn:
        await conn.execute(insert(user_holds).values(user_id="alice", reason="erasure", created_at=datetime.now(UTC)))
    with pytest.raises(ErasureInProgress):
        await store.save(key, owner="w1", expected_version=0, record=record(), release=True)
    with pytest.raises(ErasureInProgress):
        await acquire(store, SessionKey("alice", "s2"), owner="w2")
    other = await acquire(store, SessionKey("bob", "s1"), owner="w3")
    assert other.is_new


async def test_sweep_deletes_expired_unleased_rows_in_batches(store: StateStore) -> None:
    for i in range(7):
        key = SessionKey("alice", f"s{i}")
        await acquire(store, key)
        days = -1.0 if i < 5 else 1.0
        await store.save(key, owner="w1", expected_version=0, record=record(days=days), release=i != 0)
    # s0 is expired but still leased: a live worker's row is never swept from under it.
    assert await store.sweep_expired(batch_size=2) == 4
    left = sorted(s.session_id for s in await store.list_sessions("alice"))
    assert left == ["s0", "s5", "s6"]


@pytest.mark.parametrize(
    "user_id", ["a/b/../c", "..", "Ünïcødé 用户 🎉", "ALICE", "e\u0301", "\u00e9", "x" * 256]
)
async def test_ids_are_stored_exactly_and_never_alias(store: StateStore, user_id: str) -> None:
    key = SessionKey(user_id, "../../etc/passwd")
    await acquire(store, key)
    await store.save(key, owner="w1", expected_version=0, record=record('{"mine":1}'), release=True)
    for other in {"alice", "a/b/c", "e\u0301" if user_id == "\u00e9" else "\u00e9", user_id.lower()[:255] + "?"} - {user_id}:
        assert await store.get(SessionKey(other, "../../etc/passwd")) is None
    row = await store.get(key)
    assert row is not None and row.user_id == user_id and row.state == '{"mine":1}'


async def test_sessions_of_one_user_are_not_reachable_by_another(store: StateStore) -> None:
    for user in ("alice", "bob"):
        key = SessionKey(user, "shared-session-id")
        await acquire(store, key)
        await store.save(key, owner="w1", expected_version=0, record=record(f'{{"who":"{user}"}}'), release=True)
    alice = await store.get(SessionKey("alice", "shared-session-id"))
    assert alice is not None and alice.state == '{"who":"alice"}'
    assert [s.user_id for s in await store.list_sessions("bob")] == ["bob"]


async def test_rows_hold_what_the_schema_promises(store: StateStore) -> None:
    key = SessionKey("alice", "s1")
    await acquire(store, key)
    await store.save(key, owner="w1", expected_version=0, record=record(), release=True)
    async with store.engine.connect() as conn:
        row = (await conn.execute(select(sessions))).one()._mapping
    assert row["schema_version"] == 1 and row["agentchat_version"] == "0.7.5"
    assert row["lease_owner"] is None and row["row_version"] == 1
    assert row["created_at"] is not None and row["updated_at"] >= row["created_at"]


async def test_database_down_is_a_typed_error() -> None:
    engine = create_engine(f"postgresql://nobody@127.0.0.1:{free_port()}/none", connect_args={"connect_timeout": 2})
    with pytest.raises(StoreUnavailable) as info:
        await acquire(store_for(engine), SessionKey("alice", "s1"))
    assert "TEAMSTORE_DATABASE_URL" in (info.value.hint or "")
    await engine.dispose()


async def test_one_statement_to_load_and_one_to_save(store: StateStore) -> None:
    from sqlalchemy import event

    await store.check_lease_mode()  # once per store, not per load
    statements: list[str] = []

    def count(conn, cursor, statement, *args) -> None:  # type: ignore[no-untyped-def]
        if not statement.lstrip().upper().startswith(("PRAGMA", "BEGIN", "COMMIT", "SELECT PG_", "SHOW")):
            statements.append(statement)

    keys = getattr(store, "keys", None)
    if keys is not None:  # the user's data key, made on their first session and then kept in memory
        await keys.data_key("alice")
    event.listen(store.engine.sync_engine, "before_cursor_execute", count)
    # The Postgres stores send their lease statements through psycopg directly, past SQLAlchemy's events.
    backend = getattr(store, "inner", store)
    direct = backend if hasattr(backend, "_execute") else getattr(backend, "statements", None)
    fast = getattr(direct, "_execute", None)
    if fast is not None:

        async def counted(cursor, stmt, params):  # type: ignore[no-untyped-def]
            statements.append(stmt.sql)
            return await fast(cursor, stmt, params)

        direct._execute = counted  # type: ignore[union-attr]
    key = SessionKey("alice", "s1")
    await acquire(store, key, max_sessions=10)  # a new session: the bound's count is in the same statement
    assert len(statements) == 1
    await store.save(key, owner="w1", expected_version=0, record=record(), release=True)
    assert len(statements) == 2
    await acquire(store, key, max_sessions=10)  # a resume
    assert len(statements) == 3
    await store.save(key, owner="w1", expected_version=1, record=record(), release=True)
    assert len(statements) == 4
    event.remove(store.engine.sync_engine, "before_cursor_execute", count)
    async with store.engine.connect() as conn:
        assert (await conn.execute(text("select count(*) from ts_sessions"))).scalar_one() == 1


async def test_the_store_leases_as_its_database_records(store: StateStore, lease: str) -> None:
    from teamstore.state.postgres_lock import LockLeaseStore

    assert store.lease == lease == await lease_mode(store.engine)
    assert isinstance(getattr(store, "inner", store), LockLeaseStore) == (lease == "lock")  # the sealed store's backend


async def test_a_save_that_keeps_the_lease_still_excludes_others(store: StateStore) -> None:
    key = SessionKey("alice", "s1")
    await acquire(store, key, owner="w1")
    await store.save(key, owner="w1", expected_version=0, record=record(), release=False)
    with pytest.raises(SessionBusy):
        await acquire(store, key, owner="w2", timeout=0.2)
    assert await store.save(key, owner="w1", expected_version=1, record=record('{"b":2}'), release=True) == 2
    assert (await acquire(store, key, owner="w2")).state == '{"b":2}'


async def test_expiry_moves_only_when_it_leaves_the_window_and_never_lands_short(store: StateStore) -> None:
    key, slack = SessionKey("alice", "s1"), timedelta(hours=1)

    async def save(version: int, days: float) -> datetime:
        await acquire(store, key)
        rec = replace(record(days=days), expiry_slack=slack)
        await store.save(key, owner="w1", expected_version=version, record=rec, release=True)
        row = await store.get(key)
        assert row is not None and row.expires_at is not None
        # Never before the TTL is up; on Postgres the window is counted from the server's clock at the save,
        # a moment after the record was made.
        assert rec.expires_at <= row.expires_at <= rec.expires_latest + timedelta(seconds=1)
        return row.expires_at

    first = await save(0, 7)
    assert await save(1, 7) == first  # inside the window: the indexed column is left alone
    longer = await save(2, 7.1)  # past the window: moved to the far end
    assert longer > first
    shorter = await save(3, 1)  # a shortened TTL takes effect at once
    assert shorter < first


FREED_WITHIN = 2.0
"""How long the next worker waits for a session a cancelled acquire let go of. A lock lease whose statement was cut
short is let go by closing its connection, and the server frees the lock as it ends that session, a moment later
(longer on a loaded machine); a lease kept would hold for its whole 60 s."""


async def test_a_cancelled_acquire_never_keeps_the_lease(store: StateStore) -> None:
    # Cancelled at every step of the event loop in turn, from before the statement is sent to after its
    # answer came back: whatever the database did, the session is free for the next worker at once.
    key = SessionKey("alice", "s1")
    for steps in range(400):
        task = asyncio.create_task(acquire(store, key, owner=f"c{steps}"))
        for _ in range(steps):
            await asyncio.sleep(0)
        if task.done():
            break  # it got through before this many steps: every earlier point was tried
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        row = await acquire(store, key, owner="next", timeout=FREED_WITHIN)
        await store.release(key, owner="next", discard_empty=row.row_version == 0)
    else:
        pytest.fail("the acquire never finished")


async def test_an_acquire_cancelled_again_and_again_never_keeps_the_lease(store: StateStore) -> None:
    # anyio's cancel scopes (Starlette's, FastAPI's) cancel a task again at every turn of the event loop until it
    # ends: from whichever step the cancellations start, the session is free for the next worker at once.
    key = SessionKey("alice", "s1")
    for steps in range(400):
        task = asyncio.create_task(acquire(store, key, owner=f"c{steps}"))
        for _ in range(steps):
            await asyncio.sleep(0)
        if task.done():
            break  # it got through before this many steps: every earlier point was tried
        while not task.done():
            task.cancel()
            await asyncio.sleep(0)
        assert task.cancelled()
        row = await acquire(store, key, owner="next", timeout=FREED_WITHIN)
        await store.release(key, owner="next", discard_empty=row.row_version == 0)
    else:
        pytest.fail("the acquire never finished")


@pytest.mark.parametrize("bad", ["lone\udcffsurrogate", "", "nul\x00", "x" * 257, "   ", " s1"])
async def test_reading_or_deleting_by_an_id_no_session_can_have_is_a_typed_error(
    store: StateStore, bad: str
) -> None:
    # A lone surrogate reached the driver as a UnicodeEncodeError; the others read as "nothing stored".
    for attempt in (store.get(SessionKey(bad, "s")), store.get(SessionKey("u", bad)), store.list_sessions(bad),
                    store.list_quarantined(bad), store.delete_session(SessionKey(bad, "s"))):
        with pytest.raises(InvalidIdentifier):
            await attempt


# --- the per-user bound on stored sessions -----------------------------------------------------------------
async def _keep(store: StateStore, user: str, *sessions_: str, days: float = 1.0) -> None:
    """Store a saved session for each id, expiring in ``days`` (negative: already expired)."""
    for session_id in sessions_:
        key = SessionKey(user, session_id)
        row = await acquire(store, key, owner="keeper")
        await store.save(key, owner="keeper", expected_version=row.row_version, record=record(days=days),
                         release=True)


async def _rows(store: StateStore, user: str) -> list[tuple[str, str | None]]:
    async with store.engine.connect() as conn:
        found = await conn.execute(select(sessions.c.session_id, sessions.c.lease_owner)
                                   .where(sessions.c.user_id == user).order_by(sessions.c.session_id))
        return [(r[0], r[1]) for r in found]


async def test_at_the_bound_a_new_session_is_refused_at_once_and_leaves_nothing_behind(store: StateStore) -> None:
    await _keep(store, "alice", "s1", "s2", "s3")
    before = await _rows(store, "alice")
    started = asyncio.get_running_loop().time()
    with pytest.raises(TooManySessions) as info:
        await acquire(store, SessionKey("alice", "s4"), owner="w1", timeout=5, max_sessions=3)
    assert asyncio.get_running_loop().time() - started < 2  # refused, not waited on like a busy session
    assert (info.value.stored, info.value.limit) == (3, 3)
    assert "TEAMSTORE_MAX_SESSIONS_PER_USER" in (info.value.hint or "") and "alice" not in info.value.message
    assert await _rows(store, "alice") == before  # no row for s4, no lease left in any row
    # No lease is left either (an advisory lock, with lock leases): the session opens at once, unbounded.
    row = await acquire(store, SessionKey("alice", "s4"), owner="w2", timeout=0)
    assert row.is_new
    await store.release(SessionKey("alice", "s4"), owner="w2", discard_empty=True)
    assert await store.live_sessions("alice") == 3


async def test_a_resume_at_or_past_the_bound_is_never_refused(store: StateStore) -> None:
    await _keep(store, "alice", "s1", "s2", "s3", "s4")  # past the bound (it is soft, see the next tests)
    for session_id in ("s1", "s4"):
        row = await acquire(store, SessionKey("alice", session_id), owner="w1", max_sessions=3)
        assert row.row_version == 1 and row.state is not None
        await store.save(row.key, owner="w1", expected_version=1, record=record(), release=True)


async def test_a_busy_session_at_the_bound_is_busy_not_refused(store: StateStore) -> None:
    await _keep(store, "alice", "s1", "s2")
    await acquire(store, SessionKey("alice", "s1"), owner="w1")
    with pytest.raises(SessionBusy):
        await acquire(store, SessionKey("alice", "s1"), owner="w2", timeout=0.2, max_sessions=2)


async def test_expired_sessions_are_not_counted_and_reopening_one_is_a_new_session(store: StateStore) -> None:
    await _keep(store, "alice", "old1", "old2", days=-1)
    await _keep(store, "alice", "s1", "s2")
    assert await store.live_sessions("alice") == 2
    row = await acquire(store, SessionKey("alice", "s3"), max_sessions=3)  # 2 live of 3: room for one more
    await store.save(row.key, owner="w1", expected_version=0, record=record(), release=True)
    with pytest.raises(TooManySessions):  # an expired row holds nothing a run resumes: opening it is new
        await acquire(store, SessionKey("alice", "old1"), max_sessions=3)
    assert await store.live_sessions("alice") == 3


async def test_a_new_session_not_yet_saved_is_not_counted(store: StateStore) -> None:
    await _keep(store, "alice", "s1")
    await acquire(store, SessionKey("alice", "opening"), owner="w1")  # leased, never saved (no state yet)
    assert await store.live_sessions("alice") == 1
    row = await acquire(store, SessionKey("alice", "s2"), owner="w2", max_sessions=2)
    assert row.is_new


async def test_the_bound_is_per_user(store: StateStore) -> None:
    await _keep(store, "alice", "s1", "s2")
    with pytest.raises(TooManySessions):
        await acquire(store, SessionKey("alice", "s3"), max_sessions=2)
    row = await acquire(store, SessionKey("bob", "s3"), max_sessions=2)
    assert row.is_new and await store.live_sessions("bob") == 0


async def test_a_refused_open_costs_the_process_nothing(store: StateStore) -> None:
    # Refused opens, many more than the store's connection pool holds: each gives its connection back,
    # and the sessions the user already has still open.
    await _keep(store, "alice", "s1")
    for i in range(30):
        with pytest.raises(TooManySessions):
            await acquire(store, SessionKey("alice", f"new-{i}"), owner=f"w{i}", max_sessions=1)
    row = await acquire(store, SessionKey("alice", "s1"), owner="w", timeout=0, max_sessions=1)
    assert row.row_version == 1
    assert [session_id for session_id, _ in await _rows(store, "alice")] == ["s1"]
