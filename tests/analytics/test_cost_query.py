"""Every grouping and filter of a cost report against the figures worked out by hand in ``seed.py``, on
SQLite and a real Postgres."""

from __future__ import annotations

import json
import re
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from pathlib import Path

import pytest
from sqlalchemy import delete, update
from sqlalchemy.ext.asyncio import AsyncEngine

from teamstore.analytics.query import CostQuery, cost_report, parse_when
from teamstore.audit.cost import CostReport, CostRow, query_costs
from teamstore.audit.cost_report import costliest
from teamstore.audit.cost_sums import GroupSums
from teamstore.audit.prices import parse_prices
from teamstore.audit.schema import subject_sessions, subjects, usage
from teamstore.audit.subjects import find_subject
from teamstore.audit.transcripts.local import LocalTranscriptStore
from teamstore.erasure.steps.base import StepContext
from teamstore.erasure.steps.database import LedgerRows
from teamstore.errors import ConfigurationError, NoMatchingUsage
from tests.analytics.seed import PRICES, TOTAL, seed_ledger

D = Decimal
NOW = datetime(2026, 12, 2, 12, 0, tzinfo=UTC)


async def _report(engine: AsyncEngine, by: str, **filters: object) -> CostReport:
    return await cost_report(engine, PRICES, CostQuery.build(by, now=NOW, **filters))  # type: ignore[arg-type]


def _costs(report: CostReport) -> dict[str, Decimal | None]:
    return {row.key: row.cost for row in report.rows}


GROUPINGS = {
    "team": {"sales": D("0.0021"), "support": D("0.01281")},
    "version": {"sales@v2": D("0.0021"), "support@v1": D("0.01281")},
    "model": {"m-big": D("0.01245"), "m-small-2024": D("0.00246"), "mystery": None},
    "agent": {"critic": D("0.00036"), "triage": D("0.01455")},
    "day": {"2026-11-02": D("0.00681"), "2026-11-09": D("0.006"), "2026-12-01": D("0.0021")},
    "week": {"2026-W45": D("0.00681"), "2026-W46": D("0.006"), "2026-W49": D("0.0021")},
    "month": {"2026-11": D("0.01281"), "2026-12": D("0.0021")},
    "user": {"alice": D("0.00936"), "bob": D("0.0021"), "carol": D("0.00045"), "dave": D("0.003")},
    "session": {"alice / s1": D("0.00636"), "alice / s2": D("0.003"), "bob / s1": D("0.0021"),
                "carol / c1": D("0.00045"), "dave / d1": D("0.003")},
    "team,model": {"sales / m-small-2024": D("0.0021"), "sales / mystery": None,
                   "support / m-big": D("0.01245"), "support / m-small-2024": D("0.00036")},
    "week,team": {"2026-W45 / support": D("0.00681"), "2026-W46 / support": D("0.006"),
                  "2026-W49 / sales": D("0.0021")},
    "month,user": {"2026-11 / alice": D("0.00936"), "2026-11 / carol": D("0.00045"), "2026-11 / dave": D("0.003"),
                   "2026-12 / bob": D("0.0021")},
}


@pytest.mark.parametrize("by", list(GROUPINGS))
async def test_every_grouping_gives_the_hand_worked_costs_and_the_same_total(ledger: AsyncEngine, by: str) -> None:
    report = await _report(ledger, by)
    assert _costs(report) == GROUPINGS[by]
    assert [row.key for row in report.rows] == sorted(GROUPINGS[by])  # in the order of the group
    total = report.total
    assert (total.cost, total.limited_cost, total.unpriced_tokens, total.unpriced_models) == (
        TOTAL, D("0.003"), 55, ["mystery"])
    assert (total.runs_completed, total.runs_limited, total.runs_failed, total.calls) == (3, 1, 1, 10)
    assert (total.input_tokens, total.output_tokens) == (13650, 1615)
    assert sum(row.calls for row in report.rows) == 10
    assert report.price_version == "hand-1" and report.readable and report.groups == len(GROUPINGS[by])


