"""``teamstore demo``: the main job, end to end, on whatever settings are in force (offline by default).

    teamstore demo          # or: make demo

It registers the example support team, runs two users' sessions, ends that process and resumes both in
new processes (the earlier context comes back), makes a breaking definition change and shows a session
failing closed with the reason, rolls the change back by moving the label and restores the quarantined
state, lets a session expire and shows the new one knowing its user from the memory kept, prints what is
stored, kills a worker in the middle of a long checkpointed run and continues the run in a new process,
shows a run's transcript and the cost per session (the memory writer's apart), and erases one user with a
verified receipt.

It runs on stores of its own (an empty home, or one only the demo used): stores holding other teams or users
are refused before anything is written. It prints at the terminal's width (``COLUMNS`` when set), its tables
as blocks of ``name: value`` lines where they do not fit; written to a file or a pipe, at 120 columns.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import re
import signal
import subprocess
import sys
import time
from datetime import datetime
from typing import Any

from autogen_core import ComponentModel
from rich.console import Console
from rich.markup import escape
from rich.panel import Panel
from rich.text import Text
from sqlalchemy import inspect, select
from sqlalchemy.ext.asyncio import AsyncConnection

from config_registry import Manifest, Registry
from config_registry.errors import RegistryError, RegistryNotFound
from teamstore.app import App
from teamstore.audit.schema import subject_sessions, subjects
from teamstore.db.engine import redact_url
from teamstore.errors import ConfigurationError, SchemaNotReady
from teamstore.examples import example_manifest, support_escalation, support_triage, support_triage_v2_renamed
from teamstore.memory.facts import fact_text
from teamstore.memory.schema import memories
from teamstore.runtime.inspect import describe_checkpoint
from teamstore.settings import Settings
from teamstore.state.base import SessionKey
from teamstore.state.schema import quarantine
from teamstore.state.schema import sessions as sessions_table
from teamstore.terminal import plain, print_table

console = Console(emoji=False)
if not console.is_terminal and not os.environ.get("COLUMNS", "").isdigit():
    console.width = 120  # written to a file or a pipe: the width a log has always had, not rich's 80
TEAM = "support_triage"
LONG = "support_escalation"
DEMO_USERS = ("alice", "bob")
"""The users the demo makes (and bob, erases): a database holding any other is not the demo's (:func:`_refuse_others`)."""
DEMO_SESSIONS = {"alice": re.compile(r"ticket-[0-9]{6}-a|case-[0-9]{6}"), "bob": re.compile(r"ticket-[0-9]{6}-b")}
"""The sessions the demo opens for each (:func:`run_demo`): one of theirs by any other id is a real user's."""
MODEL_SECONDS = 0.6  # each model call of the long case takes this long, so a worker can be killed mid-run
LEASE_SECONDS = 3.0  # the killed worker's lease TTL


def teamstore(*args: str, ok: tuple[int, ...] = (0,), json_flag: str = "--json", env: dict[str, str] | None = None) -> Any:
    """Run a ``teamstore`` command in a NEW process (with ``env`` added to its environment) and return its
    JSON output."""
    flags = [json_flag] if json_flag else []
    proc = subprocess.run(
        [sys.executable, "-m", "teamstore", *args, *flags], capture_output=True, text=True, check=False,
        env={**os.environ, **(env or {})},
    )
    if proc.returncode not in ok:
        command = " ".join(itertools.takewhile(lambda a: not a.startswith("-"), args[:2]))
        console.print(f"[red]teamstore {escape(command)} failed[/]\n{escape(proc.stderr)}", highlight=False)
        raise SystemExit(proc.returncode)
    return json.loads(proc.stdout)


def _step(title: str) -> None:
    if len(title) + 4 <= console.width:
        console.rule(f"[bold cyan]{title}")
    else:  # a rule cuts a title longer than itself short with '…'
        console.rule()
        console.print(title, style="bold cyan")


