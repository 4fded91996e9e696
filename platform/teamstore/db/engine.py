"""Async engines for Postgres (psycopg 3) and SQLite (aiosqlite), set up for many workers.

    from teamstore.db.engine import create_engine

    engine = create_engine("postgresql://app@db/teamstore")   # -> postgresql+psycopg
    engine = create_engine("sqlite:///.teamstore/teamstore.db")
    reader = create_engine("sqlite:///.teamstore/teamstore.db", must_exist=True)   # no file: SchemaNotReady
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import re
import sqlite3
import time
from pathlib import Path
from typing import Any

from sqlalchemy import create_engine as create_sync_engine
from sqlalchemy import event, text
from sqlalchemy.engine import Engine, make_url
from sqlalchemy.exc import ArgumentError, DataError, SQLAlchemyError
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine
from sqlalchemy.pool import NullPool
from sqlalchemy.util import await_only

from config_registry.errors import folder_failure
from config_registry.folders import PRIVATE, make_folder
from teamstore.db.hidden import hide_driver_call_values, hide_row_values
from teamstore.errors import ConfigurationError, MissingExtra, SchemaNotReady
from teamstore.settings import to_async_url

log = logging.getLogger(__name__)

_PASSWORD = re.compile(r"(://[^:/@]+:)[^@]*@")
# libpq also takes the password (and the client key's passphrase) as a query parameter:
# postgresql://app@db/teamstore?password=...
_QUERY_PASSWORD = re.compile(r"([?&](?:ssl)?password=)[^&#]*", re.IGNORECASE)


def redact_url(url: str) -> str:
    """A database URL safe to print: the password, in the userinfo or the query, is replaced by ``***``."""
    return _QUERY_PASSWORD.sub(r"\1***", _PASSWORD.sub(r"\1***@", url))


# SQLSTATE classes of a connection that failed or was ended (08: connection exception; 57P: the server
# shut down, crashed, or is not accepting connections yet).
_UNREACHABLE = ("08", "57P")


def unreachable(exc: BaseException) -> bool:
    """Whether a database error means the database could not be reached (or dropped the connection),
    rather than that it refused one statement."""
    orig = getattr(exc, "orig", None) or exc
    state, sqlite = getattr(orig, "sqlstate", None), getattr(orig, "sqlite_errorname", None)
    if getattr(exc, "connection_invalidated", False) or sqlite == "SQLITE_CANTOPEN":
        return True
    if _driver_refused(exc):
        return False
    return state.startswith(_UNREACHABLE) if state else sqlite is None


def _driver_refused(exc: BaseException) -> bool:
    """Whether the driver refused a value before sending the statement (psycopg's NUL in a string: no SQLSTATE)."""
    orig = getattr(exc, "orig", None) or exc
    return isinstance(exc, DataError) and getattr(orig, "sqlstate", None) is None and not hasattr(
        orig, "sqlite_errorname")


# What an SQLite error code means for the embedded database, and what to do about it. Matched by prefix, in
# order: an extended code (SQLITE_IOERR_SHMSIZE) before its primary one (SQLITE_IOERR), which stands for the
# extended codes not named.
_LOCAL_DISK = ("keep the SQLite file on a local disk (a network file system does not give SQLite the file locks and "
               "shared memory its WAL mode needs), or use PostgreSQL")
_SQLITE_FAILURES = {
    "SQLITE_NOTADB": ("the SQLite file is not a database",
                      "move the file aside (keep it if it matters) and teamstore creates a new one, or point "
                      "TEAMSTORE_DATABASE_URL at the right file"),
    "SQLITE_CORRUPT": ("the SQLite file is damaged",
                       "restore it from a backup, or move it aside and teamstore creates a new one"),
    "SQLITE_READONLY_DBMOVED": ("the SQLite file was moved or deleted while it was open",
                                "put the file back (or restore it from a backup), then start the process again"),
    "SQLITE_READONLY": ("the SQLite file cannot be written",
                        "give this process write access to the file and its folder (SQLite writes -wal and "
                        "-shm files beside it)"),
    "SQLITE_FULL": ("the disk holding the SQLite file is full", "free space on its disk"),
    "SQLITE_IOERR_SHMSIZE": ("SQLite could not grow its shared-memory file (-shm, beside the database): its disk "
                             "is full", "free space on the disk holding the SQLite file"),
    "SQLITE_IOERR_SHMOPEN": ("SQLite could not open its shared-memory file (-shm, beside the database)",
                             "give this process write access to the SQLite file's folder (SQLite makes its -wal "
                             "and -shm files there)"),
    "SQLITE_IOERR_SHMMAP": ("SQLite could not map its shared-memory file (-shm) into memory", _LOCAL_DISK),
    "SQLITE_IOERR_SHMLOCK": ("the file system refused SQLite's lock on its shared-memory file (-shm)", _LOCAL_DISK),
    **dict.fromkeys(("SQLITE_IOERR_LOCK", "SQLITE_IOERR_RDLOCK", "SQLITE_IOERR_UNLOCK", "SQLITE_IOERR_CHECKRESERVEDLOCK"),
                    ("the file system refused SQLite's file lock", _LOCAL_DISK)),
    "SQLITE_IOERR_NOMEM": ("SQLite ran out of memory", "give the process more memory, or run fewer sessions at once"),
    "SQLITE_IOERR_CORRUPTFS": ("the file system holding the SQLite file is damaged",
                               "repair the file system (fsck), then restore the SQLite file from a backup if it "
                               "does not open"),
    "SQLITE_IOERR": ("SQLite could not read or write its files (a disk I/O error)",
                     "check the disk holding the SQLite file and its -wal and -shm files: its free space, and the "
                     "system log for I/O errors"),
    "SQLITE_NOMEM": ("SQLite ran out of memory", "give the process more memory, or run fewer sessions at once"),
    "SQLITE_PROTOCOL": ("SQLite's WAL locks kept failing (another process kept taking them)",
                        "retry; if it persists, " + _LOCAL_DISK),
    "SQLITE_PERM": ("the operating system denied access to the SQLite file",
                    "give this process read and write access to the file and its folder"),
    "SQLITE_BUSY": ("another process held SQLite's write lock for too long",
                    "SQLite serves one writer at a time: for many workers, use PostgreSQL"),
    "SQLITE_CANTOPEN_NOTEMPDIR": ("SQLite found no folder for its temporary files",
                                  "set SQLITE_TMPDIR (or TMPDIR) to a folder this process may write"),
    "SQLITE_CANTOPEN_ISDIR": ("a folder is where the SQLite file should be",
                              "move the folder aside, or point TEAMSTORE_DATABASE_URL at a file"),
    "SQLITE_CANTOPEN_FULLPATH": ("the SQLite file's path cannot be resolved to a full path",
                                 "check the path in TEAMSTORE_DATABASE_URL (or TEAMSTORE_HOME): every folder on "
                                 "it must exist and be readable by this process"),
    "SQLITE_CANTOPEN": ("the SQLite file cannot be opened",
                        "check that its folder exists and this process may write there"),
}


def _sqlite_failure(exc: BaseException) -> tuple[str, str, str] | None:
    """(what happened, what to do, the error's own code) for a known SQLite error."""
    orig = getattr(exc, "orig", None) or exc
    code = str(getattr(orig, "sqlite_errorname", ""))
    told = next((told for prefix, told in _SQLITE_FAILURES.items() if code.startswith(prefix)), None)
    return (*told, code) if told else None


# Why a connection could not be made, from libpq's text (psycopg gives a failed connection no SQLSTATE), and
# what to do: the server up and answering "no such database" was told "check that the server is up". Only the
# kind is told, never the text, which names the host, the role and the database.
_CONNECT_FAILURES = (
    (re.compile(r'database ".*" does not exist'), "the server has no such database",
     "create it (`createdb`), or fix the database name in TEAMSTORE_DATABASE_URL; then run `teamstore db upgrade`"),
    (re.compile(r'role ".*" does not exist'), "the server has no such role",
     "create the role, or fix the user name in TEAMSTORE_DATABASE_URL"),
    (re.compile("password authentication failed"), "the server refused the role's password",
     "fix the password in TEAMSTORE_DATABASE_URL"),
    (re.compile("no pg_hba.conf entry"), "the server's pg_hba.conf has no entry for this host, role and database",
     "add a pg_hba.conf entry for this host, role and database, or connect as a role it allows"),
    (re.compile("pg_hba.conf rejects connection"), "the server's pg_hba.conf refuses this host, role and database",
     "give this host, role and database a pg_hba.conf entry that lets them in, or connect as a role it allows"),
    (re.compile("too many connections|too many clients|remaining connection slots are reserved"),
     "the server has no connection left to give",
     "raise the server's max_connections, or lower TEAMSTORE_DB_POOL_SIZE or the number of workers"),
    (re.compile("Connection refused"), "nothing accepts connections at that host and port",
     "check the host and port in TEAMSTORE_DATABASE_URL and that the server is up"),
    (re.compile("failed to resolve host|could not translate host name"), "the database host name does not resolve",
     "fix the host in TEAMSTORE_DATABASE_URL (or the name service)"),
    # Refused before anything was sent (a port past 65535, sslmode=bogus, an unknown ?option), or by the server
    # at startup (options=-c statement_timeout=abc): the server may well be up.
    (re.compile(r"invalid (port number|connection option|URI query parameter|\w+ value|value for parameter)|bad value for"),
     "the URL's port or connection options (after '?') are not valid",
     "fix the port and the options after '?' in TEAMSTORE_DATABASE_URL (libpq's connection parameters)"),
)


def _connect_failure(exc: BaseException) -> tuple[str, str] | None:
    """(why, what to do) for a connection that could not be made for a reason libpq names."""
    orig = getattr(exc, "orig", None) or exc
    if getattr(orig, "sqlstate", None) is not None or getattr(orig, "sqlite_errorname", None) is not None:
        return None  # a statement's failure, whose message may quote values
    text = str(orig)
    return next(((why, fix) for pattern, why, fix in _CONNECT_FAILURES if pattern.search(text)), None)


def refused_statement(exc: BaseException) -> bool:
    """Whether ``exc`` is the database refusing a statement, as :func:`describe_failure` tells it: not an
    unreachable database, nor a failure of SQLite's file (locked, full, unreadable)."""
    return not unreachable(exc) and _sqlite_failure(exc) is None


def failure_hint(exc: BaseException) -> str:
    """What to check after a database error (as :func:`describe_failure` tells it)."""
    sqlite = _sqlite_failure(exc)
    if sqlite is not None:
        return sqlite[1]
    if _driver_refused(exc):
        return ("a value cannot be stored as it is (Postgres keeps no NUL, U+0000, in text, say); nothing was sent: "
                "report it, with the command that failed")
    if unreachable(exc):
        connect = _connect_failure(exc)
        if connect is not None:
            return connect[1]
        return "check TEAMSTORE_DATABASE_URL and that the server is up"
    if _denied(exc) is not None:
        return ("grant the role TEAMSTORE_DATABASE_URL names what teamstore's commands and workers need on that "
                "object (docs/operations.md, Database tables), or connect as a role that has it")
    return "check what the database allows this role (its statement_timeout, lock_timeout, grants)"


def _denied(exc: BaseException) -> str | None:
    """Postgres's own words for a privilege the role lacks (SQLSTATE ``42501``: ``permission denied for table
    ts_sessions``): they name an object of the schema, never a value, and tell the operator which grant is missing."""
    orig = getattr(exc, "orig", None) or exc
    diag = getattr(orig, "diag", None)
    if getattr(orig, "sqlstate", None) != "42501" or diag is None or not diag.message_primary:
        return None
    return str(diag.message_primary)


def describe_failure(exc: BaseException) -> str:
    """A database error told without its statement, its values or the server's message (which can
    quote them): whether the database was reachable, the driver's error class and its code.

        could not reach the database (OperationalError)
        could not connect to the database: the server has no such database (OperationalError)
        the database refused the statement (QueryCanceled, SQLSTATE 57014)
        the database driver refused a value before sending the statement (DataError)
    """
    orig = getattr(exc, "orig", None) or exc
    name = type(orig).__name__
    sqlite = _sqlite_failure(exc)
    if sqlite is not None:
        return f"{sqlite[0]} ({name}, {sqlite[2]})"
    if unreachable(exc):
        connect = _connect_failure(exc)
        if connect is not None:
            return f"could not connect to the database: {connect[0]} ({name})"
        return f"could not reach the database ({name})"
    if _driver_refused(exc):
        return f"the database driver refused a value before sending the statement ({name})"
    state = getattr(orig, "sqlstate", None)
    code = f"SQLSTATE {state}" if state else getattr(orig, "sqlite_errorname", "")
    denied = _denied(exc)
    return f"the database refused the statement{f': {denied}' if denied else ''} ({', '.join(filter(None, [name, code]))})"


async def empty_sqlite_log(engine: AsyncEngine, after: str) -> bool:
    """On SQLite, checkpoint and empty the write-ahead log: its older frames, and until a checkpoint the database
    file's pages, still hold rows as they were before ``after`` (an erasure deleted them, ``keys migrate`` sealed
    them), for as long as any process keeps the database open. Nothing to do on Postgres (its log is recycled;
    dead rows go at the next vacuum). Whether the log was emptied; a warning says so when not."""
    if engine.dialect.name != "sqlite":
        return True
    try:
        async with engine.connect() as conn:
            busy = (await conn.execute(text("PRAGMA wal_checkpoint(TRUNCATE)"))).scalar()
    except SQLAlchemyError as exc:
        log.warning("could not truncate the SQLite write-ahead log after %s: %s", after, describe_failure(exc))
        return False
    if busy:
        log.warning("could not empty the SQLite write-ahead log after %s (another process was reading): run "
                    "`sqlite3 teamstore.db 'PRAGMA wal_checkpoint(TRUNCATE)'` when it is idle", after)
    return not busy


SQLITE_PRAGMAS = ("busy_timeout=10000", "journal_mode=WAL", "synchronous=NORMAL", "secure_delete=ON")
"""Set on every SQLite connection. WAL lets readers run beside the single writer; busy_timeout makes
writers from other processes wait instead of failing at once (it comes first, so the pragmas after it wait
too). With secure_delete, deleted rows are overwritten, not left in free pages: an erased user's words must
not stay in the file (many builds, not all, compile it in)."""


def _sqlite_pragmas(dbapi_connection: Any, _record: Any) -> None:
    cursor = dbapi_connection.cursor()
    try:
        for pragma in SQLITE_PRAGMAS:
            if pragma.startswith("journal_mode"):
                _switch_journal(cursor, pragma)
            else:
                cursor.execute(f"PRAGMA {pragma}")
    finally:
        cursor.close()


def _switch_journal(cursor: Any, pragma: str, *, patience: float = 10.0) -> None:
    """Set the journal mode, waiting out connections that hold the file.

    Switching a new file to WAL needs it alone; SQLite answers "database is locked" at once, without its busy
    handler, while another connection is creating or migrating it (processes starting together on a fresh
    database). The switch is retried until ``patience`` seconds have passed, like a busy writer's wait.
    """
    deadline = time.monotonic() + patience
    pause = 0.005
    while True:
        try:
            cursor.execute(f"PRAGMA {pragma}")
            return
        except Exception as exc:
            if getattr(exc, "sqlite_errorcode", None) != sqlite3.SQLITE_BUSY or time.monotonic() >= deadline:
                raise
        await_only(asyncio.sleep(pause))  # the handler runs in the async engine's greenlet: the loop goes on
        pause = min(pause * 2, 0.1)


def _create_private(database: Path) -> None:
    """Create the SQLite file, before sqlite does, readable and writable by its owner only.

    The file holds user ids, session ids, saved agent states (users' words) and the map from user ids to
    transcript subject keys: under the usual umask (022) sqlite would create it world-readable, and its
    ``-wal``/``-shm`` files copy the database's mode. An existing file keeps the mode its operator gave
    it; a file that cannot be made here is left to sqlite, which reports why it cannot open it.
    """
    if database.is_dir():
        # Said here, before aiosqlite starts its thread: its failed connect can outlive the event loop
        # and print a stray traceback after the error.
        raise ConfigurationError(
            f"the SQLite database {str(database)!r} is a folder, not a file",
            hint="move the folder away, or point TEAMSTORE_DATABASE_URL (or TEAMSTORE_HOME) elsewhere",
        )
    with contextlib.suppress(OSError):
        os.close(os.open(database, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))


def _not_created(database: Path) -> SchemaNotReady:
    return SchemaNotReady(
        f"the SQLite database {str(database)!r} does not exist yet: nothing is stored there",
        hint="`teamstore db upgrade` creates it (so does the first `teamstore run`); if it should exist, check "
        "TEAMSTORE_HOME and TEAMSTORE_DATABASE_URL",
    )


UTC_SESSION = "SET TIME ZONE 'UTC'"
"""Run as every teamstore connection to Postgres opens. The server hands ``timestamptz`` values back in the
session's time zone, which is the server's (the OS zone ``initdb`` found) unless set: a receipt or an export would
show local times. Pinned to UTC, every time reads as SQLite's do. A statement, not libpq's ``options`` (which
PgBouncer refused before 1.20); a pooler tracks ``TimeZone`` and sets it again on whichever server connection it
hands the client, in transaction mode too."""


def _utc_session(dbapi_connection: Any, _record: Any) -> None:
    """Pin a new connection's session to UTC (:data:`UTC_SESSION`), outside any transaction: a ``SET`` in one the
    pool rolls back on check-in would be undone with it."""
    autocommit = dbapi_connection.autocommit
    dbapi_connection.autocommit = True
    try:
        cursor = dbapi_connection.cursor()
        cursor.execute(UTC_SESSION)
        cursor.close()
    finally:
        dbapi_connection.autocommit = autocommit


def create_engine(url: str, *, must_exist: bool = False, **kwargs: Any) -> AsyncEngine:
    """Build an async engine for ``url``, swapping in the async driver when needed.

    Args:
        url: A SQLAlchemy URL; ``postgresql://`` and ``sqlite://`` are accepted as is.
        must_exist: Refuse an SQLite file that does not exist yet instead of creating it (and its folder),
            for commands that only read or that act on what is stored. (Postgres never creates a database
            on connect.)
        **kwargs: Passed to :func:`sqlalchemy.ext.asyncio.create_async_engine`.

    Returns:
        The engine. The caller owns it and disposes of it.

    Raises:
        MissingExtra: The Postgres driver is not installed.
        ConfigurationError: The URL names a database, or a driver, teamstore does not support.
        SchemaNotReady: ``must_exist`` and the SQLite file does not exist.
    """
    try:
        async_url = to_async_url(url)
        parsed = make_url(async_url)
    except (ArgumentError, ValueError):  # ValueError: a port that is not a number
        raise ConfigurationError(  # the URL is not repeated: it may hold a password
            "the database URL is not a URL (it does not parse as scheme://user:password@host/database)",
            hint="set TEAMSTORE_DATABASE_URL to a postgresql:// URL, or unset it for the embedded SQLite default",
        ) from None
    _refuse_other_driver(parsed.drivername)
    # Bound values (user ids, session ids, whole states) stay out of error messages and SQL logs: an
    # exception chained under a typed error, or logged with its traceback, carries only the SQL.
    kwargs.setdefault("hide_parameters", True)
    kwargs.setdefault("logging_name", hide_row_values())  # and the rows' values
    hide_driver_call_values()  # and aiosqlite's own DEBUG lines, which hold each statement's values
    if parsed.get_backend_name() == "postgresql":
        try:
            import psycopg  # noqa: F401
        except ImportError as exc:
            raise MissingExtra("A Postgres database", "postgres", "psycopg") from exc
        kwargs.setdefault("pool_size", 20)
        kwargs.setdefault("max_overflow", 20)
        # A pooled connection the server ended (a restart, a failover) is replaced before use, so the first
        # audit write after a restart is not lost. The sessions' hot path has its own pool (state/direct.py).
        kwargs.setdefault("pool_pre_ping", True)
        engine = create_async_engine(async_url, **kwargs)
        event.listen(engine.sync_engine, "connect", _utc_session)
        return engine
    if parsed.get_backend_name() == "sqlite":
        engine = create_async_engine(async_url, **kwargs)
        if parsed.database and parsed.database != ":memory:" and not parsed.query.get("uri"):
            database = Path(parsed.database)
            if must_exist and not database.exists():
                raise _not_created(database)
            try:
                make_folder(database.parent, PRIVATE)
            except OSError as exc:  # a file where the folder should be, no permission, a read-only disk
                raise ConfigurationError(
                    f"cannot make the folder of the SQLite database {str(database.parent)!r}: "
                    f"{folder_failure(exc)}",
                    hint="set TEAMSTORE_HOME (or TEAMSTORE_DATABASE_URL) to a folder this process may write",
                ) from None
            event.listen(engine.sync_engine, "do_connect", lambda *_: _create_private(database))
        event.listen(engine.sync_engine, "connect", _sqlite_pragmas)
        return engine
    raise ConfigurationError(
        f"unsupported database {redact_url(url)!r}",
        hint="use a postgresql:// URL, or unset TEAMSTORE_DATABASE_URL for the embedded SQLite default",
    )


_OUR_DRIVERS = {"postgresql": "postgresql+psycopg", "sqlite": "sqlite+aiosqlite"}
"""The one driver teamstore connects to each database with (what :func:`to_async_url` puts in place of none)."""


def _refuse_other_driver(drivername: str) -> None:
    """Refuse a URL that names another driver (``postgresql+asyncpg://``, copied from another service's
    settings): SQLAlchemy would fail on the missing package, or a sync one, with a traceback and no fix."""
    backend = drivername.partition("+")[0]
    ours = _OUR_DRIVERS.get(backend)
    if ours is not None and drivername != ours:
        raise ConfigurationError(
            f"the database URL names the driver {drivername.partition('+')[2]!r}: teamstore connects to "
            f"{'Postgres with psycopg 3' if backend == 'postgresql' else 'SQLite with aiosqlite'}",
            hint=f"write the URL's scheme as {backend}:// (teamstore picks its driver) in TEAMSTORE_DATABASE_URL",
        )


def create_reader(engine: AsyncEngine) -> Engine:
    """A synchronous engine reading the same database as ``engine``, for code that runs outside the event
    loop (an OpenTelemetry reader's thread collecting gauges): a connection per use, none kept, parameters
    hidden like ``engine``'s. An SQLite file is opened read-only, so a reader never creates one.

    Args:
        engine: The async engine whose database to read.
    """
    url = engine.url
    if url.get_backend_name() == "sqlite":
        database = url.database or ":memory:"
        sync_url = url.set(drivername="sqlite", database=f"file:{database}", query={"mode": "ro", "uri": "true"})
        reader = create_sync_engine(sync_url, poolclass=NullPool, hide_parameters=True,
                                    logging_name=hide_row_values())
        event.listen(reader, "connect", _busy_timeout)
        return reader
    reader = create_sync_engine(url.set(drivername="postgresql+psycopg"), poolclass=NullPool, hide_parameters=True,
                                logging_name=hide_row_values())
    event.listen(reader, "connect", _utc_session)
    return reader


def _busy_timeout(dbapi_connection: Any, _record: Any) -> None:
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA busy_timeout=2000")  # a writer's moment of holding the file is waited out
    cursor.close()
