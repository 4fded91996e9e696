"""Statements written once for both databases: an INSERT that never fails on a key already taken.

    from teamstore.db.statements import insert_new

    stmt = insert_new(conn.dialect.name, subjects).values(user_id=user, subject_key=key, session_secret=secret,
                                                          created_at=now)
    added = (await conn.execute(stmt.returning(subjects.c.subject_key))).first()   # None: the key was taken

On Postgres a statement that breaks a unique key is an ERROR, and the server writes the key's value to its
own log (``DETAIL: Key (user_id)=(alice@example.com) already exists``): a copy of a raw id that erasure
never reaches. So no statement of teamstore's inserts a row that may collide and lets the database refuse
it: it says ``ON CONFLICT DO NOTHING`` (or ``DO UPDATE``) and reads what it finds.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import Table
from sqlalchemy.dialects import postgresql, sqlite


def dialect_insert(dialect: str) -> Any:
    """The ``insert`` of ``dialect`` (``postgresql`` or ``sqlite``), the one that takes ``ON CONFLICT``."""
    return postgresql.insert if dialect == "postgresql" else sqlite.insert


def insert_new(dialect: str, table: Table) -> Any:
    """``INSERT INTO table .. ON CONFLICT DO NOTHING``: a row whose key (any unique key of the table) is
    taken is skipped, never refused; ``RETURNING`` then gives no row for it.

    Args:
        dialect: ``engine.dialect.name`` (``postgresql`` or ``sqlite``).
        table: The table.
    """
    return dialect_insert(dialect)(table).on_conflict_do_nothing()
