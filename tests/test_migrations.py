"""The migrations on SQLite and a real Postgres: they build exactly the declared schema, come down to
nothing and go up again, on Postgres store session states with lz4 (migration 0006), and keep erasure requests
filed as twins before request ids were unique as twins compare them (migration 0022), and keep quarantined states
with their ids while never giving an id again (migration 0025), and count the calls an earlier release recorded as
answered with no tokens as calls of unknown usage (migration 0028), and give an export left running a lease
ending a day after it began (migration 0031)."""

from __future__ import annotations

import importlib
import uuid
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

import pytest
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import inspect, make_url, text
from sqlalchemy.engine import Connection
from sqlalchemy.exc import IntegrityError

import teamstore.audit.schema
import teamstore.db.fence
import teamstore.erasure.schema
import teamstore.keys.schema
import teamstore.state.schema  # noqa: F401  (each registers its tables on the metadata)
from teamstore.audit.cost import query_costs
from teamstore.audit.prices import parse_prices
from teamstore.audit.pseudonyms import Pseudonyms
from teamstore.audit.subjects import new_subject_key, record_store, recorded_endpoints
from teamstore.audit.transcripts.record import RunKeys
from teamstore.db.engine import create_engine
from teamstore.db.metadata import metadata
from teamstore.db.migrate import alembic_config, current_revision, head_revision, require_current, upgrade
from teamstore.erasure import requests
from teamstore.errors import ErasureConflict, SchemaNotReady
from teamstore.state.base import SessionKey
from teamstore.state.factory import store_for
from tests.audit.teams import context
from tests.state.test_store_conformance import acquire, record

HAS_LZ4 = importlib.import_module("teamstore.migrations.versions.0006_state_lz4").HAS_LZ4


def _differences(conn: Connection) -> list[Any]:
    return list(compare_metadata(MigrationContext.configure(conn), metadata))


def _tables(conn: Connection) -> set[str]:
    return {name for name in inspect(conn).get_table_names() if name != "alembic_version"}


def _downgrade(conn: Connection, target: str) -> None:
    command.downgrade(alembic_config(conn), target)


async def test_the_migrations_build_the_declared_schema_and_come_down_again(database_url: str) -> None:
    engine = create_engine(database_url)
    assert await upgrade(engine) == head_revision()
    async with engine.connect() as conn:
        assert await conn.run_sync(_differences) == []
        assert await conn.run_sync(_tables) == set(metadata.tables)
    async with engine.begin() as conn:
        await conn.run_sync(_downgrade, "base")
    async with engine.connect() as conn:
        assert await conn.run_sync(_tables) == set()
        if engine.dialect.name == "postgresql":  # the functions of 0004 and 0008 go with their migrations
            for function in ("ts_locked_session", "ts_live_sessions"):
                assert (await conn.execute(text(f"SELECT to_regproc('{function}')"))).scalar() is None
    assert await current_revision(engine) is None
    assert await upgrade(engine) == head_revision()
    async with engine.connect() as conn:
        assert await conn.run_sync(_differences) == []
    await engine.dispose()


async def _stored_compression(engine: Any) -> str:
    async with engine.connect() as conn:
        found: str = (await conn.execute(text("SELECT pg_column_compression(state) FROM ts_sessions"))).scalar()
    return found


@pytest.mark.postgres
async def test_postgres_stores_session_states_with_lz4(postgres_url: str) -> None:
    engine = create_engine(postgres_url)
    await upgrade(engine)
    store = store_for(engine)
    key, big = SessionKey("alice", "s1"), '{"messages": "%s"}' % ("the router drops every evening. " * 200)
    row = await acquire(store, key, owner="w1")
    await store.save(key, owner="w1", expected_version=row.row_version, record=record(big), release=True)
    async with engine.connect() as conn:  # a server built without lz4 keeps its default
        has_lz4 = (await conn.execute(text(HAS_LZ4))).scalar()
    assert await _stored_compression(engine) == ("lz4" if has_lz4 else "pglz")
    row = await acquire(store, key, owner="w2")
    assert row.state == big  # reads back as written
    await store.release(key, owner="w2", discard_empty=False)

    async with engine.begin() as conn:  # back to 0005: the next write compresses with the server's default
        await conn.run_sync(_downgrade, "0005")
        # Written by hand: this code's load statement needs migration 0008 (ts_live_sessions).
        await conn.execute(text("UPDATE ts_sessions SET state = :state"), {"state": big + " "})
    assert await _stored_compression(engine) == "pglz"
    await store.aclose()
    await engine.dispose()


