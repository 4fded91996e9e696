"""``teamstore registry``: add, list, show, history, diff, label and check team definitions."""

from __future__ import annotations

import typer

app = typer.Typer(help="Team definitions, versioned in git.", no_args_is_help=True)
