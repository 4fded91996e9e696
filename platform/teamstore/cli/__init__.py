"""The ``teamstore`` command.

    teamstore registry list
    teamstore run --team support_triage --user u1 --session s1 "My router keeps dropping"
    teamstore cost --by session --format csv
    teamstore erase --user u1

Each area lives in its own module and mounts its commands here.
"""

from __future__ import annotations

from typing import Any

import typer
from typer.core import TyperGroup

from teamstore.cli import audit, erase, registry, sessions
from teamstore.cli._output import fail
from teamstore.errors import TeamstoreError


class _Commands(TyperGroup):
    """Every command's typed errors become a message, a fix and exit status 1, never a traceback."""

    def invoke(self, ctx: Any) -> Any:
        try:
            return super().invoke(ctx)
        except TeamstoreError as exc:
            fail(exc)  # inside the command line's own handling, so the exit is a status


app = typer.Typer(
    name="teamstore",
    cls=_Commands,
    help="The data platform for AutoGen agent teams.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)
app.add_typer(registry.app, name="registry")
sessions.register(app)
audit.register(app)
erase.register(app)


def main() -> None:
    """Console entry point."""
    app()
