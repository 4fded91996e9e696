"""The audit tables on teamstore's shared metadata: subjects, usage ledger, transcript outbox, prices.

    from teamstore.audit.schema import usage, subjects

    async with engine.connect() as conn:
        rows = (await conn.execute(select(usage).where(usage.c.team == "support_triage"))).all()

Created by migrations ``0002_audit``, ``0009_outbox_claims`` (the outbox's claims), ``0010_subject_stores``,
``0011_subject_sessions``, ``0016_transcript_rewrites``, ``0017_usage_attempts`` (the ledger's attempts) and
``0018_session_secrets``, ``0029_store_endpoints`` (``teamstore db upgrade``), never implicitly; the first creates the ``session_costs`` view
for BI tools (documented in docs/analysts.md; 0007 makes its cost exact on Postgres).
"""

from __future__ import annotations

import hashlib

from sqlalchemy import (
    BigInteger,
    Boolean,
    Column,
    Date,
    DateTime,
    Float,
    Index,
    Integer,
    LargeBinary,
    PrimaryKeyConstraint,
    String,
    Table,
    Text,
    UniqueConstraint,
)

from teamstore.db.metadata import metadata
from teamstore.ids import MAX_ID_CHARS

KEY = 64
NAME = 128  # an agent's or model's name in the ledger (longer ones are shortened: ledger_name below)

subjects = Table(
    "ts_subjects",
    metadata,
    # Exact string match: no case folding, no unicode normalisation; two ids that differ at all are two users.
    Column("user_id", String(MAX_ID_CHARS), primary_key=True),
    Column("subject_key", String(KEY), nullable=False, unique=True),
    Column("created_at", DateTime(timezone=True), nullable=False),
    # Keys the subject's session keys (migration 0018): published nowhere, deleted with the row by an erasure.
    Column("session_secret", String(KEY), nullable=False),
)

# Which transcript stores (``s3://bucket/prefix``, or a folder's ``file://`` URL) each subject's transcripts
# were written to, recorded before the first upload to each: an erasure must reach every one of them.
subject_stores = Table(
    "ts_subject_stores",
    metadata,
    Column("subject_key", String(KEY), nullable=False),
    Column("store", Text, nullable=False),
    Column("created_at", DateTime(timezone=True), nullable=False),
    # Set by an erasure that emptied this store of the subject while another store still held some.
    Column("erased_at", DateTime(timezone=True), nullable=True),
    # The S3 endpoint the store was reached at (migration 0029): 'aws' for AWS's own; NULL for a folder, or a
    # record from before endpoints were recorded (unknown). Never a user or password.
    Column("endpoint", Text, nullable=True),
    PrimaryKeyConstraint("subject_key", "store"),
)
# The application's own session id behind each session key (migration 0011), so that a cost report can be
# read by people. Written with the run's ledger rows (so under the same erasure fence), deleted with the
# subject by the erasure's ``session_ids`` step, and swept by ``teamstore retention sweep`` once the
# ledger holds no run of the session.
subject_sessions = Table(
    "ts_subject_sessions",
    metadata,
    Column("session_key", String(KEY), primary_key=True),
    Column("subject_key", String(KEY), nullable=False),
    Column("session_id", String(MAX_ID_CHARS), nullable=False),
    Column("created_at", DateTime(timezone=True), nullable=False),
    Index("ix_ts_subject_sessions_subject", "subject_key"),
    # The retention sweep takes the old ones in the order they were recorded (migration 0019).
    Index("ix_ts_subject_sessions_created_at", "created_at", "session_key"),
)

SUBJECT_STORES_SINCE = "subject_stores_since"
"""The ``ts_store_settings`` row whose time is when stores began to be recorded (migration 0010)."""

