"""``teamstore transcripts``: a session's run transcripts read back, and the outbox delivered.

    teamstore transcripts show --user alice --session s1            # the newest runs, oldest first
    teamstore transcripts show --user alice --session s1 --run 3f2a --json
    teamstore transcripts flush       # send what waited in the outbox while the store was unreachable

The transcripts live in ``TEAMSTORE_TRANSCRIPTS_URL`` (S3 or a local folder), one object per run.
"""

from __future__ import annotations

from dataclasses import asdict
from typing import TYPE_CHECKING, Any

import typer

from teamstore.cli._output import JsonOption, dumps, emit, fail
from teamstore.cli._runner import with_app
from teamstore.errors import (
    AuditError,
    ConfigurationError,
    StorageError,
    TranscriptNotFound,
    TranscriptUnavailable,
)
from teamstore.ids import check_ids
from teamstore.limits import DEFAULT_RUNS, MAX_RUNS
from teamstore.terminal import console, plain

# The database, the stores and the keys are imported by the commands that use them, not with the command
# line: `teamstore --help` starts without them.
if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncEngine

    from teamstore.app import App
    from teamstore.audit.transcripts import TranscriptStore
    from teamstore.audit.transcripts.pages import RunPage
    from teamstore.keys.service import KeyService

transcripts_app = typer.Typer(
    help="Run transcripts (one object per run, S3 or a local folder).", no_args_is_help=True
)


async def load_transcripts(
    engine: AsyncEngine, store: TranscriptStore, user: str, session: str, run: str | None, last: int = DEFAULT_RUNS,
    keys: KeyService | None = None,
) -> tuple[RunPage, int]:
    """Read one session's ``last`` newest runs (or one run, by its id or a unique prefix of it), oldest
    first, and how many runs it has in all; only the runs shown are held in memory. Each sealed object is
    opened under the user's data key (``keys``; by default the environment's).

    Returns:
        The page, and how many of the session's transcripts wait in the outbox (not in the store yet, so
        neither shown nor counted in the page's total).

    Raises:
        TranscriptNotFound: The user, session or run has no transcript in the store (the message says how many
            wait in the outbox), or a prefix names several runs.
        AuditError: A run's object is not readable (the message names the run).
        StorageError, TranscriptUnavailable: The store failed (the message says how many wait in the outbox).
        KeyDestroyed, KeyUnavailable, PayloadUnreadable: A sealed object does not open.
    """
    from teamstore.audit import outbox
    from teamstore.audit.subjects import lookup_subject, session_key
    from teamstore.audit.transcripts import session_prefix
    from teamstore.audit.transcripts.capabilities import missing_here
    from teamstore.audit.transcripts.pages import newest_runs, one_run
    from teamstore.audit.transcripts.record import RunKeys, sealed_context
    from teamstore.keys.service import KeyService

    if run == "":
        raise TranscriptNotFound("--run is empty", hint="give a run id, or omit --run for the newest runs")
    found = await lookup_subject(engine, user)
    if found is None:
        raise TranscriptNotFound("no audit data for that user", hint="check the user id (matched exactly)")
    subject = found.key
    service = keys or KeyService.from_settings(engine)
    run_keys = RunKeys(subject, session_key(found.session_secret, session))

    async def opener(object_key: str, body: bytes) -> bytes:
        return await service.open(user, body, sealed_context(object_key))

    queued = await outbox.queued_under(engine, subject, session_prefix(run_keys))
    try:
        page = await (one_run(store, run_keys, run, opener=opener) if run is not None
                      else newest_runs(store, run_keys, last, opener=opener))
    except TranscriptNotFound as exc:
        if not queued and (elsewhere := await _written_elsewhere(engine, subject, store)) is not None:
            raise elsewhere from exc
        if not queued and await missing_here(store):  # not "check the session id": the folder is not here at all
            raise _not_here(store.url) from exc
        if not queued:
            raise
        raise TranscriptNotFound(f"{exc.message} ({_queued_note(queued)})", hint=_FLUSH_HINT) from exc
    except (TranscriptUnavailable, StorageError) as exc:  # the store's own fix first; what waits goes once it answers
        if not queued:
            raise
        raise type(exc)(f"{exc.message} ({_queued_note(queued)})", hint=exc.hint) from exc
    return page, queued


