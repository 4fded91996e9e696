"""The resume-state SQL, written once in SQLAlchemy Core for both databases.

    from teamstore.state.statements import live_count, never_saved

    stmt = delete(sessions).where(never_saved())
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import and_, case, exists, func, select, true

from teamstore.state.schema import sessions


def never_saved() -> Any:
    """A row a row-lease worker made to hold a new session's lease, before the session's first save."""
    return and_(sessions.c.row_version == 0, sessions.c.state.is_(None))


def live(now: Any) -> Any:
    """A stored session that has not expired: what the per-user bound counts. A row made to lease a new
    session has no expiry until its first save, so it does not count. (Postgres's load statements count
    through ``ts_live_sessions``, migration 0008, which says the same.)"""
    return sessions.c.expires_at > now


def live_count(user_id: Any, now: Any) -> Any:
    """How many live sessions ``user_id`` keeps, as a scalar subquery."""
    return select(func.count()).select_from(sessions).where(sessions.c.user_id == user_id, live(now)).scalar_subquery()


def room(user_id: Any, session_id: Any, now: Any, limit: Any) -> Any:
    """Whether the session may be opened under the per-user bound ``limit`` (NULL: no bound): its own row
    is live (a resume, never refused), or its user keeps fewer live sessions than ``limit``. The count sits
    in the CASE's last branch, which neither database evaluates for a resume."""
    resumed = exists().where(sessions.c.user_id == user_id, sessions.c.session_id == session_id, live(now))
    return case((limit.is_(None), true()), (resumed, true()), else_=live_count(user_id, now) < limit)
