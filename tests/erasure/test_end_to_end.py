"""End to end: seed two users across every store through the real runtime, erase one, scan everything.

Postgres and SQLite (the ``database_url`` parametrisation), S3 over HTTP with versioning on (moto's
server), spans through a real OTLP/HTTP receiver.
"""

from __future__ import annotations

import gzip
from typing import Any

import pytest
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncEngine

from config_registry import Registry
from teamstore.analytics.query import CostQuery, cost_report
from teamstore.audit.prices import load_prices
from teamstore.audit.subjects import ensure_subject, find_subject
from teamstore.audit.telemetry import setup_tracing
from teamstore.audit.transcripts.s3 import S3TranscriptStore
from teamstore.db.fence import user_holds
from teamstore.erasure import RequestStatus, StepStatus
from teamstore.erasure.schema import erasure_requests
from teamstore.errors import ErasureConflict
from teamstore.settings import Settings
from tests.erasure.conftest import coordinator
from tests.erasure.seed import all_versions, audited_platform, counts, scan_database, seed_user
from tests.otlp_receiver import OtlpReceiver

pytestmark = [pytest.mark.s3, pytest.mark.otlp]
ALICE, ALICE_CASE = "alice@example.com", "Alice@example.com"  # two users: ids differ only by case
CANARY_A, CANARY_B = "CANARY-a-4f1e9b", "CANARY-b-77c0d2"


def _subject_versions(versions: list[dict[str, Any]], subject: str) -> list[dict[str, Any]]:
    return [v for v in versions if f"/subjects/{subject}/" in v["Key"]]


def _gunzipped(data: bytes) -> bytes:
    try:
        return gzip.decompress(data)
    except OSError:
        return b""  # sealed: nothing to unpack


