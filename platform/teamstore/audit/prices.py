"""The versioned price table that turns token counts into cost, at query time, in exact decimals.

    from teamstore.audit.prices import load_prices

    table = load_prices()                      # the shipped data/prices.json, or TEAMSTORE_PRICES_PATH
    price = table.lookup("gpt-4o-2024-08-06", date(2025, 1, 1))   # priced by the pattern gpt-4o-2024-*
    if price is not None:
        print(table.version, price.model, price.cost(input_tokens=1200, output_tokens=300))  # a Decimal

Token counts are the record; prices are data. An entry is named by a model's exact name or by a glob
pattern (``*``, ``?``, ``[...]``) that prices a family of names, such as the dated snapshots a provider
publishes (``gpt-4o-2024-*``). A model takes the entry of its exact name first, else the longest pattern
that matches it (ties by the pattern's text). A model no entry matches has no price (``None``): its cost
is shown as unknown while its tokens are still counted.

Prices are :class:`~decimal.Decimal` from the file to the report: a float would turn 0.15 per million
tokens into 0.1499999..., and sums of such products into figures no invoice shows.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import date
from decimal import Decimal
from fnmatch import fnmatchcase
from importlib import resources
from itertools import pairwise
from pathlib import Path
from typing import Any

from teamstore.audit.schema import ledger_name
from teamstore.audit.schema import prices as price_rows
from teamstore.errors import ConfigurationError

# As long as ts_prices holds them: a longer one was refused there on Postgres (`prices sync` and
# `db upgrade` ended in a traceback, every run logged a warning) while SQLite kept it whole.
VERSION_CHARS: int = price_rows.c.version.type.length  # type: ignore[attr-defined]
CURRENCY_CHARS: int = price_rows.c.currency.type.length  # type: ignore[attr-defined]

GLOB = frozenset("*?[")
"""Characters that make an entry's name a pattern."""


def is_pattern(name: str) -> bool:
    """Whether a price entry's name is a glob pattern rather than one model's exact name."""
    return any(char in GLOB for char in name)


@dataclass(frozen=True)
class Price:
    """One price entry from a date on, per million tokens.

    Attributes:
        model: The entry's name: a model's exact name, or the pattern that matched it.
        effective_from: The first day the price applies (the day a run started).
        input_per_million: Price of a million input tokens, in the table's currency.
        output_per_million: Price of a million output tokens.
        source: Where the price was read (the provider's pricing page), if the file says.
    """

    model: str
    effective_from: date
    input_per_million: Decimal
    output_per_million: Decimal
    source: str = ""

    def cost(self, input_tokens: int, output_tokens: int) -> Decimal:
        """The exact cost of the given token counts at this price."""
        return (input_tokens * self.input_per_million + output_tokens * self.output_per_million).scaleb(-6)


History = tuple[Price, ...]


@dataclass(frozen=True)
class PriceTable:
    """Every entry's price history, under one version id.

    Attributes:
        version: Names the table; versions sort in time order (dates do).
        currency: ISO code of every price.
        prices: Exact model names (as the ledger stores them) -> history, oldest first.
        patterns: ``(pattern, history)`` in the order they are tried: longest pattern first.
    """

    version: str
    currency: str
    prices: dict[str, History]
    patterns: tuple[tuple[str, History], ...] = ()
    _matched: dict[str, History | None] = field(default_factory=dict, compare=False, hash=False, repr=False)

    def history(self, model: str) -> History | None:
        """The entries that price ``model``: its exact name's, else the longest matching pattern's.

        Args:
            model: The model name as the ledger stores it.

        Returns:
            The history, oldest first; ``None`` when no entry names or matches the model.
        """
        if model not in self._matched:  # resolved once per name: a report looks a model up per group
            exact = self.prices.get(model)
            found = exact or next((h for pattern, h in self.patterns if fnmatchcase(model, pattern)), None)
            self._matched[model] = found
        return self._matched[model]

    def lookup(self, model: str, day: date) -> Price | None:
        """The price in effect for ``model`` on ``day``, or ``None`` if the table has none.

        Args:
            model: The model name as metered (``ModelCall.model``).
            day: The day the tokens were used.

        Returns:
            The latest matching entry whose ``effective_from`` is on or before ``day``; ``None`` if no
            entry matches the model or the day predates its first one.
        """
        found: Price | None = None
        for price in self.history(model) or ():
            if price.effective_from <= day:
                found = price
        return found

    def rows(self) -> list[Price]:
        """Every entry, exact names and patterns, sorted by name and date."""
        every = {**self.prices, **dict(self.patterns)}
        return [p for name in sorted(every) for p in every[name]]


