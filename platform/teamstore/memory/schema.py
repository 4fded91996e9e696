"""The user-memory tables (SQLAlchemy Core), shared by SQLite and Postgres; created by migrations ``0013`` and
``0027`` (the forgets).

    from teamstore.memory.schema import memories, facts, forgets

One row per (user, scope) in ``ts_user_memory``: the bounded summary, the row version every write checks,
the expiry its retention sets, and the writer's last failure. One row per (user, scope, fact) in
``ts_user_memory_facts``: the fact's declared type, its value (JSON text), the run it came from and when a
run last confirmed it. One row per (user, scope) in ``ts_user_memory_forgets``: when the user last forgot
memory under that scope (a fact or everything; the scope ``""``: every scope), so that a writer whose messages
were said before it writes nothing. The scope is the team's name, or the name several teams share their memory under.
Timestamps and counts read a damaged value (SQLite keeps whatever is written) as ``DAMAGED``, so a row
edited by hand is reported, never a crash while read.
"""

from __future__ import annotations

from sqlalchemy import Column, Index, PrimaryKeyConstraint, String, Table, Text

from teamstore.db.metadata import metadata
from teamstore.ids import MAX_ID_CHARS
from teamstore.state.schema import BigCount, Count, Timestamp

SCOPE = 64  # a team name's length (config_registry.manifest.NAME_PATTERN)
FACT_NAME = 64
RUN_ID = 128

memories = Table(
    "ts_user_memory",
    metadata,
    Column("user_id", String(MAX_ID_CHARS), nullable=False),
    Column("scope", String(SCOPE), nullable=False),
    Column("summary", Text, nullable=False),
    # 0 for a row that holds only a failure (no memory written yet); each write adds 1, and checks it.
    Column("version", BigCount, nullable=False),
    Column("team", String(128), nullable=False),
    Column("team_version", String(64), nullable=False),
    Column("source_run_id", String(RUN_ID), nullable=True),
    Column("created_at", Timestamp, nullable=False),
    Column("updated_at", Timestamp, nullable=False),
    Column("expires_at", Timestamp, nullable=False),
    # The writer's last failure (a reason naming no content) and how many it has had: visible, never silent.
    Column("failure", String(512), nullable=True),
    Column("failed_at", Timestamp, nullable=True),
    Column("failures", Count, nullable=False),
    PrimaryKeyConstraint("user_id", "scope"),
)
Index("ix_ts_user_memory_expires_at", memories.c.expires_at)

facts = Table(
    "ts_user_memory_facts",
    metadata,
    Column("user_id", String(MAX_ID_CHARS), nullable=False),
    Column("scope", String(SCOPE), nullable=False),
    Column("name", String(FACT_NAME), nullable=False),
    Column("type", String(16), nullable=False),
    Column("value", Text, nullable=False),  # JSON: a string, number, boolean, or an ISO date as a string
    Column("source_run_id", String(RUN_ID), nullable=False),
    Column("created_at", Timestamp, nullable=False),
    Column("confirmed_at", Timestamp, nullable=False),
    PrimaryKeyConstraint("user_id", "scope", "name"),
)

EVERY_SCOPE = ""
"""The scope of a forget that named none: every scope (no team's name is empty)."""

forgets = Table(
    "ts_user_memory_forgets",
    metadata,
    Column("user_id", String(MAX_ID_CHARS), nullable=False),
    Column("scope", String(SCOPE), nullable=False),  # EVERY_SCOPE: a forget of every scope
    # The last forget's time on the database's clock: a writer whose session opened before it writes nothing.
    Column("forgotten_at", Timestamp, nullable=False),
    PrimaryKeyConstraint("user_id", "scope"),
)
Index("ix_ts_user_memory_forgets_forgotten_at", forgets.c.forgotten_at)
