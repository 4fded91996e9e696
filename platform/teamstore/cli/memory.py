"""``teamstore memory``: what is kept about a user between sessions, shown and forgotten.

    teamstore memory show --user alice                     # every scope; --team support_triage for one
    teamstore memory show --user alice --json
    teamstore memory forget --user alice --fact ticket_id  # one fact (every scope, unless --team)
    teamstore memory forget --user alice --all             # the summaries and every fact

``--team`` names the memory's scope: the team's name, unless the team declares a scope it shares.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import typer

from teamstore.cli._output import JsonOption, emit
from teamstore.cli._runner import with_app
from teamstore.errors import ConfigurationError
from teamstore.ids import check_ids
from teamstore.terminal import console, plain, print_table

# The database layer is imported by the commands, when they run: `teamstore --help` does not pay for it.
if TYPE_CHECKING:
    from teamstore.app import App

app = typer.Typer(help="What teams keep about a user between sessions: a summary and typed facts.",
                  no_args_is_help=True)

UserOption = typer.Option(..., "--user", help="The user (exact id).")
TeamOption = typer.Option(None, "--team", help="One scope: the team's name, or the scope it declares it shares.")


@app.command("show")
def show(user: str = UserOption, team: str | None = TeamOption, as_json: bool = JsonOption) -> None:
    """Print the summary and facts kept about USER, the writer's last failure, and anything damaged."""
    from teamstore.memory.facts import check_names

    check_ids(user_id=user)
    check_names(scope=team)

    async def go(app: App) -> dict[str, Any]:
        return {"user_id": user, "memories": [m.to_dict() for m in await app.memory_store.show(user, team)]}

    emit(with_app(go, must_exist=True), as_json=as_json, render=lambda data: _render(data, team))


def _render(data: dict[str, Any], scope: str | None) -> None:
    from teamstore.memory.facts import fact_text

    if not data["memories"]:
        # Under one scope, "nothing" is about that scope: the user may well have memory under another.
        console.print("nothing is kept about this user" + (plain(f" under scope {scope!r}") if scope else ""))
        return
    for memory in data["memories"]:
        # Version 0: a row holding only a writer's failure, nothing written yet (UserMemory.written).
        by = "written by" if memory["version"] != 0 else "nothing written yet; last tried by"
        console.print(plain(f"{memory['scope']}: {by} {memory['team']}@{memory['team_version'][:12]}, "
                            f"version {memory['version']}, updated {str(memory['updated_at'])[:19]}, "
                            f"expires {str(memory['expires_at'])[:10]}"), style="bold")
        console.print(plain(f"summary: {memory['summary'] or '(none yet)'}"))
        rows = [[plain(f["name"]), plain(f["type"]), plain(fact_text(f["value"])), plain(f["source_run_id"][:12]),
                 plain(f["confirmed_at"][:19])] for f in memory["facts"]]
        if rows:
            print_table(("fact", "type", "value", "from run", "last confirmed"), rows, fixed=(1, 3, 4))
        for damaged in memory["damaged"]:
            held = "" if damaged["stored"] is None else f"; it holds {damaged['stored']!r}"
            console.print(plain(f"damaged: {damaged['name']}: {damaged['reason']}{held} (not given to any model; "
                                "forget it to clear it)"), style="yellow")
        failure = memory["failure"]
        if failure is not None:
            console.print(plain(f"writer failed {failure['count']} time(s), last at {str(failure['at'])[:19]}: "
                                f"{failure['reason']}"), style="yellow")


@app.command("forget")
def forget(
    user: str = UserOption,
    team: str | None = TeamOption,
    fact: str | None = typer.Option(None, "--fact", help="Forget this fact only (the summary stays)."),
    everything: bool = typer.Option(False, "--all", help="Forget the summaries and every fact."),
    as_json: bool = JsonOption,
) -> None:
    """Forget one fact kept about USER, or everything (--all); in one scope with --team."""
    from teamstore.memory.facts import check_names

    check_ids(user_id=user)
    check_names(scope=team, fact=fact)
    if (fact is None) == (not everything):
        raise ConfigurationError("say what to forget: --fact NAME or --all (not both)",
                                 hint="`teamstore memory show --user ...` lists what is kept")

    async def go(app: App) -> dict[str, Any]:
        gone = await app.memory_store.forget(user, scope=team, fact=fact)
        return {"memories": gone.memories, "facts": gone.facts, "unrecorded": gone.unrecorded}

    def render(d: dict[str, Any]) -> None:
        console.print(f"forgot {d['facts']} fact(s) and {d['memories']} summary row(s)")
        if d["unrecorded"] is not None:
            console.print(d["unrecorded"], style="yellow")

    emit(with_app(go, must_exist=True), as_json=as_json, render=render)


def register(root: typer.Typer) -> None:
    """Mount ``teamstore memory`` on the main app."""
    root.add_typer(app, name="memory")
