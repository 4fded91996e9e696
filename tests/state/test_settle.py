"""Reading a session's row back once nothing its worker sent can still land (``StateStore.settle``): after a
checkpoint write whose answer was lost, whether it landed. On Postgres a statement whose connection the worker
gave up on can still be running on the server, and a plain read taken then would say it had not landed."""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import pytest
from sqlalchemy import text

from teamstore.db.engine import create_engine
from teamstore.errors import StaleStateVersion, StoreUnavailable
from teamstore.state.base import SessionKey, StateStore
from teamstore.state.factory import store_for
from teamstore.state.postgres_lock import LockLeaseStore
from teamstore.state.row_lease import RowLeaseStore
from tests.conftest import prepare
from tests.state.test_checkpoint_conformance import checkpoint
from tests.state.test_store_conformance import acquire, record

KEY = SessionKey("alice", "s1")


async def test_a_row_settled_after_a_checkpoint_holds_it_and_writes_go_on_from_the_version_read(
    store: StateStore,
) -> None:
    await acquire(store, KEY)
    version = await store.save(KEY, owner="w1", expected_version=0, record=record('{"before":1}'), release=False)
    version = await store.checkpoint(KEY, owner="w1", expected_version=version, record=checkpoint())
    settled = await store.settle(KEY, owner="w1")
    assert settled is not None and settled.checkpoint == '{"turn":1}' and settled.state == '{"before":1}'
    assert settled.row_version >= version
    version = await store.checkpoint(KEY, owner="w1", expected_version=settled.row_version,
                                     record=checkpoint('{"turn":2}'))
    await store.save(KEY, owner="w1", expected_version=version, record=record('{"after":1}'), release=True)
    row = await store.get(KEY)
    assert row is not None and row.state == '{"after":1}' and row.checkpoint is None


async def test_under_a_row_lease_a_write_sent_before_the_settle_can_no_longer_land(
    store: StateStore, lease: str
) -> None:
    if lease != "row":  # an advisory lock's store ends the connection instead (below)
        assert store.lease == "lock"
        return
    await acquire(store, KEY)
    version = await store.checkpoint(KEY, owner="w1", expected_version=0, record=checkpoint())
    settled = await store.settle(KEY, owner="w1")
    assert settled is not None and settled.row_version == version + 1
    # The same write, arriving late (held up on the network), names the version before the settle.
    with pytest.raises(StaleStateVersion):
        await store.checkpoint(KEY, owner="w1", expected_version=version, record=checkpoint('{"turn":9}'))
    row = await store.get(KEY)
    assert row is not None and row.checkpoint == '{"turn":1}' and row.row_version == settled.row_version


async def test_a_row_another_worker_leases_is_read_as_it_stands(store: StateStore, lease: str) -> None:
    await acquire(store, KEY, owner="w2")
    version = await store.checkpoint(KEY, owner="w2", expected_version=0, record=checkpoint())
    settled = await store.settle(KEY, owner="w1")
    assert settled is not None and settled.checkpoint == '{"turn":1}' and settled.row_version == version
    await store.checkpoint(KEY, owner="w2", expected_version=version, record=checkpoint('{"turn":2}'))  # still its


async def test_a_session_with_no_row_settles_to_none(store: StateStore) -> None:
    assert await store.settle(SessionKey("alice", "never"), owner="w1") is None


# --- a write the server is still running when the worker gives up on its connection -----------------------


@pytest.fixture(params=["lock", "row"])
async def pg(request: pytest.FixtureRequest, postgres_url: str) -> AsyncIterator[tuple[Any, Any]]:
    """A Postgres store with each kind of lease (unsealed: the rows are read as written), and its engine."""
    await prepare(postgres_url, request.param)
    engine = create_engine(postgres_url)
    store = store_for(engine, pool_size=2, lease=request.param)
    yield store, engine
    await store.aclose()
    await engine.dispose()


