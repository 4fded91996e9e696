"""A session opened on a host whose clock disagrees with the database's is judged expired or not on the
database server's clock, as its expiry was written (Postgres, both kinds of lease). A skewed host is this
process with its clock moved (:func:`tests.clocks.host_clock`)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from sqlalchemy import Interval, func, literal, update

from teamstore.runtime.platform import Platform
from teamstore.state.schema import sessions
from tests.clocks import host_clock
from tests.runtime.test_sessions import researcher_reply, talk

pytestmark = pytest.mark.postgres
POSTGRES = pytest.mark.parametrize("backend", ["postgres", "postgres-row"], indirect=True)
SKEW = timedelta(minutes=6)


async def _expiring_in(platform: Platform, left: timedelta) -> None:
    """Move the session's expiry ``left`` from now by the database's clock (before now if negative)."""
    async with platform.engine.begin() as conn:
        await conn.execute(update(sessions).values(expires_at=func.now() + literal(left, Interval())))


@POSTGRES
async def test_a_host_whose_clock_runs_ahead_resumes_a_session_the_database_keeps(platform: Platform) -> None:
    await talk(platform, "alice", "s1", "My router ZX-81 drops every evening")
    await _expiring_in(platform, timedelta(minutes=3))
    with host_clock(SKEW):
        result, outcome = await talk(platform, "alice", "s1", "still broken")
    assert outcome.outcome == "resumed" and "ZX-81" in researcher_reply(result)


@POSTGRES
async def test_a_host_whose_clock_runs_behind_starts_afresh_a_session_the_database_has_expired(
    platform: Platform,
) -> None:
    await talk(platform, "alice", "s1", "My router ZX-81 drops every evening")
    await _expiring_in(platform, -timedelta(minutes=3))
    with host_clock(-SKEW):
        result, outcome = await talk(platform, "alice", "s1", "still broken")
    assert outcome.outcome == "expired" and "ZX-81" not in researcher_reply(result)
