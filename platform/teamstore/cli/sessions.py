"""``teamstore run``, ``teamstore sessions``, ``teamstore db`` and ``teamstore demo``.

    teamstore db upgrade
    teamstore db lease-mode row          # Postgres: switch session leases (while no session is open)
    teamstore run --team support_triage --user alice --session s1 - --json < message.txt
    teamstore sessions list --user alice
    teamstore sessions show --user alice --session s1
"""

from __future__ import annotations

import re
import sys
import traceback
from collections.abc import Awaitable, Callable
from pathlib import PurePath
from typing import TYPE_CHECKING, Any, TypeVar

import typer

from teamstore.cli._output import JsonOption, emit, fail
from teamstore.cli._runner import with_app, with_app_stoppable
from teamstore.errors import ConfigurationError, InvalidTask, NoInterruptedRun, TeamstoreError
from teamstore.ids import check_ids
from teamstore.terminal import console, plain, print_table

# The database, the runtime and AutoGen are imported by the commands that use them, not with the command
# line: `teamstore --help` and the commands that need none of them start without paying for them.
if TYPE_CHECKING:
    from autogen_agentchat.messages import BaseAgentEvent, BaseChatMessage

    from teamstore.app import App
    from teamstore.runtime.platform import Platform
    from teamstore.runtime.session import Session
    from teamstore.state.base import StateStore

T = TypeVar("T")
CONTENT_CAPTURE = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"
"""The operator's opt-in to users' words in telemetry, and in a failed run's error (docs/operations.md)."""
# AutoGen raises an agent's exception again as a RuntimeError reading "Type: message\nTraceback:\n<its traceback>".
_AGENTS_TRACEBACK = "\nTraceback:\n"
_FRAME = re.compile(r'^\s*File "([^"]+)", line (\d+), in (\S+)', re.MULTILINE)

sessions_app = typer.Typer(help="Stored resume state, one row per (user, session).", no_args_is_help=True)
db_app = typer.Typer(help="The state database's schema.", no_args_is_help=True)


def _stored(fn: Callable[[App], Awaitable[T]]) -> T:
    """Run ``fn`` on the state store of a database that exists. Creating one here would only answer
    'nothing stored' (from a mistyped TEAMSTORE_HOME, say); nor is the registry opened, let alone created:
    listing, showing and deleting stored state builds no team."""
    return with_app(fn, must_exist=True, lease=True)


def run(
    text: str | None = typer.Argument(
        None, help="The user's message, or - to read it from stdin (none with --continue or --abandon)."),
    team: str = typer.Option(..., "--team", help="Registry reference: NAME, NAME@VERSION or NAME@LABEL."),
    user: str = typer.Option(..., "--user", help="The user id."),
    session: str = typer.Option(..., "--session", help="The session id."),
    continue_run: bool = typer.Option(False, "--continue", help="Continue the session's interrupted run."),
    abandon: bool = typer.Option(False, "--abandon", help="Abandon the session's interrupted run (then run TEXT, if given)."),
    as_json: bool = JsonOption,
) -> None:
    """Resume the session, run the team on TEXT (or continue its interrupted run), save, and print the reply."""
    check_ids(user_id=user, session_id=session)  # before anything is opened: the ids are the likelier mistake
    if continue_run and abandon:
        fail(InvalidTask("--continue and --abandon are two answers to one interrupted run: give one",
                         hint="--continue finishes it; --abandon gives it up (then runs the message, if given)"))
    if continue_run and text is not None:
        fail(InvalidTask("--continue takes no message: continuing runs the interrupted run to its end, on the "
                         "message it was given",
                         hint="drop the message to continue the run, then send it in the next run; or --abandon "
                         "'message' to give the interrupted run up and run the message instead"))
    if not continue_run and text is None and not abandon:
        fail(InvalidTask("give the user's message, or --continue to finish the session's interrupted run",
                         hint="teamstore run --team T --user U --session S - < message.txt (or --continue)"))
    if text is not None:  # before anything is opened or leased (and before --abandon gives a run up for it)
        text = _message(text)

    async def go(app: App) -> dict[str, Any]:
        # The platform checks the schema and the lease mode as it opens, and closes the app as it closes.
        async with app.platform() as platform:
            return await _run_once(platform, text, team=team, user=user, session=session,
                                   how="continue" if continue_run else "abandon" if abandon else "run")

    # A run writes: the embedded database is made if need be.
    data = with_app_stoppable(
        go, must_exist=False, migrate=False,
        said="the session's lease was given back, and it keeps what it saved before this run",
        fix="run it again; `teamstore sessions show --user ... --session ...` says whether the run can "
        "be continued (--continue)")
    emit(data, as_json=as_json, render=lambda d: _render_run(d))


