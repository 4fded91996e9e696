"""The resume-state tables (SQLAlchemy Core), shared by SQLite and Postgres.

    from teamstore.state.schema import sessions, quarantine

One row per (user_id, session_id) in ``ts_sessions``, which also holds the checkpoint of a run in flight
(a team with per-turn checkpoints, migration 0014); refused rows move to ``ts_quarantine`` with the
reason (the erasure fence every lease and save checks, ``ts_user_holds``, is :mod:`teamstore.db.fence`);
``ts_store_settings`` records how the database's sessions are leased (``lock`` or ``row``). The row
version, and with row leases the lease too, live in the session row itself, so taking the lease and
loading the state is one statement, and saving and releasing is another.
"""

from __future__ import annotations

from typing import Any

import orjson
from sqlalchemy import (
    JSON,
    BigInteger,
    Column,
    DateTime,
    Index,
    Integer,
    PrimaryKeyConstraint,
    String,
    Table,
    Text,
    TypeDecorator,
)
from sqlalchemy.engine import Dialect

from teamstore.db.metadata import metadata
from teamstore.ids import MAX_ID_CHARS
from teamstore.state.base import read_fingerprints


class JsonText(str):
    """JSON already encoded (``teamstore.state.rows`` encodes fingerprints once, for every backend): the
    fingerprints column writes it as it is, where any other value, a plain string too, is encoded."""

    __slots__ = ()


class Fingerprints(TypeDecorator[Any]):
    """A session row's fingerprints: JSON (:class:`JsonText` written as it is), read back through
    :func:`teamstore.state.base.read_fingerprints` alone. SQLite keeps JSON as text, and SQLAlchemy would
    parse it inside the very statement that takes the lease: a damaged value (not even JSON) would fail
    that statement with the lease already taken.
    """

    impl = JSON
    cache_ok = True

    def bind_processor(self, dialect: Dialect) -> Any:
        return _json_text

    def result_processor(self, dialect: Dialect, coltype: Any) -> Any:
        return read_fingerprints  # the driver's value: text on SQLite, already parsed on Postgres


def _json_text(value: Any) -> Any:
    return value if value is None or isinstance(value, JsonText) else orjson.dumps(value).decode()


DAMAGED = object()
"""What :class:`Timestamp` and :class:`Count` read from a value of the wrong type (SQLite keeps whatever
is written into a column): the row is then refused as ``corrupt`` when judged, not a crash while read."""


class Timestamp(TypeDecorator[Any]):
    """A timezone-aware timestamp that reads a damaged value as :data:`DAMAGED` instead of raising. SQLite
    keeps timestamps as text, which SQLAlchemy parses inside the statement that takes the lease."""

    impl = DateTime(timezone=True)
    cache_ok = True

    def coerce_compared_value(self, op: Any, value: Any) -> Any:
        # As a timestamp does (``expires_at - interval``): a decorator would otherwise cast the interval too.
        return self.impl_instance.coerce_compared_value(op, value)

    def result_processor(self, dialect: Dialect, coltype: Any) -> Any:
        parse = self.impl_instance.result_processor(dialect, coltype)  # None where the driver parses

        def read(value: Any) -> Any:
            if value is None or parse is None:
                return value
            try:
                return parse(value)
            except (ValueError, TypeError):
                return DAMAGED
        return read


class StoredTime(TypeDecorator[Any]):
    """A timestamp exactly as the database keeps it, neither parsed nor formatted: on SQLite the stored text (or
    whatever a damaged row holds), on Postgres the driver's time. The session listing's cursor carries a row's
    ``updated_at`` so, and compares it so: a page ends exactly after its last row, a damaged one too."""

    impl = DateTime(timezone=True)
    cache_ok = True

    def bind_processor(self, dialect: Dialect) -> Any:
        return None

    def result_processor(self, dialect: Dialect, coltype: Any) -> Any:
        return None


class Count(TypeDecorator[Any]):
    """An integer column that reads a value of another type (text, a float) as :data:`DAMAGED`."""

    impl = Integer
    cache_ok = True

    def result_processor(self, dialect: Dialect, coltype: Any) -> Any:
        return lambda value: value if value is None or type(value) is int else DAMAGED


class BigCount(Count):
    """:class:`Count` on a 64-bit column."""

    impl = BigInteger
    cache_ok = True


sessions = Table(
    "ts_sessions",
    metadata,
    Column("user_id", String(MAX_ID_CHARS), nullable=False),
    Column("session_id", String(MAX_ID_CHARS), nullable=False),
    Column("team", String(128), nullable=False),
    Column("team_version", String(64), nullable=False),
    Column("schema_version", Count, nullable=False),
    Column("agentchat_version", String(32), nullable=False),
    Column("fingerprints", Fingerprints, nullable=False),
    # Raw text, not JSON: a corrupt or truncated blob must still be readable so it can be quarantined.
    Column("state", Text, nullable=True),
    Column("state_bytes", Count, nullable=False, default=0),
    Column("row_version", BigCount, nullable=False, default=0),
    Column("created_at", Timestamp, nullable=False),
    Column("updated_at", Timestamp, nullable=False),
    Column("expires_at", Timestamp, nullable=True),
    Column("lease_owner", String(64), nullable=True),
    Column("lease_until", DateTime(timezone=True), nullable=True),
    # The checkpoint of a run in flight (migration 0014): raw text like the state, so a damaged one can
    # still be read and quarantined; cleared by the save that follows the run.
    Column("checkpoint", Text, nullable=True),
    Column("checkpoint_bytes", Count, nullable=False, default=0, server_default="0"),
    PrimaryKeyConstraint("user_id", "session_id"),
)
Index("ix_ts_sessions_expires_at", sessions.c.expires_at)

quarantine = Table(
    "ts_quarantine",
    metadata,
    Column("id", BigInteger().with_variant(Integer, "sqlite"), primary_key=True, autoincrement=True),
    Column("user_id", String(MAX_ID_CHARS), nullable=False),
    Column("session_id", String(MAX_ID_CHARS), nullable=False),
    Column("reason", String(64), nullable=False),
    Column("detail", Text, nullable=False),
    Column("team", String(128), nullable=False),
    Column("team_version", String(64), nullable=False),
    Column("schema_version", Integer, nullable=False),
    Column("agentchat_version", String(32), nullable=False),
    Column("fingerprints", JSON, nullable=False),
    Column("state", Text, nullable=True),
    Column("state_bytes", Integer, nullable=False),
    Column("row_version", BigInteger, nullable=False),
    Column("quarantined_at", DateTime(timezone=True), nullable=False),
    Column("checkpoint", Text, nullable=True),  # an interrupted run's checkpoint set aside with the row or alone
    # An id is never handed out twice (migration 0025): `sessions restore N` from old notes finds nothing rather
    # than another state. Postgres's sequence never does; SQLite's rowid would, once the newest rows were gone.
    sqlite_autoincrement=True,
)
Index("ix_ts_quarantine_user", quarantine.c.user_id, quarantine.c.session_id)

# Settings of the state store kept in the database itself, e.g. ``session_lease``: ``lock`` or ``row``.
store_settings = Table(
    "ts_store_settings",
    metadata,
    Column("name", String(64), primary_key=True),
    Column("value", String(64), nullable=False),
    Column("updated_at", DateTime(timezone=True), nullable=False),
)
