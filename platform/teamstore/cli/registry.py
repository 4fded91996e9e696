"""``teamstore registry``: add, list, show, history, diff, label and check team definitions; recover.

    teamstore registry add support_triage --factory teamstore.examples:support_triage \\
        --persist researcher --context-bound 20 --label production --message "first version" \\
        --memory '{"participants": ["triage"], "writer": "triage", "facts": {"ticket_id": "str"}}'
    teamstore registry show support_triage@production --json
    teamstore registry check support_triage --from production --to <version>
    teamstore registry recover --discard      # after a registration was killed before its commit

The registry lives at ``TEAMSTORE_REGISTRY_PATH`` (default ``$TEAMSTORE_HOME/registry``).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from config_registry.errors import DefinitionInvalid
from teamstore.cli._output import JsonOption, deaf_to_ctrl_c, emit, fail
from teamstore.cli._registry_options import (
    build_manifest,
    dump_factory_here,
    one_label,
    parse_memory,
    parse_secrets,
    read_component,
)
from teamstore.cli._registry_render import (
    render_added,
    render_definition,
    render_history,
    render_left,
    render_list,
    short,
)
from teamstore.errors import TeamstoreError
from teamstore.terminal import console, plain

# The registry (git, AutoGen, pydantic models) and the settings are imported by the commands that use
# them, not with the command line.
if TYPE_CHECKING:
    from config_registry import Manifest, Registry, TeamDefinition

app = typer.Typer(help="Team definitions, versioned in git.", no_args_is_help=True)
NAME_HELP = "The team's registry name."


def _registry(*, create: bool = False) -> Registry:
    """The registry; only ``add`` creates it: every other command reads, or moves a label of a version
    that must already be registered."""
    from teamstore.app import App

    return App().registry(create=create)


@app.command("add")
def add(
    name: str = typer.Argument(..., help=NAME_HELP),
    factory: str | None = typer.Option(None, "--factory", help="module:function that builds the team."),
    file: Annotated[
        Path | None, typer.Option("--file", help="A JSON file from team.dump_component().")
    ] = None,
    persist: Annotated[list[str] | None, typer.Option(
        "--persist", help="Participants opted in to resume state: repeatable, or comma separated."
    )] = None,
    context_bound: int | None = typer.Option(
        None, "--context-bound", help="Most messages a persisted context keeps."
    ),
    allow_provider: Annotated[
        list[str] | None, typer.Option("--allow-provider", help="Extra provider prefix (repeatable).")
    ] = None,
    allow_source_code_tools: bool = typer.Option(
        False, "--allow-source-code-tools", help="Allow FunctionTool code, code executors and MCP stdio servers."
    ),
    secret: Annotated[
        list[str] | None, typer.Option("--secret", help="PATH=env:VAR, a secret as a reference.")
    ] = None,
    description: str = typer.Option("", "--description", help="What the team does (shown by list and show)."),
    owner: str = typer.Option("", "--owner", help="Who answers for it (a team or a person)."),
    notes: str = typer.Option("", "--notes", help="Anything a reviewer should know."),
    state_ttl_days: float | None = typer.Option(
        None, "--state-ttl-days", help="Resume-state TTL for this team."
    ),
    memory: str | None = typer.Option(
        None, "--memory", help="User memory, as JSON: participants, writer, summary_tokens, facts {name: type}, "
        "scope, retention_days (docs/memory.md).",
    ),
    checkpoints: str = typer.Option(
        "off", "--checkpoints", help="'every_turn': make each completed agent turn durable before the next; 'off'."
    ),
    message: str | None = typer.Option(
        None, "--message", "-m", help="Why this version exists (commit message); omitted: 'register NAME'."
    ),
    label: Annotated[list[str] | None, typer.Option(
        "--label", help="Also point this label at the new version (one label)."
    )] = None,
    allow_incompatible: bool = typer.Option(
        False, "--allow-incompatible", help="Move --label even if sessions saved under the version it points at "
        "would not resume under the new one (`registry check`): they start fresh."
    ),
    as_json: bool = JsonOption,
) -> None:
    """Validate and register a team definition from a factory or a JSON file."""
    options = {
        "persist": [p.strip() for given in persist or [] for p in given.split(",") if p.strip()],
        "context_bound": context_bound,
        "allowed_providers": allow_provider or [],
        "allow_source_code_tools": allow_source_code_tools,
        "description": description,
        "owner": owner,
        "notes": notes,
        "state_ttl_days": state_ttl_days,
        "checkpoints": checkpoints,
    }
    try:
        references, memory_declared = parse_secrets(secret or []), parse_memory(memory)
        manifest = build_manifest(name, {**options, "secrets": references, "memory": memory_declared})
        definition, new = _register(name, factory, file, manifest,
                                    f"register {name}" if message is None else message, one_label(label),
                                    allow_incompatible)
    except TeamstoreError as exc:
        fail(exc)
    data = {
        "name": name,
        "version": definition.version,
        "new": new,
        "labels": definition.labels,
        "fingerprints": definition.fingerprints,
    }
    emit(data, as_json=as_json, render=render_added)


def _register(
    name: str, factory: str | None, file: Path | None, manifest: Manifest, message: str, label: str | None,
    allow_incompatible: bool,
) -> tuple[TeamDefinition, bool]:
    """The definition registered, and whether it is a new version (identical to the latest, it is not)."""
    if (factory is None) == (file is None):
        raise DefinitionInvalid(
            "give exactly one of --factory or --file",
            field="source",
            hint="e.g. --factory teamstore.examples:support_triage",
        )
    from config_registry.errors import RegistryNotFound

    component = read_component(file) if file is not None else dump_factory_here(str(factory))
    try:
        registry = _registry()
    except RegistryNotFound:
        # The first registration makes the registry once its definition passes every check: one that fails
        # (at a mistyped path, say) leaves no registry behind.
        _check_first(name, component, manifest, message, label)
        registry = _registry(create=True)
    before = _versions(registry, name)
    version = registry.add(name, component, manifest, message, label=label, allow_incompatible=allow_incompatible)
    deaf_to_ctrl_c()  # committed: a Ctrl-C now would only cut short "registered" or turn its status into 130
    return registry.resolve(f"{name}@{version}"), version not in before


def _check_first(name: str, component: Any, manifest: Manifest, message: str, label: str | None) -> None:
    from config_registry.manifest import validate_name
    from config_registry.registration import check_commit, check_definition

    if label is not None:
        validate_name(label, what="label", field="label")
    check_commit(message, None)
    check_definition(name, component, manifest)


def _versions(registry: Registry, name: str) -> set[str]:
    """Every version ``name`` has (none for a new team)."""
    from config_registry.manifest import validate_name

    return {row["commit"] for row in registry.repo.log(f"teams/{validate_name(name)}/")}


@app.command("list")
def list_teams(as_json: bool = JsonOption) -> None:
    """Every registered team with its latest version and labels."""
    try:
        summaries = _registry().list()
    except TeamstoreError as exc:
        fail(exc)
    rows = [
        {
            "name": s.name,
            "kind": s.kind,
            "version": s.version,
            "labels": s.labels,
            "persisted": s.persisted,
            "owner": s.owner,
            "description": s.description,
            "time": s.time,
        }
        for s in summaries
    ]
    emit(rows, as_json=as_json, render=render_list)


def _participant_rows(definition: Any) -> list[dict[str, Any]]:
    from config_registry.participants import participant_names, participants

    rows = []
    component = definition.component
    for name, part in zip(participant_names(component), participants(component), strict=True):
        config = part.get("config") or {}
        client = config.get("model_client") or {}
        context = config.get("model_context") or {}
        rows.append(
            {
                "name": name,
                "type": str(part.get("provider", "")).rsplit(".", 1)[-1],
                "model": str((client.get("config") or {}).get("model", "-")),
                "context": f"{str(context.get('provider', '-')).rsplit('.', 1)[-1]}"
                f"({(context.get('config') or {}).get('max_messages', '')})",
                "fingerprint": definition.fingerprints.get(name),
            }
        )
    return rows


@app.command("show")
def show(
    ref: str = typer.Argument(..., help="NAME, NAME@VERSION or NAME@LABEL."), as_json: bool = JsonOption
) -> None:
    """One version of a team: manifest, allowances, participants, fingerprints and (with --json) its JSON."""
    try:
        definition = _registry().resolve(ref)
        data = {**definition.to_dict(), "participants": _participant_rows(definition)}
    except TeamstoreError as exc:
        fail(exc)
    emit(data, as_json=as_json, render=render_definition)


@app.command("history")
def history(name: str = typer.Argument(..., help=NAME_HELP), as_json: bool = JsonOption) -> None:
    """Every version of a team and every label move (who, when, why)."""
    try:
        entries = _registry().history(name)
    except TeamstoreError as exc:
        fail(exc)
    rows = [
        {
            "kind": e.kind,
            "commit": e.commit,
            "version": e.version,
            "author": e.author,
            "time": e.time,
            "message": e.message,
            "label": e.label,
            "previous": e.previous,
        }
        for e in entries
    ]
    emit(rows, as_json=as_json, render=render_history)


@app.command("diff")
def diff(
    name: str = typer.Argument(..., help=NAME_HELP),
    a: str = typer.Argument(..., help="From: a version (a sha, or 7+ hex digits of one) or a label."),
    b: str = typer.Argument(..., help="To: a version or a label."),
    as_json: bool = JsonOption,
) -> None:
    """What changed between two versions or labels, by meaning (participants, prompts, models, tools ...)."""
    try:
        change = _registry().diff(name, a, b)
    except TeamstoreError as exc:
        fail(exc)

    def render(data: dict[str, Any]) -> None:
        console.print(f"[bold]{name}[/] {short(data['a'])} -> {short(data['b'])}")
        for line in data["changes"] or ["no semantic change"]:
            console.print(f"  - {plain(line)}")

    emit(change.to_dict(), as_json=as_json, render=render)


@app.command("label")
def label(
    name: str = typer.Argument(..., help=NAME_HELP),
    version: str = typer.Argument(..., help="A version or another label."),
    label_name: str = typer.Argument(
        ..., metavar="LABEL", help="The label to point at it (made on first use)."
    ),
    reason: str = typer.Option(..., "--reason", help="Why (kept in the move log, shown by history)."),
    who: str | None = typer.Option(None, "--who", help="Who moves it (default: GIT_AUTHOR_NAME or login)."),
    as_json: bool = JsonOption,
) -> None:
    """Point LABEL at a version (rollback = move it back); every move is recorded."""
    try:
        registry = _registry()
        moved = registry.label(name, version, label_name, reason, who=who)
        deaf_to_ctrl_c()  # committed, as a registration is (`add`)
        target = registry.resolve(f"{name}@{label_name}").version
    except TeamstoreError as exc:
        fail(exc)

    def render(data: dict[str, Any]) -> None:
        if data["moved"]:
            console.print(f"{name}: {label_name} -> [cyan]{short(data['version'])}[/] ({plain(reason)})")
        else:  # no move, so the reason is recorded nowhere
            console.print(f"{name}: {label_name} already points at [cyan]{short(data['version'])}[/]; nothing "
                          "was moved or recorded")

    emit({"name": name, "label": label_name, "version": target, "moved": moved, "reason": reason},
         as_json=as_json, render=render)


@app.command("check")
def check(
    name: str = typer.Argument(..., help=NAME_HELP),
    from_ref: str = typer.Option(..., "--from", help="Version or label the state was saved under."),
    to_ref: str = typer.Option(..., "--to", help="Version or label it would be loaded under."),
    as_json: bool = JsonOption,
) -> None:
    """Whether resume state saved under --from loads under --to; exits 2 when it does not."""
    try:
        report = _registry().check(name, from_ref, to_ref)
    except TeamstoreError as exc:
        fail(exc)

    def render(data: dict[str, Any]) -> None:
        verdict = "[green]compatible[/]" if data["compatible"] else "[red]INCOMPATIBLE[/]"
        console.print(f"{name} {short(data['a'])} -> {short(data['b'])}: {verdict}")
        for line in data["reasons"]:
            console.print(f"  - {plain(line)}")
        for line in data["notes"]:
            console.print(f"  note: {plain(line)}")

    emit(report.to_dict(), as_json=as_json, render=render)
    if not report.compatible:
        raise typer.Exit(2)


@app.command("recover")
def recover(
    discard: bool = typer.Option(False, "--discard", help="Go back to the last commit: remove git's lock files "
                                 "and throw away every uncommitted file under teams/ and labels/."),
    commit: bool = typer.Option(False, "--commit", help="Commit each definition left, only if every one passes "
                                "every check a registration applies (needs --message)."),
    message: str | None = typer.Option(None, "--message", "-m", help="Why (the commit message of --commit)."),
    as_json: bool = JsonOption,
) -> None:
    """Show what an interrupted registration or label move left (exit 2 if anything), then discard or commit it."""
    from config_registry.gitrepo import GitRepo
    from config_registry.recovery import commit_left, discard_left, inspect
    from teamstore.settings import Settings

    if discard and commit:
        raise typer.BadParameter("give --discard or --commit, not both", param_hint="--discard/--commit")
    if (message is not None) != commit:
        raise typer.BadParameter("--commit needs --message (why), and --message goes with --commit",
                                 param_hint="--message")
    repo = GitRepo.open_or_init(Settings().resolved_registry_path, create=False)
    versions: dict[str, str | None] = {}
    if discard:
        left = discard_left(repo, lock_timeout=10)
    elif commit:
        assert message is not None
        left, versions = commit_left(repo, message, None, lock_timeout=10)
    else:
        left = inspect(repo, lock_timeout=10)
    data = {
        "registry": str(repo.path),
        "action": "discard" if discard else "commit" if commit else "inspect",
        "clean": left.clean,
        "locks": left.locks,
        "files": [{"status": status, "path": path} for status, path in left.files],
        "definitions": [{"team": d.team, "passes": d.problem is None, "problem": d.problem} for d in left.definitions],
        "not_committable": left.not_committable,
        "versions": versions,
    }
    emit(data, as_json=as_json, render=render_left)
    if not discard and not commit and not left.clean:
        raise typer.Exit(2)