async def test_a_database_migrated_by_a_newer_teamstore_is_refused_by_name_not_misread(database_url: str) -> None:
    engine = create_engine(database_url)
    await upgrade(engine)
    async with engine.begin() as conn:
        await conn.execute(text("UPDATE alembic_version SET version_num = '0099'"))
    for attempt in (upgrade, require_current):  # upgrade raised alembic's CommandError traceback
        with pytest.raises(SchemaNotReady) as caught:
            await attempt(engine)
        assert "0099" in caught.value.message and "newer teamstore" in caught.value.message
    async with engine.connect() as conn:  # nothing was touched
        assert (await conn.execute(text("SELECT version_num FROM alembic_version"))).scalar() == "0099"
    await engine.dispose()


async def test_processes_migrating_one_fresh_database_at_once_all_succeed(database_url: str) -> None:
    """Workers (or two `teamstore run`) starting together on a new database each find it empty: every one
    of them must end with the schema at head, none with "table already exists"."""
    import asyncio

    engines = [create_engine(database_url) for _ in range(4)]
    try:
        results = await asyncio.gather(*(upgrade(engine) for engine in engines), return_exceptions=True)
        assert results == [head_revision()] * len(engines)
    finally:
        for engine in engines:
            await engine.dispose()


def _revisions_after(revision: str) -> list[str]:
    """The migrations this code ships after ``revision``, oldest first."""
    from alembic.script import ScriptDirectory

    walked = ScriptDirectory.from_config(alembic_config()).walk_revisions(base=revision, head="heads")
    return [each.revision for each in reversed(list(walked)) if each.revision != revision]


async def test_an_upgrade_that_waited_for_another_says_it_applied_nothing(database_url: str) -> None:
    """Two `teamstore db upgrade` at once (two deploy jobs): the one that waited for the other's migrations found
    them applied. Both said "0021 -> <head>", as if each had migrated the database."""
    import asyncio

    from teamstore.db.migrate import MIGRATION_LOCK

    engine = create_engine(database_url)
    await upgrade(engine, "0021")
    engines = [create_engine(database_url) for _ in range(2)]
    applied: list[list[str]] = [[], []]
    try:
        async with engine.connect() as holder:  # the lock an upgrade takes, held until both wait for it
            if holder.dialect.name == "sqlite":
                await holder.exec_driver_sql("BEGIN IMMEDIATE")
            else:
                await holder.execute(text(f"SELECT pg_advisory_lock({MIGRATION_LOCK})"))
            waiting = [asyncio.create_task(upgrade(e, applied=a)) for e, a in zip(engines, applied, strict=True)]
            await asyncio.sleep(1)
            await holder.exec_driver_sql("ROLLBACK" if holder.dialect.name == "sqlite"
                                         else f"SELECT pg_advisory_unlock({MIGRATION_LOCK})")
        assert await asyncio.gather(*waiting) == [head_revision()] * 2
    finally:
        for each in (engine, *engines):
            await each.dispose()
    assert sorted(applied) == [[], _revisions_after("0021")]


async def test_a_new_sqlite_file_held_by_another_connection_is_switched_to_wal_once_it_is_let_go(
    tmp_path: Any,
) -> None:
    """Switching a new file to WAL needs it alone, and SQLite refuses at once (no busy wait) while another
    connection holds it: one of several processes opening a fresh database together failed with "database is
    locked". The switch waits the other connection out instead."""
    import asyncio
    import sqlite3

    path = tmp_path / "fresh.db"
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")  # a file still in rollback-journal mode, its write lock held
    engine = create_engine(f"sqlite:///{path}")
    release = asyncio.get_running_loop().call_later(0.3, lambda: holder.execute("COMMIT"))
    try:
        async with engine.connect() as conn:
            assert (await conn.execute(text("PRAGMA journal_mode"))).scalar() == "wal"
    finally:
        release.cancel()
        holder.close()
        await engine.dispose()