def _show_run(user: str, text: str, data: dict[str, Any]) -> None:
    resume = data["resume"]
    detail = f" - {resume['detail']}" if resume["detail"] else ""
    colour = "green" if resume["outcome"] == "resumed" else "yellow"
    console.print(f"[bold]{user}[/] says: {text}")
    console.print(f"  resume: [{colour}]{resume['outcome']}[/]{detail}")
    if resume["restored"]:
        console.print(f"  restored: {', '.join(resume['restored'])}")
    memory = data.get("memory") or {}
    if memory.get("given_to"):
        console.print(f"  memory given to {', '.join(memory['given_to'])}: "
                      f"{'summary, ' if memory['summary'] else ''}facts {', '.join(memory['facts']) or 'none'}")
    for message in data["messages"][1:]:
        if message["type"] == "MemoryQueryEvent":
            continue  # the memory given, as AutoGen reports it: shown above in one line
        console.print(f"  [bold]{message['source']}[/]: {escape(message['content'])}")
    usage = data["usage"]
    console.print(f"  [dim]run {data['run_id'][:12]}, {usage['input_tokens']}+{usage['output_tokens']} tokens, "
                  f"stop: {data['stop_reason']}[/]")


def _definitions() -> dict[str, list[tuple[str, ComponentModel, Manifest]]]:
    """What the demo registers, per team, in order: each version's message, component and manifest."""
    renamed = example_manifest("support_triage_v2_renamed").model_copy(update={"name": TEAM})
    return {TEAM: [("support triage: triage, researcher (persisted), critic", support_triage().dump_component(),
                    example_manifest(TEAM)),
                   ("rename researcher to investigator", support_triage_v2_renamed().dump_component(), renamed)],
            LONG: [("a long escalation, checkpointed after every turn",
                    support_escalation(MODEL_SECONDS).dump_component(), example_manifest(LONG))]}


def _register(registry: Registry) -> tuple[str, str]:
    (first, renamed), (long,) = _definitions().values()
    # A demo killed between shipping the rename and rolling it back left production on v2: its sessions are the
    # demo's own (run_demo refused any other), so moving the label back over them is the rollback it owed.
    v1 = registry.add(TEAM, first[1], first[2], first[0], label="production", allow_incompatible=True)
    v2 = registry.add(TEAM, renamed[1], renamed[2], renamed[0])
    registry.label(TEAM, v1, "production", reason="demo: production runs v1")
    registry.add(LONG, long[1], long[2], long[0], label="production")
    return v1, v2


def _run(user: str, session: str, text: str, team: str = TEAM, env: dict[str, str] | None = None) -> dict[str, Any]:
    data: dict[str, Any] = teamstore("run", "--team", team, "--user", user, "--session", session, text, env=env)
    _show_run(user, text, data)
    return data


def _said_by(data: dict[str, Any], agent: str) -> str:
    """What ``agent`` said in a run (its reply, not the memory AutoGen reports it was given)."""
    return next((m["content"] for m in data["messages"] if m["source"] == agent and m["type"] == "TextMessage"), "")


def _quarantined(user: str, session: str) -> list[dict[str, Any]]:
    # This run's session only: a home the demo ran in before keeps the user's earlier sessions' copies.
    rows: list[dict[str, Any]] = teamstore("sessions", "quarantine", "--user", user)
    return [q for q in rows if q["session_id"] == session]


def _stored(sessions: dict[str, str]) -> None:
    rows = []
    for user, session in sessions.items():
        d = teamstore("sessions", "show", "--user", user, "--session", session)
        agents = d["agents"] if isinstance(d["agents"], dict) else {}
        summary = ", ".join(f"{n}: {a['messages']}" for n, a in agents.items())
        rows.append([plain(user), plain(session), d["team_version"][:12], str(d["row_version"]),
                     str(d["state_bytes"]), plain(summary), str(d["expires_at"])[:19]])
    # The ids whole, to be copied into the next command: a block per session where the table does not fit.
    print_table(("user", "session", "team version", "row v", "bytes", "persisted agent: messages", "expires"),
                rows, fixed=(0, 1, 2, 3, 4, 6), right=(3, 4), out=console, narrow="blocks")


