"""The session listing a page at a time, on SQLite and a real Postgres (both kinds of lease): every row once and in
order however many share a time, a cursor nobody gave refused by name without being quoted, and one user's listing
found by the primary key (asserted on the plan)."""

from __future__ import annotations

import base64
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import orjson
import pytest
from sqlalchemy import event, insert, text
from sqlalchemy.ext.asyncio import AsyncEngine

from teamstore.db.engine import create_engine
from teamstore.db.migrate import upgrade
from teamstore.errors import InvalidCursor
from teamstore.state.base import StateStore
from teamstore.state.factory import store_for
from teamstore.state.schema import sessions

T0 = datetime(2031, 5, 4, 12, 0, 0, 123456, tzinfo=UTC)  # microseconds: a cursor keeps the time exactly


def _row(user_id: str, session_id: str, updated_at: datetime, *, stored: bool = True) -> dict[str, Any]:
    return {"user_id": user_id, "session_id": session_id, "team": "support_triage", "team_version": "v1",
            "schema_version": 1, "agentchat_version": "0.7.5", "fingerprints": {}, "state": '{"x":1}' if stored else None,
            "state_bytes": 7 if stored else 0, "row_version": 1 if stored else 0, "created_at": T0,
            "updated_at": updated_at, "expires_at": updated_at + timedelta(days=1) if stored else None}


async def _insert(engine: AsyncEngine, rows: list[dict[str, Any]]) -> None:
    async with engine.begin() as conn:
        await conn.execute(insert(sessions), rows)


async def _tied(engine: AsyncEngine) -> list[tuple[str, str]]:
    """30 sessions of 5 users at 3 times (10 sessions a time), and a row that holds nothing (never listed);
    returns the listing's order: newest first, then by user id, then by session id, all descending."""
    rows = [_row(f"u{u}", f"s{s}", T0 + timedelta(seconds=(u + s) % 3)) for u in range(5) for s in range(6)]
    await _insert(engine, [*rows, _row("u9", "lease-only", T0 + timedelta(days=1), stored=False)])
    ordered = sorted(rows, key=lambda r: (r["updated_at"], r["user_id"], r["session_id"]), reverse=True)
    return [(r["user_id"], r["session_id"]) for r in ordered]


async def _walk(store: StateStore, limit: int, user_id: str | None = None) -> list[tuple[str, str]]:
    """Every page of the listing, each from the cursor the one before gave."""
    seen: list[tuple[str, str]] = []
    after = None
    while True:
        page = await store.list_sessions_page(user_id, limit, after=after)
        seen += [(s.user_id, s.session_id) for s in page.sessions]
        assert len(page.cursors) == len(page.sessions) <= limit
        if page.next is None:
            return seen
        assert len(page.sessions) == limit and page.next == page.cursors[-1]
        after = page.next


@pytest.mark.parametrize("limit", [1, 4, 7, 29, 30, 31])
async def test_every_page_walked_lists_each_session_once_and_in_order_when_many_share_a_time(
    store: StateStore, limit: int
) -> None:
    expected = await _tied(store.engine)
    assert await _walk(store, limit) == expected
    assert [(s.user_id, s.session_id) for s in await store.list_sessions(limit=100)] == expected


async def test_one_users_pages_and_a_rows_own_cursor_go_on_after_that_row(store: StateStore) -> None:
    expected = await _tied(store.engine)
    assert await _walk(store, 2, "u3") == [key for key in expected if key[0] == "u3"]
    page = await store.list_sessions_page(limit=5)
    later = await store.list_sessions_page(limit=5, after=page.cursors[1])  # from the second row of the page
    assert [(s.user_id, s.session_id) for s in later.sessions] == expected[2:7]
    last = await store.list_sessions_page(limit=5, after=(await store.list_sessions_page(limit=29)).next)
    assert [(s.user_id, s.session_id) for s in last.sessions] == expected[29:] and last.next is None


def _cursor(*fields: Any) -> str:
    return base64.urlsafe_b64encode(orjson.dumps(list(fields))).decode().rstrip("=")