def _message(text: str) -> str:
    """The message given, or for ``-`` the one on stdin: an argument is on view to every user of the host
    (``ps``, ``/proc/*/cmdline``) and kept in the shell's history. Either is refused if blank; stdin is read
    no further than the task limit the runtime enforces."""
    from teamstore.runtime.tasks import check_not_blank, read_task

    if text != "-":
        check_not_blank(text)
        return text
    if sys.stdin is None:  # started with its stdin closed (`<&-`, a service manager's): Python then has none
        raise InvalidTask("the message is read from stdin (-), but the command was started with no stdin",
                          hint="send the message on stdin (`teamstore run ... - < message.txt`)")
    from teamstore.settings import Settings

    return read_task(sys.stdin.buffer, max_bytes=Settings().task_max_bytes)


async def _run_once(
    platform: Platform, text: str | None, *, team: str, user: str, session: str, how: str = "run"
) -> dict[str, Any]:
    """One request: open the session, run the team on ``text`` (or continue or abandon its interrupted run),
    and describe the reply."""
    opened: Session | None = None
    try:
        async with platform.session(user, session, team=team, continuing=how == "continue") as s:
            opened = s
            assert s.resume is not None
            waiting = s.resume.as_dict()["interrupted"]  # the run the session opened on, waiting for a decision
            if how == "abandon":
                await s.abandon_run()
                if text is None:
                    return {"abandoned": waiting, "resume": s.resume.as_dict(), "row_version": s.row_version}
            result = await (s.continue_run() if how == "continue" else s.run(text))
            # As it stands after the command: a continued run no longer asks to be continued or abandoned.
            resume = s.resume.as_dict()
            run_id = s.last_run_id
            memory = s.memory.as_dict() if s.memory is not None else None
    except NoInterruptedRun as exc:  # said for the command line, not the Python API
        raise NoInterruptedRun(exc.message, hint="`teamstore sessions show` names a session's interrupted run; "
                               "without one, run the message without --continue or --abandon") from None
    except TeamstoreError:
        raise
    except Exception as exc:  # the team's own failure (a model endpoint down, a tool raising): said, not a traceback
        said, see = _team_failure(exc, with_message=platform.settings.capture_message_content)
        stopped = opened.interrupted if opened is not None else None
        if stopped is not None:  # its checkpoint keeps the turns it completed; its transcript waits for its end
            raise TeamstoreError(
                f"{said}; the run stopped after turn {stopped.last_turn} and can be continued",
                hint="once the model client answers again: teamstore run --team T --user U --session S --continue "
                f"(or --abandon){see}",
            ) from exc
        raise TeamstoreError(
            said,
            hint="check the model client's endpoint, key and quota; `teamstore transcripts show --user ... "
            f"--session ...` shows the run up to the failure{see}",
        ) from exc
    usage = [m.models_usage for m in result.messages if m.models_usage]
    last = result.messages[-1]
    return {
        "reply": getattr(last, "content", str(last)),
        "speaker": last.source,
        "messages": [
            {"source": m.source, "type": type(m).__name__, "content": _message_text(m),
             "created_at": m.created_at.isoformat()} for m in result.messages
        ],
        "resume": resume,
        **({"continued": waiting} if how == "continue" else {}),
        "memory": memory,
        "run_id": run_id,
        "row_version": s.row_version,
        "stop_reason": result.stop_reason,
        "usage": {
            "input_tokens": sum(u.prompt_tokens for u in usage),
            "output_tokens": sum(u.completion_tokens for u in usage),
        },
    }


