"""The erasure tables (SQLAlchemy Core): one row per request, one row per (request, store) step.

    from teamstore.erasure.schema import erasure_requests, erasure_steps

    async with engine.connect() as conn:
        row = (await conn.execute(select(erasure_requests).where(erasure_requests.c.request_id == rid))).one()

The request id is the idempotency key. While a request is open its row holds the raw user id and the
subject key, because a resumed request needs both to find what is left; on completion both are cleared
and only a keyed hash of the subject stays, in the stored receipt. ``user_id`` is unique, so one user
has at most one open request (completed requests have ``NULL`` there). Created by migration
``0003_erasure`` (``teamstore db upgrade``), never implicitly; migration ``0012`` adds who asked, the one
extension of the due date, and ``ts_erasure_attempts`` (who ran each attempt of a request); ``0021`` when a
step began its wait; ``0022`` the folded id twins share (:func:`folded_id`), unique; ``0026`` a keyed hash of the
user id, kept as long as the subject key.
"""

from __future__ import annotations

import string

from sqlalchemy import JSON, Column, DateTime, Index, Integer, PrimaryKeyConstraint, String, Table, Text

from teamstore.db.metadata import metadata
from teamstore.ids import MAX_ID_CHARS
from teamstore.people import MAX_PERSON_CHARS

REQUEST_ID = 128
KEY = 64
_ASCII_LOWER = str.maketrans(string.ascii_uppercase, string.ascii_lowercase)


def folded_id(request_id: str) -> str:
    """``request_id`` as twins compare: without the spaces (U+0020) around it, its ASCII letters in lower case and
    every other character as it is. ``REQ-7``, ``req-7`` and ``"Req-7 "`` are twins; ``İD-9`` and ``id-9``, or
    ``Ä-1`` and ``ä-1``, are not. Folded here and stored (``folded_id``) rather than by the database: Postgres's
    ``lower`` folds what its locale says (``Ä`` under UTF-8's, not under ``C``) and SQLite's ASCII alone, so
    twins would depend on the database they were filed in."""
    return request_id.strip(" ").translate(_ASCII_LOWER)


erasure_requests = Table(
    "ts_erasure_requests",
    metadata,
    Column("request_id", String(REQUEST_ID), primary_key=True),
    Column("user_id", String(MAX_ID_CHARS), nullable=True, unique=True),  # cleared on completion
    Column("subject_key", String(KEY), nullable=True),  # cleared on completion (kept while objects are held)
    Column("subject_hash", String(KEY), nullable=True),
    # A keyed hash of the user id (receipt.user_hash, migration 0026): kept while the subject key is, so a request
    # that has forgotten its user id (held) is rerun for its own user alone; cleared on completion.
    Column("user_hash", String(KEY), nullable=True),
    Column("reason", Text, nullable=True),
    Column("status", String(32), nullable=False),
    Column("received_at", DateTime(timezone=True), nullable=False),
    Column("due_at", DateTime(timezone=True), nullable=False),
    Column("completed_at", DateTime(timezone=True), nullable=True),
    Column("updated_at", DateTime(timezone=True), nullable=False),
    Column("owner", String(64), nullable=True),
    Column("lease_until", DateTime(timezone=True), nullable=True),
    Column("receipt", JSON, nullable=True),
    # Who asked (the data subject, a representative, a ticket): the operator's text, kept with the receipt.
    Column("requested_by", String(MAX_PERSON_CHARS), nullable=True),
    # The one extension of the due date (GDPR art. 12(3)): the new date, by how much, why, when and by whom.
    Column("extended_due_at", DateTime(timezone=True), nullable=True),
    Column("extended_by", String(16), nullable=True),
    Column("extension_reason", Text, nullable=True),
    Column("extended_at", DateTime(timezone=True), nullable=True),
    Column("extension_operator", String(MAX_PERSON_CHARS), nullable=True),
    # The request id as twins compare (folded_id()): unique, so no two filings open twin requests. NULL on the
    # younger of twins filed before migration 0022, which keep resuming under their exact ids.
    Column("folded_id", String(REQUEST_ID), nullable=True),
    # The metrics' gauges read the requests of a few statuses, finished ones by when (migration 0020).
    Index("ix_ts_erasure_requests_status", "status", "completed_at"),
    Index("uq_ts_erasure_requests_folded_id", "folded_id", unique=True),
)

# One row per run of a request (a rerun resumes it: a second attempt), with who ran it and how it ended.
erasure_attempts = Table(
    "ts_erasure_attempts",
    metadata,
    Column("request_id", String(REQUEST_ID), nullable=False),
    Column("attempt", Integer, nullable=False),
    Column("operator", String(MAX_PERSON_CHARS), nullable=False),
    Column("started_at", DateTime(timezone=True), nullable=False),
    Column("ended_at", DateTime(timezone=True), nullable=True),
    Column("status", String(32), nullable=True),  # the request's status when the attempt ended
    PrimaryKeyConstraint("request_id", "attempt"),
)

# A step's parts have rows of their own (``transcripts@<digest of the store's URL>``, the URL in ``detail``: what
# the step found and did in each transcript store, teamstore.erasure.record.record_part), gone once it finishes.
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
    # When the step began the wait it ends with, on the database's clock (migration 0021): the ``keys`` step's,
    # for workers' cached data keys; a rerun waits only what is left of it.
    Column("wait_started_at", DateTime(timezone=True), nullable=True),
    PrimaryKeyConstraint("request_id", "store"),
)