async def test_a_cursor_no_listing_gave_is_refused_by_name_and_never_quoted(store: StateStore) -> None:
    await _tied(store.engine)
    given = (await store.list_sessions_page(limit=1)).cursors[0]
    bad = {
        "empty": "", "too long": "A" * 9000, "not base64": "CANARY-4711!", "cut short": given[:-7],
        "not JSON": base64.urlsafe_b64encode(b"CANARY-4711").decode(),
        "another version": _cursor(2, "2031-05-04", "CANARY-4711", "s1"),
        "an id no session can have": _cursor(1, "2031-05-04", "CANARY-4711", ""),
        "a time neither database keeps": _cursor(1, {"CANARY-4711": 1}, "u1", "s1"),
    }
    if store.engine.dialect.name == "postgresql":
        bad["a time without its zone (SQLite's)"] = _cursor(1, "2031-05-04 12:00:00.123456", "CANARY-4711", "s1")
    for case, cursor in bad.items():
        with pytest.raises(InvalidCursor) as info:
            await store.list_sessions_page(limit=5, after=cursor)
        said = f"{info.value.message} {info.value.hint}"
        assert "cursor" in said and "--after" in said, case
        assert "CANARY" not in said and (not cursor or cursor[:12] not in said), case


async def test_a_page_ends_exactly_after_a_row_whose_time_is_damaged(tmp_path: Path) -> None:
    # SQLite keeps whatever is written into a column; the listing still reads such a row (it is refused when run),
    # and a page that ends on it must not lose or repeat the rows around it.
    engine = create_engine(f"sqlite:///{tmp_path / 'damaged.db'}")
    await upgrade(engine)
    store = store_for(engine)
    await _insert(engine, [_row("u1", f"s{n}", T0) for n in range(6)])
    async with engine.begin() as conn:
        for session, damage in (("s1", "'garbage'"), ("s2", "12345"), ("s3", "x'00ff'"), ("s4", "'garbage'")):
            await conn.execute(text(f"UPDATE ts_sessions SET updated_at = {damage} WHERE session_id = '{session}'"))
    everything = [(s.user_id, s.session_id) for s in await store.list_sessions(limit=100)]
    assert sorted(everything) == [("u1", f"s{n}") for n in range(6)]
    for limit in (1, 2, 4):
        assert await _walk(store, limit) == everything
    await store.aclose()
    await engine.dispose()


async def _plans(engine: AsyncEngine, store: StateStore, user_id: str | None) -> list[str]:
    """The plans of the listing's statements, as the store sends them: the first page and one after a cursor."""
    sent: list[tuple[str, Any]] = []

    def note(_conn: Any, _cursor: Any, statement: str, parameters: Any, *_: Any) -> None:
        if "FROM ts_sessions" in statement:
            sent.append((statement, parameters))

    event.listen(engine.sync_engine, "before_cursor_execute", note)
    first = await store.list_sessions_page(user_id, 100)
    await store.list_sessions_page(user_id, 100, after=first.cursors[3])
    event.remove(engine.sync_engine, "before_cursor_execute", note)
    plans = []
    async with engine.connect() as conn:
        for statement, parameters in sent:
            if engine.dialect.name == "sqlite":
                found = await conn.exec_driver_sql(f"EXPLAIN QUERY PLAN {statement}", parameters)
                plans.append("\n".join(str(row[-1]) for row in found))
            else:
                found = await conn.exec_driver_sql(f"EXPLAIN {statement}", parameters)
                plans.append("\n".join(str(row[0]) for row in found))
    return plans


async def _many(engine: AsyncEngine) -> None:
    """3,000 sessions of 300 users, with the statistics a database of them keeps."""
    rows = [_row(f"user-{n % 300:03d}", f"session-{n:04d}", T0 - timedelta(seconds=n)) for n in range(3000)]
    await _insert(engine, rows)
    async with engine.begin() as conn:
        await conn.exec_driver_sql("ANALYZE")


async def test_one_users_listing_finds_their_rows_by_the_primary_key(store: StateStore) -> None:
    # A user's rows are bounded (TEAMSTORE_MAX_SESSIONS_PER_USER, and expired ones until swept): found by the
    # key and sorted, never by reading the whole table for them.
    await _many(store.engine)
    for plan in await _plans(store.engine, store, "user-007"):
        assert "sqlite_autoindex_ts_sessions_1 (user_id=?)" in plan or "Index Cond: ((user_id)::text =" in plan, plan
        assert "Seq Scan" not in plan and "SCAN ts_sessions\n" not in plan + "\n", plan
