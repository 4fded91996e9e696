"""Ordered schema migrations (Alembic), applied by an explicit command.

    teamstore db upgrade            # production: the only way tables are created or changed
    teamstore db current

    from teamstore.db.migrate import upgrade
    await upgrade(engine)           # the embedded SQLite default does this on open (ensure_current)

The migration scripts ship inside the package (``teamstore/migrations``), so an installed wheel can
migrate without a checkout.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sqlalchemy import String, column, table, text
from sqlalchemy.engine import Connection
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.ext.asyncio import AsyncEngine

from teamstore.db.engine import describe_failure, failure_hint, refused_statement
from teamstore.errors import SchemaNotReady, StorageError, StoreUnavailable

# Alembic (with Mako and Pygments behind it) is imported when a migration runs or a revision is looked up,
# not for a command whose database is already current (see ensure_current).
if TYPE_CHECKING:
    from alembic.config import Config

MIGRATIONS = Path(__file__).resolve().parent.parent / "migrations"

VERSION_TABLE = table("alembic_version", column("version_num", String))
"""Where Alembic records the database's migration: for a statement that reads it beside something else
(:func:`require_revision`)."""


def alembic_config(connection: Connection | None = None) -> Config:
    """An Alembic config pointing at the packaged migrations, optionally bound to a connection."""
    from alembic.config import Config

    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    if connection is not None:
        config.attributes["connection"] = connection
    return config


def ships(revision: str) -> bool:
    """Whether this code ships migration ``revision`` (a newer teamstore may have applied one it does not)."""
    from alembic.script import ScriptDirectory

    return revision in {script.revision for script in ScriptDirectory.from_config(alembic_config()).walk_revisions()}


def head_revision() -> str:
    """The newest migration this code ships."""
    from alembic.script import ScriptDirectory

    head = ScriptDirectory.from_config(alembic_config()).get_current_head()
    assert head is not None
    return head


MIGRATION_LOCK = 7_460_617_270_001
"""The advisory lock key (Postgres) that serialises migrations of one database."""


def _upgrade(connection: Connection, target: str, applied: list[str] | None = None) -> None:
    # Processes starting together on a fresh database (two `teamstore run` in a new home, workers rolling
    # out) each found it empty and ran the same CREATE TABLE; all but one failed ("table already exists").
    # The migration takes the database's write lock first, so a second one waits, then finds it done.
    if connection.dialect.name == "sqlite":
        # pysqlite opens no transaction before DDL by itself: without this, each statement commits alone.
        connection.exec_driver_sql("BEGIN IMMEDIATE")
    else:
        connection.exec_driver_sql(f"SELECT pg_advisory_xact_lock({MIGRATION_LOCK})")
    from alembic import command

    config = alembic_config(connection)
    config.attributes["applied"] = applied
    command.upgrade(config, target)


def _current(connection: Connection) -> str | None:
    from alembic.runtime.migration import MigrationContext

    return MigrationContext.configure(connection).get_current_revision()


async def _run(engine: AsyncEngine, fn: Any, *args: Any) -> Any:
    try:
        async with engine.begin() as conn:
            return await conn.run_sync(fn, *args)
    except SQLAlchemyError as exc:
        raise StoreUnavailable(describe_failure(exc), hint=failure_hint(exc)) from exc


def _newer(current: str, hint: str = "run the teamstore version that migrated this database, or a newer one; "
           "this one would misread its tables") -> SchemaNotReady:
    return SchemaNotReady(
        f"the database is at migration {current}, which this code does not ship (its newest is "
        f"{head_revision()}): a newer teamstore migrated it",
        hint=hint,
    )


async def upgrade(engine: AsyncEngine, target: str = "head", *, applied: list[str] | None = None) -> str | None:
    """Apply every migration up to ``target``; returns the revision the database is then at.

    Args:
        engine: The database.
        target: The revision to reach.
        applied: Filled with the migrations this call applied, in order: none when another process's upgrade,
            which this one waited for, had already applied them.

    Raises:
        SchemaNotReady: A newer teamstore migrated the database past what this code ships.
        StoreUnavailable: The database failed.
    """
    before: str | None = await _run(engine, _current)
    if before is not None and not ships(before):
        raise _newer(before)
    if applied is None:
        applied = []
    try:
        async with engine.begin() as conn:
            await conn.run_sync(_upgrade, target, applied)
    except SQLAlchemyError as exc:
        raise _stopped(exc, before, applied) from exc
    after: str | None = await _run(engine, _current)
    return after


def _stopped(exc: SQLAlchemyError, before: str | None, applied: list[str]) -> StorageError:
    """The error for an upgrade the database refused: which migration it stopped at, and that it was undone whole
    (every migration of one upgrade runs in one transaction)."""
    if not refused_statement(exc):  # a lost connection, a locked or full file...
        return StoreUnavailable(describe_failure(exc), hint=failure_hint(exc))
    failed = _after(applied[-1] if applied else before)
    return SchemaNotReady(
        f"migration {failed} stopped: {describe_failure(exc)}{_own_words(exc)}; the upgrade was undone whole, and "
        f"the database is still at {f'migration {before}' if before else 'no migration'}",
        hint=_NOT_ALLOWED if getattr(getattr(exc, "orig", None), "sqlstate", None) == "42501" else
        f"read what docs/operations.md (Database tables) says of migration {failed}: an object of your own "
        "that depends on a table or view it rebuilds (a view over session_costs or ts_usage) stops it; drop it, "
        "run `teamstore db upgrade` again, then create it again. Otherwise check what the database allows this "
        "role (its grants, statement_timeout, lock_timeout)")


_NOT_ALLOWED = (
    "the role TEAMSTORE_DATABASE_URL names may not create or change teamstore's tables: run `teamstore db upgrade` "
    "with a URL naming the role that owns them (the database's owner, or a role granted CREATE on its schema: "
    "`GRANT CREATE ON SCHEMA public TO <role>`, which PostgreSQL 15 and newer no longer give every role)")
"""The fix for a migration the database refused for want of a privilege (SQLSTATE ``42501``): a workers' role
with only the grants the tables need, or a PostgreSQL 15 database whose ``public`` schema no longer lets every
role create in it. A view of the operator's own is not the cause then."""


