"""The ``teamstore`` command.

    teamstore registry list
    teamstore run --team support_triage --user u1 --session s1 "My router keeps dropping"
    teamstore cost --by session --format csv
    teamstore erase --user u1

Each area lives in its own module and mounts its commands here.
"""

from __future__ import annotations

import typer

from teamstore.cli import audit, erase, registry, sessions
from teamstore.errors import TeamstoreError

app = typer.Typer(
    name="teamstore",
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
    """Console entry point: typed errors become a message, a fix and exit status 1."""
    from teamstore.cli._output import fail

    try:
        app()
    except TeamstoreError as exc:
        fail(exc)