async def test_a_subject_made_before_session_secrets_keeps_its_session_keys_and_a_new_one_gets_a_secret(
    database_url: str,
) -> None:
    # Migration 0018: a session run before the upgrade and again after has one key (its transcripts, ledger
    # rows and recorded id stay together); a subject made after keys its sessions with a secret of its own.
    earlier_key = importlib.import_module("teamstore.migrations.versions.0011_subject_sessions")._session_key
    engine = create_engine(database_url)
    await upgrade(engine, "0017")
    subject, session = new_subject_key(), "ticket-182025-a"
    async with engine.begin() as conn:  # as the audit before 0018 wrote them
        await conn.execute(text("INSERT INTO ts_subjects (user_id, subject_key, created_at) "
                                "VALUES ('old', :subject, CURRENT_TIMESTAMP)"), {"subject": subject})
        await conn.execute(text("INSERT INTO ts_subject_sessions (session_key, subject_key, session_id, created_at) "
                                "VALUES (:key, :subject, :session, CURRENT_TIMESTAMP)"),
                           {"key": earlier_key(subject, session), "subject": subject, "session": session})
    assert await upgrade(engine) == head_revision()
    pseudonyms = Pseudonyms(engine)
    try:
        runs = context(user_id="old", session_id=session), context(user_id="new", session_id=session)
        for run in runs:  # each session opens: "new" gets its subject
            await pseudonyms.open_session(run.user_id, run.run_id)
        old, new = [await pseudonyms.writable(run) for run in runs]
    finally:
        await pseudonyms.aclose()
    assert old == RunKeys(subject, earlier_key(subject, session))
    async with engine.connect() as conn:
        recorded = await conn.scalar(text("SELECT session_id FROM ts_subject_sessions WHERE session_key = :key"),
                                     {"key": old.session_key})
    assert recorded == session
    assert new.session_key != earlier_key(new.subject_key, session)  # not confirmable from the subject key
    await engine.dispose()


async def test_an_upgrade_a_view_of_ones_own_stops_names_the_migration_and_the_view_and_is_undone_whole(
    database_url: str,
) -> None:
    # The operator's own view over session_costs, which 0007 makes again on Postgres and 0017 around the ledger's
    # rebuild on SQLite: the upgrade said only "the database refused the statement" and to check the role's grants.
    engine = create_engine(database_url)
    await upgrade(engine, "0006")
    async with engine.begin() as conn:
        await conn.execute(text("CREATE VIEW my_costs AS SELECT * FROM session_costs"))
    stopped_at = "0007" if engine.dialect.name == "postgresql" else "0017"
    with pytest.raises(SchemaNotReady) as caught:
        await upgrade(engine)
    assert f"migration {stopped_at} stopped" in caught.value.message and "my_costs" in caught.value.message
    assert "still at migration 0006" in caught.value.message
    assert f"says of migration {stopped_at}" in caught.value.hint and "drop it" in caught.value.hint
    assert await current_revision(engine) == "0006"
    async with engine.begin() as conn:
        await conn.execute(text("DROP VIEW my_costs"))
    assert await upgrade(engine) == head_revision()
    await engine.dispose()


@pytest.mark.postgres
async def test_an_upgrade_by_a_role_that_may_not_create_tables_says_to_run_it_as_their_owner(
    postgres_url: str,
) -> None:
    # A workers' role, on a database whose public schema lets no other role create (PostgreSQL 15's default):
    # the fix spoke of a view of one's own, which was not the cause.
    role, password = f"ts_workers_{uuid.uuid4().hex[:8]}", uuid.uuid4().hex
    owner = create_engine(postgres_url)
    async with owner.begin() as conn:
        await conn.execute(text(f"CREATE ROLE {role} LOGIN PASSWORD '{password}'"))
        await conn.execute(text("REVOKE CREATE ON SCHEMA public FROM PUBLIC"))
    workers = create_engine(make_url(postgres_url).set(username=role, password=password)
                            .render_as_string(hide_password=False))
    try:
        with pytest.raises(SchemaNotReady) as caught:
            await upgrade(workers)
        assert "migration 0001 stopped" in caught.value.message and "InsufficientPrivilege" in caught.value.message
        assert "may not create or change teamstore's tables" in caught.value.hint
        assert "GRANT CREATE ON SCHEMA public TO <role>" in caught.value.hint and "view" not in caught.value.hint
        assert await upgrade(owner) == head_revision()
    finally:
        await workers.dispose()
        async with owner.begin() as conn:
            await conn.execute(text(f"DROP ROLE {role}"))
        await owner.dispose()


