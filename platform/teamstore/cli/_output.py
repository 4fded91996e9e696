"""Shared output for the CLI: rich tables for people, ``--json`` for machines, typed errors as exit codes.

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
from rich.markup import escape

from teamstore.errors import TeamstoreError

console = Console()
err_console = Console(stderr=True)

JsonOption = typer.Option(False, "--json", help="Print machine-readable JSON instead of a table.")


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
    """JSON with stable key order and ISO timestamps."""
    return json.dumps(data, default=_default, indent=2, sort_keys=True, ensure_ascii=False)


def emit(data: Any, *, as_json: bool, render: Callable[[Any], None]) -> None:
    """Print ``data`` as JSON when asked, otherwise through ``render``."""
    if as_json:
        sys.stdout.write(dumps(data) + "\n")
    else:
        render(data)


def fail(exc: TeamstoreError, code: int = 1) -> NoReturn:
    """Print a typed error with its fix and exit non-zero."""
    # The message quotes ids as the user gave them: printed as text, never read as rich markup.
    err_console.print(f"[bold red]error[/]: {escape(exc.message)}")
    if exc.hint:
        err_console.print(f"[yellow]fix[/]: {escape(exc.hint)}")
    raise typer.Exit(code)
