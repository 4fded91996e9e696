"""``teamstore db``: the state database's schema and its session lease mode.

    teamstore db current                 # the revision, and the migrations an upgrade would apply
    teamstore db current --check         # the same, exit status 2 when the schema is behind the code, 3 ahead
    teamstore db upgrade
    teamstore db lease-mode row          # Postgres: switch session leases (while no session is open)
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import typer

from teamstore.cli._output import JsonOption, emit
from teamstore.cli._runner import with_app
from teamstore.errors import ConfigurationError, refused_value
from teamstore.terminal import console, plain

# The database, the runtime and AutoGen are imported by the commands that use them, not with the command
# line: `teamstore --help` and the commands that need none of them start without paying for them.
if TYPE_CHECKING:
    from teamstore.app import App

db_app = typer.Typer(help="The state database's schema.", no_args_is_help=True)


@db_app.command("upgrade")
def db_upgrade(as_json: bool = JsonOption) -> None:
    """Apply every pending migration to TEAMSTORE_DATABASE_URL (the only way production tables change)."""

    from teamstore.db.engine import redact_url
    from teamstore.db.migrate import revision_before, upgrade

    async def go(app: App) -> dict[str, Any]:
        from teamstore.audit.price_sync import PriceSync
        from teamstore.audit.prices import load_prices

        applied: list[str] = []
        after = await upgrade(app.engine, applied=applied)
        table = load_prices(app.settings.prices_path)
        # The session_costs view prices with it at once, every model of the ledger (runs read no ledger for it).
        await PriceSync(lambda: table, whole_ledger=True).ensure(app.engine, ())
        # From what this upgrade found once it held the migration lock: an upgrade that waited for another
        # one found the database migrated, and applied nothing.
        before = revision_before(applied[0]) if applied else after
        return {"database": redact_url(app.settings.resolved_database_url), "from": before, "to": after,
                "applied": applied, "prices": table.version}

    data = with_app(go, must_exist=False, migrate=False)  # it is the migration: it makes the database
    emit(data, as_json=as_json, render=_render_upgrade)


def _render_upgrade(d: dict[str, Any]) -> None:
    if d["applied"]:
        count = len(d["applied"])
        console.print(plain(f"{d['database']}: {d['from'] or 'empty'} -> {d['to']}, {count} migration"
                            f"{'s' if count > 1 else ''} applied; prices {d['prices']}"))
    else:
        console.print(plain(f"{d['database']}: at {d['to']} already, no migration applied; prices {d['prices']}"))


BEHIND = 2
"""``db current --check``'s exit status for a database this code's migrations have not reached (or an empty one)."""
AHEAD = 3
"""``db current --check``'s exit status for a database a newer teamstore migrated past this code."""


@db_app.command("current")
def db_current(
    check: bool = typer.Option(
        False, "--check",
        help=f"Exit with status {BEHIND} when the database is behind this code (run `teamstore db upgrade`) and "
        f"{AHEAD} when a newer teamstore migrated it, for a deploy check; 0 only when it is at this code's head."),
    as_json: bool = JsonOption,
) -> None:
    """Show the database's migration revision and the one this code needs (it migrates nothing).

    With --check the exit status says whether this code may run on it (docs/operations.md, Upgrading).
    """

    from teamstore.db.engine import redact_url
    from teamstore.db.migrate import current_revision, head_revision, pending, ships

    async def go(app: App) -> dict[str, Any]:
        current, head = await current_revision(app.engine), head_revision()
        ahead = current is not None and not ships(current)
        return {"database": redact_url(app.settings.resolved_database_url), "current": current, "head": head,
                "pending": [] if ahead else pending(current),
                "state": "up_to_date" if current == head else "ahead" if ahead else "behind"}

    data = with_app(go, must_exist=True, migrate=False)  # it reports the revision, whatever it is
    emit(data, as_json=as_json, render=_render_current)
    if check and data["state"] != "up_to_date":
        raise typer.Exit(AHEAD if data["state"] == "ahead" else BEHIND)


def _render_current(d: dict[str, Any]) -> None:
    if d["state"] == "up_to_date":
        console.print(plain(f"{d['database']}: at {d['head']}, up to date"))
    elif d["state"] == "ahead":
        console.print(plain(f"{d['database']}: at {d['current']}, newer than this code ({d['head']}): run the "
                            "teamstore version that migrated it"))
    elif d["current"] is None:  # an empty database has no revision (JSON null)
        console.print(plain(f"{d['database']}: at empty, this code needs {d['head']}: run `teamstore db upgrade`"))
    else:  # each pending migration's notes may ask for a step first (a view to drop, grants)
        console.print(plain(f"{d['database']}: at {d['current']}, this code needs {d['head']}; pending: "
                            f"{', '.join(d['pending'])}. Read their notes in docs/operations.md (Database tables), "
                            "then run `teamstore db upgrade`"))


@db_app.command("lease-mode")
def db_lease_mode(
    mode: str | None = typer.Argument(None, help="lock or row; omit to show the current mode."),
    as_json: bool = JsonOption,
) -> None:
    """Show or switch how the database's sessions are leased (Postgres: lock or row; SQLite: row).

    A switch is refused while any session is open. Stop every worker first, switch, and start them
    again with TEAMSTORE_SESSION_LEASE set to the new mode.
    """
    if mode is not None and mode not in ("lock", "row"):
        raise ConfigurationError(refused_value("MODE", takes="lock or row"),
                                 hint="e.g. `teamstore db lease-mode row`, or give no MODE to show the current mode")

    from teamstore.db.engine import redact_url
    from teamstore.db.migrate import require_current
    from teamstore.state.lease_mode import lease_mode, set_lease_mode

    async def go(app: App) -> dict[str, Any]:
        engine, settings = app.engine, app.settings
        if mode == "lock" and engine.dialect.name != "postgresql":
            raise ConfigurationError("SQLite leases sessions in the row; advisory locks need Postgres",
                                     hint="keep row leases on SQLite, or point TEAMSTORE_DATABASE_URL at "
                                     "Postgres for lock leases")
        await require_current(engine)  # the migrations record the mode: without them, say to run them
        before = await lease_mode(engine) if mode is None else await set_lease_mode(engine, mode)
        return {"database": redact_url(settings.resolved_database_url), "from": before, "mode": mode or before,
                "this_process": settings.session_lease if engine.dialect.name == "postgresql" else "row"}

    data = with_app(go, must_exist=True, migrate=False)  # never migrates, even the embedded database

    def render(d: dict[str, Any]) -> None:
        change = f"{d['from']} -> {d['mode']}" if d["from"] != d["mode"] else d["mode"]
        console.print(plain(f"{d['database']}: session lease {change} "
                            f"(TEAMSTORE_SESSION_LEASE here: {d['this_process']})"))
        if d["this_process"] != d["mode"]:  # every worker started so refuses the database's sessions
            console.print(plain(f"set TEAMSTORE_SESSION_LEASE={d['mode']} on every worker and wherever teamstore "
                                "commands run, then start them again: one set otherwise refuses to start"))

    emit(data, as_json=as_json, render=render)


def register(app: typer.Typer) -> None:
    """Mount this module's commands on the main app."""
    app.add_typer(db_app, name="db")
