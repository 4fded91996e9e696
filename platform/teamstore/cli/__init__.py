"""The ``teamstore`` command.

    teamstore registry list
    teamstore run --team support_triage --user u1 --session s1 - < message.txt
    teamstore cost --by session --format csv
    teamstore memory show --user u1
    teamstore ledger export --to s3://warehouse/teamstore/ledger
    teamstore erase --user u1
    teamstore export --user u1 --output u1.zip

Each area lives in its own module and mounts its commands here.
"""

from __future__ import annotations

import inspect
import logging
import re
import threading
import traceback
from datetime import datetime
from typing import Any, NoReturn, get_args

import typer
from typer.core import TyperCommand, TyperGroup, TyperOption
from typer.models import DefaultPlaceholder

from teamstore.cli import (
    cost,
    db,
    erase,
    export,
    keys,
    ledger,
    memory,
    prices,
    registry,
    retention,
    run,
    sessions,
    transcripts,
)
from teamstore.cli._output import JsonOutput, UsageError, err_console, fail, json_error
from teamstore.errors import ConfigurationError, OptionValueMissing, TeamstoreError, refused_value
from teamstore.ids import lone_surrogate
from teamstore.terminal import plain


class _FlagsTakeNoValue:
    """Help that shows a flag (``--json``, ``--yes``, ``--help``) with no value placeholder: typer's rich help
    gives every option its type, ``<bool>`` too, which reads as if the flag wanted a value. An empty metavar is
    what the help shows instead; errors name an option by its flag, never by its metavar."""

    def get_params(self, ctx: Any) -> list[Any]:
        params: list[Any] = super().get_params(ctx)  # type: ignore[misc]  # mixed into a typer command class
        for param in params:
            if isinstance(param, TyperOption) and param.is_flag and param.metavar is None:
                param.metavar = ""
        return params


class _UsageErrorsInContext:
    """A usage error told with the usage line of the command it is about: click's parser raises some (an
    option given without its value) with no context, which typer would print in a box of its own."""

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        _json_only_where_taken(ctx.command, args)
        _refuse_an_option_as_a_value(ctx, args)
        try:
            return super().parse_args(ctx, args)  # type: ignore[misc,no-any-return]  # mixed into a click command
        except UsageError as exc:
            if getattr(exc, "ctx", None) is None:
                exc.ctx, exc.cmd = ctx, ctx.command  # type: ignore[attr-defined]
            raise


class _Command(_FlagsTakeNoValue, _UsageErrorsInContext, TyperCommand):
    """A command whose help shows flags without a placeholder."""


class _Group(_FlagsTakeNoValue, _UsageErrorsInContext, TyperGroup):
    """A group (its callback's options too) whose help shows flags without a placeholder."""


class _Commands(_FlagsTakeNoValue, _UsageErrorsInContext, TyperGroup):
    """Every command's typed errors become a message, a fix and exit status 1, never a traceback; so do
    usage errors (a mistyped option), since status 2 is an outcome of `erase` and `registry check`."""

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        JsonOutput.reset()  # one command per process, but a test's runner invokes many
        JsonOutput.asked_by = _asking_for_json(args)  # before any option is read: a usage error may come first
        JsonOutput.asked = bool(JsonOutput.asked_by)
        _json_only_where_taken(ctx.command, args)
        _check_text(args)
        try:
            return super().parse_args(ctx, args)
        except UsageError as exc:  # the top level's own options
            _usage_failed(exc)

    def invoke(self, ctx: Any) -> Any:
        try:
            return super().invoke(ctx)
        except TeamstoreError as exc:
            fail(exc)  # inside the command line's own handling, so the exit is a status
        except UsageError as exc:
            _usage_failed(exc)


def _usage_failed(exc: Exception) -> NoReturn:
    """A usage error as every other failure reads: the usage line, ``error:`` and ``fix:``, status 1."""
    exc.exit_code = 1  # type: ignore[attr-defined]
    ctx = getattr(exc, "ctx", None)
    if type(exc).__name__ == "NoArgsIsHelpError" or ctx is None:
        raise exc  # a bare group prints its help
    no_such_command = exc.format_message().startswith("No such command")  # type: ignore[attr-defined]
    if not (no_such_command or _takes_json(ctx.command)):
        JsonOutput.asked = False  # `demo --json`: its --json is the unknown option, and asks for nothing
    said, fix = _unquoted(exc, ctx)
    fix = f"see `{ctx.command_path} --help`{fix}"
    json_error("UsageError", said, fix, 1)
    err_console.print(plain(ctx.get_usage()), highlight=False)
    err_console.print(f"[bold red]error[/]: {plain(said)}")
    err_console.print(f"[yellow]fix[/]: {plain(fix)}")
    raise typer.Exit(1)