async def test_request_ids_filed_as_twins_before_0022_keep_resuming_and_the_oldest_keeps_their_folded_id(
    database_url: str,
) -> None:
    # Migration 0022 makes the folded request id unique. Twins filed before it stay: the oldest takes the folded
    # id, the others none; each still resumes under its exact id, and a new twin of theirs is refused naming them.
    engine = create_engine(database_url)
    await upgrade(engine, "0021")
    now = datetime.now(UTC)
    filed = [("req-7", None, "completed"), ("REQ-7", "ivy", "open"), ("Req-7 ", None, "completed"),
             ("İD-1", None, "completed"), ("id-1", None, "completed")]
    async with engine.begin() as conn:  # oldest first
        for age, (request_id, user_id, status) in enumerate(reversed(filed)):
            received = now - timedelta(minutes=age)
            await conn.execute(text(
                "INSERT INTO ts_erasure_requests (request_id, user_id, status, received_at, due_at, updated_at) "
                "VALUES (:request_id, :user_id, :status, :received, :received, :received)"),
                {"request_id": request_id, "user_id": user_id, "status": status, "received": received})
    assert await upgrade(engine) == head_revision()

    async with engine.connect() as conn:
        folded = dict((await conn.execute(text("SELECT request_id, folded_id FROM ts_erasure_requests"))).all())
    assert folded == {"req-7": "req-7", "REQ-7": None, "Req-7 ": None, "İD-1": "İd-1", "id-1": "id-1"}
    assert not (await requests.open_request(engine, "REQ-7", "ivy", None, 30)).created_now  # resumed, as it was
    with pytest.raises(ErasureConflict, match="differs from 3 stored request id") as twins:
        await requests.open_request(engine, "rEq-7", "jo", None, 30)
    assert "'REQ-7' and 'Req-7 ' and 'req-7'" in (twins.value.hint or "")
    with pytest.raises(IntegrityError):  # the database itself refuses a second request of a folded id
        async with engine.begin() as conn:
            await conn.execute(text(
                "INSERT INTO ts_erasure_requests (request_id, status, received_at, due_at, updated_at, folded_id) "
                "VALUES ('rEq-7', 'open', :now, :now, :now, 'req-7')"), {"now": now})
    await engine.dispose()


_SET_ASIDE = text(
    "INSERT INTO ts_quarantine (user_id, session_id, reason, detail, team, team_version, schema_version, "
    "agentchat_version, fingerprints, state, state_bytes, row_version, quarantined_at) VALUES (:user, 's1', "
    "'definition_changed', 'researcher: removed', 'support_triage', 'v1', 1, '0.7', '{}', :state, 9, 1, :now)")


async def _set_aside(engine: Any, user: str) -> int:
    async with engine.begin() as conn:
        await conn.execute(_SET_ASIDE, {"user": user, "state": f'{{"of":"{user}"}}', "now": datetime.now(UTC)})
        return int((await conn.execute(text("SELECT MAX(id) FROM ts_quarantine"))).scalar_one())


async def test_the_quarantines_rebuild_on_sqlite_keeps_an_operators_trigger_on_it(tmp_path: Any) -> None:
    # SQLite's rebuild for AUTOINCREMENT dropped the old table, and an operator's trigger on it with it, unsaid.
    # (Postgres rebuilds nothing: its ids come from a sequence.)
    engine = create_engine(f"sqlite:///{tmp_path / 'state.db'}")
    await upgrade(engine, "0024")
    async with engine.begin() as conn:
        await conn.execute(text("CREATE TABLE ops_set_aside (id INTEGER)"))
        await conn.execute(text("CREATE TRIGGER ops_count AFTER INSERT ON ts_quarantine "
                                "BEGIN INSERT INTO ops_set_aside VALUES (NEW.id); END"))
    assert await upgrade(engine) == head_revision()
    set_aside = await _set_aside(engine, "ann")
    async with engine.connect() as conn:
        assert (await conn.execute(text("SELECT id FROM ops_set_aside"))).scalars().all() == [set_aside]
    await engine.dispose()


async def test_quarantined_states_set_aside_before_0025_keep_their_ids_and_no_id_is_given_again(
    database_url: str,
) -> None:
    # Migration 0025 rebuilds SQLite's quarantine with AUTOINCREMENT: its rows and index stay, and once they are
    # gone the next state set aside takes a new id, never one `sessions restore` from old notes could name.
    engine = create_engine(database_url)
    await upgrade(engine, "0024")
    before = {await _set_aside(engine, user): user for user in ("ann", "bob", "cy")}
    assert await upgrade(engine) == head_revision()
    async with engine.connect() as conn:
        kept = dict((await conn.execute(text("SELECT id, user_id FROM ts_quarantine"))).all())
        assert await conn.run_sync(lambda c: [i["name"] for i in inspect(c).get_indexes("ts_quarantine")]) == [
            "ix_ts_quarantine_user"]
    assert kept == before
    async with engine.begin() as conn:  # restored or swept, all of them
        await conn.execute(text("DELETE FROM ts_quarantine"))
    assert await _set_aside(engine, "dee") > max(before)
    await engine.dispose()


