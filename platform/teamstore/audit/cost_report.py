"""What a cost report holds: its rows (a group's figures, or the total), the prices it used, and the forms it is
written out in (a dictionary for JSON, a pandas DataFrame). Pure: nothing here reads the ledger;
:func:`teamstore.audit.cost.query_costs` makes the reports.

    from decimal import Decimal
    from teamstore.audit.cost_report import CostRow, costliest, money

    row = CostRow(key="support_triage / gpt-4o", input_tokens=1200, output_tokens=300)
    row.tokens                        # 1500
    money(Decimal("7.5E-5"))          # "0.000075"
    sorted(report.rows, key=costliest)  # a report's rows, the costliest first
"""

from __future__ import annotations

from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any, ClassVar

from teamstore.errors import MissingExtra

__all__ = ["CostReport", "CostRow", "costliest", "money"]


@dataclass(slots=True)  # a full listing holds one per group: hundreds of thousands
class CostRow:
    """One group of the report (or its total).

    Attributes:
        key: The group's values joined for display (``support_triage / gpt-4o``); ``total`` for the total.
        group: Each column of the group and its value: ``{"team": ..., "model": ...}``; a session reads
            as ``user`` and ``session`` in a readable report, ``session_key`` in a pseudonymous one.
        cost: Exact, in the report's currency; ``None`` when none of the tokens has a price.
        limited_cost: The part of ``cost`` spent in runs ended by a limit (``None`` when ``cost`` is).
        limited_unpriced_tokens: Of ``unpriced_tokens``, those spent in runs ended by a limit: when any, the
            limited cost is ``limited_cost`` plus an unknown part.
        unknown_usage_calls: Of ``calls``, those whose usage is unknown (failed, cancelled, or answered without
            their usage): counted with no tokens, so when any, the cost is ``cost`` plus an unknown part
            (``cost`` is ``None`` when no call of the group has known tokens).
        raw: The ledger's values per dimension (keys, not ids), for the readable names.
    """

    key: str
    group: dict[str, str] = field(default_factory=dict)
    runs_completed: int = 0
    runs_limited: int = 0
    runs_failed: int = 0
    runs_interrupted: int = 0
    """Runs continued (or abandoned) after they stopped mid-run; each also counts as it ended."""
    calls: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cost: Decimal | None = None
    limited_cost: Decimal | None = None
    unpriced_tokens: int = 0
    unpriced_models: list[str] = field(default_factory=list)
    limited_unpriced_tokens: int = 0
    unknown_usage_calls: int = 0
    raw: tuple[tuple[Any, ...], ...] = field(default=(), repr=False, compare=False)

    FIGURES: ClassVar[tuple[str, ...]] = (
        "runs_completed", "runs_limited", "runs_failed", "runs_interrupted", "calls", "input_tokens", "output_tokens", "cost",
        "limited_cost", "unpriced_tokens", "unpriced_models", "limited_unpriced_tokens", "unknown_usage_calls")

    @property
    def runs(self) -> int:
        """Every run of the group: completed, ended by a limit, or failed."""
        return self.runs_completed + self.runs_limited + self.runs_failed

    @property
    def tokens(self) -> int:
        """Input and output tokens."""
        return self.input_tokens + self.output_tokens

    def figures(self) -> dict[str, Any]:
        """The row's figures, money as exact decimal text (JSON and CSV carry these)."""
        found: dict[str, Any] = {name: getattr(self, name) for name in self.FIGURES}
        found.update(cost=money(self.cost), limited_cost=money(self.limited_cost),
                     unpriced_models=list(self.unpriced_models))
        return found


def money(value: Decimal | None) -> str | None:
    """An exact amount as plain decimal text (``0.000075``, never ``7.5E-5``); ``None`` stays ``None``."""
    if value is None:
        return None
    text = format(value, "f")
    return text.rstrip("0").rstrip(".") if "." in text else text


def costliest(row: CostRow) -> tuple[Decimal, int, str]:
    """Sorts rows costliest first, ties by tokens, then by the ledger's key (an unknown cost as 0)."""
    return -(row.cost or Decimal(0)), -row.tokens, row.key


@dataclass
class CostReport:
    """A cost report: its rows, its total and the prices it used.

    Attributes:
        by: The dimensions, comma-separated as given (``team,model``).
        fields: The group's columns, in order (a readable session is two: ``user``, ``session``).
        readable: Users and sessions read as the application's ids (else pseudonymous keys).
        groups: How many groups matched (more than ``rows`` when ``top`` cut the list).
        top: The ``--top`` the rows were cut to, if any; the total always counts every group.
        filters: The filters as given, for the reader (ids only in a readable report).
    """

    by: str
    price_version: str
    currency: str
    rows: list[CostRow]
    total: CostRow
    fields: tuple[str, ...] = ()
    readable: bool = False
    groups: int = 0
    top: int | None = None
    filters: dict[str, str] = field(default_factory=dict)

    def to_pandas(self) -> Any:
        """The rows as a pandas DataFrame: the group's columns, then the figures (money as exact
        :class:`~decimal.Decimal`; ``.astype(float)`` to plot). The total is not a row of it.

        Raises:
            MissingExtra: pandas is not installed (``pip install 'teamstore[analytics]'``).
        """
        try:
            import pandas
        except ImportError as exc:
            raise MissingExtra("a DataFrame of a cost report", "analytics", "pandas") from exc
        figures = list(CostRow.FIGURES)
        records = [[*(r.group.get(f) for f in self.fields), *(getattr(r, f) for f in figures)] for r in self.rows]
        return pandas.DataFrame(records, columns=[*self.fields, *figures])

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dictionary: each row its group's columns, ``key`` and figures; money as strings."""
        return {
            "by": self.by, "fields": list(self.fields), "readable": self.readable,
            "price_version": self.price_version, "currency": self.currency,
            "groups": self.groups, "top": self.top, "filters": dict(self.filters),
            "rows": [{**r.group, "key": r.key, **r.figures()} for r in self.rows],
            "total": {"key": self.total.key, **self.total.figures()},
        }
