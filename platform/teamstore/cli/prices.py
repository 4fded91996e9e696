"""``teamstore prices``: the versioned price table cost is derived from, shown and written to the database.

    teamstore prices show --json
    teamstore prices sync          # write the price table into ts_prices now (db upgrade and runs do it too)

The table is the one shipped, or the file ``TEAMSTORE_PRICES_PATH`` names.
"""

from __future__ import annotations

from dataclasses import asdict
from typing import TYPE_CHECKING, Any

import typer

from teamstore.cli._output import JsonOption, emit
from teamstore.cli._runner import with_app
from teamstore.terminal import console, plain, print_table

# The price table and the database are imported by the commands that use them: `teamstore --help` starts
# without them.
if TYPE_CHECKING:
    from teamstore.app import App

prices_app = typer.Typer(help="The versioned price table cost is derived from.", no_args_is_help=True)


@prices_app.command("show")
def prices_show(as_json: bool = JsonOption) -> None:
    """Print the price table in effect (shipped, or TEAMSTORE_PRICES_PATH)."""
    from teamstore.audit.cost_report import money
    from teamstore.audit.prices import is_pattern, load_prices
    from teamstore.settings import Settings

    table = load_prices(Settings().prices_path)
    data = {
        "version": table.version,
        "currency": table.currency,
        "prices": [{**asdict(p), "effective_from": p.effective_from.isoformat(), "pattern": is_pattern(p.model),
                    "input_per_million": money(p.input_per_million),
                    "output_per_million": money(p.output_per_million)} for p in table.rows()],
    }

    def render(d: dict[str, Any]) -> None:  # names and versions come from a file: shown, never read as markup
        rows = [[plain(p["model"]), p["effective_from"], plain(p["input_per_million"]), plain(p["output_per_million"])]
                for p in d["prices"]]
        print_table(("model", "from", "input", "output"), rows, fixed=(1, 2, 3), right=(2, 3),
                    title=plain(f"prices {d['version']} ({d['currency']} per million tokens)"))

    emit(data, as_json=as_json, render=render)


@prices_app.command("sync")
def prices_sync(as_json: bool = JsonOption) -> None:
    """Write the price table into the database (ts_prices) for the session_costs SQL view now. Not needed to
    keep it current: `db upgrade` and the first run a process records do it."""
    from teamstore.audit.price_sync import sync_prices
    from teamstore.audit.prices import load_prices

    async def go(app: App) -> dict[str, Any]:
        table = load_prices(app.settings.prices_path)
        return {"version": table.version, "rows": await sync_prices(app.engine, table)}

    emit(
        with_app(go, must_exist=False),  # the price table is written: the embedded database is made if need be
        as_json=as_json,
        render=lambda d: console.print(plain(f"synced {d['rows']} prices, version {d['version']}")),
    )



def register(app: typer.Typer) -> None:
    """Mount this module's commands on the main app."""
    app.add_typer(prices_app, name="prices")
