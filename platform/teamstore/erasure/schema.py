"""The erasure tables (SQLAlchemy Core): one row per request, one row per (request, store) step.

    from teamstore.erasure.schema import erasure_requests, erasure_steps

    async with engine.connect() as conn:
        row = (await conn.execute(select(erasure_requests).where(erasure_requests.c.request_id == rid))).one()

The request id is the idempotency key. While a request is open its row holds the raw user id and the
subject key, because a resumed request needs both to find what is left; on completion both are cleared
and only a keyed hash of the subject stays, in the stored receipt. ``user_id`` is unique, so one user
has at most one open request (completed requests have ``NULL`` there). Created by migration
``0003_erasure`` (``teamstore db upgrade``), never implicitly.
"""

from __future__ import annotations

from sqlalchemy import JSON, Column, DateTime, PrimaryKeyConstraint, String, Table, Text

from teamstore.db.metadata import metadata
from teamstore.ids import MAX_ID_CHARS

REQUEST_ID = 128
KEY = 64

erasure_requests = Table(
    "ts_erasure_requests",
    metadata,
    Column("request_id", String(REQUEST_ID), primary_key=True),
    Column("user_id", String(MAX_ID_CHARS), nullable=True, unique=True),  # cleared on completion
    Column("subject_key", String(KEY), nullable=True),  # cleared on completion (kept while objects are held)
    Column("subject_hash", String(KEY), nullable=True),
    Column("reason", Text, nullable=True),
    Column("status", String(32), nullable=False),
    Column("received_at", DateTime(timezone=True), nullable=False),
    Column("due_at", DateTime(timezone=True), nullable=False),
    Column("completed_at", DateTime(timezone=True), nullable=True),
    Column("updated_at", DateTime(timezone=True), nullable=False),
    Column("owner", String(64), nullable=True),
    Column("lease_until", DateTime(timezone=True), nullable=True),
    Column("receipt", JSON, nullable=True),
)

erasure_steps = Table(
    "ts_erasure_steps",
    metadata,
    Column("request_id", String(REQUEST_ID), nullable=False),
    Column("store", String(32), nullable=False),
    Column("status", String(32), nullable=False),
    Column("counts", JSON, nullable=False),
    Column("detail", Text, nullable=True),
    Column("updated_at", DateTime(timezone=True), nullable=False),
    Column("verified_at", DateTime(timezone=True), nullable=True),
    PrimaryKeyConstraint("request_id", "store"),
)