def _in_flight(store: Any) -> Any:
    """The connection the store's one statement in flight runs on."""
    if isinstance(store, LockLeaseStore):
        return store._leases[(KEY, "w1")].conn
    assert isinstance(store, RowLeaseStore)
    (conn,) = store.statements._direct._out  # type: ignore[attr-defined]
    return conn


def _cut(conn: Any) -> None:
    """The network between the worker and the server fails: the worker's end of the socket is shut, and the
    server, busy with the statement, does not notice until it answers."""
    with socket.socket(fileno=os.dup(conn.pgconn.socket)) as sock:
        sock.shutdown(socket.SHUT_RDWR)


async def _waiting_on_the_row(engine: Any) -> int:
    """The server process of the worker's statement, once it waits for the row."""
    for _ in range(500):
        async with engine.connect() as conn:
            pid = (await conn.execute(text(
                "SELECT pid FROM pg_stat_activity WHERE application_name LIKE 'teamstore-state %' "
                "AND wait_event_type = 'Lock' AND query LIKE 'UPDATE ts_sessions%'"))).scalar()
        if pid is not None:
            return int(pid)
        await asyncio.sleep(0.02)
    raise AssertionError("the checkpoint write never waited for the row")


async def _waiting_for_locks(engine: Any, count: int) -> None:
    """Once ``count`` statements of this database wait for a lock."""
    for _ in range(500):
        async with engine.connect() as conn:
            if (await conn.execute(text("SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
                                        "AND datname = current_database()"))).scalar() >= count:
                return
        await asyncio.sleep(0.02)
    raise AssertionError(f"{count} statement(s) never waited for a lock")


async def _gone(engine: Any, pid: int) -> None:
    for _ in range(500):
        async with engine.connect() as conn:
            if (await conn.execute(text("SELECT count(*) FROM pg_stat_activity WHERE pid = :p"), {"p": pid})).scalar() == 0:
                return
        await asyncio.sleep(0.02)
    raise AssertionError(f"server process {pid} never ended")


@dataclass
class _CutOff:
    version: int  # the row's version before the write
    pid: int  # the write's server process, as the server names it
    reported_pid: int  # and as the connection was told it (behind a pooler, the pooler's own number)
    settling: asyncio.Future[Any]  # the settle, begun once the worker has given the write up


@contextlib.asynccontextmanager
async def _cut_off_while_the_row_is_held(
    store: Any, admin: Any, *, write: str = "checkpoint", ttl: float = 60, cut_after: float = 0
) -> AsyncIterator[_CutOff]:
    """A write of w1's (a checkpoint, or a save that keeps the lease) that waits for the row (another
    transaction holds it) when w1's connection fails ``cut_after`` seconds later, and the settle begun after it;
    the row comes free as the block ends."""
    await acquire(store, KEY, ttl=ttl)
    version = await store.save(KEY, owner="w1", expected_version=0, record=record('{"before":1}'), release=False)
    async with admin.connect() as holder:
        await holder.execute(text("SELECT 1 FROM ts_sessions WHERE user_id = 'alice' FOR UPDATE"))
        writing = asyncio.ensure_future(
            store.checkpoint(KEY, owner="w1", expected_version=version, record=checkpoint()) if write == "checkpoint"
            else store.save(KEY, owner="w1", expected_version=version, record=record('{"after":1}'), release=False))
        pid = await _waiting_on_the_row(admin)
        in_flight = _in_flight(store)
        await asyncio.sleep(cut_after)
        _cut(in_flight)
        with pytest.raises(StoreUnavailable):
            await writing
        yield _CutOff(version, pid, in_flight.info.backend_pid, asyncio.ensure_future(store.settle(KEY, owner="w1")))
        await holder.commit()
    await _gone(admin, pid)  # whatever the write's process was going to do, it has done