def _where(settings: Settings) -> None:
    """The stores the demo writes to, in a frame if their paths fit in one."""
    keys = f"KMS {settings.kms_key_id}" if settings.kms_key_id else f"key file {settings.resolved_key_file}"
    exported = "OTLP (OTEL_* variables)" if settings.otlp_configured or settings.otlp_metrics_configured else "none"
    where = (f"registry    {settings.resolved_registry_path}\ndatabase    {redact_url(settings.resolved_database_url)}\n"
             f"transcripts {settings.resolved_transcripts_url}\nkeys        {keys}\ntelemetry   {exported}")
    if max(len(line) for line in where.splitlines()) + 4 <= console.width:
        console.print(Panel.fit(Text(where), title="teamstore demo"))  # Text: a '[' in TEAMSTORE_HOME is not markup
    else:  # a path folded inside a frame's borders could not be copied
        console.print("teamstore demo", style="bold")
        console.print(Text(where))


def _refuse_others(settings: Settings) -> None:
    """Refuse stores that hold what the demo did not make: it moves its teams' ``production`` label (to a
    breaking version and back), and erases bob, so pointed at a service's real stores, or at a home where
    someone registered ``support_triage`` or ran sessions for alice or bob themselves, it would break their
    sessions and erase a real user of that name. Read-only: it creates no database and no registry.

    Raises:
        ConfigurationError: The registry holds other teams or versions the demo did not register, or the
            database other users or sessions of alice and bob the demo did not open.
    """
    held = [f"{count} {what}" for count, what in (
        *_others_versions(settings), *asyncio.run(_others_users(settings))) if count]
    if held:
        raise ConfigurationError(
            f"teamstore demo runs on stores of its own, and these hold {' and '.join(held)}: it relabels its "
            "example teams and erases its user bob, which would break other sessions and erase a real user",
            hint="run it on a throwaway home (TEAMSTORE_HOME=$(mktemp -d) teamstore demo), or point "
                 "TEAMSTORE_DATABASE_URL, TEAMSTORE_TRANSCRIPTS_URL and TEAMSTORE_REGISTRY_PATH at stores for the demo alone",
        )


def _others_versions(settings: Settings) -> list[tuple[int, str]]:
    """How many teams the registry holds besides the demo's, and versions of the demo's that are not what it
    registers: told by their files (a commit hook may have rewritten the message, a recovery committed it), read
    by one git process; a file that cannot be read is not the demo's."""
    try:
        registry = Registry(settings.resolved_registry_path)
        names = set(registry.names())
        ours = {name: [_as_json(component, manifest) for _message, component, manifest in made]
                for name, made in _definitions().items() if name in names}
        wanted = [(entry.commit, name) for name in sorted(ours) for entry in registry.history(name)
                  if entry.kind == "version"]
        texts = registry.repo.show_many([(version, f"teams/{name}/{file}") for version, name in wanted
                                         for file in ("component.json", "manifest.json")])
    except RegistryNotFound:
        return []  # no registry yet
    except RegistryError:  # its history unreadable: not a registry the demo made
        return [(1, "registry it cannot read")]
    stored = iter(texts)
    versions = sum(_stored_json(next(stored), next(stored)) not in ours[name] for _version, name in wanted)
    return [(len(names - _definitions().keys()), "other team(s) in its registry"),
            (versions, f"version(s) of {' or '.join(_definitions())} it did not register")]


def _as_json(component: ComponentModel, manifest: Manifest) -> str:
    return json.dumps([component.model_dump(mode="json"), manifest.model_dump(mode="json")], sort_keys=True)


def _stored_json(component: str | None, manifest: str | None) -> str | None:
    """A version's two files as :func:`_as_json` gives the demo's; ``None`` for files missing or not JSON."""
    try:
        return json.dumps([json.loads(component or ""), json.loads(manifest or "")], sort_keys=True)
    except ValueError:
        return None