async def _written_elsewhere(engine: AsyncEngine, subject: str, store: TranscriptStore) -> TranscriptNotFound | None:
    """The error of a user whose transcripts the records say went to other stores, never to this one (a service
    run with another TEAMSTORE_TRANSCRIPTS_URL): it names each, with the settings that read it, as erase's dry
    run does. ``None`` when this store is one of them, or holds any of the user's transcripts all the same (ones
    written before stores were recorded): the session's may be here, and its own error stands."""
    from teamstore.audit.placement import endpoint_setting
    from teamstore.audit.subjects import recorded_endpoints, recorded_stores
    from teamstore.audit.transcripts import store_endpoint
    from teamstore.audit.transcripts.base import subject_prefix
    from teamstore.audit.transcripts.capabilities import holds_any

    recorded = await recorded_stores(engine, subject)
    others = sorted(url for url, erased in recorded.items() if not erased and url != store.url)
    if not others or recorded.get(store.url) is False or await holds_any(store, subject_prefix(subject)):
        return None
    endpoints = await recorded_endpoints(engine, subject)

    def settings(url: str) -> str:
        endpoint = endpoints.get(url)
        at = f"{endpoint_setting(endpoint)} " if endpoint not in (None, store_endpoint(store)) else ""
        return f"{at}TEAMSTORE_TRANSCRIPTS_URL={url}"

    return TranscriptNotFound(
        f"no transcript of this user in {store.url}: the records say their transcripts were written to "
        f"{' and '.join(others)}",
        hint=f"run `teamstore transcripts show` with {settings(others[0])}" if len(others) == 1 else
             "run `teamstore transcripts show` with the settings of the store the session's went to, one of: "
             + "; ".join(settings(url) for url in others),
    )


def _not_here(url: str) -> TranscriptUnavailable:
    """The error of a session read from a folder store this machine does not have."""
    return TranscriptUnavailable(
        f"the transcripts are kept in {url}, a folder this machine does not have (another machine's disk, or not "
        "mounted here)",
        hint="run `teamstore transcripts show` on the machine whose folder that is (or where it is mounted at the "
        "same path)",
    )


_FLUSH_HINT = "`teamstore transcripts flush` delivers them (or says why the store still refuses them)"


def _queued_note(queued: int) -> str:
    return f"{queued} of the session's transcripts wait in the outbox, not yet in the store"


def _content_text(message: dict[str, Any]) -> str:
    content = message.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return " | ".join(_part_text(p) for p in content)
    return dumps(content) if content is not None else ""


def _part_text(part: Any) -> str:
    if isinstance(part, dict) and "name" in part and "arguments" in part:
        return f"call {part['name']}({part['arguments']})"
    if isinstance(part, dict) and "content" in part:
        return f"result {part.get('name', '')}: {part['content']}"
    return part if isinstance(part, str) else dumps(part)


def _render_transcripts(data: dict[str, Any], one: bool) -> None:
    for entry in data["runs"]:
        run = entry["run"]
        totals = run["totals"]
        console.rule()  # the heading on its own lines: in a rule's title a narrow terminal cut it short
        console.print(plain(f"run {run['run_id']}  {run['team']}@{run['team_version']}  {run['started_at']}"),
                      style="bold", highlight=False)
        for item in entry["items"]:
            usage = item["message"].get("models_usage") or {}
            tokens = (
                f" [dim]({usage.get('prompt_tokens', 0)}+{usage.get('completion_tokens', 0)} tokens)[/]"
                if usage
                else ""
            )
            # Users' words and models' replies: shown, never acted on by the terminal (plain()).
            console.print(f"[bold]{plain(item['source'])}[/] [dim]{plain(item['type'])}[/]{tokens}")
            console.print(plain(_content_text(item["message"])), highlight=False)
        limit = " (ended by a limit)" if run["ended_by_limit"] else ""
        ended = f"raised {run['error']}" if run.get("error") else f"stop: {run['stop_reason']}{limit}"
        console.print(
            f"[dim]{plain(ended)}; {totals['model_calls']} model calls, "
            f"{totals['input_tokens']} in / {totals['output_tokens']} out tokens[/]"
        )
    shown, total = len(data["runs"]), data["total"]
    console.rule()
    if one:
        console.print(f"one of the session's {total} run(s)")
    else:
        more = "; --last N shows more, --run RUN one" if shown < total else ""
        console.print(f"the newest {shown} of the session's {total} run(s), oldest first{more}")
    if data.get("queued"):
        console.print(f"and {_queued_note(data['queued'])}: {_FLUSH_HINT}")


@transcripts_app.command("show")
def transcripts_show(
    user: str = typer.Option(..., "--user", help="The user id (exact)."),
    session: str = typer.Option(..., "--session", help="The session id (exact)."),
    last: int | None = typer.Option(
        None, "--last", min=1, max=MAX_RUNS, help=f"How many of the newest runs to show (default {DEFAULT_RUNS})."
    ),
    run: str | None = typer.Option(None, "--run", help="One run id or a unique prefix of it, instead of the newest."),
    as_json: bool = JsonOption,
) -> None:
    """Print a session's newest transcripts, or one run's, readable or as JSON; and how many runs it has."""
    check_ids(user_id=user, session_id=session)
    if run is not None and last is not None:
        raise ConfigurationError("--last and --run each choose the runs to show", hint="give one of them")
    page, queued = with_app(lambda app: load_transcripts(app.engine, app.transcript_store, user, session, run,
                                                         last or DEFAULT_RUNS, app.keys), must_exist=True)
    emit({"runs": page.runs, "total": page.total, "queued": queued}, as_json=as_json,
         render=lambda data: _render_transcripts(data, one=run is not None))


