"""Shared output for the CLI: ``--json`` for machines, typed errors as exit codes (tables for people are
:mod:`teamstore.terminal`'s).

    from teamstore.cli._output import emit, fail

    emit({"teams": rows}, as_json=json_flag, render=lambda data: console.print(table))
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from datetime import date, datetime
from pathlib import Path
from typing import Any, NoReturn

import typer
from rich.console import Console

from teamstore.errors import TeamstoreError
from teamstore.terminal import UNSAFE, plain

# Click's usage error, whether typer vendors click (0.17+) or uses it: BadParameter's base class.
UsageError: type[Exception] = next(c for c in typer.BadParameter.__mro__ if c.__name__ == "UsageError")

err_console = Console(stderr=True)


class JsonOutput:
    """What the command running asked of stdout: whether ``--json`` was given, and whether its document was
    written, so that a failure under ``--json`` is itself one JSON document (:func:`fail`) and never a second one."""

    asked = False
    written = False

    @classmethod
    def reset(cls) -> None:
        cls.asked = cls.written = False


def _asked_for_json(value: bool) -> bool:
    JsonOutput.asked = JsonOutput.asked or value
    return value


JsonOption = typer.Option(False, "--json", help="Print machine-readable JSON instead of a table.",
                          callback=_asked_for_json)

INTERRUPTED = 130
"""A command's exit status when Ctrl-C stopped it (128 + SIGINT, as a shell reports it)."""


def _default(value: object) -> object:
    if isinstance(value, datetime | date):
        return value.isoformat()
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, set | frozenset | tuple):
        return list(value)
    if hasattr(value, "model_dump"):
        return value.model_dump(mode="json")
    raise TypeError(f"not JSON serialisable: {type(value).__name__}")


def dumps(data: Any) -> str:
    """JSON with stable key order and ISO timestamps; characters a terminal would act on, which JSON may
    hold raw (DEL, C1 controls, bidirectional overrides), are written as ``\\u`` escapes: the same JSON."""
    text = json.dumps(data, default=_default, indent=2, sort_keys=True, ensure_ascii=False)
    return UNSAFE.sub(lambda m: f"\\u{ord(m.group()):04x}", text)


def emit(data: Any, *, as_json: bool, render: Callable[[Any], None]) -> None:
    """Print ``data`` as JSON when asked, otherwise through ``render``."""
    if as_json:
        sys.stdout.write(dumps(data) + "\n")
        JsonOutput.written = True
    else:
        render(data)


def fail(exc: TeamstoreError, code: int = 1) -> NoReturn:
    """Print a typed error with its fix and exit non-zero. Under ``--json``, when the command wrote no document
    yet, the error is also stdout's one document: ``{"error": {"type", "message", "fix", "exit_code"}}``."""
    if JsonOutput.asked and not JsonOutput.written:
        sys.stdout.write(dumps({"error": {"type": type(exc).__name__, "message": exc.message, "fix": exc.hint,
                                          "exit_code": code}}) + "\n")
        JsonOutput.written = True
    # The message quotes ids as the user gave them: printed as text, never read as rich markup.
    err_console.print(f"[bold red]error[/]: {plain(exc.message)}")
    if exc.hint:
        err_console.print(f"[yellow]fix[/]: {plain(exc.hint)}")
    raise typer.Exit(code)


def interrupted(said: str, fix: str, code: int = INTERRUPTED) -> NoReturn:
    """Say what a command stopped by Ctrl-C (or another stop) had done and what to run to go on; exit ``code``."""
    err_console.print("[bold red]interrupted[/]: " + plain(said))
    err_console.print("[yellow]fix[/]: " + plain(fix))
    raise typer.Exit(code)