def _message_text(message: BaseAgentEvent | BaseChatMessage) -> str:
    """A message's text; the memory a participant was given, one item a line (AutoGen's ``to_text()`` of a
    ``MemoryQueryEvent`` is the Python repr of its list)."""
    from autogen_agentchat.messages import MemoryQueryEvent

    if isinstance(message, MemoryQueryEvent):
        return "\n".join(str(item.content) for item in message.content)
    return message.to_text()


def _team_failure(exc: Exception, *, with_message: bool) -> tuple[str, str]:
    """The team's failure as the command line says it, and what to add to the fix to see its message.

    The exception's type and where it was raised are said; its message only when the operator opted in to
    content capture. A model client's or a tool's message often quotes the user's words (a provider's refusal
    repeats the request), and the error line and ``--json`` reach terminals, CI logs and tickets. AutoGen's log
    filter leaves the same message out; the Python API's caller gets the exception itself."""
    text = str(exc)
    first = next(iter(text.splitlines()), "")
    said = f"the team's run raised {type(exc).__name__}"
    message = first
    if _AGENTS_TRACEBACK in text:  # an agent's exception, which AutoGen raises again as a RuntimeError
        kind, _, message = first.partition(": ")
        where = _raised_at(_FRAME.findall(text))
        said += f" (an agent's {kind}, {where})" if where else f" (an agent's {kind})"
    else:
        where = _raised_at([(f.filename, str(f.lineno), f.name) for f in traceback.extract_tb(exc.__traceback__)])
        said += f" ({where})" if where else ""
    if with_message:
        return (f"{said}: {message}" if message else said), ""
    if not message:
        return said, ""
    return f"{said}; its message is left out: it may quote the user's words", (
        f"; to see it, run again with {CONTENT_CAPTURE}=true (docs/operations.md, *Opting in to content capture*)")


def _raised_at(frames: list[tuple[str, str, str]]) -> str:
    """``at FILE:LINE in FUNCTION`` of the innermost of ``frames`` (file, line, function); without any, ``""``."""
    if not frames:
        return ""
    file, line, function = frames[-1]
    return f"at {PurePath(file).name}:{line} in {function}"


def _render_run(data: dict[str, Any]) -> None:
    resume = data["resume"]
    note = f" ({resume['detail']})" if resume["detail"] else ""
    console.print(f"[dim]resume: {plain(resume['outcome'] + note)}[/]")
    if "abandoned" in data:
        run = data["abandoned"]  # None: the session's opening ended the run (the resume line says how)
        console.print(f"abandoned run {plain(run['run_id'])}" if run else "the interrupted run was given up as the "
                      "session opened: nothing is left to abandon")
        return
    console.print(f"[bold]{plain(data['speaker'])}[/]: {plain(data['reply'])}")


@sessions_app.command("list")
def list_sessions(
    user: str | None = typer.Option(None, "--user", help="Only this user's sessions (exact id)."),
    limit: int = typer.Option(100, "--limit", min=1, max=100_000, help="Most rows to show."),
    as_json: bool = JsonOption,
) -> None:
    """List saved sessions, most recently updated first; for one user, also how many count against their bound."""
    check_ids(user_id=user)

    from teamstore.runtime.inspect import describe_session

    async def go(app: App) -> tuple[list[dict[str, Any]], str | None]:
        store = app.state_store
        rows = [describe_session(r) for r in await store.list_sessions(user, limit)]
        return rows, await _bound_line(store, app.settings.max_sessions_per_user, user) if user is not None else None

    rows, bound = _stored(go)

    def render(rows: list[dict[str, Any]]) -> None:
        _render_sessions(rows)
        _say_if_cut(rows, limit)
        if bound is not None:
            console.print(f"[dim]{plain(bound)}[/]")

    emit(rows, as_json=as_json, render=render)


