"""``teamstore sessions``: stored resume state, one row per (user, session), and its quarantine.

    teamstore sessions list --user alice
    teamstore sessions list --limit 500 --after CURSOR     # the next page: the footer (or --json) gives CURSOR
    teamstore sessions show --user alice --session s1
    teamstore sessions quarantine --user alice
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, TypeVar

import typer

from teamstore.cli._output import JsonOption, emit
from teamstore.cli._runner import with_app, with_app_stoppable
from teamstore.errors import SessionNotFound
from teamstore.ids import check_ids
from teamstore.terminal import console, plain, print_table

# The database, the runtime and AutoGen are imported by the commands that use them, not with the command
# line: `teamstore --help` and the commands that need none of them start without paying for them.
if TYPE_CHECKING:
    from teamstore.app import App
    from teamstore.state.base import StateStore

T = TypeVar("T")

sessions_app = typer.Typer(help="Stored resume state, one row per (user, session).", no_args_is_help=True)


def _stored(fn: Callable[[App], Awaitable[T]]) -> T:
    """Run ``fn`` on the state store of a database that exists. Creating one here would only answer
    'nothing stored' (from a mistyped TEAMSTORE_HOME, say); nor is the registry opened, let alone created:
    listing, showing and deleting stored state builds no team."""
    return with_app(fn, must_exist=True, lease=True)


@sessions_app.command("list")
def list_sessions(
    user: str | None = typer.Option(None, "--user", help="Only this user's sessions (exact id)."),
    limit: int = typer.Option(100, "--limit", min=1, max=100_000, help="Most rows to show."),
    after: str | None = typer.Option(None, "--after", metavar="CURSOR",
                                     help="Go on after the row this cursor names (the footer's, or a row's "
                                          "`cursor` under --json)."),
    as_json: bool = JsonOption,
) -> None:
    """List saved sessions, most recently updated first, a page at a time; for one user, also how many count
    against their bound."""
    check_ids(user_id=user)

    from teamstore.runtime.inspect import describe_session

    async def go(app: App) -> tuple[list[dict[str, Any]], str | None, str | None]:
        store = app.state_store
        page = await store.list_sessions_page(user, limit, after=after)
        rows = [{**describe_session(r), "cursor": c} for r, c in zip(page.sessions, page.cursors, strict=True)]
        bound = await _bound_line(store, app.settings.max_sessions_per_user, user) if user is not None else None
        return rows, page.next, bound

    rows, following, bound = _stored(go)

    def render(rows: list[dict[str, Any]]) -> None:
        _render_sessions(rows)
        if following is not None:
            _say_if_cut(rows, limit, f"--after {following}")
        if bound is not None:
            console.print(f"[dim]{plain(bound)}[/]")

    emit(rows, as_json=as_json, render=render)


def _say_if_cut(rows: list[dict[str, Any]], limit: int, next_page: str | None = None) -> None:
    """Say under a table that filled its ``--limit`` that older rows follow, and the option that lists them:
    ``next_page`` where the listing pages, else a larger ``--limit``. On one line whatever the terminal's
    width, so that the option is copied whole."""
    if len(rows) < limit:
        return
    if next_page is None:
        console.print(f"[dim]the newest {limit} shown; older ones may follow: raise --limit[/]")
    else:
        console.print(f"[dim]{limit} shown; older ones follow: {plain(next_page)}[/]", soft_wrap=True)


async def _bound_line(store: StateStore, bound: int, user: str) -> str:
    """How many of the user's sessions count against TEAMSTORE_MAX_SESSIONS_PER_USER, in a sentence."""
    live = await store.live_sessions(user)
    return (f"{live} unexpired stored session(s) for this user, of the {bound} TEAMSTORE_MAX_SESSIONS_PER_USER "
            "allows (a new one past it is refused; a resume never is)")


def _render_sessions(rows: list[dict[str, Any]]) -> None:
    # Every column keeps its width: a user id, session id, team name or version folded over lines could not be
    # copied into the next command (`sessions show`, `registry show`). On a terminal too narrow for the row,
    # each session is a block of lines instead of a table line the terminal would wrap.
    print_table(("user", "session", "team", "version", "bytes", "row v", "expires"),
                [[plain(r["user_id"]), plain(r["session_id"]), plain(r["team"]), r["team_version"][:12],
                  str(r["state_bytes"]), str(r["row_version"]), str(r["expires_at"])[:16]] for r in rows],
                fixed=(0, 1, 2, 3, 4, 5, 6), right=(4, 5), narrow="blocks")