def _own_words(exc: SQLAlchemyError) -> str:
    """The database's own message where it names schema objects only (an object that depends on one a migration
    drops, a view no longer valid), never values: Postgres's ``2BP01``, SQLite's plain ``SQLITE_ERROR``."""
    orig = getattr(exc, "orig", None)
    diag = getattr(orig, "diag", None)
    if getattr(orig, "sqlstate", None) == "2BP01" and diag is not None and diag.message_primary:
        detail = " ".join((diag.message_detail or "").split())
        return f": {diag.message_primary}" + (f" ({detail})" if detail else "")
    if getattr(orig, "sqlite_errorname", None) == "SQLITE_ERROR" and str(orig):
        return f": {orig}"
    return ""


def revision_before(revision: str) -> str | None:
    """The migration ``revision`` follows (``None``: it is the first)."""
    from alembic.script import ScriptDirectory

    script = ScriptDirectory.from_config(alembic_config()).get_revision(revision)
    assert script is not None
    down = script.down_revision
    assert down is None or isinstance(down, str)  # one straight line of migrations
    return down


def pending(current: str | None) -> list[str]:
    """The migrations this code ships that a database at ``current`` (``None``: empty) has not had, oldest first."""
    from alembic.script import ScriptDirectory

    scripts = ScriptDirectory.from_config(alembic_config())
    return [script.revision for script in scripts.iterate_revisions("head", current or "base")][::-1]


def _after(revision: str | None) -> str:
    """The migration that follows ``revision`` (``None``: the first)."""
    from alembic.script import ScriptDirectory

    scripts = ScriptDirectory.from_config(alembic_config())
    return next((s.revision for s in scripts.walk_revisions() if s.down_revision == revision), head_revision())


async def current_revision(engine: AsyncEngine) -> str | None:
    """The revision the database is at, ``None`` for an empty database."""
    result: str | None = await _run(engine, _current)
    return result


