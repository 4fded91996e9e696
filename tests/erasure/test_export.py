"""The access and portability export in the library: contents checked against what each store holds, on
SQLite and a real Postgres, transcripts in a versioned bucket over HTTP (moto's server) and in a folder."""

from __future__ import annotations

import asyncio
import gzip
import hashlib
import json
import re
import shutil
import stat
import tracemalloc
import zipfile
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import boto3
import pytest
from botocore.config import Config
from sqlalchemy import delete, func, insert, select, update
from sqlalchemy.ext.asyncio import AsyncEngine

from config_registry import Registry
from teamstore.app import App
from teamstore.audit.prices import load_prices
from teamstore.audit.schema import rewrites, subjects, usage
from teamstore.audit.subjects import (
    ensure_subject,
    find_subject,
    get_or_create_subject,
    lookup_subject,
    record_store,
    session_key,
)
from teamstore.audit.transcripts import record
from teamstore.audit.transcripts.base import TranscriptStore, subject_prefix
from teamstore.audit.transcripts.local import LocalTranscriptStore
from teamstore.audit.transcripts.s3 import S3TranscriptStore, make_client
from teamstore.db.fence import user_holds
from teamstore.erasure import RequestStatus, requests
from teamstore.erasure.desk import extend_request
from teamstore.erasure.exporter import ErasureRequestsExporter
from teamstore.errors import AuditError, ExportFailed, ExportTargetExists, InvalidIdentifier
from teamstore.export import ExportCoordinator, Section, store_exporters
from teamstore.export.base import to_json
from teamstore.export.guide import OTHER
from teamstore.export.requests import get_export, open_export, without_pseudonyms
from teamstore.export.schema import export_requests
from teamstore.keys import KeyService
from teamstore.keys.schema import data_keys
from teamstore.memory.facts import MemoryUpdate
from teamstore.memory.schema import facts, memories
from teamstore.memory.statements import FORGETS_KEPT
from teamstore.memory.store import MemoryStore
from teamstore.settings import Settings
from teamstore.state import envelope
from teamstore.state.schema import quarantine, sessions
from tests.erasure.conftest import coordinator, versioned_bucket
from tests.erasure.seed import audited_platform, seed_user
from tests.services import free_port

ALICE, ALICE_CASE = "alice@example.com", "Alice@example.com"
CANARY_A, CANARY_B = "CANARY-xa-51c2e0", "CANARY-xb-09d3f7"
STORES = {"resume_state", "quarantine", "memory", "transcripts", "outbox", "ledger", "exports", "keys", "subject",
          "erasure_requests"}


def exporter(engine: AsyncEngine, store: TranscriptStore) -> ExportCoordinator:
    """The coordinator the composition root builds: every store's exporter, the erasure requests' last."""
    return ExportCoordinator(engine, store, [*store_exporters(), ErasureRequestsExporter()], load_prices())


def unpack(path: Path | None) -> dict[str, bytes]:
    """Every file of an archive (a zip file or a folder), by its name inside it."""
    assert path is not None, "no archive was written"
    if path.is_dir():
        return {p.relative_to(path).as_posix(): p.read_bytes() for p in path.rglob("*") if p.is_file()}
    with zipfile.ZipFile(path) as archive:
        return {name: archive.read(name) for name in archive.namelist()}


def loaded(files: dict[str, bytes], name: str) -> Any:
    return json.loads(files[name])


async def test_an_export_holds_what_every_store_holds_about_the_user_and_nothing_of_another(
    state_engine: AsyncEngine, backend: tuple[str, str], registry: Registry, s3_store: S3TranscriptStore,
    tmp_path: Path,
) -> None:
    platform = audited_platform(state_engine, registry, s3_store, session_lease=backend[1])
    a = await seed_user(platform, s3_store, ALICE, CANARY_A)
    await seed_user(platform, s3_store, ALICE_CASE, CANARY_B)  # differs only by case: never exported with alice
    await requests.open_request(state_engine, "req-open", ALICE, "art. 17", 30, requested_by="ticket 881")
    await extend_request(state_engine, "req-open", "2m", "40 sessions", operator="ana")
    async with state_engine.begin() as conn:  # past its expiry, not swept yet: still held, so still hers to see
        await conn.execute(update(memories).where(memories.c.user_id == ALICE)
                           .values(expires_at=datetime.now(UTC) - timedelta(days=1)))

    done = await exporter(state_engine, s3_store).run(ALICE, tmp_path / "alice.zip", requested_by="subject", operator="dpo")

    files = unpack(done.path)
    manifest = loaded(files, "manifest.json")
    assert done.matched and manifest["status"] == "exported" and set(manifest["stores"]) == STORES
    assert {name: hashlib.sha256(data).hexdigest() for name, data in files.items() if name != "manifest.json"} == {
        name: entry["sha256"] for name, entry in manifest["files"].items()}
    assert CANARY_B.encode() not in b"".join(files.values()) and ALICE_CASE.encode() not in b"".join(files.values())
    assert ALICE not in json.dumps(manifest) and CANARY_A not in json.dumps(manifest)
    assert (manifest["operator"], manifest["requested_by"]) == ("dpo", "subject")
    _the_guide_says_what_each_file_holds(files, manifest)

    states = loaded(files, "resume_state.json")
    assert states["user_id"] == ALICE and sorted(s["session_id"] for s in states["resume_state"]) == ["sess-0", "sess-1"]
    assert all(CANARY_A in json.dumps(s["state"]) for s in states["resume_state"])  # decoded, not an envelope
    (memory,) = loaded(files, "memory.json")["memory"]  # the summary and facts its runs wrote about alice
    assert memory["scope"] == "support_triage" and CANARY_A in memory["summary"]
    assert manifest["stores"]["memory"]["records"] == 1 + len(memory["facts"])
    (held,) = loaded(files, "quarantine.json")["quarantine"]
    assert held["session_id"] == "sess-old" and CANARY_A in held["state_as_stored"] and held["state_unreadable"]
    await _transcripts_match_the_store(files, s3_store, a.subject_key, a.run_ids, KeyService.from_settings(state_engine))
    (waiting,) = loaded(files, "outbox.json")["waiting_transcripts"]
    assert CANARY_A in json.dumps(waiting)
    ledger = loaded(files, "ledger.json")
    async with state_engine.connect() as conn:
        rows = await conn.scalar(select(func.count()).select_from(usage).where(usage.c.subject_key == a.subject_key))
    assert len(ledger["usage"]) == rows == manifest["stores"]["ledger"]["records"] and rows >= 4
    assert {row["session_id"] for row in ledger["usage"]} == {"sess-0", "sess-1"}
    (key,) = loaded(files, "keys.json")["data_keys"]  # that the key exists, never the key
    assert set(key) == {"key_id", "created_at", "wrapped_at"}
    subject = loaded(files, "subject.json")
    assert subject["subject"]["user_id"] == ALICE and subject["subject"]["subject_key"] == a.subject_key
    found = await lookup_subject(state_engine, ALICE)  # the secret her session keys are keyed by stays in the database
    assert found is not None and found.session_secret.encode() not in b"".join(files.values())
    assert set(subject["subject"]) == {"user_id", "subject_key", "created_at"}
    (rewritten,) = subject["transcripts_written_again"]  # the transcript seed_user wrote again, and when first
    assert rewritten["store"] == s3_store.url and rewritten["object_key"].startswith(subject_prefix(a.subject_key))
    assert [e["requested_by"] for e in loaded(files, "exports.json")["earlier_exports"]] == ["ticket 881"]
    (request,) = loaded(files, "erasure_requests.json")["requests"]
    assert (request["request_id"], request["requested_by"]) == ("req-open", "ticket 881")
    assert request["extension"]["reason"] == "40 sessions"

    stored = await get_export(state_engine, done.manifest.export_id)
    # req-open fences alice: the record links no key, which the erasure would have to unlink again.
    assert stored is not None and stored["status"] == "exported" and stored["subject_key"] is None
    assert ALICE not in json.dumps(stored, default=str) and "alice.zip" not in json.dumps(stored, default=str)
    assert done.path is not None and stat.S_IMODE(done.path.stat().st_mode) == 0o600


