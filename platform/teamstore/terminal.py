"""Text for a terminal that stays whole and inert: tables whose ids and figures are never cut or folded
(blocks of ``name: value`` lines on a terminal too narrow for them), and values from users shown as text,
never as markup or escape sequences. The command line and the demo print through it.

    from teamstore.terminal import console, plain, print_table

    print_table(("user", "session"), [[plain(user), plain(session)]], fixed=(1,), narrow="blocks")
"""

from __future__ import annotations

import re
from collections.abc import Collection, Sequence
from typing import Literal

from rich.box import SIMPLE_HEAD
from rich.console import Console
from rich.markup import escape
from rich.table import Table
from rich.text import Text

console = Console(emoji=False)
"""stdout's console: what :func:`print_table` prints to unless given another. Never reads ``:name:`` as an
emoji code: a factory ``billing:x`` in an error would otherwise print as ``billing❌``."""

# What a terminal would act on rather than show: C0 controls but newline and tab (ESC starts escape sequences
# that move the cursor, erase lines, set the title or the clipboard), DEL, C1 controls (U+009B is a one-
# character CSI), and the bidirectional overrides that reorder what is shown.
UNSAFE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def plain(value: object) -> str:
    """``value`` as inert text for a readable table or line: never read as rich markup, and every character
    a terminal would act on shown escaped (``\\x1b``). Ids, names and messages come from users, models and
    registry authors; printed as they are, ``[/]`` would crash the command and an escape sequence could
    rewrite or hide what the operator reads. ``--json`` keeps values exact (:func:`dumps`)."""
    return escape(inert(value))


def inert(value: object) -> str:
    """``value`` with every character of :data:`UNSAFE` written as its escape (``\\u202e``), so it is shown,
    not acted on: a right-to-left override in a name would otherwise turn the figures after it around
    (a terminal's or a browser's; the HTML report shows names through this too)."""
    return UNSAFE.sub(lambda m: m.group().encode("unicode_escape").decode("ascii"), str(value))


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
    # As wide as its title at least: rich folds a longer title onto two lines ("export ex-...: " over "exported").
    table = Table(title=title, box=SIMPLE_HEAD, padding=0, min_width=len(title) if title else None)
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
