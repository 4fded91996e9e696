"""The export record (SQLAlchemy Core): one row per ``teamstore export`` of a user.

    from teamstore.export.schema import export_requests

    async with engine.connect() as conn:
        row = (await conn.execute(select(export_requests).where(export_requests.c.export_id == eid))).one()

A row says that an export was made, when, at whose request and by whom, and its manifest (stores covered,
counts, bytes, a checksum per file). It never holds the raw user id or the archive's path (a path often
names the user): only the pseudonymous subject key, which an erasure of the user clears (the erasure's
``exports`` step), so the record outlives the user unlinked, as the ledger's rows do. Created by
migration ``0012`` (``teamstore db upgrade``), never implicitly; its lease by ``0031``.
"""

from __future__ import annotations

from sqlalchemy import JSON, Column, DateTime, Index, String, Table, Text

from teamstore.db.metadata import metadata
from teamstore.people import MAX_PERSON_CHARS

EXPORT_ID = 64
KEY = 64
OWNER = 128

export_requests = Table(
    "ts_export_requests",
    metadata,
    Column("export_id", String(EXPORT_ID), primary_key=True),
    Column("subject_key", String(KEY), nullable=True),  # cleared by the user's erasure
    Column("requested_by", String(MAX_PERSON_CHARS), nullable=True),
    Column("operator", String(MAX_PERSON_CHARS), nullable=False),
    Column("status", String(32), nullable=False),  # running, exported, no_match, failed
    Column("started_at", DateTime(timezone=True), nullable=False),
    Column("finished_at", DateTime(timezone=True), nullable=True),
    Column("manifest", JSON, nullable=True),  # the archive's manifest.json: no user id, no user content
    Column("detail", Text, nullable=True),  # where it failed and the error's type, never the error's message
    # Which process runs it and until when it is known alive (renewed while it runs, on the database's clock):
    # a record `running` whose lease has passed is an export killed outright (migration 0031).
    Column("owner", String(OWNER), nullable=True),
    Column("lease_until", DateTime(timezone=True), nullable=True),
    Index("ix_ts_export_requests_subject", "subject_key"),
)