async def _others_users(settings: Settings) -> list[tuple[int, str]]:
    """How many users the database holds besides the demo's own (alice, bob), sessions of theirs the demo did
    not open, and those of them with memory no session of the demo's accounts for; none for no database yet."""
    app = App(settings, must_exist=True)
    try:
        async with app.engine.connect() as conn:
            present = set(await conn.run_sync(lambda sync: inspect(sync).get_table_names()))
            users: set[str] = set()
            for table in (subjects, sessions_table, memories):
                if table.name in present:
                    query = select(table.c.user_id).where(table.c.user_id.not_in(DEMO_USERS)).distinct().limit(100)
                    users.update((await conn.execute(query)).scalars())
            theirs = await _demo_users_sessions(conn, present)
            sessions = sum(1 for user, session in theirs if not DEMO_SESSIONS[user].fullmatch(session))
            # Memory outlives every record of the sessions it came from: kept of a user none of the demo's sessions
            # is recorded for, it is someone else's (a subject alone is not: a run makes it first, an erasure
            # removes it last).
            kept: set[str] = set()
            if memories.name in present:
                query = select(memories.c.user_id).where(memories.c.user_id.in_(DEMO_USERS)).distinct()
                kept.update(str(u) for u in (await conn.execute(query)).scalars())
            unaccounted = len(kept - {user for user, _session in theirs})
            return [(len(users), "other user(s) in its database"),
                    (sessions, f"session(s) of {' or '.join(DEMO_USERS)} it did not open"),
                    (unaccounted, f"user(s) {' or '.join(DEMO_USERS)} with memory no session of its own left")]
    except SchemaNotReady:
        return []  # no database file yet: nothing to refuse
    finally:
        await app.aclose()


async def _demo_users_sessions(conn: AsyncConnection, present: set[str]) -> set[tuple[str, str]]:
    """Every (user, session) recorded for alice and bob: their states, quarantined rows, and the ledger's
    sessions, which outlive the state's rows."""
    theirs: set[tuple[str, str]] = set()
    for table in (sessions_table, quarantine):
        if table.name in present:
            query = select(table.c.user_id, table.c.session_id).where(table.c.user_id.in_(DEMO_USERS))
            theirs.update((str(u), str(s)) for u, s in await conn.execute(query.distinct()))
    if subject_sessions.name in present:
        query = (select(subjects.c.user_id, subject_sessions.c.session_id)
                 .join(subject_sessions, subject_sessions.c.subject_key == subjects.c.subject_key)
                 .where(subjects.c.user_id.in_(DEMO_USERS)))
        theirs.update((str(u), str(s)) for u, s in await conn.execute(query.distinct()))
    return theirs


