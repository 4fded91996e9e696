"""Cost and usage for notebooks and scripts: the filters and groupings of ``teamstore cost``, as rows or a
pandas DataFrame, and the HTML report of ``teamstore cost report``.

    from teamstore import analytics

    report = analytics.cost(by="team,model", since="7d", top=10)   # synchronous, even in Jupyter
    for row in report.rows:
        print(row.group, row.runs, row.cost)                       # cost: an exact Decimal
    frame = analytics.cost_frame(by="week", team="support_triage") # pip install 'teamstore[analytics]'
    analytics.write_report("cost.html", since="30d")

Each call opens the database the environment names (``TEAMSTORE_DATABASE_URL``, else the embedded
default; pass ``settings=`` for another) and closes it again. See docs/analysts.md.
"""

from __future__ import annotations

from teamstore.analytics.api import cost, cost_frame, write_report
from teamstore.analytics.query import CostQuery, cost_report
from teamstore.audit.cost import CostReport, CostRow
from teamstore.errors import MissingExtra, NoMatchingUsage

__all__ = ["CostQuery", "CostReport", "CostRow", "MissingExtra", "NoMatchingUsage", "cost", "cost_frame",
           "cost_report", "write_report"]