async def test_a_grouping_counts_runs_by_how_they_ended_in_each_group(ledger: AsyncEngine) -> None:
    by_model = {row.key: row for row in (await _report(ledger, "model")).rows}
    big = by_model["m-big"]
    assert (big.runs_completed, big.runs_limited, big.runs_failed) == (2, 1, 1)  # r1 r5; r2; r4
    assert (big.limited_cost, big.input_tokens, big.output_tokens) == (D("0.003"), 1600, 510)
    mystery = by_model["mystery"]  # no price: tokens counted, cost unknown, never 0
    assert (mystery.cost, mystery.limited_cost, mystery.unpriced_tokens, mystery.runs_completed) == (None, None, 55, 1)
    week = {row.key: row for row in (await _report(ledger, "week")).rows}["2026-W46"]
    assert (week.runs_completed, week.runs_limited, week.group) == (1, 1, {"week": "2026-W46"})


async def test_users_and_sessions_read_as_ids_or_as_keys_when_pseudonymous(ledger: AsyncEngine) -> None:
    readable = await _report(ledger, "session", user="alice")
    assert readable.fields == ("user", "session")
    assert [row.group for row in readable.rows] == [{"user": "alice", "session": "s1"},
                                                    {"user": "alice", "session": "s2"}]
    keys = await _report(ledger, "session", user="alice", pseudonymous=True)
    assert keys.fields == ("session_key",) and not keys.readable
    assert all(len(row.key) == 32 and "alice" not in row.key for row in keys.rows)
    assert keys.filters == {"user": "(given)"} and readable.filters == {"user": "alice"}
    both = await _report(ledger, "user,session")
    assert both.fields == ("user", "session") and len(both.rows) == 5


async def test_an_erased_user_and_their_sessions_read_as_erased(ledger: AsyncEngine) -> None:
    bob = await find_subject(ledger, "bob")
    async with ledger.begin() as conn:  # what the erasure's ledger, session_ids and subject steps leave
        await conn.execute(update(usage).where(usage.c.subject_key == bob).values(subject_key=None,
                                                                                   session_key="f" * 32))
        await conn.execute(delete(subject_sessions).where(subject_sessions.c.subject_key == bob))
        await conn.execute(delete(subjects).where(subjects.c.subject_key == bob))
    assert _costs(await _report(ledger, "user"))["erased"] == D("0.0021")
    by_session = _costs(await _report(ledger, "session"))
    assert by_session[f"erased / erased-{'f' * 12}"] == D("0.0021") and sum(c or 0 for c in by_session.values()) == TOTAL
    assert "erased" in _costs(await _report(ledger, "user", pseudonymous=True))


async def test_each_session_of_an_erased_user_reads_apart_under_a_label_that_names_no_one(
    ledger: AsyncEngine, tmp_path: Path
) -> None:
    """Two sessions of one erased user are two rows a reader can tell apart (not two ``erased / erased``),
    each labelled the same in every report, by the start of the key ``--pseudonymous`` shows."""
    alice = await find_subject(ledger, "alice")
    ctx = StepContext(ledger, LocalTranscriptStore(tmp_path), "req-1", "alice", alice)
    async with ledger.begin() as conn:  # what the erasure's ledger, session_ids and subject steps leave
        await LedgerRows(usage, lambda c: usage.c.subject_key == c.subject_key).delete(conn, ctx)
        await conn.execute(delete(subject_sessions).where(subject_sessions.c.subject_key == alice))
        await conn.execute(delete(subjects).where(subjects.c.subject_key == alice))

    report = await _report(ledger, "session")
    erased = {row.group["session"]: row.cost for row in report.rows if row.group["user"] == "erased"}
    assert sorted(erased.values()) == [D("0.003"), D("0.00636")]  # s2 and s1, each its own row
    assert len({row.key for row in report.rows}) == len(report.rows) == 5
    keys = [row.key for row in (await _report(ledger, "session", pseudonymous=True)).rows]
    for label in erased:
        assert re.fullmatch(r"erased-[0-9a-f]{12}", label)
        assert sum(key.startswith(label.removeprefix("erased-")) for key in keys) == 1
    (costliest,) = (await _report(ledger, "session", top=1)).rows
    assert costliest.group == {"user": "erased", "session": next(k for k, c in erased.items() if c == D("0.00636"))}
    rows = report.to_dict()["rows"]  # what --format json prints
    assert sorted(r["session"] for r in rows if r["user"] == "erased") == sorted(erased)
    assert "alice" not in json.dumps(rows) and alice not in json.dumps(rows)