def run_demo() -> None:
    """Run the whole demo; every step but registration happens in a fresh process."""
    settings = Settings()
    _where(settings)
    _refuse_others(settings)
    stamp = time.strftime("%H%M%S")
    sessions = dict(zip(DEMO_USERS, (f"ticket-{stamp}-a", f"ticket-{stamp}-b"), strict=True))

    migrated = teamstore("db", "upgrade")
    console.print(f"database schema: {migrated['from'] or 'empty'} -> {migrated['to']} (teamstore db upgrade)")

    _step("1. Register the support team (a git commit) and label it production")
    v1, v2 = _register(App(settings).registry())
    console.print(f"v1 {v1[:12]} (production), v2 {v2[:12]} (researcher renamed; not labelled yet)")

    _step("2. Two users open sessions (process per request)")
    _run("alice", sessions["alice"], "My router ZX-81 drops the connection every evening (ticket 55102).")
    _run("bob", sessions["bob"], "I was billed twice for November.")

    _step("3. New processes: both sessions resume where they stopped")
    data = _run("alice", sessions["alice"], "The technician came and it is still not working.")
    researcher = _said_by(data, "researcher")
    if "ZX-81" in researcher:
        console.print("  [green]the researcher still knows alice's first message: context came back[/]")
    _run("bob", sessions["bob"], "Any news on the refund?")

    _step("4. A breaking definition change fails closed")
    report = teamstore("registry", "check", TEAM, "--from", v1, "--to", v2, ok=(0, 2))
    console.print(f"registry check v1 -> v2: compatible={report.get('compatible')}")
    for reason in report.get("reasons", []):
        console.print(f"  - {reason}")
    teamstore("registry", "label", TEAM, v2, "production", "--reason", "demo: ship the rename")
    _run("alice", sessions["alice"], "Hello again?")
    console.print("  [yellow]alice's refused state was set aside in quarantine, not overwritten[/]")
    teamstore("registry", "label", TEAM, v1, "production", "--reason", "demo: roll back the rename")
    console.print(f"  rolled back: production -> {v1[:12]} (moving a label is the rollback)")
    (kept,) = _quarantined("alice", sessions["alice"])
    restored = teamstore("sessions", "restore", str(kept["id"]), "--replace")
    console.print(f"  restored alice's quarantined state {kept['id']} (teamstore sessions restore --replace); the "
                  f"fresh state saved since is quarantined as {restored['replaced_by']}")
    data = _run("alice", sessions["alice"], "Any update on my router?")
    researcher = _said_by(data, "researcher")
    if "ZX-81" in researcher:
        console.print("  [green]after the restore the researcher knows alice's first message again[/]")
    _run("bob", sessions["bob"], "Thanks, that is all.")

    _step("5. Memory outlives the session: alice's expires, the next one knows her")
    _memory("alice", sessions["alice"])

    _step("6. What is stored")
    _stored(sessions)
    for q in _quarantined("alice", sessions["alice"]):
        console.print(f"quarantined: alice/{q['session_id']} reason={q['reason']}: {escape(q['detail'])}")

    _step("7. A worker is killed mid-run; a new process continues the run")
    _interrupted(settings, "alice", f"case-{stamp}")

    _step("8. The audit trail: alice's first run as stored, one compressed object")
    _transcript("alice", sessions["alice"])

    _step("9. Token cost per session, from the usage ledger")
    _cost(sessions)

    _step("10. Compliance erases bob from every store")
    _erase("bob", sessions["bob"])


EXPIRES_AFTER_S = 2.0


def _memory(user: str, session: str) -> None:
    """The session is saved with a TTL of two seconds (the demo's clock), left to expire, and opened again."""
    ttl_days = str(EXPIRES_AFTER_S / 86_400)
    _run(user, session, "Thanks, I will wait for the technician.", env={"TEAMSTORE_STATE_TTL_DAYS": ttl_days})
    console.print(f"  [dim]saved with a {EXPIRES_AFTER_S:g}s TTL (TEAMSTORE_STATE_TTL_DAYS={float(ttl_days):.2e}, "
                  "in days); waiting...[/]")
    time.sleep(EXPIRES_AFTER_S + 0.5)
    data = _run(user, session, "Hello, any news?")
    triage = _said_by(data, "triage")
    if data["resume"]["outcome"] == "expired" and "ticket_id=55102" in triage and "router_model=ZX-81" in triage:
        console.print(f"  [green]the state expired, and triage knows {user}'s ticket id and router model from "
                      "the memory kept[/]")
    shown = teamstore("memory", "show", "--user", user)
    for memory in shown["memories"]:
        console.print(f"teamstore memory show --user {user}: scope {memory['scope']}, version {memory['version']}, "
                      f"expires {memory['expires_at'][:10]}")
        console.print(f"  summary: {escape(memory['summary'])}")
        rows = [[plain(fact["name"]), plain(fact["type"]), plain(fact_text(fact["value"])),
                 fact["source_run_id"][:12], fact["confirmed_at"][:19]] for fact in memory["facts"]]
        print_table(("fact", "type", "value", "from run", "last confirmed"), rows, fixed=(1, 3, 4), out=console,
                    narrow="blocks")