MAX_PER_MILLION = 1_000_000
"""The highest price per million tokens a table may give (one per token): past any model's, and within what
``ts_prices`` stores exactly."""


def _per_million(model: str, entry: dict[str, Any], side: str) -> Decimal:
    value = entry[side]
    if isinstance(value, bool) or not isinstance(value, int | float | Decimal):
        raise ValueError(f"{model}: {side} must be a number of at least 0 per million tokens, not {value!r}")
    # A float from a caller's dict reads as it was written (0.1, not 0.1000000000000000055...).
    amount = Decimal(repr(value)) if isinstance(value, float) else Decimal(value)
    if not amount.is_finite() or not 0 <= amount <= MAX_PER_MILLION:
        # A negative, infinite or NaN price would price runs below zero or as NaN, silently; one past any
        # real price (1e400 parses) is stored in ts_prices as infinity.
        raise ValueError(f"{model}: {side} must be a number of at least 0 and at most {MAX_PER_MILLION:,} per"
                         f" million tokens, not {value!r}")
    return amount


ENTRY_FIELDS = ("effective_from", "input", "output", "source")
"""What a price entry says; :func:`_parse_entry` refuses any other field."""


def _parse_entry(model: str, entry: Any) -> Price:
    if not isinstance(entry, dict):
        raise ValueError(f"{model}: an entry must be an object of {', '.join(ENTRY_FIELDS)}, not {entry!r}")
    unknown = sorted(set(entry) - set(ENTRY_FIELDS))
    if unknown:
        # A field teamstore does not price by (a cached-input or batch rate) would be left out of every cost
        # while the file seemed to set it.
        raise ValueError(f"{model}: unknown field {', '.join(map(repr, unknown))} (an entry gives "
                         f"{', '.join(ENTRY_FIELDS)}; cached-input and batch rates are not priced)")
    missing = [name for name in ENTRY_FIELDS[:3] if name not in entry]
    if missing:
        raise ValueError(f"{model}: an entry has no {' and no '.join(map(repr, missing))}")
    return Price(
        model=model,
        effective_from=_day(model, entry["effective_from"]),
        input_per_million=_per_million(model, entry, "input"),
        output_per_million=_per_million(model, entry, "output"),
        source=str(entry.get("source", "")),
    )


def _day(model: str, value: Any) -> date:
    if isinstance(value, date):
        return value
    try:
        return date.fromisoformat(str(value))
    except ValueError as exc:  # date's own words ("month must be in 1..12") named neither the model nor the field
        raise ValueError(f"{model}: effective_from must be a day as YYYY-MM-DD, not {value!r}") from exc


def _history(model: str, entries: Any) -> History:
    if not isinstance(entries, list):
        raise ValueError(f"{model}: its entries must be a list of entries, not {entries!r}")
    history = tuple(sorted((_parse_entry(model, e) for e in entries), key=lambda p: p.effective_from))
    if not history:
        # A name with no price would price nothing: a whole table of them made every cost unknown, and an
        # empty pattern hid the shorter patterns that do price its models.
        raise ValueError(f"{model}: no price entry (give it one, or leave the name out)")
    for earlier, later in pairwise(history):
        if earlier.effective_from == later.effective_from:
            # Which of the two priced that day would depend on their order in the file (and ts_prices,
            # keyed by model and date, could not hold both).
            raise ValueError(f"{model}: two entries take effect on {later.effective_from.isoformat()}")
    return history


def _label(value: Any, name: str, most: int) -> str:
    text = str(value)
    if not text.strip() or len(text) > most:
        raise ValueError(f"{name} must be 1 to {most} characters, not {text!r}")
    return text


