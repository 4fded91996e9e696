"""Seed users across every store through the real runtime, and scan every store for traces of them."""

from __future__ import annotations

import gzip
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from opentelemetry.trace import TracerProvider
from sqlalchemy import func, insert, inspect, select, text, update
from sqlalchemy.ext.asyncio import AsyncEngine

from config_registry import Registry
from teamstore.audit import outbox
from teamstore.audit.ledger_observer import LedgerObserver
from teamstore.audit.observer import TranscriptObserver
from teamstore.audit.pseudonyms import Pseudonyms
from teamstore.audit.rewrites import record_rewrite
from teamstore.audit.schema import usage
from teamstore.audit.span_observer import SpanObserver
from teamstore.audit.subjects import find_subject
from teamstore.audit.transcripts.base import TranscriptStore, subject_prefix
from teamstore.audit.transcripts.s3 import MARKS
from teamstore.events import RunObserver
from teamstore.export.requests import new_export_id, open_export
from teamstore.memory.schema import memories
from teamstore.runtime.platform import Platform
from teamstore.settings import Settings
from teamstore.state.schema import quarantine, sessions


@dataclass
class Seeded:
    """What was stored for one user."""

    user_id: str
    canary: str
    subject_key: str
    run_ids: list[str] = field(default_factory=list)


def audited_platform(
    engine: AsyncEngine, registry: Registry, store: TranscriptStore, tracer: TracerProvider | None = None,
    **settings: Any,
) -> Platform:
    """A Platform whose runs write transcripts to ``store``, ledger rows, and spans when ``tracer`` is set."""
    pseudonyms = Pseudonyms(engine)
    observers: list[RunObserver] = [LedgerObserver(engine, pseudonyms), TranscriptObserver(store, engine, pseudonyms)]
    if tracer is not None:
        observers.append(SpanObserver(tracer, pseudonyms))
    knobs = Settings(auto_migrate=True, registry_refresh_seconds=0, lease_timeout_seconds=0.5, **settings)
    return Platform(engine, registry, settings=knobs, observers=observers)


async def seed_user(
    platform: Platform, store: TranscriptStore, user_id: str, canary: str, sessions_n: int = 2, runs: int = 2
) -> Seeded:
    """Runs through the real runtime (with the user's memory they write), an overwritten transcript (and, on S3,
    its record as one written again), a quarantined row, an outbox row and the record of an earlier export of the user."""
    run_ids = []
    for s in range(sessions_n):
        async with platform.session(user_id, f"sess-{s}", team="support_triage") as session:
            for r in range(runs):
                await session.run(f"{canary} run {r}: my router keeps dropping")
                assert session.last_run_id is not None
                run_ids.append(session.last_run_id)
    await platform.drain_memory()  # the memory writer's summary holds the canary too
    for observer in platform.observers:  # a flush the runs started would deliver the outbox row queued below
        drain = getattr(observer, "drain", None)
        if drain is not None:
            await drain()
    subject = await find_subject(platform.engine, user_id)
    assert subject is not None
    keys = await store.list_keys(subject_prefix(subject))
    # Written again as `keys migrate` writes one (recorded first, on S3): an old version now exists.
    await record_rewrite(platform.engine, store, keys[0], subject, datetime.now(UTC))
    await store.put(keys[0], gzip.compress(f'{{"rewritten": "{canary}"}}'.encode()))
    await _quarantine_and_outbox(platform.engine, user_id, subject, canary, keys[0])
    await open_export(platform.engine, new_export_id(), subject, user_id=user_id, requested_by="ticket 881",
                      operator="dpo", owner="seed")
    return Seeded(user_id, canary, subject, run_ids)


async def _quarantine_and_outbox(engine: AsyncEngine, user_id: str, subject: str, canary: str, key: str) -> None:
    now = datetime.now(UTC)
    async with engine.begin() as conn:
        await conn.execute(insert(quarantine).values(
            user_id=user_id, session_id="sess-old", reason="corrupt", detail="truncated JSON", team="support_triage",
            team_version="v1", schema_version=1, agentchat_version="0.7.5", fingerprints={},
            state=f'{{"messages": ["{canary}"', state_bytes=30, row_version=3, quarantined_at=now))
    queued_key = key.rsplit("/", 1)[0] + f"/{uuid.uuid4().hex}.jsonl.gz"
    body = gzip.compress(f'{{"text": "{canary}"}}'.encode())
    assert await outbox.enqueue(engine, uuid.uuid4().hex, queued_key, subject, body, "S3 unreachable")


async def text_columns(engine: AsyncEngine) -> dict[str, list[str]]:
    """Every table of the database (from the catalogue, not from teamstore's metadata) and its columns."""
    async with engine.connect() as conn:
        return await conn.run_sync(lambda c: {t: [col["name"] for col in inspect(c).get_columns(t)]
                                              for t in inspect(c).get_table_names()})