def _interrupted(settings: Settings, user: str, session: str) -> None:
    """Start a long run in a worker process, SIGKILL the worker once turn 2 is checkpointed, continue the run."""
    text = "Escalation: my line has dropped every evening for three weeks."
    # A short lease, so the next process takes the dead worker's session over within seconds (with Postgres's
    # advisory locks, a dead worker's lease goes with its connection at once).
    env = {**os.environ, "TEAMSTORE_LEASE_TTL_SECONDS": str(LEASE_SECONDS)}
    worker = subprocess.Popen([sys.executable, "-m", "teamstore", "run", "--team", LONG, "--user", user,
                               "--session", session, text, "--json"], stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL, env=env)
    turn = asyncio.run(_checkpointed(settings, SessionKey(user, session), 2))
    os.kill(worker.pid, signal.SIGKILL)  # mid-way through turn 3's model call: a node drained, an OOM kill
    killed_at = datetime.now().astimezone()
    worker.wait()
    console.print(f"worker pid {worker.pid} ran {LONG} (six turns, {MODEL_SECONDS}s per model call) and was killed "
                  f"with SIGKILL after turn {turn} was checkpointed")
    stored = teamstore("sessions", "show", "--user", user, "--session", session)["checkpoint"]
    console.print(f"  stored: the run's checkpoint after turn {stored['last_turn']} ({stored['bytes']:,} bytes)")
    data = teamstore("run", "--team", LONG, "--user", user, "--session", session, "--continue")
    console.print(f"  the dead worker's lease ran out ({LEASE_SECONDS:g}s TTL here) and a new process took the session over")
    run = data["continued"]
    console.print(f"  a new process: resume [yellow]interrupted[/] (run {run['run_id'][:12]} stopped after turn "
                  f"{run['last_turn']}): teamstore run --continue")
    for n, message in enumerate(data["messages"]):
        before = datetime.fromisoformat(message["created_at"]) < killed_at
        where = "[dim]from the killed worker[/]" if before else "[green]this process[/]"
        label = "task" if n == 0 else f"turn {n}"
        _print_cut(f"  {label} {message['source']} ({where}): ", message["content"], 70)
    total = teamstore("cost", "--user", user, "--session", session, "--format", "json", json_flag="")["total"]
    console.print(f"  ledger: {total['calls']} model calls for six turns (turns 1-2 were not run again; turn 3, in "
                  f"flight when the worker died, was), {total['runs_interrupted']} interrupted run")


async def _checkpointed(settings: Settings, key: SessionKey, turn: int) -> int:
    """Wait until the session's run has checkpointed ``turn``; the turn it has reached."""
    app = App(settings)
    try:
        store = app.state_store
        for _ in range(1200):
            row = await store.get(key)
            found = describe_checkpoint(row) if row is not None else None
            if isinstance(found, dict) and found["last_turn"] >= turn:
                return int(found["last_turn"])
            await asyncio.sleep(0.05)
    finally:
        await app.aclose()
    raise SystemExit(f"the long run never reached turn {turn}")


def _transcript(user: str, session: str) -> None:
    shown = teamstore("transcripts", "show", "--user", user, "--session", session)
    first = shown["runs"][0]
    record = first.get("run", {})
    console.print(f"{shown['total']} runs stored; run {str(record.get('run_id', ''))[:12]} of team "
                  f"{record.get('team')}@{str(record.get('team_version', ''))[:12]}:")
    for item in first["items"]:
        message = item.get("message") or {}
        usage = message.get("models_usage") or {}
        tokens = f" [dim]({usage['prompt_tokens']}+{usage['completion_tokens']} tokens)[/]" if usage else ""
        _print_cut(f"  {item['source']}{tokens}: ", str(message.get("content", "")), 90)
    console.print(f"  stop: {record.get('stop_reason')}; ended by a limit: {record.get('ended_by_limit')}")