def parse_prices(data: dict[str, Any], source: str = "prices") -> PriceTable:
    """Build a :class:`PriceTable` from the JSON document.

    Args:
        data: The parsed file: ``version``, ``currency`` and ``models`` (a model's name or a glob pattern
            -> list of entries with ``effective_from``, ``input`` and ``output`` per million tokens, and
            optionally ``source``).
        source: Where it came from, for error messages.

    Returns:
        The table, each entry's history sorted by date, patterns longest first.

    Raises:
        ConfigurationError: A field is missing or malformed (a ``version`` of more than 64 characters, a
            ``currency`` of more than 8, either empty, no model, a model or pattern with no entry, an entry
            with a field other than effective_from, input, output and source), or an entry has two prices
            for one day.
    """
    try:
        _check_document(data)
        entries = dict(data["models"])
        # Keyed as the ledger stores a model's name (a long one shortened), so its price applies to it.
        exact = {ledger_name(m): _history(m, e) for m, e in entries.items() if not is_pattern(m)}
        patterns = sorted(((m, _history(m, e)) for m, e in entries.items() if is_pattern(m)),
                          key=lambda item: (-len(item[0]), item[0]))
        return PriceTable(version=_label(data["version"], "version", VERSION_CHARS),
                          currency=_label(data.get("currency", "USD"), "currency", CURRENCY_CHARS),
                          prices=exact, patterns=tuple(patterns))
    except (KeyError, TypeError, ValueError) as exc:
        said = str(exc) if isinstance(exc, ValueError) else f"{type(exc).__name__}: {exc}"
        raise ConfigurationError(
            f"the price table {source} is malformed: {said}",
            hint=f"give a version of 1 to {VERSION_CHARS} characters, a currency code of at most {CURRENCY_CHARS}, "
            "and each model or pattern one or more entries with distinct effective_from dates (YYYY-MM-DD), "
            "input and output; see docs/analysts.md",
        ) from exc


def _check_document(data: Any) -> None:
    """The document's shape, said in its own terms (a list read as the table said ``list indices must be
    integers``; a table without models said ``KeyError: 'models'``)."""
    if not isinstance(data, dict):
        raise ValueError(f"it must be one JSON object of version, currency and models, not a {type(data).__name__}")
    for name in ("version", "models"):
        if name not in data:
            raise ValueError(f"it has no {name!r}")
    if not data["models"]:  # a table that prices nothing would make every run's cost unknown, silently
        raise ValueError("models names no model")
    if not isinstance(data["models"], dict):
        raise ValueError("models must be an object of model names (or patterns) and their lists of entries")


class _Repeated(ValueError):
    """A name given twice in one JSON object of the price file."""


def _unique(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """A JSON object whose names are all different: JSON keeps the last of a repeated one, so a model listed
    twice (or an entry's price given twice) would lose the first silently, and the runs it priced with it."""
    found: dict[str, Any] = {}
    for name, value in pairs:
        if name in found:
            raise _Repeated(f"{name!r} is given twice in one object")
        found[name] = value
    return found


def load_prices(path: Path | None = None) -> PriceTable:
    """Load the price table from ``path``, or the one shipped with teamstore.

    Args:
        path: An override (``Settings.prices_path``); ``None`` for ``teamstore/data/prices.json``.

    Returns:
        The parsed table, its prices exact decimals as written in the file.

    Raises:
        ConfigurationError: The file is missing, not JSON, names a model or an entry's field twice, or is
            malformed.
    """
    try:
        if path is None:
            text = resources.files("teamstore").joinpath("data/prices.json").read_text(encoding="utf-8")
        else:
            text = path.read_text(encoding="utf-8")
        data = json.loads(text, parse_float=Decimal, object_pairs_hook=_unique)
    except _Repeated as exc:
        raise ConfigurationError(
            f"the price table {path or 'shipped with teamstore'} is malformed: {exc}",
            hint="name each model or pattern once, all its prices in one list of entries (and each field of an "
            "entry once); see docs/analysts.md",
        ) from exc
    except (OSError, ValueError) as exc:
        raise ConfigurationError(
            f"could not read the price table {path or 'shipped with teamstore'}: {exc}",
            hint="check TEAMSTORE_PRICES_PATH points at a readable JSON price file",
        ) from exc
    return parse_prices(data, str(path or "data/prices.json"))