usage = Table(
    "ts_usage",
    metadata,
    Column("id", BigInteger().with_variant(Integer, "sqlite"), primary_key=True, autoincrement=True),
    Column("run_id", String(128), nullable=False),
    Column("agent", String(NAME), nullable=False),
    Column("model", String(NAME), nullable=False),
    Column("purpose", String(32), nullable=False),
    Column("calls", Integer, nullable=False),
    Column("failed_calls", Integer, nullable=False),
    Column("input_tokens", BigInteger, nullable=False),
    Column("output_tokens", BigInteger, nullable=False),
    Column("team", String(128), nullable=False),
    Column("team_version", String(64), nullable=False),
    Column("session_key", String(KEY), nullable=False),
    Column("subject_key", String(KEY), nullable=True),  # erasure sets NULL: the row stays, de-identified
    Column("stop_reason", String(256), nullable=True),
    Column("ended_by_limit", Boolean, nullable=False),
    Column("run_failed", Boolean, nullable=False),
    Column("started_at", DateTime(timezone=True), nullable=False),
    Column("finished_at", DateTime(timezone=True), nullable=False),
    Column("day", Date, nullable=False),
    # How many times the run was continued from its checkpoint after its worker died (migration 0014).
    Column("interruptions", Integer, nullable=False, default=0, server_default="0"),
    # The attempt at the run that made the row's calls: 0 the first, n its n-th continuation (migration 0017).
    Column("attempt", Integer, nullable=False, default=0, server_default="0"),
    # A record sent again adds nothing, nor do the calls a continuation's checkpoint carried once the attempt
    # that made them recorded them (it ended the run, and died before the save that clears the checkpoint).
    UniqueConstraint("run_id", "attempt", "agent", "model", "purpose", name="uq_ts_usage_run_attempt"),
    Index("ix_ts_usage_session", "session_key"),
    Index("ix_ts_usage_subject", "subject_key"),
    Index("ix_ts_usage_team_day", "team", "team_version", "day"),
    Index("ix_ts_usage_day", "day"),
    Index("ix_ts_usage_finished_at", "finished_at"),
)

outbox = Table(
    "ts_transcript_outbox",
    metadata,
    Column("run_id", String(128), primary_key=True),  # one transcript per run id, ever
    Column("object_key", String(512), nullable=False),
    Column("subject_key", String(KEY), nullable=False),
    # NULL once delivered, when an erasure fenced the user before it was queued, or for a write that is no
    # queued transcript's (`keys migrate` writing a stored one again, keyed `rewrite-...`): the row then only
    # records that an upload of object_key may still land until claimed_until (migration 0009).
    Column("body", LargeBinary, nullable=True),
    Column("created_at", DateTime(timezone=True), nullable=False),
    Column("attempts", Integer, nullable=False),
    Column("last_error", String(512), nullable=True),
    # Who is uploading the transcript, and until when an upload of it may land: no other flusher
    # delivers it meanwhile, and an erasure of its subject waits for it.
    Column("claimed_by", String(64), nullable=True),
    Column("claimed_until", DateTime(timezone=True), nullable=True),
    Index("ix_ts_transcript_outbox_subject", "subject_key"),
    # Flushers claim the oldest transcript first (migration 0019): without it, each claim sorted the whole outbox.
    Index("ix_ts_transcript_outbox_created_at", "created_at"),
)

# Transcripts written again (``keys migrate`` sealing a plain one, a late delivery from the outbox) to a store
# whose retention counts from the upload (S3), with when each was first written (migration 0016): recorded
# before the write, read by ``teamstore retention sweep``, which deletes each once that is past retention;
# deleted with the subject by the erasure's ``rewrites`` step.
rewrites = Table(
    "ts_transcript_rewrites",
    metadata,
    Column("store", Text, nullable=False),
    Column("object_key", String(512), nullable=False),
    Column("subject_key", String(KEY), nullable=False),
    Column("written_at", DateTime(timezone=True), nullable=False),  # the earliest first write given for it
    Column("recorded_at", DateTime(timezone=True), nullable=False),  # its latest write (one may still land)
    PrimaryKeyConstraint("store", "object_key"),
    Index("ix_ts_transcript_rewrites_subject", "subject_key"),
)

prices = Table(
    "ts_prices",
    metadata,
    Column("version", String(64), nullable=False),
    Column("model", String(128), nullable=False),
    Column("effective_from", Date, nullable=False),
    Column("effective_to", Date, nullable=True),  # exclusive; NULL = still in effect
    Column("input_per_million", Float, nullable=False),
    Column("output_per_million", Float, nullable=False),
    Column("currency", String(8), nullable=False),
    PrimaryKeyConstraint("version", "model", "effective_from", name="pk_ts_prices"),
)


def ledger_name(name: str) -> str:
    """``name`` as the ledger stores it: whole up to 128 characters; a longer one (a model's resource
    path, say) as its first 111 characters, ``~`` and 16 hex digits of its hash, so two long names stay
    apart and a run's usage is never refused for the length of a name."""
    if len(name) <= NAME:
        return name
    digest = hashlib.sha256(name.encode("utf-8", "surrogatepass")).hexdigest()[:16]
    return f"{name[: NAME - 17]}~{digest}"
