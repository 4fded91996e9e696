"""Database failures are told for what they are, without the statement, its values or the server's
message: an unreachable database is not a refused statement, and the reverse."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from sqlalchemy import text
from sqlalchemy.engine import make_url
from sqlalchemy.exc import SQLAlchemyError

from config_registry import Registry, RegistryError
from teamstore.db.engine import create_engine, describe_failure, failure_hint, unreachable
from teamstore.db.migrate import current_revision
from teamstore.errors import ConfigurationError, StoreUnavailable
from tests.conftest import refusing, upgrade_database
from tests.services import free_port


async def test_an_unreachable_postgres_is_told_as_such() -> None:
    engine = create_engine(f"postgresql://x@127.0.0.1:{free_port()}/x")
    with pytest.raises(StoreUnavailable) as caught:
        await current_revision(engine)
    assert caught.value.message == (
        "could not connect to the database: nothing accepts connections at that host and port (OperationalError)")
    assert "server is up" in (caught.value.hint or "")
    await engine.dispose()


@pytest.mark.parametrize("url", [
    "postgresql://x@127.0.0.1:99999/x",
    "postgresql://x@127.0.0.1:{port}/x?sslmode=bogus",
    "postgresql://x@127.0.0.1:{port}/x?no_such_option=1",
    "postgresql://x@127.0.0.1:{port}/x?connect_timeout=soon",
])
async def test_a_url_whose_port_or_options_libpq_refuses_says_so_not_that_the_server_is_down(url: str) -> None:
    # libpq refuses these before connecting: "check that the server is up" sent operators to a server that was.
    engine = create_engine(url.format(port=free_port()))
    with pytest.raises(StoreUnavailable) as caught:
        await current_revision(engine)
    assert caught.value.message.startswith(
        "could not connect to the database: the URL's port or connection options (after '?') are not valid")
    assert "options after '?' in TEAMSTORE_DATABASE_URL" in (caught.value.hint or "")
    await engine.dispose()


@pytest.mark.postgres
@pytest.mark.parametrize(("part", "told", "fix"), [
    ("database", "the server has no such database", "createdb"),
    ("username", "the server has no such role", "user name in TEAMSTORE_DATABASE_URL"),
])
async def test_a_server_that_refuses_the_connection_says_why_without_naming_it(
    postgres_url: str, part: str, told: str, fix: str
) -> None:
    # The server is up and answers: "could not reach the database ... check that the server is up" sent
    # operators looking at the wrong thing.
    url = make_url(postgres_url).set(**{part: "no_such_one_canary"}, password="s3cret-pw")
    engine = create_engine(url.render_as_string(hide_password=False))
    with pytest.raises(StoreUnavailable) as caught:
        await current_revision(engine)
    assert caught.value.message == f"could not connect to the database: {told} (OperationalError)"
    assert fix in (caught.value.hint or "")
    assert "canary" not in str(caught.value) and "s3cret" not in str(caught.value)
    await engine.dispose()


async def test_an_unopenable_sqlite_file_is_told_as_such(tmp_path: Path) -> None:
    # Read-only of a file that is not there: sqlite cannot open it.
    engine = create_engine(f"sqlite:///file:{tmp_path / 'absent.db'}?mode=ro&uri=true")
    with pytest.raises(StoreUnavailable) as caught:
        await current_revision(engine)
    assert caught.value.message == "the SQLite file cannot be opened (OperationalError, SQLITE_CANTOPEN)"
    assert "may write there" in (caught.value.hint or "")
    await engine.dispose()
    await asyncio.sleep(0.2)  # aiosqlite's thread reports its failed open late: let it land before the loop closes


async def test_a_folder_where_the_sqlite_file_should_be_is_a_configuration_error(tmp_path: Path) -> None:
    engine = create_engine(f"sqlite:///{tmp_path / 'x.db'}")
    (tmp_path / "x.db").mkdir()
    with pytest.raises(ConfigurationError) as caught:
        await current_revision(engine)
    assert "is a folder, not a file" in caught.value.message and caught.value.hint
    await engine.dispose()


@pytest.mark.parametrize(("content", "told"), [
    (b"\x8f\x02 not a database" * 300, "the SQLite file is not a database (DatabaseError, SQLITE_NOTADB)"),
    (b"SQLite format 3\x00" + b"\x00" * 84 + b"garbage" * 600, "the SQLite file"),
])
async def test_a_damaged_or_foreign_sqlite_file_is_told_with_what_to_do(
    tmp_path: Path, content: bytes, told: str
) -> None:
    (tmp_path / "x.db").write_bytes(content)
    engine = create_engine(f"sqlite:///{tmp_path / 'x.db'}")
    with pytest.raises(StoreUnavailable) as caught:
        await current_revision(engine)
    assert caught.value.message.startswith(told)
    assert "move" in (caught.value.hint or "") and "statement_timeout" not in (caught.value.hint or "")
    assert (tmp_path / "x.db").read_bytes() == content  # nothing was overwritten
    await engine.dispose()
    await asyncio.sleep(0.2)  # as above: aiosqlite's thread may report the failed open late


@pytest.mark.parametrize("home_is", ["a file", "under a file"])
def test_a_home_that_cannot_be_a_folder_is_a_configuration_error(tmp_path: Path, home_is: str) -> None:
    (tmp_path / "home").write_text("not a folder")
    home = tmp_path / "home" if home_is == "a file" else tmp_path / "home" / "sub"
    with pytest.raises(ConfigurationError) as caught:
        create_engine(f"sqlite:///{home / 'teamstore.db'}")
    assert "a file is in the way" in caught.value.message and "TEAMSTORE_HOME" in (caught.value.hint or "")
    with pytest.raises(RegistryError) as refused:
        Registry(home / "registry", create=True)
    assert "a file is in the way" in refused.value.message


@pytest.mark.postgres
async def test_a_statement_the_database_refuses_is_not_called_unreachable(postgres_url: str) -> None:
    # The schema check meets a lock it may not wait for (as with a low statement_timeout or
    # lock_timeout set on the role): the database is up, and the message must say so.
    await upgrade_database(postgres_url)
    async with refusing(postgres_url, "alembic_version") as blocked:
        with pytest.raises(StoreUnavailable) as caught:
            await current_revision(blocked)
    assert caught.value.message == "the database refused the statement (LockNotAvailable, SQLSTATE 55P03)"
    assert "lock_timeout" in (caught.value.hint or "")


@pytest.mark.postgres
async def test_the_description_never_quotes_the_servers_message(postgres_url: str) -> None:
    engine = create_engine(postgres_url)
    with pytest.raises(SQLAlchemyError) as caught:
        async with engine.connect() as conn:  # the server's message quotes the value it could not read
            await conn.execute(text("SELECT CAST('alice-private' AS integer)"))
    assert "alice-private" in str(caught.value.orig)
    assert describe_failure(caught.value) == "the database refused the statement (InvalidTextRepresentation, SQLSTATE 22P02)"
    assert not unreachable(caught.value)
    await engine.dispose()


@pytest.mark.postgres
def test_a_role_granted_as_the_guide_says_runs_sessions_and_one_missing_a_grant_is_told_the_table(
    postgres_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The fix said only "check what the database allows this role (its statement_timeout, lock_timeout, grants)".
    import uuid

    import psycopg
    from typer.testing import CliRunner

    from teamstore.cli import app

    asyncio.run(upgrade_database(postgres_url))
    role, password = f"ts_workers_{uuid.uuid4().hex[:8]}", uuid.uuid4().hex
    grants = ["USAGE ON SCHEMA public", "SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA public",
              "USAGE ON ALL SEQUENCES IN SCHEMA public"]  # docs/operations.md, Database tables
    with psycopg.connect(postgres_url, autocommit=True) as owner:
        owner.execute(f"CREATE ROLE {role} LOGIN PASSWORD '{password}'")
        for grant in grants:
            owner.execute(f"GRANT {grant} TO {role}")
        try:
            monkeypatch.setenv("TEAMSTORE_DATABASE_URL", make_url(postgres_url).set(username=role, password=password)
                               .render_as_string(hide_password=False))
            monkeypatch.setenv("TEAMSTORE_HOME", str(tmp_path / "home"))
            monkeypatch.setenv("OPENAI_API_KEY", "")
            cli = CliRunner()
            assert cli.invoke(app, ["registry", "add", "support_triage", "--factory",
                                    "teamstore.examples:support_triage", "-m", "v1"]).exit_code == 0
            for _ in range(2):  # a new session, then its resume
                ran = cli.invoke(app, ["run", "--team", "support_triage", "--user", "alice", "--session", "s1", "hi"])
                assert ran.exit_code == 0, ran.output
            assert cli.invoke(app, ["retention", "sweep"]).exit_code == 0
            owner.execute(f"REVOKE SELECT ON ts_sessions FROM {role}")
            refused = cli.invoke(app, ["sessions", "list"], env={"COLUMNS": "300"})
            assert refused.exit_code == 1
            assert ("the database refused the statement: permission denied for table ts_sessions "
                    "(InsufficientPrivilege, SQLSTATE 42501)") in refused.stderr, refused.output
            assert "fix: grant the role TEAMSTORE_DATABASE_URL names what" in refused.stderr
        finally:
            owner.execute(f"DROP OWNED BY {role}")
            owner.execute(f"DROP ROLE {role}")


HBA_ROLES = {"ts_hba_password": "scram-sha-256", "ts_hba_rejected": "reject"}
"""Roles the server's pg_hba.conf gets lines of their own for, while a test needs them (no one else logs in
as them)."""


@pytest.fixture
async def hba_roles(postgres_url: str) -> AsyncIterator[None]:
    """The server asks ``ts_hba_password`` for its password (``right-pw``) and rejects ``ts_hba_rejected``;
    ``ts_hba_limited`` may hold no connection. Written into the server's own pg_hba.conf over SQL (so it holds
    for a server in a container too), ahead of its lines, and the file put back as it was afterwards."""
    import psycopg

    async with await psycopg.AsyncConnection.connect(postgres_url, autocommit=True) as conn:
        path = str((await (await conn.execute("SHOW hba_file")).fetchone() or [""])[0])
        original = bytes((await (await conn.execute("SELECT pg_read_binary_file(%s)", (path,))).fetchone() or [b""])[0])
        lines = "".join(f"host all {role} all {method}\n" for role, method in HBA_ROLES.items())

        async def write(content: bytes) -> None:
            oid = (await (await conn.execute("SELECT lo_from_bytea(0, %s)", (content,))).fetchone() or [0])[0]
            await conn.execute("SELECT lo_export(%s, %s)", (oid, path))
            await conn.execute("SELECT lo_unlink(%s)", (oid,))
            await conn.execute("SELECT pg_reload_conf()")

        for role in (*HBA_ROLES, "ts_hba_limited"):
            await conn.execute(f"DROP ROLE IF EXISTS {role}")
        await conn.execute("CREATE ROLE ts_hba_password LOGIN PASSWORD 'right-pw'")
        await conn.execute("CREATE ROLE ts_hba_rejected LOGIN")
        await conn.execute("CREATE ROLE ts_hba_limited LOGIN CONNECTION LIMIT 0")
        await write(lines.encode() + original)
        try:
            yield
        finally:
            await write(original)
            for role in (*HBA_ROLES, "ts_hba_limited"):
                await conn.execute(f"DROP ROLE IF EXISTS {role}")


async def _refusal(url: str) -> StoreUnavailable:
    """The error a connection to ``url`` gets, once the server has read its pg_hba.conf again (a reload
    is asynchronous: a connection made at once may still be let in)."""
    for _ in range(50):
        engine = create_engine(url)
        try:
            await current_revision(engine)
        except StoreUnavailable as exc:
            return exc
        finally:
            await engine.dispose()
        await asyncio.sleep(0.1)
    raise AssertionError("the server let the connection in")


@pytest.mark.postgres
@pytest.mark.parametrize(("role", "password", "told", "fix"), [
    ("ts_hba_password", "wrong-pw-canary", "the server refused the role's password", "fix the password"),
    ("ts_hba_rejected", None, "the server's pg_hba.conf refuses this host, role and database",
     "pg_hba.conf entry that lets"),
    ("ts_hba_limited", None, "the server has no connection left to give", "max_connections"),
])
async def test_a_server_that_refuses_the_role_says_why_without_naming_it(
    postgres_url: str, hba_roles: None, role: str, password: str | None, told: str, fix: str
) -> None:
    url = make_url(postgres_url).set(username=role, password=password)
    caught = await _refusal(url.render_as_string(hide_password=False))
    assert caught.message == f"could not connect to the database: {told} (OperationalError)"
    assert fix in (caught.hint or "")
    assert role not in str(caught) and "canary" not in str(caught)


@pytest.mark.postgres
async def test_the_right_password_still_connects(postgres_url: str, hba_roles: None) -> None:
    # The refusal above is the password's, not the role's: with the right one the same role gets in.
    url = make_url(postgres_url).set(username="ts_hba_password", password="right-pw")
    await _refusal(make_url(postgres_url).set(username="ts_hba_password", password="wrong").render_as_string(
        hide_password=False))  # the server has read the new lines
    engine = create_engine(url.render_as_string(hide_password=False))
    try:
        assert await current_revision(engine) is None
    finally:
        await engine.dispose()


@pytest.mark.parametrize(("server_says", "told"), [
    # libpq's text for the refusals a shared test server cannot be made to give (its own pg_hba.conf lets the
    # suite in, and its max_connections serves the suite).
    ('connection failed: connection to server at "127.0.0.1", port 5432 failed: FATAL:  no pg_hba.conf entry for '
     'host "127.0.0.1", user "alice", database "app", no encryption', "the server's pg_hba.conf has no entry"),
    ('connection failed: connection to server at "127.0.0.1", port 5432 failed: FATAL:  sorry, too many clients '
     "already", "the server has no connection left to give"),
    ('connection failed: connection to server at "127.0.0.1", port 5432 failed: FATAL:  remaining connection slots '
     'are reserved for roles with the SUPERUSER attribute', "the server has no connection left to give"),
])
def test_libpqs_other_refusals_are_told_for_what_they_are(server_says: str, told: str) -> None:
    import psycopg

    described = describe_failure(psycopg.OperationalError(server_says))
    assert described.startswith(f"could not connect to the database: {told}")
    assert "alice" not in described and "127.0.0.1" not in described


@pytest.mark.parametrize(("code", "told", "fix"), [
    ("SQLITE_IOERR_SHMSIZE", "could not grow its shared-memory file (-shm, beside the database): its disk is full",
     "free space on the disk"),
    ("SQLITE_IOERR_SHMOPEN", "could not open its shared-memory file", "write access to the SQLite file's folder"),
    ("SQLITE_IOERR_SHMMAP", "could not map its shared-memory file", "local disk"),
    ("SQLITE_IOERR_LOCK", "the file system refused SQLite's file lock", "local disk"),
    ("SQLITE_IOERR_WRITE", "could not read or write its files (a disk I/O error)", "system log for I/O errors"),
    ("SQLITE_IOERR", "could not read or write its files (a disk I/O error)", "free space"),
    ("SQLITE_READONLY_DBMOVED", "the SQLite file was moved or deleted while it was open", "put the file back"),
    ("SQLITE_READONLY_DIRECTORY", "the SQLite file cannot be written", "write access to the file and its folder"),
    ("SQLITE_CANTOPEN_NOTEMPDIR", "no folder for its temporary files", "SQLITE_TMPDIR"),
    ("SQLITE_CANTOPEN_FULLPATH", "cannot be resolved to a full path", "TEAMSTORE_DATABASE_URL"),
    ("SQLITE_FULL", "the disk holding the SQLite file is full", "free space on its disk"),
])
def test_sqlites_disk_file_and_lock_failures_are_told_with_a_fix_for_sqlite(code: str, told: str, fix: str) -> None:
    # A full disk under the shared-memory file was told to check Postgres's statement_timeout and grants.
    import sqlite3

    from sqlalchemy.exc import OperationalError

    from teamstore.db.engine import failure_hint

    error = sqlite3.OperationalError("disk I/O error")
    error.sqlite_errorname = code
    failure = OperationalError("PRAGMA journal_mode=WAL", None, error)
    assert told in describe_failure(failure) and describe_failure(failure).endswith(f"(OperationalError, {code})")
    assert fix in failure_hint(failure)
    assert "statement_timeout" not in failure_hint(failure)


@pytest.mark.postgres
async def test_a_value_the_driver_refuses_before_sending_it_is_not_called_unreachable(postgres_url: str) -> None:
    """Reviewed: psycopg refuses NUL in a string before it is sent, with no SQLSTATE, and that was told as a
    database that could not be reached (a ledger row with a stop reason holding NUL, say)."""
    engine = create_engine(postgres_url)
    with pytest.raises(SQLAlchemyError) as caught:
        async with engine.connect() as conn:
            await conn.execute(text("SELECT CAST(:v AS text)"), {"v": "alice-private\x00"})
    assert describe_failure(caught.value) == "the database driver refused a value before sending the statement (DataError)"
    assert "Postgres keeps no NUL" in failure_hint(caught.value) and not unreachable(caught.value)
    await engine.dispose()