def _asking_for_json(args: list[str]) -> frozenset[str]:
    """Which options of the command line ask for JSON (``--json``, ``--format`` when its last value is json):
    read from the words as given, before click has read any option, so that a usage error, or ``--json`` taken
    as another option's value, still answers with the JSON error document. Words after ``--`` are a message,
    not options."""
    words = args[: args.index("--")] if "--" in args else args
    pairs = list(zip(words, [*words[1:], ""], strict=True))
    formats = [word.removeprefix("--format=") if word.startswith("--format=") else after
               for word, after in pairs if word == "--format" or word.startswith("--format=")]
    # The last --format given is the one click keeps: `--format json --format csv` writes CSV, and no JSON.
    asking = {"--json"} if "--json" in words else set()
    return frozenset(asking | ({"--format"} if formats and formats[-1] == "json" else set()))


def _takes_json(command: Any) -> bool:
    """Whether ``command`` itself takes the option that asked for JSON: ``--json``, or a ``--format`` with
    ``json`` among its choices. Only then is a usage error about it told as the JSON error document."""
    return any(("--json" in JsonOutput.asked_by and "--json" in param.opts)
               or ("--format" in JsonOutput.asked_by and "--format" in param.opts and "json" in _choices(param))
               for param in command.params)


def _json_only_where_taken(group: Any, args: list[str]) -> None:
    """Ask for no JSON when the command ``args`` name does not take the option that asked for it (``demo
    --json``): every error before it runs, a missing value or an argument that is no text too, is then told on
    stderr only, as the usage error about that option is. Read before any error can be raised."""
    command = _command_named(group, args)
    if command is not None and JsonOutput.asked and not _takes_json(command):
        JsonOutput.asked = False


def _command_named(group: Any, args: list[str]) -> Any:
    """The command ``args`` run from ``group`` (``cost report``), read word by word down its groups; None when a
    word names no command of a group (that error is told as asked)."""
    command, words = group, iter(args)
    for word in words:
        if word == "--" or not hasattr(command, "commands"):
            break
        if word.startswith("-"):
            if any(word in p.opts and not (p.is_flag or p.count) for p in command.params):
                next(words, None)  # the option's value, never a command's name
            continue
        command = command.commands.get(word)
        if command is None:
            return None
    return command


# Options whose value is an id (a user's, a session's, a request's, a team's...): no id starts with "--", so
# such a word after one is the next option, the id having been lost (`--user $U` with U unset).
_ID_OPTIONS = frozenset({"--user", "--session", "--request-id", "--run", "--team", "--model", "--after",
                         "--requested-by", "--operator", "--who"})


def _refuse_an_option_as_a_value(ctx: Any, args: list[str]) -> None:
    """Refuse an option whose value is missing and which would take the next option as its value (click does):
    `--user $U --json` with ``U`` unset ran the command for a user named ``--json``. The next word is one of
    the command's own options, or, after an id option, starts with ``--``. ``--user=--x`` still gives such a
    value on purpose.

    Raises:
        OptionValueMissing: Before the command has read or stored anything.
    """
    options = {name: param for param in ctx.command.get_params(ctx) if param.param_type_name == "option"
               for name in (*param.opts, *param.secondary_opts)}
    group = hasattr(ctx.command, "commands")
    at = 0
    while at < len(args) and args[at] != "--":
        word, after = args[at], args[at + 1] if at + 1 < len(args) else None
        if group and not word.startswith("-"):
            return  # a subcommand's name: what follows is its own to read
        param = options.get(word)
        if param is None or param.is_flag or param.count or after is None:
            at += 1
            continue
        if after in options or (word in _ID_OPTIONS and after.startswith("--")):
            _option_without_value(word, after if after in options else None, free_text=_free_text(param, word),
                                  joined_as=_long_flag(param, word))
        at += 2


# Options that take words a person writes (why, what for, a fact to forget): such text may itself read as an
# option. Dates, paths, names and amounts are values, though typed as text too.
_FREE_TEXT_OPTIONS = frozenset({"--reason", "--notes", "--message", "--description", "--fact"})


def _free_text(param: Any, option: str) -> bool:
    """Whether ``option`` (of ``param``) takes words a person writes (a reason, notes, a commit message), rather
    than an id, a date, a path or a choice: such text is given joined (``--reason=--json``)."""
    return _long_flag(param, option) in _FREE_TEXT_OPTIONS and not _choices(param)


def _long_flag(param: Any, option: str) -> str:
    """``param``'s long flag (``--message`` for ``-m``): ``-m=--json`` would give ``-m`` the text ``=--json``."""
    return next((name for name in param.opts if name.startswith("--")), option)


