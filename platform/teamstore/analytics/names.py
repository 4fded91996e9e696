"""Users and sessions of a cost report read as the application's own ids, or ``erased``.

    from teamstore.analytics.names import name_rows

    await name_rows(engine, report.rows, ("session",))   # row.group: {"user": "alice", "session": "s1"}

The ledger holds pseudonymous keys. A subject key is read back through the subject mapping
(``ts_subjects``), a session key through the session ids recorded beside it (``ts_subject_sessions``).
A user erased since (the ledger's link cleared, or the mapping gone) reads as ``erased``; each of their
sessions as ``erased-`` and the start of its key in the ledger (``erased-3f9a2c1d04be``), so that every
session stays a row of its own that a reader can tell apart and find again. A live user whose id is itself
``erased`` reads as ``'erased`` (:func:`user_label`), her sessions by their ids. A session of a known user whose
id was never recorded (run before teamstore recorded session ids, its resume state gone by the upgrade)
reads as its session key.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

from sqlalchemy import Column, ColumnElement, FromClause, Subquery, case, func, literal, or_, select
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from teamstore.audit.cost import ERASED, CostRow
from teamstore.audit.cost_sql import Label, key_labels
from teamstore.audit.schema import subject_sessions, subjects
from teamstore.db.snapshot import reading

CHUNK = 500
"""Keys looked up per statement (an IN list well under every driver's parameter limit)."""
ERASED_SESSION_CHARS = 12
"""How much of an erased session's key its label shows: 48 bits, so two sessions do not read alike."""


async def _lookup(conn: AsyncConnection, key: Column[Any], value: Column[Any],
                  wanted: Iterable[str]) -> dict[str, str]:
    keys, found = sorted(set(wanted)), {}
    for start in range(0, len(keys), CHUNK):
        query = select(key, value).where(key.in_(keys[start:start + CHUNK]))
        found.update({str(k): str(v) for k, v in (await conn.execute(query)).all()})
    return found


def _keys(rows: Sequence[CostRow], dims: Sequence[str]) -> tuple[set[str], set[str]]:
    subject_keys, session_keys = set(), set()
    for row in rows:
        for dim, values in zip(dims, row.raw, strict=True):
            if dim == "session":
                session_keys.add(str(values[0]))
            if dim in ("session", "user") and values[-1] is not None:
                subject_keys.add(str(values[-1]))
    return subject_keys, session_keys


async def name_rows(source: AsyncEngine | AsyncConnection, rows: Sequence[CostRow], dims: Sequence[str]) -> None:
    """Rewrite each row's ``group`` and ``key`` with users' and sessions' own ids.

    Args:
        source: The state database, or the connection of the snapshot the rows were read in (a user
            erased since then would otherwise read as a live one, or the other way round).
        rows: Rows of a report grouped by ``dims`` (their ``raw`` values are the ledger's).
        dims: The report's dimensions.

    Raises:
        SQLAlchemyError: The database could not be read.
    """
    if not {"session", "user"} & set(dims):
        return
    subject_keys, session_keys = _keys(rows, dims)
    async with reading(source) as conn:
        users = await _lookup(conn, subjects.c.subject_key, subjects.c.user_id, subject_keys)
        sessions = await _lookup(conn, subject_sessions.c.session_key, subject_sessions.c.session_id, session_keys)
    for row in rows:
        _rename(row, dims, lambda key: users.get(str(key)), sessions.get)


def _rename(row: CostRow, dims: Sequence[str], user_of: Callable[[Any], str | None],
            session_of: Callable[[str], str | None]) -> None:
    """Rewrite the row's ``group`` and ``key`` with the user of its subject key and the id of its session key
    (``None``: none is known)."""
    group: dict[str, str] = {}
    for dim, values, (name, value) in zip(dims, row.raw, _pairs(row.group, dims), strict=True):
        if dim in ("session", "user"):
            # Erased is what the ledger says (its link cleared, or the mapping gone), never a user id.
            user = user_of(values[-1]) if values[-1] is not None else None
            group["user"] = ERASED if user is None else user_label(user)
            if dim == "session":
                key, session = str(values[0]), session_of(str(values[0]))
                group["session"] = erased_session(key) if user is None else key if session is None else session
        else:
            group[name] = value
    row.group = group
    row.key = " / ".join(group.values())


class ReadableNames:
    """A streamed report's users and sessions by the application's ids
    (:class:`~teamstore.audit.cost.Naming`): the groups come joined to the subject mapping and the session
    ids, in the order of the names :func:`name_rows` would give them, each row named as it would name it.

    Args:
        dims: The report's dimensions.
    """

    def __init__(self, dims: Sequence[str]) -> None:
        self.dims = tuple(dims)

    def joined(self, groups: Subquery) -> tuple[FromClause, list[ColumnElement[Any]]]:
        """``groups`` joined to the user of each subject key and the id of each session key."""
        if not {"session", "user"} & set(self.dims):
            return groups, []
        source = groups.outerjoin(subjects, subjects.c.subject_key == groups.c.subject_key)
        if "session" not in self.dims:
            return source, [subjects.c.user_id]
        source = source.outerjoin(subject_sessions, subject_sessions.c.session_key == groups.c.session_key)
        return source, [subjects.c.user_id, subject_sessions.c.session_id]

    def labels(self, dim: str, groups: FromClause) -> list[Label]:
        """The SQL of :func:`user_label` and :func:`erased_session` (and a session's id) for users and
        sessions; any other dimension as a pseudonymous report shows it."""
        if dim not in ("session", "user"):
            return key_labels(dim, groups)
        user = subjects.c.user_id
        quoted = or_(user == ERASED, func.substr(user, 1, 1) == "'")
        found: list[Label] = [("user", case((user.is_(None), literal(ERASED)), (quoted, literal("'") + user),
                                            else_=user))]
        if dim == "session":
            erased = literal(f"{ERASED}-") + func.substr(groups.c.session_key, 1, ERASED_SESSION_CHARS)
            found.append(("session", case((user.is_(None), erased),
                                          else_=func.coalesce(subject_sessions.c.session_id, groups.c.session_key))))
        return found

    def name(self, row: CostRow, names: Sequence[Any]) -> None:
        """Rename ``row`` from the user id and session id :meth:`joined` read for it."""
        if names:
            session = names[1] if len(names) > 1 else None
            _rename(row, self.dims, lambda _key: names[0], lambda _key: session)


def user_label(user_id: str) -> str:
    """How a live user reads: her id, unless it could be taken for the erased (``erased``, which reads
    ``'erased``) or for an id so marked (one starting with ``'`` gets one ``'`` more), so no two read alike."""
    return f"'{user_id}" if user_id == ERASED or user_id.startswith("'") else user_id


def erased_session(session_key: str) -> str:
    """How a session of an erased user reads: ``erased-`` and the start of its key in the ledger.

    The erasure gave the session's rows a fresh random key (shared by its runs), which nothing maps to the
    user or the session id: the label names no one, stays the same in every report, and is the start of
    the ``session_key`` a pseudonymous report shows.
    """
    return f"{ERASED}-{session_key[:ERASED_SESSION_CHARS]}"


def _pairs(group: dict[str, str], dims: Sequence[str]) -> list[tuple[str, str]]:
    """The pseudonymous group's columns, one per dimension (each dimension has one there)."""
    pairs = list(group.items())
    assert len(pairs) == len(dims)
    return pairs