_OLD_USAGE_ROW = text(
    "INSERT INTO ts_usage (run_id, agent, model, purpose, calls, failed_calls, input_tokens, output_tokens, team, "
    "team_version, session_key, subject_key, stop_reason, ended_by_limit, run_failed, started_at, finished_at, day, "
    "interruptions, attempt) VALUES (:run, 'writer', 'tenth-model', 'agent', :calls, :failed, :tokens, 0, 'support', "
    "'v1', :session, 'subject', NULL, FALSE, FALSE, :now, :now, :day, 0, 0)")


async def test_calls_an_earlier_release_recorded_as_answered_with_no_tokens_count_as_of_unknown_usage(
    database_url: str,
) -> None:
    # Migration 0028: before calls answered without usage counted as unknown, a stream that did not ask for its
    # usage was written as calls that succeeded with no tokens, and the report priced them as 0.
    engine = create_engine(database_url)
    await upgrade(engine, "0027")
    now = datetime.now(UTC)
    rows = (("streamed", 2, 0, 0), ("failed", 1, 1, 0), ("partly-failed", 3, 1, 10**6), ("known", 1, 0, 10**6))
    async with engine.begin() as conn:  # as the ledger before 0028 holds them
        for session, calls, failed, tokens in rows:
            await conn.execute(_OLD_USAGE_ROW, {"run": f"run-{session}", "calls": calls, "failed": failed,
                                                "tokens": tokens, "session": session, "now": now, "day": now.date()})
    assert await upgrade(engine) == head_revision()
    prices = parse_prices({"version": "2026-11-30", "models": {
        "tenth-model": [{"effective_from": "2020-01-01", "input": 0.1, "output": 0.0}]}})
    report = await query_costs(engine, prices, by="session")
    await engine.dispose()
    found = {row.group["session_key"]: (row.calls, row.unknown_usage_calls, row.cost) for row in report.rows}
    assert found == {"streamed": (2, 2, None), "failed": (1, 1, None),
                     "partly-failed": (3, 1, Decimal("0.1")), "known": (1, 0, Decimal("0.1"))}
    assert (report.total.unknown_usage_calls, report.total.cost) == (4, Decimal("0.2"))


async def test_a_store_recorded_before_endpoints_were_reads_as_aws_own_until_an_erasure_records_where_it_reached_it(
    database_url: str,
) -> None:
    # Migration 0029: a store was recorded by its URL alone, which names no S3 endpoint.
    engine = create_engine(database_url)
    await upgrade(engine, "0028")
    subject = new_subject_key()
    async with engine.begin() as conn:  # as the record before 0029 holds it
        await conn.execute(text("INSERT INTO ts_subject_stores (subject_key, store, created_at) "
                                "VALUES (:subject, 's3://audit/teamstore', :now)"),
                           {"subject": subject, "now": datetime.now(UTC)})
    assert await upgrade(engine) == head_revision()
    assert await recorded_endpoints(engine, subject) == {"s3://audit/teamstore": None}

    await record_store(engine, subject, "s3://audit/teamstore", endpoint="http://minio:9000", erasing=True)
    await record_store(engine, subject, "s3://audit/teamstore", endpoint="http://other:9000", erasing=True)
    assert await recorded_endpoints(engine, subject) == {"s3://audit/teamstore": "http://minio:9000"}
    await engine.dispose()


async def test_an_export_left_running_before_leases_is_taken_for_alive_a_day_after_it_began_then_closed(
    database_url: str,
) -> None:
    # Migration 0031: a record an export killed outright left `running` had nothing to tell it from a live one.
    from teamstore.db.clock import utc
    from teamstore.export.requests import close_abandoned, get_export

    engine = create_engine(database_url)
    await upgrade(engine, "0030")
    began = {"ex-yesterday": datetime.now(UTC) - timedelta(days=2), "ex-today": datetime.now(UTC)}
    async with engine.begin() as conn:  # as the records before 0031 hold them
        for export_id, started in began.items():
            await conn.execute(text("INSERT INTO ts_export_requests (export_id, operator, status, started_at) "
                                    "VALUES (:id, 'dpo', 'running', :started)"), {"id": export_id, "started": started})
    assert await upgrade(engine) == head_revision()

    assert await close_abandoned(engine) == 1
    old, new = await get_export(engine, "ex-yesterday") or {}, await get_export(engine, "ex-today") or {}
    assert old["status"] == "failed" and str(old["detail"]).startswith("abandoned: ")
    ended = utc(old["finished_at"])
    assert ended is not None and abs(ended - began["ex-yesterday"] - timedelta(days=1)) < timedelta(seconds=1)
    assert new["status"] == "running" and new["owner"] is None
    await engine.dispose()
