"""How the ``teamstore registry`` commands print for people (``--json`` prints their data as it is).

    from teamstore.cli._output import emit
    from teamstore.cli._registry_render import render_list

    emit(rows, as_json=False, render=render_list)

A definition's texts (descriptions, messages, names) are its author's: shown as text, never as markup.
"""

from __future__ import annotations

from typing import Any

from teamstore.terminal import console, plain, print_table

RECOVER = "teamstore registry recover"


def short(version: str | None) -> str:
    """A version as the tables show it: its first 12 characters (``-`` for none)."""
    return version[:12] if version else "-"


def render_added(data: dict[str, Any]) -> None:
    labels = f" (labels: {', '.join(data['labels'])})" if data["labels"] else ""
    if data["new"]:
        console.print(f"registered [bold]{data['name']}[/] version [cyan]{short(data['version'])}[/]{labels}")
    else:  # no commit was made, and the message given is recorded nowhere
        console.print(f"[bold]{data['name']}[/] unchanged: already version [cyan]{short(data['version'])}[/]"
                      f"{labels}; no new version was made")


def render_list(rows: list[dict[str, Any]]) -> None:
    print_table(
        ("name", "kind", "latest", "labels", "persisted", "owner", "description"),
        [
            [
                row["name"],
                row["kind"],
                short(row["version"]),
                "\n".join(f"{k}={short(v)}" for k, v in sorted(row["labels"].items())),
                plain(", ".join(row["persisted"])),
                plain(row["owner"]),
                plain(row["description"]),
            ]
            for row in rows
        ],
        fixed=(0, 1, 2, 3),  # a name or version (a label's too) cut short cannot be given to another command
        title="Registered teams",
        narrow="blocks",  # seven columns: a table line the terminal wraps is unreadable
    )


def render_definition(data: dict[str, Any]) -> None:
    manifest, allow = data["manifest"], data["allowances"]
    console.print(f"[bold]{data['name']}[/] {data['kind']} version [cyan]{data['version']}[/]")
    console.print(
        f"labels: {', '.join(data['labels']) or '-'}   registered by {plain(data['author'])} at {data['time']}"
    )
    # A definition's texts are its author's: shown as text (plain()), never as markup or escape sequences.
    console.print(f"message: {plain(data['message'])}")
    console.print(
        f"description: {plain(manifest['description'] or '-')}   owner: {plain(manifest['owner'] or '-')}"
    )
    console.print(
        f"persist: {plain(', '.join(manifest['persist']) or '-')}   "
        f"context_bound: {manifest['context_bound'] if manifest['context_bound'] is not None else '-'}   "
        f"state_ttl_days: {manifest['state_ttl_days'] or 'the runtime default'}   "
        f"checkpoints: {manifest['checkpoints']}"
    )
    console.print(
        f"allow_source_code_tools: {allow['allow_source_code_tools']}  "
        f"source-code tools: {plain(', '.join(allow['source_code_tools']) or 'none')}"
    )
    console.print(f"allowed providers (extra): {', '.join(allow['allowed_providers']) or 'none'}")
    _render_memory(data["name"], manifest.get("memory"))
    for path, reference in sorted(allow["secrets"].items()):
        console.print(f"secret: {plain(path)} <- {reference}")
    print_table(
        ("name", "type", "model", "context", "fingerprint"),
        [[*(plain(row[c]) for c in ("name", "type", "model", "context")), row["fingerprint"] or "-"]
         for row in data["participants"]],
        fixed=(0,),
        title="Participants",
    )


def _render_memory(name: str, memory: dict[str, Any] | None) -> None:
    if memory is None:
        console.print("memory: none")
        return
    facts = ", ".join(f"{n}: {t}" for n, t in memory["facts"].items()) or "none"
    console.print(plain(
        f"memory: {'on' if memory['enabled'] else 'off'}, scope {memory['scope'] or name}, given to "
        f"{', '.join(memory['participants'])}, written by {memory['writer']}'s model client, summary "
        f"{memory['summary_tokens']} tokens, facts {facts}, retention "
        f"{str(memory['retention_days']) + ' days' if memory['retention_days'] else 'the runtime default'}"))


def render_history(rows: list[dict[str, Any]]) -> None:
    print_table(
        ("time", "kind", "version", "label", "who", "message / reason"),
        [
            [
                str(row["time"])[:19],
                row["kind"],
                short(row["version"]),
                # The move on a line of its own: each version stays whole, to be copied.
                plain(f"{row['label']}\n{short(row['previous'])} -> {short(row['version'])}" if row["label"] else ""),
                plain(row["author"]),
                plain(row["message"]),
            ]
            for row in rows
        ],
        fixed=(0, 1, 2, 3),
        title="History (newest first)",
    )


def render_left(data: dict[str, Any]) -> None:
    if data["clean"]:  # --discard found nothing to throw away either
        console.print(plain(f"registry {data['registry']}: nothing to recover"))
        return
    done = {"discard": "discarded", "commit": "committed"}.get(data["action"])
    if data["locks"]:
        console.print(plain(f"git lock files a killed git command left in .git: {', '.join(data['locks'])}"))
    for row in data["files"]:
        console.print(plain(f"  {row['status']} {row['path']}"))
    if done is None:
        for row in data["definitions"]:
            verdict = row["problem"] or "passes every check a registration applies"
            console.print(plain(f"teams/{row['team']}/: {verdict}"))
        for line in data["not_committable"]:
            console.print(plain(line))
        definitions = data["definitions"]
        if definitions and all(row["passes"] for row in definitions) and not data["not_committable"]:
            console.print(f"next: `{RECOVER} --discard` goes back to the last commit; `{RECOVER} --commit -m WHY` "
                          "commits the definitions left")
        else:  # --commit would refuse: a label move, a deletion, a definition that fails, or only git's locks
            console.print(f"next: `{RECOVER} --discard` goes back to the last commit; then register or move the "
                          "label again (nothing left can be committed as it is)")
        return
    console.print(plain(f"{done}; the registry is back to a clean checkout"))
    for team, version in data["versions"].items():
        console.print(plain(f"{team}: version {short(version)}" if version else f"{team}: as committed already"))