def _the_guide_says_what_each_file_holds(files: dict[str, bytes], manifest: dict[str, Any]) -> None:
    """README.txt, covered by the manifest as every other file, names each file and folder the archive holds
    with what it holds (none left to the catch-all), in words for the user, never the user's data."""
    assert "README.txt" in manifest["files"]
    said = files["README.txt"].decode()
    held = {name.split("/")[0] + "/" if "/" in name else name for name in files} - {"README.txt"}
    assert held >= {"transcripts/", "manifest.json", "resume_state.json"}
    assert all(f"\n{name}\n    " in said for name in held) and OTHER not in said
    assert "transcripts/index.json says which conversation" in " ".join(said.split())
    assert ALICE not in said and CANARY_A not in said


async def _transcripts_match_the_store(
    files: dict[str, bytes], store: S3TranscriptStore, subject_key: str, run_ids: list[str], keys: KeyService
) -> None:
    """Every current transcript is in the archive as the store holds it (sealed there, opened here), and the
    version seed_user overwrote (the run's real record) is there too, marked an earlier version."""
    index = loaded(files, "transcripts/index.json")["runs"]
    current = {e["run_id"]: e for e in index if e["copy"] == "current"}
    assert sorted(current) == sorted(run_ids)
    for key in await store.list_keys(subject_prefix(subject_key)):
        entry = next(e for e in current.values() if key.endswith(f"/{e['run_id']}.jsonl.gz"))
        stored = await store.get(key)
        assert entry["sha256_as_stored"] == hashlib.sha256(stored).hexdigest()
        body = await keys.open(ALICE, stored, record.sealed_context(key))  # one from before sealing: as it is
        try:
            header, items = record.decode(body)
        except AuditError:  # the object seed_user overwrote is not a transcript any more
            assert entry["file"].endswith(".unreadable.json") and CANARY_A in loaded(files, entry["file"])["as_stored_text"]
            continue
        lines = [json.loads(line) for line in files[entry["file"]].decode().splitlines()]
        assert lines == [header, *items] and entry["items"] == len(items)
    (earlier,) = [e for e in index if e["copy"] == "earlier_version"]
    assert earlier["run_id"] in current and earlier["version_id"] and earlier["file"].endswith(".2.jsonl")
    assert CANARY_A.encode() in files[earlier["file"]]


async def test_an_export_of_an_erased_user_holds_nothing_and_says_so(
    engine: AsyncEngine, registry: Registry, s3_store: S3TranscriptStore, tmp_path: Path
) -> None:
    platform = audited_platform(engine, registry, s3_store)
    await seed_user(platform, s3_store, ALICE, CANARY_A, 1, 1)
    before = await exporter(engine, s3_store).run(ALICE, tmp_path / "before", operator="dpo")  # a folder
    assert before.matched and (tmp_path / "before" / "manifest.json").is_file()
    assert stat.S_IMODE((tmp_path / "before").stat().st_mode) == 0o700
    runs = loaded(unpack(before.path), "transcripts/index.json")["runs"]
    pseudonyms = {run["session_key"] for run in runs} | {run["run_id"] for run in runs}
    assert (await coordinator(engine, s3_store).run(ALICE, request_id="req-gone")).status is RequestStatus.COMPLETED
    # Its record stays, naming none of the session keys and run ids that spans and held objects still carry.
    kept = await get_export(engine, before.manifest.export_id)
    assert kept is not None and not [p for p in pseudonyms if p in json.dumps(kept["manifest"])]
    assert sorted(entry["sha256"] for entry in kept["manifest"]["files"].values()) == sorted(
        entry.sha256 for entry in before.manifest.files.values())
    names = kept["manifest"]["stores"]["transcripts"]["files"]
    assert names[-1] == "transcripts/index.json" and all(re.fullmatch(r"transcripts/run-\d\.[.\w]+", n) for n in names[:-1])

    after = await exporter(engine, s3_store).run(ALICE, tmp_path / "after.zip", operator="dpo")

    assert not after.matched and after.manifest.status == "no_match" and after.path is None
    assert not (tmp_path / "after.zip").exists() and sorted(p.name for p in tmp_path.iterdir() if "after" in p.name) == []
    assert after.manifest.stores == dict.fromkeys(STORES, Section()) and after.manifest.files == {}
    assert after.manifest.near_match is None
    stored = await get_export(engine, after.manifest.export_id)
    assert stored is not None and stored["status"] == "no_match" and set(stored["manifest"]["stores"]) == STORES
    async with engine.connect() as conn:  # the earlier exports' records stay, unlinked from the user
        linked = dict((await conn.execute(select(export_requests.c.export_id, export_requests.c.subject_key))).all())
    assert len(linked) == 3 and set(linked.values()) == {None}  # seed_user's, before and after
    assert {before.manifest.export_id, after.manifest.export_id} <= set(linked)