async def require_current(engine: AsyncEngine) -> None:
    """Raise :class:`SchemaNotReady` unless the database is at this code's head revision."""
    current = await current_revision(engine)
    if current is not None and not ships(current):
        raise _newer(current)
    if current != head_revision():
        raise SchemaNotReady(
            (f"the database is at migration {current}" if current else "the database has no teamstore tables yet")
            + f"; this code needs migration {head_revision()}",
            hint="run `teamstore db upgrade` (production databases are never migrated implicitly)",
        )


def require_revision(revisions: Sequence[str]) -> None:
    """For a process already running: raise :class:`SchemaNotReady` unless ``revisions`` (what the caller read
    from :data:`VERSION_TABLE`) are this code's head. A newer release's ``teamstore db upgrade`` (or a restore
    from a backup older than this version) has changed the tables under the process, which would misread them.

    Answered without importing Alembic while the database is at head.

    Raises:
        SchemaNotReady: The database is at another migration, or records none.
    """
    head = shipped_head() or head_revision()
    if list(revisions) == [head]:
        return
    current = max(revisions, default=None)
    if current is not None and not ships(current):
        raise _newer(current, hint="stop this process and run the version that migrated the database (or a newer "
                     "one); until then it takes no new session, as it would misread the tables")
    raise SchemaNotReady(
        (f"the database is at migration {current}" if current else "the database records no migration")
        + f"; this code needs migration {head} (restored from a backup older than this version?)",
        hint=f"run `teamstore db upgrade`, or run the version the database is at; until it is at {head} again this "
        "process takes no new session",
    )


async def ensure_current(engine: AsyncEngine, *, migrate: bool, create: bool = True) -> None:
    """Bring the database to this code's head when ``migrate`` (``Settings.should_auto_migrate``: the
    embedded default, or ``TEAMSTORE_AUTO_MIGRATE``), else check it is there.

    Args:
        engine: The database.
        migrate: Migrate it, rather than only check it is current.
        create: Also make teamstore's tables in a database that has none (``False`` for a caller that only
            reads or acts on what is stored: a database teamstore never migrated, some other application's
            file say, is left as it is).

    Raises:
        SchemaNotReady: Not ``migrate`` and the database is not at head, or a newer teamstore migrated it;
            or not ``create`` and it holds no teamstore tables.
        StoreUnavailable: The database failed.
    """
    head = shipped_head()
    if head is not None and await _run(engine, _at, head):
        return  # the usual case, answered without importing Alembic
    if migrate and not create and await current_revision(engine) is None:
        raise SchemaNotReady(
            "the database has no teamstore tables: nothing is stored there, and a command that only reads "
            "makes none",
            hint="check TEAMSTORE_DATABASE_URL (or TEAMSTORE_HOME); `teamstore db upgrade` makes the tables")
    if migrate:
        await upgrade(engine)
    else:
        await require_current(engine)


_REVISION = re.compile(r"""^(down_revision|revision)\s*(?::[^=]+)?=\s*(?:["']([^"']+)["']|None)\s*$""", re.M)


@functools.cache
def shipped_head() -> str | None:
    """The newest migration this code ships, read from the version files' ``revision`` and
    ``down_revision`` lines without Alembic; ``None`` when they do not read as one straight line of
    revisions (Alembic's own answer is then the only one)."""
    revisions: dict[str, str | None] = {}
    for path in sorted((MIGRATIONS / "versions").glob("[0-9]*.py")):
        found = dict((name, value or None) for name, value in _REVISION.findall(path.read_text(encoding="utf-8")))
        if "revision" not in found or found["revision"] is None or "down_revision" not in found:
            return None
        revisions[found["revision"]] = found["down_revision"]
    heads = set(revisions) - set(revisions.values())
    return heads.pop() if len(heads) == 1 else None


def _at(connection: Connection, head: str) -> bool:
    if not connection.dialect.has_table(connection, "alembic_version"):
        return False
    rows = connection.execute(text("SELECT version_num FROM alembic_version")).scalars().all()
    return rows == [head]
