"""A small ledger whose every figure is worked out by hand below, written through the ledger's own writer.

Prices (per million tokens): ``m-big`` 3 in / 15 out; the pattern ``m-small-*`` 0.15 / 0.60; ``mystery``
has none. Five runs:

| run | user / session | team@version | day (ISO week) | how it ended | rows: agent model in out calls | cost |
|---|---|---|---|---|---|---|
| r1 | alice / s1 | support@v1 | 2026-11-02 (W45) | completed | triage m-big 1000 200 2; critic m-small-2024 2000 100 1 | 0.006 + 0.00036 = 0.00636 |
| r2 | alice / s2 | support@v1 | 2026-11-09 (W46) | a limit | triage m-big 500 100 1 | 0.003 |
| r3 | bob / s1 | sales@v2 | 2026-12-01 (W49) | completed | triage m-small-2024 10000 1000 3; triage mystery 50 5 1 | 0.0021 + unknown (55 tokens) |
| r4 | carol / c1 | support@v1 | 2026-11-02 (W45) | failed | triage m-big 100 10 1 | 0.00045 |
| r5 | dave / d1 | support@v1 | 2026-11-09 (W46) | completed | triage m-big 0 200 1 | 0.003 |

Total: 0.01491 (0.003 of it in a run ended by a limit), 3 completed, 1 limited, 1 failed, 10 calls,
13650 tokens in and 1615 out, 55 of them unpriced (``mystery``).
"""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

from sqlalchemy.ext.asyncio import AsyncEngine

from teamstore.audit.ledger import record_usage
from teamstore.audit.prices import parse_prices
from teamstore.audit.subjects import ensure_subject, session_key

PRICES = parse_prices({"version": "hand-1", "currency": "USD", "models": {
    "m-big": [{"effective_from": "2020-01-01", "input": 3, "output": 15}],
    "m-small-*": [{"effective_from": "2020-01-01", "input": Decimal("0.15"), "output": Decimal("0.60")}],
}})

RUNS = [
    ("r1", "alice", "s1", "support", "v1", "2026-11-02", "completed",
     [("triage", "m-big", 1000, 200, 2), ("critic", "m-small-2024", 2000, 100, 1)]),
    ("r2", "alice", "s2", "support", "v1", "2026-11-09", "limited", [("triage", "m-big", 500, 100, 1)]),
    ("r3", "bob", "s1", "sales", "v2", "2026-12-01", "completed",
     [("triage", "m-small-2024", 10000, 1000, 3), ("triage", "mystery", 50, 5, 1)]),
    ("r4", "carol", "c1", "support", "v1", "2026-11-02", "failed", [("triage", "m-big", 100, 10, 1)]),
    ("r5", "dave", "d1", "support", "v1", "2026-11-09", "completed", [("triage", "m-big", 0, 200, 1)]),
]
TOTAL = Decimal("0.01491")


async def seed_ledger(engine: AsyncEngine, runs: list[Any] | None = None) -> None:
    """Write the five runs (or ``runs``, of their shape; a row may end with its calls of unknown usage):
    subjects, ledger rows and the session ids beside their keys."""
    for run_id, user, session, team, version, day, ended, rows in RUNS if runs is None else runs:
        subject, secret = await ensure_subject(engine, user)
        started = datetime.fromisoformat(day).replace(hour=10, tzinfo=UTC)
        common = {"run_id": run_id, "team": team, "team_version": version, "subject_key": subject,
                  "session_key": session_key(secret, session), "stop_reason": None,
                  "ended_by_limit": ended == "limited", "run_failed": ended == "failed", "started_at": started,
                  "finished_at": started, "day": started.date(), "purpose": "agent", "failed_calls": 0}
        await record_usage(engine, [{**common, "agent": agent, "model": model, "input_tokens": tokens_in,
                                     "output_tokens": tokens_out, "calls": calls, "failed_calls": sum(unknown)}
                                    for agent, model, tokens_in, tokens_out, calls, *unknown in rows], session)