async def test_an_export_record_written_while_an_erasure_fences_the_user_or_after_it_links_no_key(
    engine: AsyncEngine, registry: Registry, s3_store: S3TranscriptStore, tmp_path: Path
) -> None:
    platform = audited_platform(engine, registry, s3_store)
    await seed_user(platform, s3_store, ALICE, CANARY_A, 1, 1)
    subject = await find_subject(engine, ALICE)
    async with engine.begin() as conn:  # an erasure of alice under way: its fence is up
        await conn.execute(insert(user_holds).values(user_id=ALICE, reason="erasure", request_id="req-1",
                                                     created_at=datetime.now(UTC)))

    during = await exporter(engine, s3_store).run(ALICE, tmp_path / "during.zip", operator="dpo")

    assert during.matched and CANARY_A.encode() in b"".join(unpack(during.path).values())  # her access stands
    recorded = await get_export(engine, during.manifest.export_id)
    assert recorded is not None and recorded["status"] == "exported" and recorded["subject_key"] is None
    runs = loaded(unpack(during.path), "transcripts/index.json")["runs"]  # nor her session keys and run ids
    kept = json.dumps(recorded["manifest"])
    assert runs and not [run for run in runs if run["session_key"] in kept or run["run_id"] in kept]

    # An export that read the subject key just before an erasure deleted its mapping links none either.
    async with engine.begin() as conn:
        await conn.execute(delete(user_holds))
        await conn.execute(delete(subjects).where(subjects.c.subject_key == subject))
    await open_export(engine, "ex-late", subject, user_id=ALICE, requested_by=None, operator="dpo", owner="o")
    late = await get_export(engine, "ex-late")
    assert late is not None and late["subject_key"] is None
    await open_export(engine, "ex-bob", await get_or_create_subject(engine, "bob"), user_id="bob", requested_by=None,
                      operator="dpo", owner="o")
    bob = await get_export(engine, "ex-bob")
    assert bob is not None and bob["subject_key"] == await find_subject(engine, "bob")  # linked, as ever


@pytest.mark.s3
async def test_a_request_held_after_forgetting_the_user_id_is_in_that_users_export_alone(
    engine: AsyncEngine, s3_env: str, tmp_path: Path
) -> None:
    store = S3TranscriptStore(make_client(), versioned_bucket(lock=True), "audit")
    subject = await get_or_create_subject(engine, "erin")
    key = f"{subject_prefix(subject)}sessions/s0/runs/r0.jsonl.gz"
    await store.put(key, b"transcript")
    store.client.put_object_legal_hold(Bucket=store.bucket, Key=f"audit/{key}", LegalHold={"Status": "ON"})
    held = await coordinator(engine, store).run("erin", request_id="req-held", requested_by="ticket 9")
    assert held.status is RequestStatus.RETAINED_UNDER_HOLD
    await get_or_create_subject(engine, "erin")  # she comes back, and so does bob
    await get_or_create_subject(engine, "bob")

    erins = unpack((await exporter(engine, store).run("erin", tmp_path / "erin.zip", operator="dpo")).path)
    bobs = unpack((await exporter(engine, store).run("bob", tmp_path / "bob.zip", operator="dpo")).path)

    (request,) = loaded(erins, "erasure_requests.json")["requests"]
    assert (request["request_id"], request["status"], request["requested_by"]) == ("req-held", "retained_under_hold",
                                                                                   "ticket 9")
    assert loaded(bobs, "erasure_requests.json")["requests"] == []
    await store.close()


async def test_an_id_that_matches_nothing_is_said_to_have_a_near_twin_when_one_holds_data(
    engine: AsyncEngine, tmp_path: Path
) -> None:
    await get_or_create_subject(engine, "dave")
    done = await exporter(engine, LocalTranscriptStore(tmp_path / "t")).run("Dave", tmp_path / "dave.zip", operator="o")
    assert done.path is None and not (tmp_path / "dave.zip").exists()
    assert not done.matched and done.manifest.near_match and "letter case" in done.manifest.near_match
    assert "dave" not in done.manifest.model_dump_json().lower()


async def test_an_export_never_overwrites_and_refuses_bad_input_before_anything_is_written(
    engine: AsyncEngine, tmp_path: Path
) -> None:
    tmp_path = tmp_path / "desk"
    store = LocalTranscriptStore(tmp_path / "t")
    await get_or_create_subject(engine, "erin")
    taken = tmp_path / "taken.zip"
    tmp_path.mkdir()
    taken.write_bytes(b"someone's archive")
    (tmp_path / "folder").mkdir()
    (tmp_path / "link.zip").symlink_to(tmp_path / "nowhere.zip")  # a dangling link: written through, it would land there
    for target in (taken, tmp_path / "folder", tmp_path / "link.zip"):
        with pytest.raises(ExportTargetExists, match="never overwrites"):
            await exporter(engine, store).run("erin", target, operator="o")
    assert taken.read_bytes() == b"someone's archive" and not any((tmp_path / "folder").iterdir())
    with pytest.raises(ExportFailed, match="does not exist"):
        await exporter(engine, store).run("erin", tmp_path / "no-such-folder" / "x.zip", operator="o")
    with pytest.raises(ExportFailed, match="is not a folder"):
        await exporter(engine, store).run("erin", taken / "x.zip", operator="o")
    with pytest.raises(ExportFailed, match=r"could not create .* name too long"):
        await exporter(engine, store).run("erin", tmp_path / ("a" * 300 + ".zip"), operator="o")
    for user, person in (("", {}), ("erin\x00", {}), ("erin", {"requested_by": "a\nb"}), ("erin", {"operator": " "}),
                         ("erin", {"requested_by": "Erin herself"})):  # the record outlives erin's erasure
        with pytest.raises(InvalidIdentifier):
            await exporter(engine, store).run(user, tmp_path / "bad.zip", **person)
    assert not (tmp_path / "bad.zip").exists()
    async with engine.connect() as conn:
        assert await conn.scalar(select(func.count()).select_from(export_requests)) == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["folder", "link.zip", "taken.zip"]  # nothing left behind