async def scan_database(engine: AsyncEngine, needles: list[str]) -> dict[str, list[str]]:
    """Every (table.column) whose value holds a needle, read raw (bytes gunzipped), over every table."""
    hits: dict[str, list[str]] = {n: [] for n in needles}
    async with engine.connect() as conn:
        for table, columns in (await text_columns(engine)).items():
            for row in (await conn.execute(text(f'SELECT * FROM "{table}"'))).mappings():
                for column in columns:
                    value = _as_text(row[column])
                    hits.update({n: [*hits[n], f"{table}.{column}"] for n in needles if n in value})
    return hits


def _as_text(value: Any) -> str:
    if isinstance(value, bytes | memoryview):
        raw = bytes(value)
        try:
            return gzip.decompress(raw).decode("utf-8", "replace") + raw.decode("latin-1")
        except OSError:
            return raw.decode("latin-1")
    return "" if value is None else str(value)


async def counts(engine: AsyncEngine, user_id: str, subject: str) -> dict[str, int]:
    """Rows of one user in each table that holds them (for 'everything of the other user remains')."""
    async with engine.connect() as conn:
        async def n(table: Any, where: Any) -> int:
            return int(await conn.scalar(select(func.count()).select_from(table).where(where)) or 0)

        return {
            "sessions": await n(sessions, sessions.c.user_id == user_id),
            "quarantine": await n(quarantine, quarantine.c.user_id == user_id),
            "memory": await n(memories, memories.c.user_id == user_id),
            "ledger": await n(usage, usage.c.subject_key == subject),
        }


def all_versions(client: Any, bucket: str, *, marks: bool = False) -> list[dict[str, Any]]:
    """Every version and delete marker in the whole bucket; with ``marks`` only, the stores' marks of their
    databases too (they hold no user's data: :meth:`teamstore.audit.transcripts.s3.S3TranscriptStore.mark`)."""
    found: list[dict[str, Any]] = []
    for page in client.get_paginator("list_object_versions").paginate(Bucket=bucket):
        found += page.get("Versions", []) + page.get("DeleteMarkers", [])
    return [version for version in found if marks or f"{MARKS}/" not in version["Key"]]


@dataclass(frozen=True)
class Queued:
    """A request of :func:`desk_queue`, as the desk's listing must order it."""

    request_id: str
    status: str
    received_at: datetime
    effective_due_at: datetime

    @property
    def overdue(self) -> bool:
        return self.status in ("open", "failed")  # every due date of the queue has passed


# (received, due, extended due) in days after the queue's start, and the status; ids deliberately out of step
# with the times, several requests received at the same moment and several falling due at the same one (an
# extension among them, due when another request's original due date is).
_QUEUE = {
    "req-01": (3, 40, None, "open"), "req-02": (1, 41, None, "failed"), "req-03": (3, 40, None, "completed"),
    "req-04": (2, 42, None, "open"), "req-05": (1, 38, 40, "open"), "req-06": (3, 40, None, "open"),
    "req-07": (0, 42, None, "failed"), "req-08": (2, 41, None, "open"), "req-09": (3, 40, None, "no_match"),
    "req-10": (1, 42, None, "open"), "req-11": (0, 41, None, "open"), "req-12": (2, 40, None, "failed"),
}


async def desk_queue(engine: AsyncEngine) -> list[Queued]:
    """Twelve erasure requests with ties in when they were received and when they fall due, all due 150 days
    and more ago: finished ones without their user id, as a finished request forgets it."""
    from teamstore.erasure import requests
    from teamstore.erasure.schema import erasure_requests

    start = datetime.now(UTC).replace(microsecond=0) - timedelta(days=200)
    queued = []
    for n, (request_id, (received, due, extended, status)) in enumerate(_QUEUE.items()):
        await requests.open_request(engine, request_id, f"queued-{n}", None, 30)
        values: dict[str, Any] = {"received_at": start + timedelta(days=received), "status": status,
                                  "due_at": start + timedelta(days=due)}
        if extended is not None:
            values |= {"extended_due_at": start + timedelta(days=extended), "extended_by": "2d",
                       "extension_reason": "complex", "extended_at": start, "extension_operator": "ana"}
        if status in ("completed", "no_match"):
            values["user_id"] = None
        async with engine.begin() as conn:
            await conn.execute(update(erasure_requests).where(erasure_requests.c.request_id == request_id)
                               .values(**values))
        queued.append(Queued(request_id, status, values["received_at"],
                             start + timedelta(days=extended if extended is not None else due)))
    return queued


def newest_first(queued: list[Queued]) -> list[str]:
    """The listing's order: newest first, ties by request id."""
    return [q.request_id for q in sorted(queued, key=lambda q: (-q.received_at.timestamp(), q.request_id))]


def longest_overdue_first(queued: list[Queued]) -> list[str]:
    """``--overdue``'s order: the due date in force, then when received, then the request id."""
    return [q.request_id for q in sorted((q for q in queued if q.overdue),
                                         key=lambda q: (q.effective_due_at, q.received_at, q.request_id))]
