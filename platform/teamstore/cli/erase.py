"""``teamstore erase``: the deletion coordinator's command."""

from __future__ import annotations

import typer


def register(app: typer.Typer) -> None:
    """Mount this module's commands on the main app."""