@transcripts_app.command("mark")
def transcripts_mark(
    reached_at: str = typer.Option(
        ..., "--as-reached-at",
        help="The endpoint the records name for the bucket (an erasure's refusal says it): the S3 endpoint URL, or "
        "'aws' for AWS's own S3.",
    ),
    as_json: bool = JsonOption,
) -> None:
    """Say that the S3 bucket these settings reach is the one this database's workers reached at another endpoint
    (a server no longer answering there), so an erasure or export reaching it here goes on. Only for a bucket you
    know to be that one: another server's bucket of the same name marked so would be taken for it."""
    from teamstore.audit.subjects import endpoints_of
    from teamstore.audit.transcripts import Capability, capability
    from teamstore.db.identity import database_id

    async def go(app: App) -> dict[str, Any]:
        store = app.transcript_store
        marks = capability(store, Capability.MARKS)
        if marks is None:
            raise ConfigurationError(
                f"{store.url} is a folder: it is marked as this database's by its marker, not for an endpoint",
                hint="run this with TEAMSTORE_TRANSCRIPTS_URL set to the s3:// store an erasure refused",
            )
        endpoint = _recorded_as(reached_at.strip(), await endpoints_of(app.engine, store.url), store.url)
        await marks.mark(await database_id(app.engine), endpoint)
        return {"store": store.url, "marked_for": endpoint}

    data = with_app(go, must_exist=True)
    emit(data, as_json=as_json, render=lambda d: console.print(
        f"marked {plain(d['store'])} as this database's workers' bucket at {plain(d['marked_for'])}"))


def _recorded_as(given: str, recorded: set[str], store: str) -> str:
    """The endpoint ``given`` names, as the records of ``store`` hold it (as written, or as a client reaching it
    now would be recorded): one they hold, or a typed refusal naming those they do."""
    from teamstore.audit.transcripts.s3_client import recorded_endpoint

    if given in recorded:
        return given
    try:
        normalised = "aws" if given.lower() == "aws" else recorded_endpoint(given)
    except ValueError:  # a host in brackets that is no address
        normalised = ""
    if normalised in recorded:
        return normalised
    held = ", ".join(sorted(recorded)) or "none"
    raise ConfigurationError(
        f"no record names {store} at the endpoint given: give one the records hold ({held})",
        hint="copy it from the erasure's refusal (its fix says --as-reached-at <endpoint>)",
    )


@transcripts_app.command("flush")
def transcripts_flush(
    make_folder: bool = typer.Option(
        False, "--make-folder",
        help="Make the transcript folder on this machine if it has none (by default a flush refuses: the "
        "folder is on the workers' machine).",
    ),
    as_json: bool = JsonOption,
) -> None:
    """Deliver transcripts waiting in the outbox (queued while the store was unreachable); an S3 store is marked as
    this database's first, so an erasure that reaches it through another endpoint knows it."""
    from teamstore.audit import outbox
    from teamstore.audit.placement import check_here

    async def go(app: App) -> dict[str, Any]:
        store = app.transcript_store
        # Delivered here, queued transcripts would be where the workers never look; asked to, it makes the folder
        # all the same (what retention sweep's refusal says to run).
        if make_folder or await outbox.pending(app.engine):
            await check_here(store, app.engine, doing="deliver the queued transcripts into", make=make_folder)
        await outbox.mark_store(app.engine, store)
        report = await outbox.flush(app.engine, store, late_upload_s=app.settings.late_upload_seconds)
        return {**asdict(report), "store": store.url}

    data = with_app(go, must_exist=True)  # an outbox is only ever in a database that exists
    emit(
        data,
        as_json=as_json,
        render=lambda d: console.print(
            f"delivered {d['delivered']}, still queued {d['remaining']}"
            + (f" (last error: {plain(d['last_error'])})" if d["last_error"] else "")
            + (f"; {d['held']} of them held until {d['held_until']:%Y-%m-%d %H:%M:%S} UTC by an upload that may "
               "still land or another flusher: a flush after that sends what is left" if d["held"] else "")
            + (f"; {d['erasing']} of them wait for the open erasure of their user, which deletes them"
               if d["erasing"] else "")
        ),
    )
    if data["failed"] and data["in_doubt"]:
        fail(AuditError(
            f"{data['remaining']} transcript(s) still queued: the store left the last upload unanswered, and it "
            "may land all the same",
            hint="nothing is lost: it stays queued, and a flush once it is no longer held (`held_until`) sends it "
            "again if it did not land; if uploads keep going unanswered, check AWS_ENDPOINT_URL_S3, the network "
            "and the store's health",
        ))
    if data["failed"]:
        fail(AuditError(
            f"{data['remaining']} transcript(s) still queued: the last upload failed and stored nothing",
            hint=f"{data['last_hint'] or 'fix what the last error says'}; then run `teamstore transcripts flush` "
            "again",
        ))



def register(app: typer.Typer) -> None:
    """Mount this module's commands on the main app."""
    app.add_typer(transcripts_app, name="transcripts")
