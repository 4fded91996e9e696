"""Shared output for the CLI: rich tables for people, ``--json`` for machines, typed errors as exit codes.

    from teamstore.cli._output import emit, fail

    emit({"teams": rows}, as_json=json_flag, render=lambda data: console.print(table))
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Callable, Collection, Sequence
from datetime import date, datetime
from pathlib import Path
from typing import Any, Literal, NoReturn

import typer
from rich.box import SIMPLE_HEAD
from rich.console import Console
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from teamstore.errors import TeamstoreError

# Click's usage error, whether typer vendors click (0.17+) or uses it: BadParameter's base class.
UsageError: type[Exception] = next(c for c in typer.BadParameter.__mro__ if c.__name__ == "UsageError")

console = Console()
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
    return _UNSAFE.sub(lambda m: f"\\u{ord(m.group()):04x}", text)


# What a terminal would act on rather than show: C0 controls but newline and tab (ESC starts escape sequences
# that move the cursor, erase lines, set the title or the clipboard), DEL, C1 controls (U+009B is a one-
# character CSI), and the bidirectional overrides that reorder what is shown.
_UNSAFE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def plain(value: object) -> str:
    """``value`` as inert text for a readable table or line: never read as rich markup, and every character
    a terminal would act on shown escaped (``\\x1b``). Ids, names and messages come from users, models and
    registry authors; printed as they are, ``[/]`` would crash the command and an escape sequence could
    rewrite or hide what the operator reads. ``--json`` keeps values exact (:func:`dumps`)."""
    text = _UNSAFE.sub(lambda m: m.group().encode("unicode_escape").decode("ascii"), str(value))
    return escape(text)


def print_table(
    headers: Sequence[str],
    rows: Sequence[Sequence[str]],
    *,
    fixed: Collection[int] = (),
    right: Collection[int] = (),
    title: str | None = None,
    out: Console | None = None,
    narrow: Literal["wider", "blocks"] = "wider",
) -> None:
    """Print a table whose cells are never cut short with '...' nor folded into pieces: the ``fixed`` columns
    (numbers, times, short versions) keep their width, so a cost is never ``0.0007`` over ``75``; text wraps
    inside its cell, never narrower than :data:`TEXT_MIN` characters (or its longest value), every character
    of it shown (``--json`` gives an id on one line). A table wider than the terminal even so (or than the 80
    columns rich assumes for a file or a pipe, or ``COLUMNS``) is printed wider, its text columns up to
    :data:`TEXT_ROOM` characters: the terminal wraps its lines, every value whole. With ``narrow="blocks"`` a
    table that does not fit with its text columns that wide (a description in six-character lines reads no
    better than a wrapped table) is one block of ``header: value`` lines per row instead (:func:`_print_blocks`).
    ``out`` is stdout's console unless given (stderr's, for what a command shows before it asks a question, so
    ``--json`` output stays one document)."""
    table = Table(title=title, box=SIMPLE_HEAD, padding=0)
    least = len(headers) + 1  # the table's edges and the spaces between its columns
    roomy = least  # the same with each text column up to TEXT_ROOM characters wide
    for i, header in enumerate(headers):
        justify: Literal["left", "right"] = "right" if i in right else "left"
        longest = max([len(line) for row in rows for line in row[i].split("\n")] +
                      [len(word) for word in header.split()])  # a cell of several lines is as wide as its longest
        if i in fixed:  # a set width is never shrunk, so rich narrows (and wraps) the text columns instead
            table.add_column(header, justify=justify, width=longest, overflow="fold")
            least += longest
            roomy += longest
        else:
            table.add_column(header, justify=justify, overflow="fold", min_width=min(longest, TEXT_MIN))
            least += min(longest, TEXT_MIN)
            roomy += min(max(longest, len(header)), TEXT_ROOM)
    for row in rows:
        table.add_row(*row)
    shown = out or console
    if narrow == "blocks" and shown.width < roomy:
        _print_blocks(headers, rows, fixed=fixed, title=title, out=shown)
        return
    if shown.width >= least:
        shown.print(table)
        return
    pinned = shown._width  # rich's own: None unless the console was given a width (it reads COLUMNS otherwise)
    shown.width = roomy  # rich prints no wider than its console is
    try:
        shown.print(table)
    finally:
        shown._width = pinned


def _print_blocks(
    headers: Sequence[str], rows: Sequence[Sequence[str]], *, fixed: Collection[int], title: str | None, out: Console
) -> None:
    """Print each row as lines of ``header: value``, a blank line between rows (as ``sessions show`` prints
    one session): a table on a terminal too narrow for it. A value of a ``fixed`` column keeps each of its lines
    whole on one line, to be copied (only one wider than the terminal leaves it to the terminal to wrap); text
    wraps at the terminal's width, under its own first line."""
    label = max(len(header) for header in headers) + 2  # "header: ", the values aligned after the longest
    room = max(out.width - label, TEXT_MIN)
    if title is not None:
        out.print(Text(title, style="italic"))
    for row in rows:
        out.print()
        for i, (header, cell) in enumerate(zip(headers, row, strict=True)):
            value = out.render_str(cell, highlight=False)  # its markup read as a table cell's is
            lines = value.split("\n") if i in fixed else value.wrap(out, room)
            for k, line in enumerate(lines):
                shown = Text.assemble((f"{header}:".ljust(label) if k == 0 else " " * label, "bold"), line)
                shown.rstrip()
                out.print(shown, soft_wrap=True)  # soft: never cut nor folded, however long
    if rows:
        out.print()


TEXT_MIN = 6
"""The narrowest a text column of :func:`print_table` wraps to (a shorter value keeps its own width)."""
TEXT_ROOM = 20
"""How wide a text column may be in a table printed wider than the terminal (its fixed columns did not fit): a
column of six characters would fold an e-mail address over four lines."""


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