async def test_a_live_user_whose_id_is_erased_keeps_her_rows_and_sessions_apart_from_the_erased(
    ledger: AsyncEngine,
) -> None:
    """Only rows the erasure de-linked read as erased: a live user whose id is ``erased`` keeps her session
    ids, and reads as ``'erased`` (an id that starts with ``'`` gets one more) in every format."""
    await seed_ledger(ledger, [
        ("r6", "erased", "s1", "support", "v1", "2026-11-09", "completed", [("triage", "m-big", 1000, 0, 1)]),
        ("r7", "'erased", "s1", "support", "v1", "2026-11-09", "completed", [("triage", "m-big", 0, 100, 1)])])
    bob = await find_subject(ledger, "bob")
    async with ledger.begin() as conn:  # bob erased: what the erasure's steps leave
        await conn.execute(update(usage).where(usage.c.subject_key == bob).values(subject_key=None,
                                                                                   session_key="f" * 32))
        await conn.execute(delete(subject_sessions).where(subject_sessions.c.subject_key == bob))
        await conn.execute(delete(subjects).where(subjects.c.subject_key == bob))

    by_user = _costs(await _report(ledger, "user"))
    assert (by_user["erased"], by_user["'erased"], by_user["''erased"]) == (D("0.0021"), D("0.003"), D("0.0015"))
    by_session = _costs(await _report(ledger, "session"))
    assert by_session["'erased / s1"] == D("0.003") and by_session["''erased / s1"] == D("0.0015")
    assert by_session[f"erased / erased-{'f' * 12}"] == D("0.0021")
    assert sum(key.startswith("erased / ") for key in by_session) == 1
    rows = (await _report(ledger, "user")).to_dict()["rows"]  # what --format json prints
    assert sorted(r["user"] for r in rows) == sorted(["alice", "carol", "dave", "erased", "'erased", "''erased"])
    assert (await _report(ledger, "team", user="erased")).total.cost == D("0.003")  # found by her own id


async def test_a_session_whose_id_was_never_recorded_reads_as_its_key(ledger: AsyncEngine) -> None:
    async with ledger.begin() as conn:  # a run recorded before teamstore kept session ids
        await conn.execute(delete(subject_sessions))
    rows = (await _report(ledger, "session", user="carol")).rows
    assert rows[0].group["user"] == "carol" and len(rows[0].group["session"]) == 32


FILTERS = [
    ({"team": "support"}, D("0.01281")),
    ({"model": "m-big"}, D("0.01245")),
    ({"user": "alice"}, D("0.00936")),
    ({"user": "alice", "session": "s2"}, D("0.003")),
    ({"since": "2026-11-09"}, D("0.0081")),
    ({"until": "2026-11-09"}, D("0.00681")),
    ({"since": "2026-11-03", "until": "2026-12-01"}, D("0.006")),
    ({"since": date(2026, 11, 3), "until": datetime(2026, 12, 1, tzinfo=UTC)}, D("0.006")),
    ({"since": "2026-11-09T11:00:00+02:00"}, D("0.0081")),  # 09:00Z, before the 10:00Z runs of that day
    ({"since": "7d"}, D("0.0021")),  # back from 2026-12-02 12:00Z
    ({"team": "support", "model": "m-small-2024"}, D("0.00036")),
    ({"team": "support", "since": "2026-11-05", "user": "dave"}, D("0.003")),
]


@pytest.mark.parametrize(("filters", "cost"), FILTERS)
async def test_every_filter_narrows_to_the_hand_worked_total(
    ledger: AsyncEngine, filters: dict[str, object], cost: Decimal
) -> None:
    report = await _report(ledger, "team", **filters)
    assert report.total.cost == cost and sum(row.cost or 0 for row in report.rows) == cost


async def test_top_keeps_the_costliest_groups_ties_by_tokens_and_the_total_counts_every_group(
    ledger: AsyncEngine,
) -> None:
    report = await _report(ledger, "session", top=3)
    # alice / s2 and dave / d1 both cost 0.003: alice's 600 tokens rank before dave's 200.
    assert [(row.key, row.cost) for row in report.rows] == [
        ("alice / s1", D("0.00636")), ("alice / s2", D("0.003")), ("dave / d1", D("0.003"))]
    assert (report.top, report.groups, report.total.cost) == (3, 5, TOTAL)
    assert [row.key for row in (await _report(ledger, "model", top=1)).rows] == ["m-big"]