async def test_erase_one_user_everywhere_and_keep_the_other(
    state_engine: AsyncEngine, backend: tuple[str, str], registry: Registry, s3_store: S3TranscriptStore,
    otlp_env: OtlpReceiver,
) -> None:
    tracer = setup_tracing(Settings())
    assert tracer is not None
    platform = audited_platform(state_engine, registry, s3_store, tracer, session_lease=backend[1])
    a = await seed_user(platform, s3_store, ALICE, CANARY_A)
    b = await seed_user(platform, s3_store, ALICE_CASE, CANARY_B)
    tracer.force_flush()
    spans = otlp_env.wait_for(lambda s: sum(x["attributes"].get("teamstore.subject") == a.subject_key for x in s) >= 4)
    b_before = await counts(state_engine, b.user_id, b.subject_key)
    a_secret, b_secret = [(await ensure_subject(state_engine, user)).session_secret for user in (ALICE, ALICE_CASE)]
    b_versions = _subject_versions(all_versions(s3_store.client, s3_store.bucket), b.subject_key)
    assert len(b_versions) == 5 and b_before["sessions"] == 2

    receipt = await coordinator(state_engine, s3_store).run(ALICE, request_id="req-e2e", reason="art. 17")

    assert receipt.ok and receipt.status is RequestStatus.COMPLETED, receipt.model_dump_json(indent=1)
    stores = receipt.stores
    assert {n: s.status for n, s in stores.items()} == dict.fromkeys(stores, StepStatus.ERASED)
    assert stores["resume_state"].counts.rows == 2 and stores["quarantine"].counts.rows == 1
    assert (stores["transcripts"].counts.objects, stores["transcripts"].counts.versions) == (4, 5)
    assert stores["transcripts"].counts.bytes > 0 and stores["outbox"].counts.rows == 1
    assert stores["ledger"].counts.rows >= 4 and stores["subject"].counts.rows == 1
    assert stores["session_ids"].counts.rows == 2  # the session ids recorded beside alice's session keys
    assert stores["rewrites"].counts.rows == 1  # the record of her transcript written again
    assert stores["exports"].counts.rows == 1  # the record of an export stays, unlinked (the scan below)
    assert all(s.verified_at is not None for s in stores.values())
    assert receipt.subject_hash and ALICE not in receipt.model_dump_json() and a.subject_key not in receipt.model_dump_json()
    assert a_secret not in receipt.model_dump_json()
    assert (receipt.due_at - receipt.received_at).days == 30

    # Raw SQL over every table of the database: nothing of Alice, everything of the other user.
    hits = await scan_database(state_engine, [ALICE, a.subject_key, CANARY_A, ALICE_CASE, b.subject_key, CANARY_B,
                                        a_secret, b_secret])
    assert hits[ALICE] == [] and hits[a.subject_key] == [] and hits[CANARY_A] == []
    # Her session secret went with her subject: nothing left can confirm a guessed session id of hers. The
    # other user's is in the subject mapping and nowhere else.
    assert hits[a_secret] == [] and hits[b_secret] == ["ts_subjects.session_secret"]
    assert {"ts_sessions.user_id", "ts_subjects.user_id", "ts_quarantine.user_id"} <= set(hits[ALICE_CASE])
    assert {"ts_usage.subject_key", "ts_transcript_outbox.subject_key", "ts_subject_sessions.subject_key",
            "ts_transcript_rewrites.subject_key", "ts_transcript_rewrites.object_key"} <= set(hits[b.subject_key])
    # Planted in the clear by hand (as an older release wrote them); the runtime's own saves are sealed.
    assert {"ts_quarantine.state", "ts_transcript_outbox.body"} <= set(hits[CANARY_B])
    assert "ts_sessions.state" not in hits[CANARY_B] and "ts_data_keys.user_id" in hits[ALICE_CASE]
    assert await counts(state_engine, b.user_id, b.subject_key) == b_before

    # The cost report still counts Alice's runs, under no name; the other user's read as the application's ids.
    by_session = await cost_report(state_engine, load_prices(), CostQuery.build("session"))
    names = [(row.group["user"], row.group["session"]) for row in by_session.rows]
    erased = {session for user, session in names if user == "erased" and session.startswith("erased-")}
    assert len(names) == 4 and len(erased) == 2  # her two sessions, told apart by the keys the erasure gave them
    assert {(ALICE_CASE, "sess-0"), (ALICE_CASE, "sess-1")} <= set(names)

    # The whole bucket, every version and delete marker.
    versions = all_versions(s3_store.client, s3_store.bucket)
    assert _subject_versions(versions, a.subject_key) == []
    assert _subject_versions(versions, b.subject_key) == b_versions
    for v in versions:
        body = s3_store.client.get_object(Bucket=s3_store.bucket, Key=v["Key"], VersionId=v["VersionId"])["Body"]
        data = body.read()
        assert CANARY_A.encode() not in data and CANARY_A.encode() not in _gunzipped(data)

    # Spans: only the pseudonymous key, which nothing maps back to Alice any more.
    assert any(s["attributes"].get("teamstore.subject") == a.subject_key for s in spans)
    wire = otlp_env.wire()
    assert ALICE.encode() not in wire and CANARY_A.encode() not in wire
    assert a_secret.encode() not in wire and b_secret.encode() not in wire

    # The fence is lifted and the request keeps no raw id: Alice may start over as a new subject.
    async with state_engine.connect() as conn:
        row = (await conn.execute(select(erasure_requests))).one()
        assert (row.user_id, row.subject_key, row.status) == (None, None, "completed")
        assert await conn.scalar(select(user_holds.c.user_id).where(user_holds.c.user_id == ALICE)) is None
    async with platform.session(ALICE, "sess-new", team="support_triage") as s:
        await s.run("hello again")
    assert await find_subject(state_engine, ALICE) not in (None, a.subject_key)

    # The finished request is only ever reported; run again for a user with data (Alice's new session)
    # it is refused rather than answered with a receipt that would not cover that data.
    assert await coordinator(state_engine, s3_store).status("req-e2e") == receipt
    with pytest.raises(ErasureConflict, match="finished"):
        await coordinator(state_engine, s3_store).run(ALICE, request_id="req-e2e")
    tracer.shutdown()
