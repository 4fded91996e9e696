"""The versioned price table that turns token counts into cost, at query time.

    from teamstore.audit.prices import load_prices

    table = load_prices()                      # the shipped data/prices.json, or TEAMSTORE_PRICES_PATH
    price = table.lookup("gpt-4o", date(2025, 1, 1))
    if price is not None:
        print(table.version, price.cost(input_tokens=1200, output_tokens=300))

Token counts are the record; prices are data. A model missing from the table has no price (``None``), so
its cost is shown as unknown while its tokens are still counted.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from datetime import date
from importlib import resources
from itertools import pairwise
from pathlib import Path
from typing import Any

from teamstore.audit.schema import ledger_name
from teamstore.errors import ConfigurationError

PER = 1_000_000


@dataclass(frozen=True)
class Price:
    """One model's price from a date on, per million tokens."""

    model: str
    effective_from: date
    input_per_million: float
    output_per_million: float

    def cost(self, input_tokens: int, output_tokens: int) -> float:
        """The cost of the given token counts at this price."""
        return (input_tokens * self.input_per_million + output_tokens * self.output_per_million) / PER


@dataclass(frozen=True)
class PriceTable:
    """Every model's price history, under one version id."""

    version: str
    currency: str
    prices: dict[str, tuple[Price, ...]]

    def lookup(self, model: str, day: date) -> Price | None:
        """The price in effect for ``model`` on ``day``, or ``None`` if the table has none.

        Args:
            model: The model name as metered (``ModelCall.model``).
            day: The day the tokens were used.

        Returns:
            The latest entry whose ``effective_from`` is on or before ``day``; ``None`` if the model is
            unknown or the day predates its first entry.
        """
        found: Price | None = None
        for price in self.prices.get(model, ()):
            if price.effective_from <= day:
                found = price
        return found

    def rows(self) -> list[Price]:
        """Every entry, sorted by model and date (for syncing into the database)."""
        return [p for model in sorted(self.prices) for p in self.prices[model]]


def _per_million(model: str, entry: dict[str, Any], side: str) -> float:
    value = entry[side]
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value < math.inf:
        # A negative, infinite or textual price would price runs below zero or as NaN, silently.
        raise ValueError(f"{model}: {side} must be a number of at least 0 per million tokens, not {value!r}")
    return float(value)


def _parse_entry(model: str, entry: dict[str, Any]) -> Price:
    return Price(
        model=model,
        effective_from=date.fromisoformat(str(entry["effective_from"])),
        input_per_million=_per_million(model, entry, "input"),
        output_per_million=_per_million(model, entry, "output"),
    )


def _history(model: str, entries: Any) -> tuple[Price, ...]:
    history = tuple(sorted((_parse_entry(model, e) for e in entries), key=lambda p: p.effective_from))
    for earlier, later in pairwise(history):
        if earlier.effective_from == later.effective_from:
            # Which of the two priced that day would depend on their order in the file (and ts_prices,
            # keyed by model and date, could not hold both).
            raise ValueError(f"{model}: two entries take effect on {later.effective_from.isoformat()}")
    return history


def parse_prices(data: dict[str, Any], source: str = "prices") -> PriceTable:
    """Build a :class:`PriceTable` from the JSON document.

    Args:
        data: The parsed file: ``version``, ``currency`` and ``models`` (model -> list of entries with
            ``effective_from``, ``input`` and ``output`` per million tokens).
        source: Where it came from, for error messages.

    Returns:
        The table, each model's entries sorted by date.

    Raises:
        ConfigurationError: A field is missing or malformed, or a model has two entries for one day.
    """
    try:
        # Keyed as the ledger stores a model's name (a long one shortened), so its price applies to it.
        prices = {ledger_name(model): _history(model, entries) for model, entries in dict(data["models"]).items()}
        return PriceTable(
            version=str(data["version"]), currency=str(data.get("currency", "USD")), prices=prices
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise ConfigurationError(
            f"the price table {source} is malformed: {type(exc).__name__}: {exc}",
            hint="each model needs entries with distinct effective_from dates (YYYY-MM-DD), input and output; "
            "see docs/analysts.md",
        ) from exc


def load_prices(path: Path | None = None) -> PriceTable:
    """Load the price table from ``path``, or the one shipped with teamstore.

    Args:
        path: An override (``Settings.prices_path``); ``None`` for ``teamstore/data/prices.json``.

    Returns:
        The parsed table.

    Raises:
        ConfigurationError: The file is missing, not JSON, or malformed.
    """
    try:
        if path is None:
            text = resources.files("teamstore").joinpath("data/prices.json").read_text(encoding="utf-8")
        else:
            text = path.read_text(encoding="utf-8")
        data = json.loads(text)
    except (OSError, ValueError) as exc:
        raise ConfigurationError(
            f"could not read the price table {path or 'shipped with teamstore'}: {exc}",
            hint="check TEAMSTORE_PRICES_PATH points at a readable JSON price file",
        ) from exc
    return parse_prices(data, str(path or "data/prices.json"))