async def test_top_sessions_are_priced_one_session_at_a_time_and_agree_with_the_whole_report(
    engine: AsyncEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    runs = [(f"r{i}", f"user{i % 3}", f"s{i}", "support", "v1", f"2026-11-{1 + i % 9:02d}", "limited" if i % 4 else
             "completed", [("triage", "m-big", 100 * (i % 7), 10 * i, 1), ("critic", "m-small-2024", 50 * i, 5, 1)])
            for i in range(24)]
    await seed_ledger(engine, runs)
    whole = await query_costs(engine, PRICES, "session")
    held: list[int] = []
    add_tokens = GroupSums.add_tokens

    def counting(rows: GroupSums, values: dict[str, object], sums: tuple[object, object, object]) -> None:
        held.append(len(rows.groups))
        add_tokens(rows, values, sums)

    monkeypatch.setattr(GroupSums, "add_tokens", counting)
    top = await query_costs(engine, PRICES, "session", top=3)
    # A report of millions of sessions held every one of them to keep three.
    assert max(held) <= 2 * 3 + 1
    assert top.rows == sorted(whole.rows, key=costliest)[:3] and (top.groups, top.total) == (24, whole.total)


SPANNING = ("week", "month", "session,month", "month,session", "week,team", "user,week", "model,month")
"""Groupings by weeks or months, whose groups each gather several days of the ledger."""
CHANGING = parse_prices({"version": "hand-2", "currency": "USD", "models": {  # m-big's price changes mid-month
    "m-big": [{"effective_from": "2020-01-01", "input": 3, "output": 15},
              {"effective_from": "2026-02-17", "input": 2, "output": 11}],
    "m-small-*": [{"effective_from": "2020-01-01", "input": Decimal("0.15"), "output": Decimal("0.60")}],
}})


async def _seed_months(engine: AsyncEngine) -> None:
    """Six sessions of three users with a run every five days for ten months across a new year (ISO week
    2026-W01 starts on 2025-12-29), some ended by a limit or failed, some with a model that has no price."""
    start = date(2025, 11, 3)
    await seed_ledger(engine, [
        (f"r{i}", f"user{i % 3}", f"s{i % 6}", f"team{i % 2}", "v1", (start + timedelta(days=5 * i)).isoformat(),
         ("completed", "limited", "failed")[i % 3 if i % 4 else 0],
         [("triage", "m-big", 100 * (i % 7), 10 * i, 1), ("critic", "mystery" if i % 5 == 0 else "m-small-2024",
                                                          50 * i, 5, 1)])
        for i in range(60)])


async def test_top_weeks_and_months_are_priced_one_group_at_a_time_and_hold_at_most_twice_top(
    engine: AsyncEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    await _seed_months(engine)
    whole = await query_costs(engine, CHANGING, "session,month")
    held: list[int] = []
    row = GroupSums.row

    def counting(rows: GroupSums, values: dict[str, object]) -> CostRow:  # each record's tokens, then its runs
        held.append(len(rows.groups))
        return row(rows, values)

    monkeypatch.setattr(GroupSums, "row", counting)
    top = await query_costs(engine, CHANGING, "session,month", top=3)
    # Years of ledger by session and month held every (session, month) to keep three.
    assert len(whole.rows) > 50 and max(held) <= 2 * 3 + 1
    assert top.rows == sorted(whole.rows, key=costliest)[:3] and (top.groups, top.total) == (whole.groups, whole.total)


async def test_top_weeks_and_months_alone_or_with_another_dimension_are_the_whole_reports_costliest(
    engine: AsyncEngine,
) -> None:
    await _seed_months(engine)
    for by in SPANNING:
        whole = await query_costs(engine, CHANGING, by)
        for n in (1, 4, len(whole.rows) + 1):
            top = await query_costs(engine, CHANGING, by, top=n)
            assert top.rows == sorted(whole.rows, key=costliest)[:n], (by, n)
            assert (top.groups, top.total) == (whole.groups, whole.total), (by, n)
        assert all(row.runs for row in whole.rows) and whole.total.unpriced_tokens, by


@pytest.mark.parametrize(("filters", "message", "suggestions"), [
    ({"user": "alicia"}, "the ledger holds no run of the user given with --user", ()),
    ({"user": "alice", "session": "s9"}, "the ledger holds no run of that session of the user", ()),
    ({"team": "suport"}, "the ledger holds no run of the team given with --team", ("support",)),
    ({"model": "m-bgi"}, "the ledger holds no run of the model given with --model", ("m-big",)),
    ({"team": "sales", "model": "m-big"}, "no run matches these filters together (each matches runs on its own)", ()),
    ({"since": "2026-12-02"}, "no run matching these filters started in [2026-12-02T00:00:00+00:00, ...)", ()),
    ({"since": "2099-01-01"}, "--since 2099-01-01T00:00:00+00:00 is in the future: no run has started since", ()),
    ({"since": "3w", "until": "2w"}, "no run matching these filters started in [2026-11-11T12:00:00+00:00, "
                                     "2026-11-18T12:00:00+00:00)", ()),
])
async def test_a_filter_that_matches_nothing_says_which_and_suggests_near_names(
    ledger: AsyncEngine, filters: dict[str, object], message: str, suggestions: tuple[str, ...]
) -> None:
    with pytest.raises(NoMatchingUsage) as caught:
        await _report(ledger, "team", **filters)
    assert caught.value.message == message and caught.value.suggestions == suggestions
    assert caught.value.hint and "alice" not in caught.value.hint and "bob" not in caught.value.hint
    assert "alicia" not in str(caught.value)  # the id given is never repeated: the line may reach a log
    empty = caught.value.report
    assert isinstance(empty, CostReport) and empty.rows == [] and empty.total.cost == 0


async def test_the_window_hint_gives_the_span_of_the_runs_the_other_filters_match(ledger: AsyncEngine) -> None:
    with pytest.raises(NoMatchingUsage) as caught:
        await _report(ledger, "team", team="sales", until="2026-11-30")
    assert caught.value.hint is not None and "2026-12-01T10:00:00" in caught.value.hint


async def test_an_empty_ledger_says_so(engine: AsyncEngine) -> None:
    with pytest.raises(NoMatchingUsage, match="the ledger holds no runs yet"):
        await _report(engine, "team")


@pytest.mark.parametrize(("by", "fix"), [("planet", "give one dimension, or two"), ("team,model,agent", "one dimension or two"),
                                         ("team,team", "one dimension or two"), ("day,week", "one of day, week")])
def test_a_grouping_that_cannot_be_made_is_a_typed_error(by: str, fix: str) -> None:
    with pytest.raises(ConfigurationError) as caught:
        CostQuery.build(by)
    assert caught.value.message.startswith("Invalid value for '--by': it takes one or two")
    assert caught.value.hint and fix in caught.value.hint and by not in str(caught.value) + caught.value.hint


@pytest.mark.parametrize(("value", "expected"), [
    ("7d", datetime(2026, 11, 25, 12, 0, tzinfo=UTC)), ("24h", datetime(2026, 12, 1, 12, 0, tzinfo=UTC)),
    ("2w", datetime(2026, 11, 18, 12, 0, tzinfo=UTC)), ("2026-11-01", datetime(2026, 11, 1, tzinfo=UTC)),
    ("2026-11-01T02:00:00+02:00", datetime(2026, 11, 1, tzinfo=UTC)), (date(2026, 11, 1), datetime(2026, 11, 1, tzinfo=UTC)),
])
def test_dates_are_absolute_or_back_from_now(value: str | date, expected: datetime) -> None:
    assert parse_when(value, "--since", NOW) == expected


@pytest.mark.parametrize("args", [{"since": "yesterday"}, {"since": "7x"}, {"top": 0}, {"since": "999999w"},
                                  {"since": "2026-12-01", "until": "2026-11-01"}, {"session": "s1"}])
def test_a_malformed_query_is_refused_with_its_fix(args: dict[str, object]) -> None:
    with pytest.raises(ConfigurationError) as caught:
        CostQuery.build("team", **args)  # type: ignore[arg-type]
    assert caught.value.hint
