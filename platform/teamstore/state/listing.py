"""The session listing a page at a time: its statement and its cursor. Pure: nothing here touches a database.

    from teamstore.state.listing import cursor_of, listing, position

    stmt = listing(now, user_id=None, after=position(text, "postgresql"), limit=100)
    text = cursor_of(row.listed_at, row.user_id, row.session_id)     # where the next page starts

Rows come most recently updated first, ties broken by user id, then session id (all three descending): a total
order. No index holds it (every save moves ``updated_at``: indexed, each save would write the index too), so the
database keeps the newest of every row it reads (a top-N sort) for a listing of every user. A cursor is one row's place
in it: the row's ``updated_at`` as the database keeps it (:class:`teamstore.state.schema.StoredTime`) and its two
ids. The page after it holds the rows strictly after that place, so no row is listed twice or left out when
many share a time. A row saved while a listing is walked moves ahead of the cursor, and that walk does not
list it again.

A cursor holds a user's and a session's ids (base64url of JSON, not sealed): it is for the operator who was
shown those ids; nothing here logs it, and :class:`teamstore.errors.InvalidCursor` never quotes it.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import orjson
from sqlalchemy import Select, literal, or_, select, tuple_, type_coerce

from teamstore.errors import InvalidCursor, InvalidIdentifier
from teamstore.ids import check_id
from teamstore.state import statements as sql
from teamstore.state.schema import StoredTime, sessions

_VERSION = 1
_LONGEST = 8192  # characters: two ids of 256 characters, each of up to 4 bytes, in JSON and base64, fit
_HINT = ("pass the cursor a listing gave (`sessions list`'s footer, or the `cursor` of the last row its --json "
         "gave) whole and unchanged, on the database that gave it; or leave --after out to list from the newest")

StoredKey = datetime | str | int | float | bytes
"""A row's ``updated_at`` as the database keeps it: a time on Postgres; on SQLite text, or in a damaged row
whatever was written there (a number, bytes)."""


@dataclass(frozen=True)
class Position:
    """One row's place in the listing's order: the page after it starts with the next row."""

    listed_at: StoredKey
    user_id: str
    session_id: str


def listed_at() -> Any:
    """The row's ``updated_at`` as the database keeps it, to read and compare (:class:`StoredTime`)."""
    return type_coerce(sessions.c.updated_at, StoredTime())


def listing(now: Any, *, user_id: str | None, after: Position | None, limit: int) -> Select[Any]:
    """Up to ``limit`` saved rows (a state, a checkpoint, or an expiry the per-user bound counts), newest first,
    optionally one user's and after a place: the ids, :data:`teamstore.state.statements.SESSION_COLUMNS` and
    ``read_at`` (``now``), then ``listed_at``, the cursor's time."""
    stored_anything = or_(sessions.c.state.is_not(None), sessions.c.checkpoint.is_not(None),
                          sessions.c.expires_at.is_not(None))
    stmt = (select(sessions.c.user_id, sessions.c.session_id, *sql.read_columns(now), listed_at().label("listed_at"))
            .where(stored_anything))
    if user_id is not None:
        stmt = stmt.where(sessions.c.user_id == user_id)
    if after is not None:
        place = (literal(after.listed_at, StoredTime()), literal(after.user_id, sessions.c.user_id.type),
                 literal(after.session_id, sessions.c.session_id.type))
        stmt = stmt.where(tuple_(listed_at(), sessions.c.user_id, sessions.c.session_id) < tuple_(*place))
    order = (sessions.c.updated_at, sessions.c.user_id, sessions.c.session_id)
    return stmt.order_by(*(column.desc() for column in order)).limit(limit)


def cursor_of(stored: StoredKey, user_id: str, session_id: str) -> str:
    """The cursor of a listed row: the page given it starts after that row."""
    key: Any = stored
    if isinstance(stored, datetime):
        key = stored.isoformat()
    elif isinstance(stored, bytes):
        key = {"hex": stored.hex()}
    text = orjson.dumps([_VERSION, key, user_id, session_id])
    return base64.urlsafe_b64encode(text).decode("ascii").rstrip("=")


def position(cursor: str, dialect: str) -> Position:
    """The place ``cursor`` (from :func:`cursor_of`, on a database of ``dialect``) names.

    Raises:
        InvalidCursor: It does not decode, names an id no session can have, or holds a time this kind of
            database does not keep. The message never quotes it.
    """
    fields = _fields(cursor)
    try:
        user_id, session_id = check_id("user_id", fields[2]), check_id("session_id", fields[3])
    except InvalidIdentifier as exc:
        raise InvalidCursor(f"the listing cursor holds an id no session can have ({exc.message})", hint=_HINT) from None
    return Position(_stored_key(fields[1], dialect), user_id, session_id)


def _fields(cursor: str) -> list[Any]:
    """The cursor's JSON array, checked for its shape."""
    if not isinstance(cursor, str) or not 0 < len(cursor) <= _LONGEST:
        raise InvalidCursor("the listing cursor is empty or longer than any a listing gives", hint=_HINT)
    try:
        fields = orjson.loads(base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)))
    except ValueError:  # not base64 (a character outside it, a cut), not JSON: orjson's error is a ValueError
        fields = None
    if not (isinstance(fields, list) and len(fields) == 4 and fields[0] == _VERSION):
        raise InvalidCursor("the listing cursor does not read as one a listing gives (cut short or altered?)",
                            hint=_HINT)
    return fields


def _stored_key(key: Any, dialect: str) -> StoredKey:
    """The cursor's time as the database of ``dialect`` keeps it."""
    if dialect == "postgresql":
        try:
            at = datetime.fromisoformat(key) if isinstance(key, str) else None
        except ValueError:
            at = None
        if at is None or at.tzinfo is None:
            raise InvalidCursor("the listing cursor's time is not one a Postgres database keeps (a cursor from "
                                "another database?)", hint=_HINT)
        return at
    if isinstance(key, dict) and set(key) == {"hex"} and isinstance(key["hex"], str):
        try:
            return bytes.fromhex(key["hex"])
        except ValueError:
            pass
    elif isinstance(key, str | float) or (isinstance(key, int) and not isinstance(key, bool)
                                           and -(2**63) <= key < 2**63):  # what an SQLite column can hold
        return key
    raise InvalidCursor("the listing cursor's time is not one an SQLite database keeps (a cursor from another "
                        "database?)", hint=_HINT)