@pytest.mark.postgres
async def test_a_checkpoint_write_cut_off_while_the_server_runs_it_is_settled_for_good(pg: tuple[Any, Any]) -> None:
    # The write waits for the row (another transaction holds it) when the worker's connection fails. A plain
    # read then finds no checkpoint, and the write lands once the row is free: the run would be recorded at its
    # stop and again by its continuation. Under a row lease the settle waits for the write and reads what it
    # left; under an advisory lock it ends the write's server process (the lease went with its connection), so
    # the write never lands. Either way what the settle reads is what the row keeps.
    store, engine = pg
    async with _cut_off_while_the_row_is_held(store, engine) as cut:
        if store.lease == "row":
            await asyncio.sleep(0.3)  # the settle waits behind the write, which waits for the row
        else:
            await cut.settling  # the write's process ended: nothing to wait for
    settled, version = await cut.settling, cut.version
    row = await store.get(KEY)
    assert settled is not None and row is not None
    assert (row.checkpoint, row.row_version) == (settled.checkpoint, settled.row_version)
    if store.lease == "row":
        assert settled.checkpoint == '{"turn":1}' and settled.row_version == version + 2
    else:
        assert settled.checkpoint is None and settled.row_version == version
    assert row.state == '{"before":1}'


@pytest.mark.postgres
@pytest.mark.parametrize("write", ["checkpoint", "save"])
async def test_a_write_sent_within_the_lease_and_cut_off_past_it_is_settled_like_any_other(
    pg: tuple[Any, Any], write: str
) -> None:
    # The write was sent while the lease held and the network failed only after the lease's time (a statement
    # waiting on the server keeps the lease's connection busy, and the network's failure can take minutes to
    # show): whether it landed is not known, and it is settled, not reported as "the lease ended, nothing was
    # written" (it lands once the row comes free). A save is settled as a checkpoint is.
    store, engine = pg
    async with _cut_off_while_the_row_is_held(store, engine, write=write, ttl=1, cut_after=1.2) as cut:
        if store.lease == "row":
            await asyncio.sleep(0.3)
        else:
            await cut.settling
    settled, version = await cut.settling, cut.version
    row = await store.get(KEY)
    assert settled is not None and row is not None
    assert (row.state, row.checkpoint, row.row_version) == (settled.state, settled.checkpoint, settled.row_version)
    if store.lease == "lock":  # the write's process was ended: it never landed
        assert (row.state, row.checkpoint, row.row_version) == ('{"before":1}', None, version)
    else:  # the settle waited for it and read what it left
        landed = ('{"after":1}', None) if write == "save" else ('{"before":1}', '{"turn":1}')
        assert (row.state, row.checkpoint) == landed and row.row_version == version + 2


@contextlib.asynccontextmanager
async def _checkpointed_under_a_row_lease(
    postgres_url: str, monkeypatch: pytest.MonkeyPatch, *, settle_seconds: int
) -> AsyncIterator[tuple[Any, Any, int]]:
    """A row-lease store (its engine pooling one connection) whose settle waits ``settle_seconds``, w1 holding
    alice's session with a checkpoint written; an engine of its own for the other transactions; the row's
    version."""
    from teamstore.state import row_lease

    monkeypatch.setattr(row_lease, "SETTLE_SECONDS", settle_seconds)
    await prepare(postgres_url, "row")
    engine, other = create_engine(postgres_url, pool_size=1, max_overflow=0), create_engine(postgres_url)
    store = store_for(engine, pool_size=2, lease="row")
    try:
        await acquire(store, KEY)
        yield store, other, await store.checkpoint(KEY, owner="w1", expected_version=0, record=checkpoint())
    finally:
        await store.aclose()
        await engine.dispose()
        await other.dispose()