def _option_without_value(option: str, next_option: str | None, *, free_text: bool = False,
                          joined_as: str | None = None) -> NoReturn:
    """Raise :class:`OptionValueMissing` for ``option``: the next word is shown only when it is an option.

    Click would take that option as the value; it is refused even for free text, since an unset variable
    (``--reason $WHY --json``) reads the same, and would record ``--json`` as the reason and lose the JSON
    output. Text meant to read as an option is given joined to its option's long flag (``joined_as``), as
    argparse and getopt want it: click reads ``-m=--json`` as the text ``=--json``."""
    said = (f"the next word, {next_option}, is an option" if next_option is not None
            else "the next word starts with '--' as an option does (not repeated here: it may be a user's words)")
    name = "ID" if option in _ID_OPTIONS else "TEXT" if free_text else "VALUE"
    flag = joined_as or option
    joined = (f"to give {option} the text {next_option} itself, join them: {flag}={next_option}"
              if free_text and next_option is not None else f"a value that starts with '--' goes as {flag}=VALUE")
    raise OptionValueMissing(
        f"{option} got no value: {said}",
        hint=f"{joined}; otherwise give {option} its value: a shell variable that is unset or empty gives none "
        f"(`{option} ${name}` with {name} empty): check it, and quote it (`{option} \"${name}\"`) so that an empty "
        "one is refused as empty",
    )


# An unknown option is named when it is one letter, or a typo of one of the command's own (click suggests it).
_ONE_LETTER = re.compile(r"-[A-Za-z0-9]")


def _unquoted(exc: Exception, ctx: Any) -> tuple[str, str]:
    """A usage error's message without an argument that may be a user's words, and what to add to its fix.

    A message that starts with ``-`` (``teamstore run ... "-my words"``) reads as an unknown option, and words
    past the last argument as extra arguments: click quotes either, and a command's error line may be logged or
    seen by others."""
    said: str = exc.format_message()  # type: ignore[attr-defined]
    takes_text = any(p.name == "text" for p in ctx.command.params)  # a user's message (teamstore run)
    if type(exc).__name__ == "NoSuchOption":
        option, close = getattr(exc, "option_name", ""), getattr(exc, "possibilities", None)
        if option in _options_of(ctx.find_root().command):  # another command's: a name of ours, not words
            said = f"No such option: {option} (`{ctx.command_path}` does not take it; other commands do)"
        elif not (close or _ONE_LETTER.fullmatch(option)):
            said = ("No such option: an argument starts with '-' and is no option of this command (not repeated "
                    "here: it may be a user's words)")
        dashes = f"; text that starts with '-' goes after `--` (`{ctx.command_path} [OPTIONS] -- TEXT`), or on stdin (`-`)"
        return said, dashes if takes_text else ""
    if said.startswith("Got unexpected extra argument"):
        said = "more arguments than the command takes (not repeated here: they may be a user's words)"
        return said, "; pass text that holds spaces as one quoted argument, or on stdin (`-`)" if takes_text else ""
    if said.startswith("No such command") and "Did you mean" not in said:  # `teamstore erase alice`
        return "No such command: an argument names no command of this group (not repeated here: it may be a " \
               "user's words)", ""
    param = getattr(exc, "param", None)
    if type(exc).__name__ == "BadParameter" and param is not None:  # a value click or typer could not take
        said = refused_value(*_option_named(param), takes=_takes(param))
    return said, ""


def _options_of(command: Any) -> set[str]:
    """Every option name of ``command`` and of the commands below it."""
    names = {name for param in command.params for name in (*param.opts, *param.secondary_opts)
             if name.startswith("-")}
    for sub in getattr(command, "commands", {}).values():
        names |= _options_of(sub)
    return names


def _option_named(param: Any) -> list[str]:
    """An option by its flags (``--limit``), an argument by its placeholder (``USER``)."""
    return [name for name in param.opts if name.startswith("-")] or [param.metavar or param.name]


_KINDS = {int: "an integer", float: "a number", bool: "true or false", datetime: "a date and time (ISO 8601)",
          "integer": "an integer", "float": "a number", "boolean": "true or false", "datetime": "a date and time"}


def _takes(param: Any) -> str:
    """What a parameter takes, read from its declaration and never from the value given: its choices, its type,
    its range or formats. A newer typer declares it in ``type_descriptor``, an older one in click's
    ``type``."""
    declared, click_type = getattr(param, "type_descriptor", None), getattr(param, "type", None)
    choices = _choices(param)
    if choices:
        return "one of " + ", ".join(choices)
    if declared is not None:
        kind: Any = get_args(declared.annotation)[0] if declared.is_list else declared.annotation
        formats = declared.parameter_info.formats
        if declared.is_path or declared.is_file:
            kind = {"file": "a file", "dir": "a folder"}.get(declared.path_type, "a path")
            kind += " that exists" if declared.parameter_info.exists else ""
        low, high = getattr(param, "min", None), getattr(param, "max", None)
    else:
        kind = getattr(click_type, "name", "")
        kind = kind.removesuffix(" range")
        formats = getattr(click_type, "formats", None)
        low, high = getattr(click_type, "min", None), getattr(click_type, "max", None)
    said = _KINDS.get(kind, kind if isinstance(kind, str) else f"a {getattr(kind, '__name__', kind)}")
    if formats:
        said = "a date as " + " or ".join(formats)
    if low is not None and high is not None:
        return f"{said} from {low} to {high}"
    if low is not None or high is not None:
        return f"{said} of at least {low}" if low is not None else f"{said} of at most {high}"
    return said