def _say_if_cut(rows: list[dict[str, Any]], limit: int) -> None:
    """Say under a table that filled its ``--limit`` that older rows may not be shown."""
    if len(rows) >= limit:
        console.print(f"[dim]the newest {limit} shown; older ones may follow: raise --limit[/]")


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
        raise TeamstoreError("no stored session for that user and session id",
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
    replace: bool = typer.Option(False, "--replace", help="Quarantine the state the session saved since."),
    as_json: bool = JsonOption,
) -> None:
    """Put a quarantined state back as its session's state; the next run validates it again. Its sizes are
    given as `sessions show` gives them: stored (what `sessions quarantine` lists) and opened."""

    from teamstore.runtime.inspect import describe_session

    async def go(app: App) -> dict[str, Any]:
        # The registry, which gives the team's TTL, is only read (a missing one is said, not made); no audit.
        async with app.platform(audit=False) as platform:
            restored = await platform.restore_quarantined(quarantine_id, replace=replace)
        row = restored.session
        shown = describe_session(row)
        return {"restored": quarantine_id, "user_id": row.user_id, "session_id": row.session_id, "team": row.team,
                "team_version": row.team_version, "row_version": row.row_version,
                "state_bytes": shown["state_bytes"], "opened_state_bytes": shown["opened_state_bytes"],
                "replaced_by": restored.replaced_by}

    # Only a database that exists holds quarantined states; the platform checks the schema as it opens.
    data = with_app_stoppable(go, must_exist=True, migrate=False, said="the session's lease was given back; "
                              "`teamstore sessions quarantine` lists the state if it was not restored",
                              fix="restore it again if it is still listed")

    def render(d: dict[str, Any]) -> None:
        console.print(plain(f"restored quarantined state {d['restored']} to user {d['user_id']!r} session "
                             f"{d['session_id']!r} ({d['team']}@{d['team_version']}, {_sizes(d)}, "
                             f"row version {d['row_version']})"))
        if d["replaced_by"] is not None:
            console.print(f"the state it replaced is quarantined as {d['replaced_by']}")

    emit(data, as_json=as_json, render=render)


def _sizes(d: dict[str, Any]) -> str:
    """A restored state's sizes in words: stored, as the quarantine listed it, and opened."""
    opened = d["opened_state_bytes"]
    return f"{d['state_bytes']} bytes stored, " + (f"{opened} opened" if opened is not None else "does not open")


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


@db_app.command("current")
def db_current(as_json: bool = JsonOption) -> None:
    """Show the database's migration revision and the one this code needs."""

    from teamstore.db.engine import redact_url
    from teamstore.db.migrate import current_revision, head_revision, pending, ships

    async def go(app: App) -> dict[str, Any]:
        current = await current_revision(app.engine)
        return {"database": redact_url(app.settings.resolved_database_url), "current": current,
                "head": head_revision(), "pending": pending(current) if current is None or ships(current) else []}

    data = with_app(go, must_exist=True, migrate=False)  # it reports the revision, whatever it is
    emit(data, as_json=as_json, render=_render_current)


def _render_current(d: dict[str, Any]) -> None:
    from teamstore.db.migrate import ships

    if d["current"] == d["head"]:
        console.print(plain(f"{d['database']}: at {d['head']}, up to date"))
    elif d["current"] is not None and not ships(d["current"]):
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
        raise ConfigurationError(f"session lease {mode!r} is not one of lock, row",
                                 hint="give lock or row, or nothing to show the current mode")

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


def demo() -> None:
    """The main job, offline: register, run two users, resume in new processes, fail closed, show it all."""
    from teamstore.demo import run_demo

    run_demo()


def register(app: typer.Typer) -> None:
    """Mount this module's commands on the main app."""
    app.command("run")(run)
    app.command("demo")(demo)
    app.add_typer(sessions_app, name="sessions")
    app.add_typer(db_app, name="db")