@pytest.mark.postgres
async def test_a_row_held_past_the_settles_wait_says_whether_the_write_landed_is_not_known(
    postgres_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Under a row lease the settle waits for whatever holds the row (a write still running) up to its own
    # lock_timeout: past it, the error says what is not known, not that the role's lock_timeout refused a
    # statement; and that lock_timeout stays the settle's (the pooled connection keeps the one it had).
    async with _checkpointed_under_a_row_lease(postgres_url, monkeypatch, settle_seconds=1) as (store, other, version):
        engine = store.engine
        async with engine.connect() as conn:
            before = (await conn.execute(text("SHOW lock_timeout"))).scalar()
        async with other.connect() as holder:
            await holder.execute(text("SELECT 1 FROM ts_sessions WHERE user_id = 'alice' FOR UPDATE"))
            with pytest.raises(StoreUnavailable) as info:
                await store.settle(KEY, owner="w1")
        assert "held the session's row past 1s: whether the write left unanswered landed is not known" \
            in str(info.value)
        async with engine.connect() as conn:
            assert (await conn.execute(text("SHOW lock_timeout"))).scalar() == before
        row = await store.get(KEY)
        assert row is not None and row.row_version == version and row.checkpoint == '{"turn":1}'


@pytest.mark.postgres
async def test_a_queue_of_writers_on_the_row_holds_the_settle_no_longer_than_its_wait_in_all(
    postgres_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Two transactions hold the row one after the other, each for less than the settle's wait and together for
    # more: the settle waits for each lock in turn, and gives up once its wait is spent in all (it had waited
    # its whole wait for each).
    async def hold_the_row(conn: Any, seconds: float) -> None:
        await conn.execute(text("UPDATE ts_sessions SET updated_at = updated_at WHERE user_id = 'alice'"))
        await asyncio.sleep(seconds)
        await conn.commit()

    async with _checkpointed_under_a_row_lease(postgres_url, monkeypatch, settle_seconds=2) as (store, other, version):
        async with other.connect() as first, other.connect() as second:
            await hold_the_row(first, 0)  # a connection up before the clock starts
            await first.execute(text("UPDATE ts_sessions SET updated_at = updated_at WHERE user_id = 'alice'"))
            next_in_line = asyncio.ensure_future(hold_the_row(second, 1.4))
            await _waiting_for_locks(other, 1)  # queued behind the first
            settling = asyncio.ensure_future(store.settle(KEY, owner="w1"))
            await _waiting_for_locks(other, 2)  # queued behind both
            await asyncio.sleep(1.2)
            await first.commit()
            await next_in_line
            with pytest.raises(StoreUnavailable) as info:
                await settling
        assert "held the session's row past 2s: whether the write left unanswered landed is not known" in str(info.value)
        row = await store.get(KEY)
        assert row is not None and row.row_version == version


@pytest.fixture
async def unable_to_terminate(postgres_url: str) -> AsyncIterator[str]:
    """``postgres_url`` (migrated for advisory-lock leases) as a role the database does not let call
    ``pg_terminate_backend``, not even on its own connections (as some managed databases keep it)."""
    await prepare(postgres_url, "lock")
    role = f"ts_no_terminate_{os.getpid()}"
    admin = create_engine(postgres_url)
    async with admin.begin() as conn:
        await conn.execute(text(f"DROP ROLE IF EXISTS {role}"))
        await conn.execute(text(f"CREATE ROLE {role} LOGIN"))
        for grant in (f"GRANT USAGE ON SCHEMA public TO {role}", f"GRANT ALL ON ALL TABLES IN SCHEMA public TO {role}",
                      f"GRANT ALL ON ALL SEQUENCES IN SCHEMA public TO {role}",
                      "REVOKE EXECUTE ON FUNCTION pg_terminate_backend(integer, bigint) FROM PUBLIC"):
            await conn.execute(text(grant))
    scheme, _, rest = postgres_url.partition("://")
    yield f"{scheme}://{role}@{rest.partition('@')[2]}"
    async with admin.begin() as conn:
        await conn.execute(text(f"DROP OWNED BY {role}"))
    async with admin.connect() as conn:  # its connections first: a role that has any cannot be dropped
        await conn.execute(text(f"SELECT pg_terminate_backend(pid, 5000) FROM pg_stat_activity WHERE usename = '{role}'"))
        await conn.commit()
    async with admin.begin() as conn:
        await conn.execute(text(f"DROP ROLE {role}"))
    await admin.dispose()


@pytest.mark.postgres
async def test_a_lost_connection_the_role_may_not_end_is_outwaited_and_the_write_read_as_it_landed(
    unable_to_terminate: str, postgres_url: str
) -> None:
    # The role may not end its own server processes: the settle waits for the process of the write cut off to
    # end on its own (its statement done, it finds its client gone), and reads the row once it has. The write
    # waits for the row when it is cut off, and lands when the row comes free: the settle reads it there.
    engine, admin = create_engine(unable_to_terminate), create_engine(postgres_url)
    store = store_for(engine, pool_size=2, lease="lock")
    try:
        async with _cut_off_while_the_row_is_held(store, admin) as cut:
            await asyncio.sleep(0.3)  # the settle finds it may not end the write's process, and waits for it
            assert not cut.settling.done()
        settled, version = await cut.settling, cut.version
        row = await store.get(KEY)
        assert settled is not None and row is not None
        assert (row.checkpoint, row.row_version) == (settled.checkpoint, settled.row_version)
        assert settled.checkpoint == '{"turn":1}' and settled.row_version == version + 1
    finally:
        await store.aclose()
        await engine.dispose()
        await admin.dispose()


async def test_a_checkpoint_that_landed_unanswered_is_what_a_quarantine_after_the_settle_sets_aside(
    store: StateStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The sealed store remembers what the open session's row holds, so a quarantine sets aside those very bytes.
    # A write whose answer was lost told it nothing; the settle read what the row holds (turn 2's checkpoint),
    # and the checkpoint refused after it is turn 2's as the row held it, not turn 1's.
    from sqlalchemy import select

    from teamstore.state.schema import quarantine, sessions

    await acquire(store, KEY)
    version = await store.save(KEY, owner="w1", expected_version=0, record=record('{"before":1}'), release=False)
    version = await store.checkpoint(KEY, owner="w1", expected_version=version, record=checkpoint())
    inner = store.inner  # type: ignore[attr-defined]
    real = inner.checkpoint

    async def answer_lost(*args: Any, **kwargs: Any) -> int:
        await real(*args, **kwargs)
        raise StoreUnavailable("the connection closed before the commit's answer", hint="check the database")

    monkeypatch.setattr(inner, "checkpoint", answer_lost)
    with pytest.raises(StoreUnavailable):
        await store.checkpoint(KEY, owner="w1", expected_version=version, record=checkpoint('{"turn":2}'))
    async with store.engine.connect() as conn:  # type: ignore[attr-defined]
        held = (await conn.execute(select(sessions.c.checkpoint))).scalar_one()
    settled = await store.settle(KEY, owner="w1")
    assert settled is not None and settled.checkpoint == '{"turn":2}'
    await store.quarantine(settled, owner="w1", reason="checkpoint corrupt", detail="refused", checkpoint_only=True)
    async with store.engine.connect() as conn:  # type: ignore[attr-defined]
        assert (await conn.execute(select(quarantine.c.checkpoint))).scalar_one() == held


class _Pooler:
    """A connection pooler in session mode in front of the server, as far as the settle can tell one: each client
    has a server connection of its own, and is told a server process id of the pooler's making (PgBouncer's
    BackendKeyData), not the server's."""

    def __init__(self, host: str, port: int) -> None:
        self._upstream = (host, port)
        self._server: asyncio.Server | None = None

    async def start(self) -> int:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        return int(self._server.sockets[0].getsockname()[1])

    async def close(self) -> None:
        assert self._server is not None
        self._server.close()

    async def _serve(self, client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        server_r, server_w = await asyncio.open_connection(*self._upstream)
        await asyncio.gather(self._pipe(client_r, server_w), self._from_server(server_r, client_w),
                             return_exceptions=True)

    @staticmethod
    async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while chunk := await reader.read(65536):
                writer.write(chunk)
                await writer.drain()
        finally:
            writer.close()  # a client gone: its server connection is closed too, as a pooler does

    async def _from_server(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while True:  # the startup's messages, until the server is ready for a query
            head = await reader.readexactly(5)
            body = await reader.readexactly(int.from_bytes(head[1:], "big") - 4)
            if head[:1] == b"K":  # BackendKeyData: the process id, then the cancel key
                body = (2**30 + int.from_bytes(body[:4], "big")).to_bytes(4, "big") + body[4:]
            writer.write(head + body)
            if head[:1] == b"Z":
                break
        await self._pipe(reader, writer)


@pytest.mark.postgres
async def test_a_write_cut_off_behind_a_session_mode_pooler_is_settled_by_the_servers_own_process_id(
    postgres_url: str,
) -> None:
    # Behind a pooler the connection reports a process id the server never had: the settle ends the process that
    # holds the session's lock as the server names it, so the write cut off never lands after the read.
    await prepare(postgres_url, "lock")
    server = postgres_url.partition("@")[2].partition("/")[0]
    host, _, port = server.partition(":")
    pooler = _Pooler(host, int(port))
    pooled = postgres_url.replace(server, f"127.0.0.1:{await pooler.start()}") + "?sslmode=disable&gssencmode=disable"
    engine, admin = create_engine(pooled), create_engine(postgres_url)
    store = store_for(engine, pool_size=2, lease="lock")
    try:
        async with _cut_off_while_the_row_is_held(store, admin) as cut:
            assert cut.reported_pid != cut.pid  # what the pooler told the connection
            settled = await cut.settling
        version = cut.version
        row = await store.get(KEY)
        assert settled is not None and row is not None
        assert (row.checkpoint, row.row_version) == (settled.checkpoint, settled.row_version) == (None, version)
    finally:
        await store.aclose()
        await engine.dispose()
        await admin.dispose()
        await pooler.close()


@pytest.mark.postgres
@pytest.mark.parametrize("handed_on", ["process id used again", "pooler's handover"])
async def test_a_server_process_another_worker_took_the_session_on_since_is_not_ended(
    postgres_url: str, handed_on: str
) -> None:
    # The connection w1 gave up on has ended, and a connection that has taken the session since (w2) is served
    # by a process with the same id: the server gave the id again to a new process, or a session-mode pooler
    # (PgBouncer) handed the very process to w2 once w1 had gone. The settle ends a process only if it had
    # started by the time w1 took its lease and still serves w1's connection (by its application_name).
    await prepare(postgres_url, "lock")
    engine = create_engine(postgres_url)
    first, second = (store_for(engine, pool_size=2, lease="lock") for _ in range(2))
    try:
        await acquire(first, KEY)
        lease = first._leases[(KEY, "w1")]
        async with engine.connect() as conn:  # w1's connection ends (a failover, say); its lock goes with it
            await conn.execute(text("SELECT pg_terminate_backend(:p, 5000)"), {"p": lease.pid})
        await _gone(engine, lease.pid)
        await acquire(second, KEY, owner="w2", timeout=5)
        taken = second._leases[(KEY, "w2")]
        assert taken.name != lease.name and taken.name.startswith("teamstore-state ")
        if handed_on == "process id used again":  # w2's process is newer than w1's lease (the names told apart
            first._given_up[(KEY, "w1")] = (taken.pid, lease.read_at, taken.name)  # or not, if the URL names one)
        else:  # the process is as old as w1's, and serves w2's connection now
            first._given_up[(KEY, "w1")] = (taken.pid, taken.read_at, lease.name)
        assert await first.settle(KEY, owner="w1") is None  # nothing of w1's: read as it stands
        version = await second.checkpoint(KEY, owner="w2", expected_version=0, record=checkpoint())
        assert version == 1  # w2's connection, and its lock, live on
    finally:
        await first.aclose()
        await second.aclose()
        await engine.dispose()
