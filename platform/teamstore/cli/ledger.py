"""``teamstore ledger export``: the usage ledger as Parquet partitions for a warehouse.

teamstore ledger export --to ./warehouse/ledger
teamstore ledger export --to s3://warehouse/teamstore/ledger --since 2026-11-01 --until 2026-12-01 --json
"""

from __future__ import annotations

from datetime import date
from typing import TYPE_CHECKING, Any

import typer

from teamstore.cli._output import JsonOption, emit
from teamstore.cli._runner import with_app
from teamstore.errors import ConfigurationError, refused_value
from teamstore.terminal import console, plain, print_table

if TYPE_CHECKING:
    from teamstore.app import App

ledger_app = typer.Typer(help="The usage ledger, for warehouses.", no_args_is_help=True)


def _day(value: str | None, option: str) -> date | None:
    if value is None:
        return None
    try:
        return date.fromisoformat(value)
    except ValueError:
        raise ConfigurationError(
            refused_value(option, takes="a day as YYYY-MM-DD"),
            hint=f"e.g. {option} 2026-11-01: each day is exported whole, as one file (a time of day would cut one "
            "short)",
        ) from None


@ledger_app.command("export")
def export(
    to: str = typer.Option(..., "--to", help="A folder, file:///folder or s3://bucket/prefix."),
    since: str | None = typer.Option(None, "--since", help="First day (YYYY-MM-DD); default: the ledger's first."),
    until: str | None = typer.Option(None, "--until", help="Day after the last (YYYY-MM-DD, exclusive); default: "
                                     "through today."),
    as_json: bool = JsonOption,
) -> None:
    """Write the ledger as Parquet, one file per day (day=YYYY-MM-DD/part-00000.parquet), replacing each
    day's file whole; pseudonymous keys and token counts only."""
    start, end = _day(since, "--since"), _day(until, "--until")
    if start is not None and end is not None and start >= end:
        raise ConfigurationError("--since is not before --until: no day is in that window",
                                 hint="swap them (--until is the day after the last one exported)")
    from teamstore.audit.warehouse import destination_from_url, export_ledger

    async def go(app: App) -> dict[str, Any]:
        sink = destination_from_url(to)
        try:
            return (await export_ledger(app.engine, sink, start, end)).to_dict()
        finally:
            sink.close()

    data = with_app(go, must_exist=True)  # a ledger is only ever in a database that exists
    emit(data, as_json=as_json, render=_render)


def _render(d: dict[str, Any]) -> None:
    print_table(("day", "rows", "bytes", "file"),
                [[str(p["day"]), str(p["rows"]), str(p["bytes"]), plain(p["key"])] for p in d["partitions"]],
                fixed=(0, 1, 2), right=(1, 2), title=plain(f"ledger exported to {d['destination']}"))
    console.print(f"{d['rows']} rows in {len(d['partitions'])} day(s), {d['bytes']} bytes, {d['seconds']:.1f} s")


def register(app: typer.Typer) -> None:
    """Mount ``ledger`` on the main app."""
    app.add_typer(ledger_app, name="ledger")