@sessions_app.command("show")
def show_session(
    user: str = typer.Option(..., "--user", help="The user id (exact)."),
    session: str = typer.Option(..., "--session", help="The session id (exact)."),
    as_json: bool = JsonOption,
) -> None:
    """Show one session: team, versions, per persisted agent the stored messages and bytes, and how many
    sessions its user keeps against TEAMSTORE_MAX_SESSIONS_PER_USER."""
    check_ids(user_id=user, session_id=session)

    from teamstore.runtime.inspect import describe_session
    from teamstore.state.base import SessionKey

    async def go(app: App) -> dict[str, Any] | None:
        row = await app.state_store.get(SessionKey(user, session))
        if row is None:
            return None
        return {**describe_session(row), "user_live_sessions": await app.state_store.live_sessions(user),
                "max_sessions_per_user": app.settings.max_sessions_per_user}

    data = _stored(go)
    if data is None:
        raise SessionNotFound("no stored session for that user and session id",
                             hint="check the ids with `teamstore sessions list --user ...`")
    emit(data, as_json=as_json, render=_render_session)


def _render_session(d: dict[str, Any]) -> None:
    for key in ("team", "team_version", "schema_version", "agentchat_version", "row_version", "state_bytes",
                "opened_state_bytes", "updated_at", "expires_at"):
        if d[key] is not None or key != "opened_state_bytes":  # a state that does not open: `agents` says why
            console.print(f"[bold]{key}[/]: {plain(d[key])}")
    checkpoint = d.get("checkpoint")
    if checkpoint is not None:
        shown = checkpoint if isinstance(checkpoint, str) else (
            f"run {checkpoint['run_id']} after turn {checkpoint['last_turn']}, {checkpoint['bytes']} bytes stored, "
            f"{checkpoint['opened_bytes']} opened")
        console.print(f"[bold]checkpoint[/]: {plain(shown)}")
    console.print(f"[bold]user's live sessions[/]: {d['user_live_sessions']} of the {d['max_sessions_per_user']} "
                  "TEAMSTORE_MAX_SESSIONS_PER_USER allows")
    agents = d["agents"]
    if isinstance(agents, str):
        console.print(f"[bold]agents[/]: {plain(agents)}")
        return
    print_table(("persisted agent", "stored messages", "bytes"),
                [[plain(name), str(info["messages"]), str(info["bytes"])] for name, info in agents.items()],
                fixed=(1, 2), right=(1, 2))


@sessions_app.command("quarantine")
def list_quarantine(
    user: str | None = typer.Option(None, "--user", help="Only this user's refused states (exact id)."),
    limit: int = typer.Option(100, "--limit", min=1, max=100_000, help="Most rows to show."),
    as_json: bool = JsonOption,
) -> None:
    """List refused states that were set aside, newest first, with the reason."""
    check_ids(user_id=user)

    async def go(app: App) -> list[dict[str, Any]]:
        return [vars(q) for q in await app.state_store.list_quarantined(user, limit)]

    rows = _stored(go)

    def render(rows: list[dict[str, Any]]) -> None:
        if not rows:  # an empty table would leave the reader asking whether the listing worked
            console.print(f"no refused state is set aside{' for this user' if user is not None else ''}")
            return
        # "stored": sealed and compressed, as `sessions list` and `show` give state_bytes and a restore stores it.
        print_table(("id", "user", "session", "reason", "detail", "stored bytes", "when"),
                    [[str(q["id"]), plain(q["user_id"]), plain(q["session_id"]), plain(q["reason"]),
                      plain(q["detail"]), str(q["state_bytes"]), str(q["quarantined_at"])[:19]] for q in rows],
                    fixed=(0, 1, 2, 5, 6), right=(0, 5))  # the ids whole, to be given to `sessions restore`
        _say_if_cut(rows, limit)

    emit(rows, as_json=as_json, render=render)


