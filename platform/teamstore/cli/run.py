"""``teamstore run`` and ``teamstore demo``: one request on a session, from the command line.

    teamstore run --team support_triage --user alice --session s1 - --json < message.txt
    teamstore run --team support_triage --user alice --session s1 --continue     # its interrupted run
    teamstore demo
"""

from __future__ import annotations

import re
import sys
import traceback
from pathlib import PurePath
from typing import TYPE_CHECKING, Any

import typer

from teamstore.cli._output import JsonOption, emit, fail
from teamstore.cli._runner import with_app_stoppable
from teamstore.errors import InvalidTask, NoInterruptedRun, RunInterrupted, TeamRunFailed, TeamstoreError
from teamstore.ids import check_ids
from teamstore.terminal import console, plain

# The database, the runtime and AutoGen are imported by the commands that use them, not with the command
# line: `teamstore --help` and the commands that need none of them start without paying for them.
if TYPE_CHECKING:
    from autogen_agentchat.messages import BaseAgentEvent, BaseChatMessage

    from teamstore.app import App
    from teamstore.runtime.platform import Platform
    from teamstore.runtime.session import Session

CONTENT_CAPTURE = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"
"""The operator's opt-in to users' words in telemetry, and in a failed run's error (docs/operations.md)."""
# AutoGen raises an agent's exception again as a RuntimeError reading "Type: message\nTraceback:\n<its traceback>".
_AGENTS_TRACEBACK = "\nTraceback:\n"
_FRAME = re.compile(r'^\s*File "([^"]+)", line (\d+), in (\S+)', re.MULTILINE)


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
    (``ps``, ``/proc/*/cmdline``) and kept in the shell's history. Either is refused if blank or holding NUL or
    a lone surrogate; stdin is read no further than the task limit the runtime enforces."""
    from teamstore.runtime.tasks import check_text, read_task

    if text != "-":
        check_text(text)
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
            raise RunInterrupted(
                f"{said}; the run stopped after turn {stopped.last_turn} and can be continued",
                hint="once the model client answers again: teamstore run --team T --user U --session S --continue "
                f"(or --abandon){see}",
            ) from exc
        raise TeamRunFailed(
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


def demo() -> None:
    """The main job, offline: register, run two users, resume in new processes, fail closed, show it all."""
    from teamstore.demo import run_demo

    run_demo()


def register(app: typer.Typer) -> None:
    """Mount this module's commands on the main app."""
    app.command("run")(run)
    app.command("demo")(demo)