def _print_cut(head: str, text: str, most: int) -> None:
    """Print ``head`` (markup), then ``text`` in at most ``most`` characters and in what is left of the line
    (never under 10): a message a line. Cut, it ends in '…'."""
    room = max(min(most, console.width - console.render_str(head).cell_len), 10)
    console.print(head + escape(text if len(text) <= room else text[:room - 1] + "…"))


def _cost(sessions: dict[str, str]) -> None:
    # One report names every session by its user's and its own id (read back through the subject mapping).
    report = teamstore("cost", "--by", "session", "--team", TEAM, "--format", "json", json_flag="")
    figures = ("runs_completed", "runs_limited", "calls", "input_tokens", "output_tokens")
    shown = [row for row in report["rows"] if sessions.get(row["user"]) == row["session"]]  # not an earlier demo's
    rows = [[plain(row["user"]), plain(row["session"]), *(str(row[k]) for k in figures), _amount(row)] for row in shown]
    print_table(("user", "session", "runs completed", "ended by limit", "model calls", "tokens in", "tokens out",
                 f"cost ({report['currency']})"), rows, fixed=range(8), right=range(2, 8), out=console,
                narrow="blocks")
    console.print(f"[dim]prices: version {report['price_version']}; exact decimals; speaker-selection calls "
                  "included[/]")
    writer, total = _writer_share(sessions)
    if writer["calls"]:
        console.print(f"  of which the memory writer (teamstore cost --by purpose): {writer['calls']} calls, "
                      f"{writer['input_tokens']}+{writer['output_tokens']} tokens of "
                      f"{total['input_tokens']}+{total['output_tokens']}")


def _writer_share(sessions: dict[str, str]) -> tuple[dict[str, int], dict[str, int]]:
    """The memory writer's calls and tokens in the sessions shown, and all of theirs: the team's whole ledger
    would count an earlier demo's sessions in the same home, which the table leaves out."""
    figures = ("calls", "input_tokens", "output_tokens")
    writer, total = dict.fromkeys(figures, 0), dict.fromkeys(figures, 0)
    for user, session in sessions.items():
        report = teamstore("cost", "--by", "purpose", "--team", TEAM, "--user", user, "--session", session,
                           "--format", "json", json_flag="", ok=(0, 3))
        for row in report["rows"]:
            for name in figures:
                total[name] += row[name]
                writer[name] += row[name] if row["purpose"] == "memory_writer" else 0
    return writer, total


def _amount(row: dict[str, Any]) -> str:
    """The row's exact cost; ``unknown`` for tokens of a model the price table does not price."""
    if row["cost"] is None:
        return "unknown"
    return str(row["cost"]) + (" + unknown" if row["unpriced_tokens"] else "")


def _erase(user: str, session: str) -> None:
    from teamstore.erasure.receipt import Remains

    receipt = teamstore("erase", "--user", user, "--reason", "demo: user asked to be forgotten", "--yes",
                        "--requested-by", "demo: the user", ok=(0, 2))
    rows = [[store, step["status"], *(str(step["counts"][k]) for k in ("rows", "objects", "versions", "bytes"))]
            for store, step in receipt["stores"].items()]
    console.print(f"receipt {receipt['request_id']}: {receipt['status']}, due {receipt['due_at'][:10]}")
    print_table(("store", "status", "rows", "objects", "versions", "bytes"), rows, fixed=range(6), right=range(2, 6),
                out=console, narrow="blocks")
    for item in map(Remains.model_validate, receipt["remains_elsewhere"]):
        console.print(f"  remains by design: {item.what} {item.dates()} - {item.detail}")
    left = teamstore("sessions", "list", "--user", user)
    console.print(f"  sessions left for {user}: {len(left)}")
    if receipt["status"] != "completed":  # shown above with its reasons; the main job did not do its job
        console.print(f"[red]the erasure ended {escape(receipt['status'])}[/]: "
                      f"see `teamstore erase status {escape(receipt['request_id'])}`")
        raise SystemExit(2)