async def test_a_user_id_no_session_can_have_is_exported_only_while_something_is_stored_under_it(
    engine: AsyncEngine, registry: Registry, tmp_path: Path
) -> None:
    store = LocalTranscriptStore(tmp_path / "t")
    platform = audited_platform(engine, registry, store)
    await seed_user(platform, store, "erin", CANARY_A)
    async with engine.connect() as conn:
        records = await conn.scalar(select(func.count()).select_from(export_requests))
    for typed in ("   ", " erin", "erin\ufeff"):  # an unset or padded variable, a pasted id
        with pytest.raises(InvalidIdentifier, match="nothing is stored under it"):
            await exporter(engine, store).run(typed, tmp_path / "typed.zip", operator="o")
    assert not (tmp_path / "typed.zip").exists()
    async with engine.connect() as conn:  # no record of a no-match export either
        assert await conn.scalar(select(func.count()).select_from(export_requests)) == records

    async with engine.begin() as conn:  # erin's data, as an earlier release kept it under a pasted id
        for table in (subjects, sessions, quarantine, memories, facts, data_keys):
            await conn.execute(update(table).where(table.c.user_id == "erin").values(user_id="erin "))
    done = await exporter(engine, store).run("erin ", tmp_path / "erin.zip", operator="o")
    files = unpack(done.path)
    assert done.matched and loaded(files, "resume_state.json")["resume_state"]
    (memory,) = loaded(files, "memory.json")["memory"]  # memory is read as every other store is
    assert CANARY_A in memory["summary"]


async def test_a_store_that_cannot_be_read_fails_the_export_leaves_no_archive_and_records_why(
    engine: AsyncEngine, registry: Registry, s3_store: S3TranscriptStore, tmp_path: Path
) -> None:
    await seed_user(audited_platform(engine, registry, s3_store), s3_store, "fay", "CANARY-fay", 1, 1)
    dead = boto3.client("s3", endpoint_url=f"http://127.0.0.1:{free_port()}", config=Config(
        connect_timeout=0.3, read_timeout=0.3, retries={"total_max_attempts": 1}))
    out = tmp_path / "out"
    out.mkdir()

    with pytest.raises(ExportFailed, match="could not read transcripts") as caught:
        await exporter(engine, S3TranscriptStore(dead, s3_store.bucket, "audit")).run("fay", out / "fay.zip", operator="o")

    assert caught.value.hint and list(out.iterdir()) == []  # no archive, no temporary file
    async with engine.connect() as conn:
        (row,) = (await conn.execute(select(export_requests.c.status, export_requests.c.detail)
                                     .where(export_requests.c.status != "running"))).all()  # seed_user's is
    assert row.status == "failed" and row.detail.startswith("transcripts: TranscriptUnavailable")
    assert "fay" not in row.detail