def _choices(param: Any) -> list[str]:
    """The values a parameter is limited to (none for one that takes any): a newer typer declares them in
    ``type_descriptor``, an older one in click's ``type``."""
    declared = getattr(param, "type_descriptor", None)
    choices = declared.choices if declared is not None else getattr(getattr(param, "type", None), "choices", None)
    return [str(getattr(choice, "value", choice)) for choice in choices or ()]


def _check_text(args: list[str]) -> None:
    """Refuse an argument that is not text: bytes the locale could not decode reach Python as lone
    surrogates, which no database, key or terminal takes (they crashed the first query with a traceback).
    The argument is named by its place and the option before it, never shown: it may be a user's id or words."""
    for position, arg in enumerate(args, start=1):
        if lone_surrogate(arg) is not None:
            before = args[position - 2] if position > 1 else ""
            after = f" (after {before})" if before.startswith("-") and lone_surrogate(before) is None else ""
            fail(ConfigurationError(
                f"argument {position}{after} is not valid UTF-8 text (not repeated here: it may be a user's words)",
                hint="pass ids and text as UTF-8 (check the terminal's and the shell's locale, e.g. LANG=C.UTF-8)",
            ))


app = typer.Typer(
    name="teamstore",
    cls=_Commands,
    help="The data platform for AutoGen agent teams.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)
app.add_typer(registry.app, name="registry")
run.register(app)
sessions.register(app)
db.register(app)
transcripts.register(app)
retention.register(app)
prices.register(app)
cost.register(app)
ledger.register(app)
erase.register(app)
export.register(app)
keys.register(app)
memory.register(app)


def _one_line_summaries(commands: typer.Typer) -> None:
    """Give each command its docstring's first paragraph as one line for its group's list: typer's rich mode
    keeps a docstring's line breaks there (a command's own ``--help`` joins them), which broke a summary
    mid-sentence wherever the source wrapped it."""
    for info in commands.registered_commands:
        text = info.help or inspect.getdoc(info.callback) or ""
        if info.short_help is None and text:
            info.short_help = " ".join(text.split("\n\n")[0].split())
    for group in commands.registered_groups:
        if group.typer_instance is not None:
            _one_line_summaries(group.typer_instance)


_one_line_summaries(app)


def _without_flag_placeholders(commands: typer.Typer) -> None:
    """Build every command and group below ``commands`` with :class:`_FlagsTakeNoValue`, so no option needs
    marking by hand (one added later included)."""
    for info in commands.registered_commands:
        if info.cls is TyperCommand:  # what typer gives a command declared without one
            info.cls = _Command
    for group in commands.registered_groups:
        if isinstance(group.cls, DefaultPlaceholder):
            group.cls = _Group
        if group.typer_instance is not None:
            _without_flag_placeholders(group.typer_instance)


_without_flag_placeholders(app)


class _OneLine(logging.Handler):
    """Log records as one line each on stderr. AutoGen logs a failed agent's whole traceback at ERROR
    (three times over for a team), which the command's own ``error:`` line already reports."""

    def emit(self, record: logging.LogRecord) -> None:
        try:
            first = next(iter(record.getMessage().splitlines()), "")
            err_console.print(plain(f"log {record.levelname.lower()} from {record.name}: {first}"), style="dim",
                              highlight=False)
        except Exception:
            self.handleError(record)


def _quiet_late_sqlite_threads(args: threading.ExceptHookArgs) -> None:
    """Drop one known stray traceback. When opening an SQLite file fails, aiosqlite's worker thread may
    report that failure after the command has ended and closed its event loop. The error itself has
    already been told as ``error:``/``fix:``, so only that thread's 'Event loop is closed' is dropped."""
    frames = traceback.walk_tb(args.exc_traceback)
    late = (args.exc_type is RuntimeError and str(args.exc_value) == "Event loop is closed"
            and any(str(frame.f_globals.get("__name__", "")).startswith("aiosqlite") for frame, _ in frames))
    if not late:
        threading.__excepthook__(args)


def main() -> None:
    """Console entry point."""
    logging.getLogger().addHandler(_OneLine(logging.WARNING))
    threading.excepthook = _quiet_late_sqlite_threads
    app()
