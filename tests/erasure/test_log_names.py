"""teamstore's log lines name an erasure request by an id teamstore made, or by a fingerprint of one the operator
gave (which may hold a user's name or email), never by the given id; the receipt and the desk's listing say the same
name, so a log line leads to its request. On SQLite and a real Postgres."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncEngine

from teamstore.audit.subjects import get_or_create_subject
from teamstore.audit.transcripts.base import subject_prefix
from teamstore.audit.transcripts.local import LocalTranscriptStore
from teamstore.db.identity import LOG_NAME_KEY, database_id, log_name_key
from teamstore.erasure import RequestStatus, requests
from teamstore.erasure.desk import list_requests
from teamstore.errors import ErasureConflict, TranscriptUnavailable
from teamstore.ids import log_name
from teamstore.state.schema import store_settings
from tests.erasure.conftest import coordinator

GIVEN = "gdpr-canary-7f3a@example.com"
"""A request id an operator gave, holding (as one may) a user's email: the canary."""
CANARY = "canary-7f3a"


class RefusesDeletes(LocalTranscriptStore):
    """A folder that lists what it holds and refuses to delete it (a permission missing), until allowed."""

    allowed = False

    async def delete_prefix(self, prefix: str) -> int:
        if not self.allowed:
            raise TranscriptUnavailable("the transcript folder refused the delete", hint="grant it, then rerun")
        return await super().delete_prefix(prefix)


def _said(caplog: pytest.LogCaptureFixture) -> list[str]:
    """Every record's text, formatted, and its parts as logged (a handler may format them its own way)."""
    return [f"{r.getMessage()} {r.msg!r} {r.args!r}" for r in caplog.records]


async def test_no_log_record_of_an_erasure_run_holds_an_id_the_operator_gave_and_each_names_it_as_the_desk_does(
    engine: AsyncEngine, tmp_path: Path, caplog: pytest.LogCaptureFixture,
) -> None:
    store = RefusesDeletes(tmp_path / "t")
    subject = await get_or_create_subject(engine, "ivan")
    await store.put(f"{subject_prefix(subject)}sessions/s/runs/r.jsonl.gz", b"a transcript")
    caplog.set_level(logging.DEBUG)  # every logger, the database drivers' too

    failed = await coordinator(engine, store).run("ivan", request_id=GIVEN)  # a step fails: its error is logged
    store.allowed = True
    done = await coordinator(engine, store).run("ivan", request_id=GIVEN)  # resumed: every step, then finished

    assert failed.status is RequestStatus.FAILED and done.status is RequestStatus.COMPLETED, done
    said = _said(caplog)
    leaked = [line for line in said if CANARY in line]
    assert not leaked, leaked
    named = done.logged_as
    assert named is not None and named.startswith("request#") and len(named) == len("request#") + 10
    assert failed.logged_as == named == log_name(GIVEN, await log_name_key(engine))  # stable across runs
    assert any(f"erasure {named}: step transcripts failed" in line for line in said), said
    assert any(f"erasure {named} finished: completed" in line for line in said), said
    # Where the operator looks the log line's name up: the receipt `erase status` prints, and `erase list`.
    assert (await coordinator(engine, store).status(GIVEN)).logged_as == named
    assert [(r.request_id, r.logged_as) for r in await list_requests(engine)] == [(GIVEN, named)]


async def test_a_request_id_teamstore_made_is_logged_as_it_is(
    engine: AsyncEngine, tmp_path: Path, caplog: pytest.LogCaptureFixture,
) -> None:
    store = LocalTranscriptStore(tmp_path / "t")
    await get_or_create_subject(engine, "judy")
    caplog.set_level(logging.INFO, logger="teamstore")

    done = await coordinator(engine, store).run("judy")

    assert done.request_id is not None and done.logged_as == done.request_id
    assert any(f"erasure {done.request_id} finished: completed" in line for line in _said(caplog))
    assert [r.logged_as for r in await list_requests(engine)] == [done.request_id]
    dry = await coordinator(engine, store).run("judy", dry_run=True)
    assert dry.request_id is None and dry.logged_as is None  # a dry run opens no request: nothing to name


async def test_no_typed_error_of_an_erasure_names_an_id_the_operator_gave_in_its_message_only_in_its_fix(
    engine: AsyncEngine, tmp_path: Path,
) -> None:
    """A service logs an error's message (the coordinator logs nothing else of one); the fix names a stored id
    only where the operator must type it again."""
    store = RefusesDeletes(tmp_path / "t")
    subject = await get_or_create_subject(engine, "ivan")
    await store.put(f"{subject_prefix(subject)}sessions/s/runs/r.jsonl.gz", b"a transcript")
    await get_or_create_subject(engine, "judy")
    assert (await coordinator(engine, store).run("ivan", request_id=GIVEN)).status is RequestStatus.FAILED

    with pytest.raises(ErasureConflict) as open_one:  # a second request for the user
        await coordinator(engine, store).run("ivan", request_id="req-second")
    with pytest.raises(ErasureConflict) as twin:  # another user's, under an id differing only in letter case
        await coordinator(engine, store).run("judy", request_id=GIVEN.upper())
    refusals = [open_one.value, twin.value, requests.taken_over(GIVEN)]

    for refused in refusals:
        assert CANARY not in refused.message.lower(), refused.message
    assert all(GIVEN in (refused.hint or "") for refused in (open_one.value, twin.value))  # to be typed again


def test_a_fingerprint_differs_by_key_and_by_id_and_only_teamstore_shaped_ids_are_kept() -> None:
    assert log_name(GIVEN, "a") != log_name(GIVEN, "b") != log_name("gdpr-canary-7f3b@example.com", "b")
    assert log_name("er-" + "0a" * 12, "a") == "er-" + "0a" * 12
    assert log_name("ex-" + "0a" * 12, "a") == "ex-" + "0a" * 12  # an export's id (teamstore's only)
    assert log_name("er-" + "0A" * 12, "a").startswith("request#")  # not teamstore's shape: it was typed
    assert log_name("er-\udcff", "a").startswith("request#")  # undecodable bytes an earlier release stored


async def test_a_fingerprint_is_keyed_by_a_secret_the_migrated_database_holds_not_by_its_published_id(
    engine: AsyncEngine, tmp_path: Path,
) -> None:
    """The database's id is printed by commands and held by a transcript folder's marker and KMS keys' tags: keyed
    by it, a guessed request id could be tested against a log line."""
    async with engine.connect() as conn:  # made by the upgrade, before any erasure asks: a status check writes none
        stored = await conn.scalar(select(store_settings.c.value).where(store_settings.c.name == LOG_NAME_KEY))
    await get_or_create_subject(engine, "kai")

    done = await coordinator(engine, LocalTranscriptStore(tmp_path / "t")).run("kai", request_id=GIVEN)

    assert stored is not None and stored == await log_name_key(engine) != await database_id(engine)
    assert done.logged_as == log_name(GIVEN, stored) != log_name(GIVEN, await database_id(engine))