async def test_a_failed_exports_record_says_where_and_the_error_type_never_a_path_that_names_the_user(
    engine: AsyncEngine, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The archive is done, but something appeared at its path, named after the user, just after the export
    looked: the error raised names the path, the record (which outlives the user's erasure) does not."""
    await get_or_create_subject(engine, "kim@example.com")
    target = tmp_path / "kim@example.com.zip"

    def free_then_taken(path: Path) -> bool:
        path.write_bytes(b"someone's archive")
        return False

    monkeypatch.setattr("teamstore.export.archive._is_taken", free_then_taken)
    with pytest.raises(ExportTargetExists, match=re.escape(f"{target} exists")):
        await exporter(engine, LocalTranscriptStore(tmp_path / "t")).run("kim@example.com", target, operator="o")

    async with engine.connect() as conn:
        (row,) = (await conn.execute(select(export_requests.c.status, export_requests.c.detail))).all()
    assert (row.status, row.detail) == ("failed", "the archive: ExportTargetExists")


async def test_a_full_disk_under_the_exports_working_file_fails_the_export_leaves_nothing_and_records_why(
    engine: AsyncEngine, registry: Registry, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The transcript index waits in an unnamed file beside the archive. On a full disk (``/dev/full``: every
    write ENOSPC) its lines sit in the file's buffer, reading them back fails, and so does closing the file,
    which writes the buffer out once more: the export must still fail with what stopped it and say so in its
    record, not end in a raw OSError with the record left ``running`` as if it were still under way."""
    store = LocalTranscriptStore(tmp_path / "t")
    await seed_user(audited_platform(engine, registry, store), store, "gus", "CANARY-gus", 1, 1)
    # The spool closes what it opens, as it closes its own file.
    full = SimpleNamespace(TemporaryFile=lambda **_: open("/dev/full", "w+b"))  # noqa: SIM115
    monkeypatch.setattr("teamstore.export.archive.tempfile", full)
    out = tmp_path / "out"
    out.mkdir()

    with pytest.raises(ExportFailed, match="No space left on device") as caught:
        await exporter(engine, store).run("gus", out / "gus.zip", operator="o")

    assert caught.value.hint and "space" in caught.value.hint and list(out.iterdir()) == []
    async with engine.connect() as conn:
        (row,) = (await conn.execute(select(export_requests.c.status, export_requests.c.detail)
                                     .where(export_requests.c.status != "running"))).all()  # seed_user's is
    assert (row.status, row.detail) == ("failed", "transcripts: ExportFailed")


async def test_an_export_a_fault_stops_that_no_store_typed_records_it_failed_and_where_not_running(
    engine: AsyncEngine, registry: Registry, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Whatever stops an export (here an OSError no store turned into a typed error, as a bug or an unforeseen
    fault would), its record says it failed and in which store, never ``running`` as if it still were."""
    store = LocalTranscriptStore(tmp_path / "t")
    await seed_user(audited_platform(engine, registry, store), store, "hal", "CANARY-hal", 1, 1)
    done = exporter(engine, store)
    memory = next(e for e in done.exporters if e.name == "memory")

    async def broken(*_: object) -> None:
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(memory, "export", broken)
    out = tmp_path / "out"
    out.mkdir()

    with pytest.raises(OSError, match="Input/output error"):
        await done.run("hal", out / "hal.zip", operator="o")

    assert list(out.iterdir()) == []
    async with engine.connect() as conn:
        (row,) = (await conn.execute(select(export_requests.c.status, export_requests.c.detail)
                                     .where(export_requests.c.status != "running"))).all()  # seed_user's is
    assert (row.status, row.detail) == ("failed", "memory: OSError")


async def test_a_versioned_buckets_copies_are_written_as_each_listing_page_comes_not_once_every_page_is_listed(
    engine: AsyncEngine, s3_store: S3TranscriptStore, tmp_path: Path
) -> None:
    # Listed whole first, a heavy user's versions (and the index of every copy) were all in memory at once.
    store = S3TranscriptStore(s3_store.client, s3_store.bucket, "audit", page_size=2)
    subject = await get_or_create_subject(engine, "gil")
    runs = f"{subject_prefix(subject)}sessions/{'s' * 32}/runs"
    for n in range(4):  # 8 versions: 4 listing pages of 2
        for text in ("first", "second"):
            await store.put(f"{runs}/run{n}.jsonl.gz", gzip.compress(f'{{"kind": "run", "text": "{text} {n}"}}\n'.encode()))
    calls: list[str] = []
    store.client.meta.events.register("after-call.s3.ListObjectVersions", lambda **_: calls.append("list"))
    store.client.meta.events.register(
        "before-parameter-build.s3.GetObject", lambda params, **_: calls.append("read version" * ("VersionId" in params)))

    done = await exporter(engine, store).run("gil", tmp_path / "gil.zip", operator="o")

    assert calls.index("read version") < max(n for n, call in enumerate(calls) if call == "list")
    files = unpack(done.path)
    index = loaded(files, "transcripts/index.json")
    assert files["transcripts/index.json"] == to_json(index)  # the bytes add_json writes
    assert [(e["run_id"], e["copy"]) for e in index["runs"]] == [
        *((f"run{n}", "current") for n in range(4)), *((f"run{n}", "earlier_version") for n in range(4))]
    assert all(b"first" in files[e["file"]] for e in index["runs"] if e["copy"] == "earlier_version")
    assert done.manifest.stores["transcripts"].records == 8 and "transcripts/index.json" in done.manifest.files


async def test_a_folder_store_hands_over_a_write_a_killed_writer_left(engine: AsyncEngine, tmp_path: Path) -> None:
    store = LocalTranscriptStore(tmp_path / "t")
    subject = await get_or_create_subject(engine, "gil")
    folder = tmp_path / "t" / subject_prefix(subject) / "sessions" / ("s" * 32) / "runs"
    folder.mkdir(parents=True)
    (folder / ".tmp-run1.jsonl.gz.k1ll3d").write_bytes(gzip.compress(b'{"kind": "run", "text": "CANARY-gil"}\n'))

    done = await exporter(engine, store).run("gil", tmp_path / "gil.zip", operator="o")

    (entry,) = loaded(unpack(done.path), "transcripts/index.json")["runs"]
    assert entry["copy"] == "partial_write" and done.manifest.stores["transcripts"].records == 1
    assert b"CANARY-gil" in unpack(done.path)[entry["file"]]
    # Named by the run it was written for, in a file a folder archive shows (not a dotfile).
    assert entry["run_id"] == "run1"
    assert entry["file"] == f"transcripts/{'s' * 32}/run1.partial.jsonl"


async def test_an_erasure_leaves_no_run_id_of_a_partial_write_in_the_export_record_it_unlinks(
    engine: AsyncEngine, tmp_path: Path
) -> None:
    store = LocalTranscriptStore(tmp_path / "t")
    subject = await get_or_create_subject(engine, "gil")
    folder = tmp_path / "t" / subject_prefix(subject) / "sessions" / ("s" * 32) / "runs"
    folder.mkdir(parents=True)
    await store.put(f"{subject_prefix(subject)}sessions/{'s' * 32}/runs/RUNID123.jsonl.gz",
                    gzip.compress(b'{"kind": "run"}\n'))
    (folder / ".tmp-RUNID123.jsonl.gz.k1ll3d").write_bytes(gzip.compress(b'{"kind": "run", "text": "x"}\n'))
    done = await exporter(engine, store).run("gil", tmp_path / "gil.zip", operator="o")
    assert sorted(done.manifest.stores["transcripts"].files) == [
        "transcripts/index.json", f"transcripts/{'s' * 32}/RUNID123.2.partial.jsonl",
        f"transcripts/{'s' * 32}/RUNID123.jsonl"]

    assert (await coordinator(engine, store).run("gil", "req-1")).status == RequestStatus.COMPLETED
    kept = await get_export(engine, done.manifest.export_id)
    assert kept is not None and kept["subject_key"] is None
    said = json.dumps(kept["manifest"])
    assert "RUNID123" not in said and "s" * 32 not in said and "tmp" not in said
    assert sorted(kept["manifest"]["stores"]["transcripts"]["files"]) == [
        "transcripts/index.json", "transcripts/run-1.2.partial.jsonl", "transcripts/run-1.jsonl"]


def test_a_record_unlinked_keeps_no_part_of_a_transcript_file_name_but_its_copy_and_format() -> None:
    session = "s" * 32
    names = [f"transcripts/{session}/r1.jsonl", f"transcripts/{session}/r1.2.jsonl",
             f"transcripts/{session}/r1.3.partial.jsonl", f"transcripts/{session}/r2.unreadable.json",
             # as exports before partial writes were named by their run wrote it: the whole name goes
             f"transcripts/{session}/.tmp-RUNID123.jsonl.gz.k1ll3d.unreadable.json",
             f"transcripts/{session}/oddly.named", "transcripts/index.json"]
    manifest = {"files": {name: {"bytes": 1, "sha256": "x"} for name in names},
                "stores": {"transcripts": {"files": names}}}
    unlinked = without_pseudonyms(manifest)
    assert unlinked is not None
    assert unlinked["stores"]["transcripts"]["files"] == list(unlinked["files"]) == [
        "transcripts/run-3.jsonl", "transcripts/run-3.2.jsonl", "transcripts/run-3.3.partial.jsonl",
        "transcripts/run-4.unreadable.json", "transcripts/run-1.unreadable.json", "transcripts/run-2",
        "transcripts/index.json"]


async def test_a_symlink_planted_in_a_users_transcript_folder_hands_over_nothing_it_points_at(
    engine: AsyncEngine, tmp_path: Path
) -> None:
    store = LocalTranscriptStore(tmp_path / "t")
    subject = await get_or_create_subject(engine, "gil")
    await store.put(f"{subject_prefix(subject)}sessions/{'s' * 32}/runs/run1.jsonl.gz",
                    gzip.compress(b'{"kind": "run", "text": "CANARY-gil"}\n'))
    secret = tmp_path / "service-owners-file"
    secret.write_text("NOT-GILS-ssh-key")
    runs = tmp_path / "t" / subject_prefix(subject) / "sessions" / ("s" * 32) / "runs"
    (runs / "planted.jsonl.gz").symlink_to(secret)
    (runs / ".tmp-planted.jsonl.gz.x").symlink_to(secret)
    (tmp_path / "t" / subject_prefix(subject) / "sessions" / ("p" * 32)).symlink_to(tmp_path)

    done = await exporter(engine, store).run("gil", tmp_path / "gil.zip", operator="o")

    files = unpack(done.path)
    assert not any(b"NOT-GILS" in data for data in files.values())
    (entry,) = loaded(files, "transcripts/index.json")["runs"]
    assert entry["run_id"] == "run1" and b"CANARY-gil" in files[entry["file"]]


async def test_an_export_of_a_user_whose_data_key_is_gone_never_says_it_opened_their_data_under_it(
    engine: AsyncEngine, registry: Registry, tmp_path: Path
) -> None:
    store = LocalTranscriptStore(tmp_path / "t")
    await seed_user(audited_platform(engine, registry, store), store, "ida", "CANARY-ida", 1, 1)
    held = loaded(unpack((await exporter(engine, store).run("ida", tmp_path / "a.zip", operator="o")).path), "keys.json")
    assert len(held["data_keys"]) == 1 and "was opened for this export" in held["note"]
    async with engine.begin() as conn:  # as an erasure stopped after its keys step leaves it
        await conn.execute(delete(data_keys).where(data_keys.c.user_id == "ida"))

    done = await exporter(engine, store).run("ida", tmp_path / "b.zip", operator="o")
    files = unpack(done.path)

    keys = loaded(files, "keys.json")
    assert keys["data_keys"] == [] and "holds no data key" in keys["note"]
    assert "opened" not in keys["note"].replace("nothing above was opened", "")
    (state, *_) = loaded(files, "resume_state.json")["resume_state"]
    assert state["state"] is None and "beyond use" in state["state_unreadable"]
    # Its facts no longer open, and are listed as damaged: still records held about her, and counted as such.
    (memory,) = loaded(files, "memory.json")["memory"]
    assert memory["facts"] == [] and memory["damaged"]
    assert done.manifest.stores["memory"].records == 1 + len(memory["damaged"])


async def test_memory_facts_left_without_their_memory_row_are_exported_as_left_over_while_held(
    engine: AsyncEngine, tmp_path: Path
) -> None:
    store, folder = MemoryStore(engine, keys=KeyService.from_settings(engine, Settings())), LocalTranscriptStore(tmp_path)
    await get_or_create_subject(engine, "hal")
    await store.write("hal", "helpdesk", MemoryUpdate("line fault", {"ticket_id": "55102"}), types={"ticket_id": "str"},
                      expected_version=0, run_id="run-1", team="helpdesk", team_version="v1", retention_days=180)
    async with engine.begin() as conn:  # the memory row deleted by hand: its fact is left, still held about hal
        await conn.execute(memories.delete())

    done = await exporter(engine, folder).run("hal", tmp_path / "hal.zip", operator="o")

    (memory,) = loaded(unpack(done.path), "memory.json")["memory"]
    assert memory["leftover"] is True and memory["summary"] == "" and memory["version"] == 0
    assert [(f["name"], f["value"]) for f in memory["facts"]] == [("ticket_id", "55102")]
    assert done.manifest.stores["memory"].records == 1  # the fact: there is no memory row
    await store.sweep()
    swept = await exporter(engine, folder).run("hal", tmp_path / "swept.zip", operator="o")
    assert loaded(unpack(swept.path), "memory.json")["memory"] == []


async def test_an_export_says_when_the_user_forgot_their_memory_while_that_is_kept(
    engine: AsyncEngine, tmp_path: Path
) -> None:
    store, folder = MemoryStore(engine, keys=KeyService.from_settings(engine, Settings())), LocalTranscriptStore(tmp_path)
    await get_or_create_subject(engine, "hal")
    await store.write("hal", "helpdesk", MemoryUpdate("line fault", {"ticket_id": "55102"}), types={"ticket_id": "str"},
                      expected_version=0, run_id="run-1", team="helpdesk", team_version="v1", retention_days=180)
    await store.forget("hal", fact="ticket_id", scope="helpdesk")
    await store.forget("hal", scope="billing")

    done = await exporter(engine, folder).run("hal", tmp_path / "hal.zip", operator="o")

    exported = loaded(unpack(done.path), "memory.json")
    assert [f["scope"] for f in exported["forgets"]] == ["billing", "helpdesk"]
    assert all(datetime.fromisoformat(f["forgotten_at"]) for f in exported["forgets"])
    (memory,) = exported["memory"]  # the summary, its fact forgotten
    assert memory["facts"] == [] and done.manifest.stores["memory"].records == 1 + 2
    await store.sweep(now=datetime.now(UTC) + FORGETS_KEPT + timedelta(days=1))
    swept = await exporter(engine, folder).run("hal", tmp_path / "swept.zip", operator="o")
    assert loaded(unpack(swept.path), "memory.json")["forgets"] == []


def test_the_composition_root_exports_from_every_store_it_builds(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TEAMSTORE_OPERATOR", "desk")

    async def go() -> set[str]:
        app = App(Settings(auto_migrate=True))
        try:
            await app.ensure_schema()
            async with app.engine.begin() as conn:
                await conn.execute(sessions.insert().values(**_state_row("hana")))
            done = await app.exporter().run("hana", tmp_path / "hana.zip")
            return {name for name, s in done.manifest.stores.items() if s.records} | {done.manifest.operator}
        finally:
            await app.aclose()

    assert asyncio.run(go()) == {"resume_state", "desk"}


def _state_row(user_id: str) -> dict[str, Any]:
    now = datetime.now(UTC)
    state = envelope.encode({"agents": {"triage": {"note": "CANARY-hana"}}})
    return {"user_id": user_id, "session_id": "s1", "team": "support_triage", "team_version": "v1",
            "schema_version": 1, "agentchat_version": "0.7.5", "fingerprints": {}, "state": state,
            "state_bytes": len(state.encode()), "row_version": 1, "created_at": now, "updated_at": now,
            "expires_at": now + timedelta(days=1)}


async def test_a_heavy_users_export_holds_a_few_of_their_rows_in_memory_at_a_time_never_every_one(
    engine: AsyncEngine, tmp_path: Path
) -> None:
    # Tens of thousands of runs are hundreds of thousands of ledger rows, and a state per session: read whole,
    # each table and its JSON text were in memory at once, gigabytes for such a user.
    subject, secret = await ensure_subject(engine, "heavy")
    started, runs, sessions_kept = datetime(2026, 11, 2, 10, tzinfo=UTC), 12_000, 300
    ledger = [{"run_id": f"r{n}", "agent": "triage", "model": "m-big", "purpose": "agent", "calls": 1,
               "failed_calls": 0, "input_tokens": 100, "output_tokens": 10, "team": "support_triage",
               "team_version": "v1", "session_key": session_key(secret, f"s{n % sessions_kept}"),
               "subject_key": subject, "stop_reason": None, "ended_by_limit": False, "run_failed": False,
               "started_at": started, "finished_at": started, "day": started.date(), "interruptions": 0,
               "attempt": 0} for n in range(runs)]
    note = "the customer's router drops every evening; " * 75  # a state of ~3 KB
    rewritten = [{"store": "s3://audit/teamstore", "subject_key": subject, "written_at": started, "recorded_at": started,
                  "object_key": f"{subject_prefix(subject)}sessions/{'s' * 32}/runs/r{n}.jsonl.gz"} for n in range(runs)]
    async with engine.begin() as conn:
        await conn.execute(insert(usage), ledger)
        await conn.execute(insert(rewrites), rewritten)  # `keys migrate` sealed every run's transcript
        await conn.execute(insert(sessions), [
            {**_state_row("heavy"), "session_id": f"s{n}", "state": envelope.encode({"agents": {"triage": {
                "note": f"{note}{n}"}}})} for n in range(sessions_kept)])
    coordinator = ExportCoordinator(engine, LocalTranscriptStore(tmp_path / "t"), store_exporters(), load_prices(),
                                    keys=KeyService.from_settings(engine))

    tracemalloc.start()
    try:
        done = await coordinator.run("heavy", tmp_path / "heavy.zip", operator="dpo")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()

    files = unpack(done.path)
    assert len(loaded(files, "ledger.json")["usage"]) == runs and done.manifest.stores["ledger"].records == runs
    states = loaded(files, "resume_state.json")["resume_state"]
    assert [s["session_id"] for s in states] == sorted(f"s{n}" for n in range(sessions_kept))
    assert all(s["state"]["agents"]["triage"]["note"].startswith(note) for s in states)
    assert len(loaded(files, "subject.json")["transcripts_written_again"]) == runs
    assert done.manifest.stores["subject"].records == 1 + runs
    written = len(files["ledger.json"]) + len(files["resume_state.json"]) + len(files["subject.json"])
    assert peak < written / 4, f"peak {peak >> 20} MiB to write {written >> 20} MiB"


async def test_an_interrupted_runs_checkpoint_is_exported_decoded_with_its_session(
    engine: AsyncEngine, registry: Registry, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tests.runtime.checkpoint_teams import TEAM, counted_calls, register

    register(registry)
    store = LocalTranscriptStore(tmp_path / "transcripts")
    platform = audited_platform(engine, registry, store)
    with counted_calls(monkeypatch) as calls:
        calls.fail_at = 3  # the run stops in its third turn: two are in its checkpoint
        async with platform.session(ALICE, "sess-long", team=TEAM) as s:
            with pytest.raises(RuntimeError):
                await s.run(f"{CANARY_A} my line drops every evening")
    done = await exporter(engine, store).run(ALICE, tmp_path / "alice.zip", operator="dpo")
    (row,) = loaded(unpack(done.path), "resume_state.json")["resume_state"]
    assert row["session_id"] == "sess-long" and row["state"] is None
    checkpoint = row["checkpoint"]
    assert checkpoint["kind"] == "checkpoint" and checkpoint["turn"] == 2  # decoded, not an envelope
    assert CANARY_A in json.dumps(checkpoint["agent_states"])


async def test_a_deleted_sessions_runs_and_calls_are_exported_under_its_session_id(
    engine: AsyncEngine, registry: Registry, tmp_path: Path
) -> None:
    store = LocalTranscriptStore(tmp_path / "transcripts")
    platform = audited_platform(engine, registry, store)
    await seed_user(platform, store, ALICE, CANARY_A, 2, 1)
    await platform.delete_session(ALICE, "sess-0")  # its state goes; its transcripts and ledger rows stay

    files = unpack((await exporter(engine, store).run(ALICE, tmp_path / "alice.zip", operator="dpo")).path)

    recorded = {s["session_key"]: s["session_id"] for s in loaded(files, "subject.json")["session_ids"]}
    assert sorted(recorded.values()) == ["sess-0", "sess-1"]
    ledger = loaded(files, "ledger.json")["usage"]
    assert {row["session_id"] for row in ledger} == {"sess-0", "sess-1"}
    assert all(row["session_id"] == recorded[row["session_key"]] for row in ledger)
    runs = [e for e in loaded(files, "transcripts/index.json")["runs"] if e["session_key"] in recorded]
    assert {e["session_id"] for e in runs} == {"sess-0", "sess-1"}


async def test_an_exports_ledger_says_what_the_users_calls_cost_in_all_and_per_session(
    engine: AsyncEngine, registry: Registry, tmp_path: Path
) -> None:
    store = LocalTranscriptStore(tmp_path / "transcripts")
    platform = audited_platform(engine, registry, store)
    await seed_user(platform, store, ALICE, CANARY_A, 2, 2)
    await seed_user(platform, store, ALICE_CASE, CANARY_B, 1, 1)  # another user's calls are in no total

    ledger = loaded(unpack((await exporter(engine, store).run(ALICE, tmp_path / "a.zip", operator="dpo")).path),
                    "ledger.json")

    rows, totals = ledger["usage"], ledger["totals"]
    assert totals["calls"] == sum(r["calls"] for r in rows) and totals["unpriced_calls"] == 0
    assert Decimal(totals["cost"]) == sum(Decimal(r["cost"]) for r in rows) > 0
    assert (totals["input_tokens"], totals["output_tokens"]) == (sum(r["input_tokens"] for r in rows),
                                                                  sum(r["output_tokens"] for r in rows))
    assert [s["session_id"] for s in totals["by_session"]] == ["sess-0", "sess-1"]
    for session in totals["by_session"]:
        own = [r for r in rows if r["session_key"] == session["session_key"]]
        assert Decimal(session["cost"]) == sum(Decimal(r["cost"]) for r in own)
        assert session["calls"] == sum(r["calls"] for r in own)


async def test_every_time_in_an_export_says_it_is_utc(engine: AsyncEngine, registry: Registry, tmp_path: Path) -> None:
    store = LocalTranscriptStore(tmp_path / "transcripts")
    await seed_user(audited_platform(engine, registry, store), store, ALICE, CANARY_A, 1, 1)

    files = unpack((await exporter(engine, store).run(ALICE, tmp_path / "alice.zip", operator="dpo")).path)

    stamps = [(name, stamp) for name, data in files.items() if name.endswith(".json")
              for stamp in re.findall(rb'"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d[^"]*)"', data)]
    assert len(stamps) > 10  # rows of every table, the manifest's own
    assert [(name, stamp) for name, stamp in stamps if not re.search(rb"(Z|[+-]\d\d:\d\d)$", stamp)] == []
    assert {datetime.fromisoformat(stamp.decode()).utcoffset() for _, stamp in stamps} == {timedelta(0)}


async def test_a_recorded_transcript_folder_this_machine_does_not_have_fails_the_export(
    engine: AsyncEngine, tmp_path: Path
) -> None:
    """The workers wrote the user's transcripts to a folder of their own machine; an export run elsewhere
    cannot read them, and must not hand over an archive that says the user has no transcript."""
    workers = LocalTranscriptStore(tmp_path / "worker-host" / "transcripts")
    subject = await get_or_create_subject(engine, "kai")
    await record_store(engine, subject, workers.url)
    await workers.put(f"{subject_prefix(subject)}sessions/{'s' * 32}/runs/r1.jsonl.gz", gzip.compress(b"{}\n"))
    shutil.rmtree(tmp_path / "worker-host")  # as seen from the desk's machine
    out = tmp_path / "out"
    out.mkdir()

    with pytest.raises(ExportFailed, match="could not read transcripts") as caught:
        await exporter(engine, LocalTranscriptStore(tmp_path / "desk")).run("kai", out / "kai.zip", operator="o")

    assert workers.url in caught.value.message and "TranscriptUnavailable" in caught.value.message
    assert caught.value.hint and "where" in caught.value.hint and list(out.iterdir()) == []


async def test_an_export_stopped_midway_records_that_it_stopped_and_where_instead_of_running(
    engine: AsyncEngine, tmp_path: Path
) -> None:
    """Ctrl-C, or SIGTERM or SIGHUP turned into it, cancels the export while it waits on a store: its record
    must say it failed and where it stopped, not `running` as if it still were."""
    from tests.audit.fault_server import FaultServer

    hanging = FaultServer("hang")  # the transcript store answers nothing: the export waits there
    store = S3TranscriptStore(boto3.client("s3", endpoint_url=hanging.endpoint, aws_access_key_id="test",
                                           aws_secret_access_key="test", region_name="us-east-1"), "bucket", "audit")
    subject = await get_or_create_subject(engine, "lia")
    await record_store(engine, subject, store.url)
    out = tmp_path / "out"
    out.mkdir()
    try:
        running = asyncio.create_task(exporter(engine, store).run("lia", out / "lia.zip", operator="o"))
        for _ in range(600):
            if hanging.requests:
                break
            await asyncio.sleep(0.05)
        assert hanging.requests and not running.done()
        running.cancel()
        with pytest.raises(asyncio.CancelledError):
            await running
    finally:
        hanging.stop()

    assert list(out.iterdir()) == []
    async with engine.connect() as conn:
        (row,) = (await conn.execute(select(export_requests.c.status, export_requests.c.detail,
                                            export_requests.c.finished_at))).all()
    assert row.status == "failed" and row.finished_at is not None
    assert row.detail.startswith("stopped while reading transcripts") and "lia" not in row.detail