@sessions_app.command("delete")
def delete_session(
    user: str = typer.Option(..., "--user", help="The user id (exact)."),
    session: str = typer.Option(..., "--session", help="The session id (exact)."),
    as_json: bool = JsonOption,
) -> None:
    """Delete one session's stored state and quarantined copies (transcripts and ledger keep their retention;
    a run it left interrupted is recorded in them first, as abandoning it would)."""

    check_ids(user_id=user, session_id=session)

    from teamstore.events import drain_observers
    from teamstore.runtime.interruptions import ending
    from teamstore.state.base import SessionKey

    async def go(app: App) -> dict[str, Any]:
        # What Platform.delete_session does: it waits for an open session as a request would, and records the
        # interrupted run whose checkpoint goes with the row.
        observers = app.audit_observers()
        try:
            deleted = await app.state_store.delete_session(SessionKey(user, session),
                                                           wait_seconds=app.settings.lease_timeout_seconds,
                                                           ending=ending(observers, "deleted"))
        finally:
            await drain_observers(observers)
        return {"user_id": user, "session_id": session, "deleted": deleted}

    data = with_app_stoppable(go, must_exist=True, lease=True, said="the session's lease was given back, and "
                              "its state was deleted only if the deletion had ended", fix="delete it again")
    emit(data, as_json=as_json, render=lambda d: console.print(plain(
        f"session {d['user_id']!r}/{d['session_id']!r}: " + ("deleted" if d["deleted"] else "nothing stored"))))


@sessions_app.command("restore")
def restore_quarantined(
    quarantine_id: int = typer.Argument(..., help="The id 'teamstore sessions quarantine' shows."),
    replace: bool = typer.Option(False, "--replace", help="Quarantine what the session holds now: a state it "
                                 "saved since, an interrupted run (recorded as ended, its checkpoint kept)."),
    as_json: bool = JsonOption,
) -> None:
    """Put a quarantined state back as its session's state; the next run validates it again. The checkpoint of
    a run it had interrupted stays in the quarantine (that run was recorded as ended when it was set aside).
    Its sizes are given as `sessions show` gives them: stored (what `sessions quarantine` lists) and opened."""

    from teamstore.runtime.inspect import describe_session

    async def go(app: App) -> dict[str, Any]:
        # The registry, which gives the team's TTL, is only read (a missing one is said, not made). The audit
        # records an interrupted run that --replace ends.
        async with app.platform() as platform:
            restored = await platform.restore_quarantined(quarantine_id, replace=replace)
        row = restored.session
        shown = describe_session(row)
        return {"restored": quarantine_id, "user_id": row.user_id, "session_id": row.session_id, "team": row.team,
                "team_version": row.team_version, "row_version": row.row_version,
                "state_bytes": shown["state_bytes"], "opened_state_bytes": shown["opened_state_bytes"],
                "checkpoint_kept": restored.checkpoint_kept, "replaced_by": restored.replaced_by}

    # Only a database that exists holds quarantined states; the platform checks the schema as it opens.
    data = with_app_stoppable(go, must_exist=True, migrate=False, said="the session's lease was given back; "
                              "`teamstore sessions quarantine` still lists its state (stored bytes above 0) if it "
                              "was not restored", fix="restore it again if its state is still listed")

    def render(d: dict[str, Any]) -> None:
        console.print(plain(f"restored quarantined state {d['restored']} to user {d['user_id']!r} session "
                             f"{d['session_id']!r} ({d['team']}@{d['team_version']}, {_sizes(d)}, "
                             f"row version {d['row_version']})"))
        if d["checkpoint_kept"]:
            console.print(f"the checkpoint of the run it had interrupted (recorded as ended) stays in quarantine as "
                          f"{d['restored']}, until the quarantine's retention deletes it")
        if d["replaced_by"] is not None:
            console.print(f"what it replaced is quarantined as {d['replaced_by']}")

    emit(data, as_json=as_json, render=render)


def _sizes(d: dict[str, Any]) -> str:
    """A restored state's sizes in words: stored, as the quarantine listed it, and opened."""
    opened = d["opened_state_bytes"]
    return f"{d['state_bytes']} bytes stored, " + (f"{opened} opened" if opened is not None else "does not open")


def register(app: typer.Typer) -> None:
    """Mount this module's commands on the main app."""
    app.add_typer(sessions_app, name="sessions")
