"""The compliance desk in the library: who asked and who ran, the one extension, the listing, and the
verdict for an id that matches nothing, on SQLite and a real Postgres."""

from __future__ import annotations

import shlex
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from pydantic import SecretStr
from sqlalchemy import insert, select, update
from sqlalchemy.ext.asyncio import AsyncEngine

from config_registry import Registry
from teamstore.audit.schema import subjects
from teamstore.audit.subjects import find_subject, get_or_create_subject, new_session_secret, new_subject_key
from teamstore.audit.transcripts.local import LocalTranscriptStore
from teamstore.erasure import ErasureSettings, RequestStatus, StepStatus, requests
from teamstore.erasure.desk import add_months, extend_request, list_requests, near_user_match
from teamstore.erasure.schema import erasure_requests
from teamstore.errors import (
    ErasureConflict,
    ErasureInProgress,
    ErasureRequestNotFound,
    ExtensionRefused,
    InvalidIdentifier,
)
from teamstore.export.nearby import difference, near_match
from tests.erasure.conftest import coordinator
from tests.erasure.seed import audited_platform, desk_queue, longest_overdue_first, newest_first

DAY = timedelta(days=1)


class Killed(BaseException):
    """Stands in for the process dying (nothing on the way out handles it)."""


@pytest.fixture
def folder(tmp_path: Path) -> LocalTranscriptStore:
    return LocalTranscriptStore(tmp_path / "transcripts")


async def test_the_receipt_says_who_asked_and_who_ran_each_attempt(
    engine: AsyncEngine, folder: LocalTranscriptStore
) -> None:
    await get_or_create_subject(engine, "erin")

    def die(step: str) -> None:
        if step == "quarantine":
            raise Killed(step)

    first = coordinator(engine, folder)
    first.after_step = die
    with pytest.raises(Killed):
        await first.run("erin", request_id="req-who", requested_by="data subject, ticket 881", operator="ana")
    opened = await coordinator(engine, folder).status("req-who")
    assert opened.requested_by == "data subject, ticket 881"
    assert [(a.operator, a.ended_at, a.status) for a in opened.attempts] == [("ana", None, None)]

    done = await coordinator(engine, folder).run("erin", request_id="req-who", operator="bo")
    assert done.status is RequestStatus.COMPLETED and done.requested_by == "data subject, ticket 881"
    assert [(a.operator, a.status) for a in done.attempts] == [("ana", None), ("bo", RequestStatus.COMPLETED)]
    assert done.attempts[1].ended_at is not None
    assert await coordinator(engine, folder).status("req-who") == done  # stored as printed
    again = await coordinator(engine, folder).run("erin", request_id="req-who", operator="cy")
    assert again == done  # a finished request is only reported: no attempt is added


async def test_the_operator_defaults_to_the_variable_and_bad_names_are_refused_before_anything_is_written(
    engine: AsyncEngine, folder: LocalTranscriptStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TEAMSTORE_OPERATOR", "privacy desk")
    receipt = await coordinator(engine, folder).run("nobody", request_id="req-env")
    assert [a.operator for a in receipt.attempts] == ["privacy desk"]
    for bad in ({"requested_by": "line\nbreak"}, {"requested_by": "x" * 201}, {"requested_by": "  "},
                {"operator": "\x1b[2Jops"}):
        with pytest.raises(InvalidIdentifier):
            await coordinator(engine, folder).run("nobody", request_id="req-bad", **bad)
    assert await requests.get_request(engine, "req-bad") is None


async def test_an_id_that_matches_nothing_ends_no_match_and_says_a_near_twin_exists_without_naming_it(
    engine: AsyncEngine, folder: LocalTranscriptStore
) -> None:
    dave = await get_or_create_subject(engine, "dave")

    receipt = await coordinator(engine, folder).run("Dave", request_id="req-881")

    assert receipt.status is RequestStatus.NO_MATCH and receipt.ok and not receipt.matched
    assert {s.status for s in receipt.stores.values()} == {StepStatus.NO_MATCH}
    assert receipt.near_match is not None and "letter case" in receipt.near_match
    assert "dave" not in receipt.model_dump_json().lower().replace("req-881", "")
    assert await find_subject(engine, "dave") == dave  # the real dave is untouched
    assert (await coordinator(engine, folder).status("req-881")).status is RequestStatus.NO_MATCH
    row = await requests.get_request(engine, "req-881")
    assert row is not None and row.user_id is None  # finished: the id is forgotten like a completed one's
    nobody = await coordinator(engine, folder).run("zed", request_id="req-882")
    assert nobody.status is RequestStatus.NO_MATCH and nobody.near_match is None
    plan = await coordinator(engine, folder).run("DAVE", dry_run=True)
    assert not plan.matched and plan.near_match is not None
    for found_nothing in (receipt, nobody, plan):  # no rows, no key, no mapping: the receipt claims none gone
        remains = {r.what: r.detail for r in found_nothing.remains_elsewhere}
        assert "no store holds anything for this id" in remains["database backups"]
        assert "destroyed" not in remains["database backups"]
        assert "no subject mapping of this id is stored" in remains["tracing backend"]
        assert "deleted" not in remains["tracing backend"] and "deletes" not in remains["tracing backend"]


async def test_a_request_finished_long_after_it_was_received_counts_its_backups_from_when_it_ended(
    engine: AsyncEngine, folder: LocalTranscriptStore
) -> None:
    """The user's rows were live until the erasure ended: backups taken the day before it hold them, and
    the last of those expires its retention after the end, not after the request was received."""
    await get_or_create_subject(engine, "erin")
    await requests.open_request(engine, "req-late", "erin", "test", 30)
    long_ago = datetime.now(UTC) - timedelta(days=60)
    async with engine.begin() as conn:
        await conn.execute(update(erasure_requests).where(erasure_requests.c.request_id == "req-late")
                           .values(received_at=long_ago, due_at=long_ago + timedelta(days=30)))
    receipt = await coordinator(engine, folder).run("erin", request_id="req-late")
    assert receipt.status is RequestStatus.COMPLETED and receipt.completed_at is not None
    (backups,) = [r for r in receipt.remains_elsewhere if r.what == "database backups"]
    retention = timedelta(days=coordinator(engine, folder).knobs.backup_retention_days)
    expire = receipt.completed_at + retention
    assert receipt.completed_at < backups.until <= expire + timedelta(seconds=5)  # never before the erasure
    assert backups.expires_at is not None and abs(backups.expires_at - expire) < timedelta(seconds=5)


@pytest.mark.parametrize(("given", "stored", "said"), [
    ("Dave", "dave", "letter case"),
    ("dAvE", "Dave", "letter case"),
    ("Zoe\u0308", "Zoë", "Unicode form"),
    ("ZOË", "zoe\u0308", "letter case and Unicode form"),
    ("dave ", "dave", "surrounding spaces"),
    (" Dave", "dave", "surrounding spaces and letter case"),
    ("dave", "david", None),
])
def test_a_near_twin_is_told_by_the_kind_of_difference(given: str, stored: str, said: str | None) -> None:
    assert difference(given, stored) == said


async def test_a_request_is_extended_once_by_at_most_two_months_with_a_reason(
    engine: AsyncEngine, folder: LocalTranscriptStore
) -> None:
    row = await requests.open_request(engine, "req-ext", "frida", None, 30)
    soon = row.received_at + 5 * DAY

    with pytest.raises(ExtensionRefused, match="more than two months"):
        await extend_request(engine, "req-ext", "63d", "complex", operator="ana", now=soon)
    with pytest.raises(ExtensionRefused, match="more than two months"):
        await extend_request(engine, "req-ext", "3m", "complex", operator="ana", now=soon)
    with pytest.raises(ExtensionRefused, match="needs a reason"):
        await extend_request(engine, "req-ext", "2m", "   ", operator="ana", now=soon)
    for by in ("two months", "0d", "-1m", "1y", "1000d"):
        with pytest.raises(ExtensionRefused, match="not a length of time"):
            await extend_request(engine, "req-ext", by, "complex", operator="ana", now=soon)
    for reason in ("x" * 1001, "line\nbreak", "nul\x00"):
        with pytest.raises(InvalidIdentifier, match="reason"):
            await extend_request(engine, "req-ext", "2m", reason, operator="ana", now=soon)
    with pytest.raises(ErasureRequestNotFound) as unknown:
        await extend_request(engine, "req-none", "2m", "complex", operator="ana", now=soon)
    assert "did you mean" not in (unknown.value.hint or "")
    with pytest.raises(ErasureRequestNotFound) as typed:  # in another letter case, pasted with a space
        await extend_request(engine, " REQ-Ext", "2m", "complex", operator="ana", now=soon)
    assert "did you mean 'req-ext'?" in (typed.value.hint or "")

    extended = await extend_request(engine, "req-ext", "2m", "40 sessions in two stores", operator="ana", now=soon)
    assert extended.extension is not None and extended.extension.due_at == add_months(row.due_at, 2)
    assert (extended.extension.by, extended.extension.operator) == ("2m", "ana")
    with pytest.raises(ExtensionRefused, match="extended already") as twice:
        await extend_request(engine, "req-ext", "1d", "more", operator="bo", now=soon)
    # who extended it in the fix only: a service logs the message, and a staff member's name need not be there
    assert "ana" not in twice.value.message and "extended by ana" in (twice.value.hint or "")

    status = await coordinator(engine, folder).status("req-ext")
    assert status.extension == extended.extension and status.effective_due_at == extended.extension.due_at
    done = await coordinator(engine, folder).run("frida", request_id="req-ext")
    assert done.extension == extended.extension  # on the stored receipt too


async def test_a_failed_request_extended_after_its_receipt_was_stored_shows_the_extension_until_it_completes(
    engine: AsyncEngine, registry: Registry, folder: LocalTranscriptStore
) -> None:
    platform = audited_platform(engine, registry, folder)
    with pytest.raises(ErasureInProgress):  # the session's save at its end meets the fence
        async with platform.session("uma", "s1", team="support_triage") as session:
            await session.run("my router keeps dropping")
            failed = await coordinator(engine, folder, session_wait_seconds=0).run("uma", request_id="req-held")
    assert failed.status is RequestStatus.FAILED and failed.extension is None

    extended = await extend_request(engine, "req-held", "30d", "a session of the user was held", operator="ana")

    assert extended.extension is not None
    shown = await coordinator(engine, folder).status("req-held")
    assert shown.status is RequestStatus.FAILED and shown.extension == extended.extension
    assert shown.effective_due_at == extended.extension.due_at == shown.due_at + 30 * DAY
    done = await coordinator(engine, folder).run("uma", request_id="req-held")
    assert done.status is RequestStatus.COMPLETED and done.extension == extended.extension
    assert await coordinator(engine, folder).status("req-held") == done
    with pytest.raises(ExtensionRefused, match="is completed: only an open or failed request"):
        await extend_request(engine, "req-held", "1d", "more", operator="ana")


async def test_an_extension_is_refused_after_the_original_due_date_for_a_finished_request_and_while_it_runs(
    engine: AsyncEngine, folder: LocalTranscriptStore
) -> None:
    row = await requests.open_request(engine, "req-late", "gus", None, 30)
    with pytest.raises(ExtensionRefused, match="too late to extend"):
        await extend_request(engine, "req-late", "30d", "complex", operator="ana", now=row.due_at + DAY)
    assert await requests.claim(engine, "req-late", "host:1", lease_seconds=60)
    with pytest.raises(ExtensionRefused, match="being run by a coordinator"):
        await extend_request(engine, "req-late", "30d", "complex", operator="ana")
    await requests.release(engine, "req-late", "host:1")

    await coordinator(engine, folder).run("hal", request_id="req-done")
    with pytest.raises(ExtensionRefused, match="is no_match: only an open or failed request"):
        await extend_request(engine, "req-done", "30d", "complex", operator="ana")


def test_months_are_calendar_months_kept_inside_the_month() -> None:
    assert add_months(datetime(2026, 12, 31, 9, tzinfo=UTC), 2) == datetime(2027, 2, 28, 9, tzinfo=UTC)
    assert add_months(datetime(2027, 11, 30, tzinfo=UTC), 3) == datetime(2028, 2, 29, tzinfo=UTC)


async def test_the_listing_filters_by_status_and_overdue_and_finds_an_open_request_by_id_without_showing_it(
    engine: AsyncEngine, folder: LocalTranscriptStore
) -> None:
    await get_or_create_subject(engine, "ivy")
    done = await coordinator(engine, folder).run("ivy", request_id="req-a", requested_by="ticket 1", operator="ana")
    assert done.status is RequestStatus.COMPLETED
    await coordinator(engine, folder).run("nobody", request_id="req-b")
    late = await requests.open_request(engine, "req-c", "jo", None, 30)
    await requests.open_request(engine, "req-d", "kim", None, 30)
    await extend_request(engine, "req-d", "2m", "complex", operator="ana")

    everything = await list_requests(engine)
    assert {r.request_id for r in everything} == {"req-a", "req-b", "req-c", "req-d"}
    shown = {r.request_id: r for r in everything}
    assert shown["req-a"].requested_by == "ticket 1" and shown["req-a"].operators == ["ana"]
    assert shown["req-a"].subject == done.subject_hash[:12] if done.subject_hash else False
    assert shown["req-d"].extended_due_at is not None and shown["req-d"].extension_reason == "complex"
    assert "ivy" not in str(everything) and "jo" not in str([r.model_dump() for r in everything]).replace("job", "")

    assert [r.request_id for r in await list_requests(engine, statuses=[RequestStatus.NO_MATCH])] == ["req-b"]
    later = late.due_at + DAY  # past req-c's due date; req-d's extended one is two months on
    assert [r.request_id for r in await list_requests(engine, overdue=True, now=later)] == ["req-c"]
    assert await list_requests(engine, overdue=True) == []
    assert [r.request_id for r in await list_requests(engine, user_id="kim")] == ["req-d"]
    assert await list_requests(engine, user_id="ivy") == []  # finished: the id is forgotten


async def test_the_overdue_queue_lists_the_longest_overdue_first_so_a_limit_leaves_out_the_latest_due(
    engine: AsyncEngine,
) -> None:
    """Newest first, a capped overdue list would leave out the requests that have waited longest: the ones the
    desk must answer first. An extension counts: the due date in force orders the queue."""
    rows = {}
    for request_id, user_id in (("req-1", "ada"), ("req-2", "bo"), ("req-3", "cy")):
        rows[request_id] = await requests.open_request(engine, request_id, user_id, None, 30)
    await extend_request(engine, "req-1", "1m", "complex", operator="ana")
    base = rows["req-1"].due_at
    async with engine.begin() as conn:  # req-2 fell due first, then req-3, then req-1 (extended past the others)
        for request_id, due in (("req-2", base - DAY * 5), ("req-3", base - DAY * 3)):
            await conn.execute(update(erasure_requests).where(erasure_requests.c.request_id == request_id)
                               .values(due_at=due))
        await conn.execute(update(erasure_requests).where(erasure_requests.c.request_id == "req-1")
                           .values(due_at=base - DAY * 9, extended_due_at=base - DAY))
    later = base + DAY

    assert [r.request_id for r in await list_requests(engine, overdue=True, now=later)] == ["req-2", "req-3", "req-1"]
    assert [r.request_id for r in await list_requests(engine, overdue=True, now=later, limit=1)] == ["req-2"]


async def _walk(engine: AsyncEngine, limit: int, **filters: Any) -> list[list[str]]:
    """Every page of a listing, each after the last request id of the one before, until one comes back empty."""
    pages: list[list[str]] = []
    after = None
    while page := [r.request_id for r in await list_requests(engine, limit=limit, after=after, **filters)]:
        assert len(page) <= limit
        pages.append(page)
        after = page[-1]
    return pages


@pytest.mark.parametrize("limit", [1, 2, 5])
async def test_the_listing_is_read_page_after_page_each_request_once_in_order_whatever_ties_its_times(
    engine: AsyncEngine, limit: int
) -> None:
    queued = await desk_queue(engine)
    unfinished = [RequestStatus.OPEN, RequestStatus.FAILED]
    expected = {
        "all": ({}, newest_first(queued)),
        "overdue": ({"overdue": True}, longest_overdue_first(queued)),
        "failed": ({"statuses": [RequestStatus.FAILED]}, [i for i in newest_first(queued) if i in ("req-02", "req-07", "req-12")]),
        "overdue open": ({"overdue": True, "statuses": [RequestStatus.OPEN]},
                         [i for i in longest_overdue_first(queued) if i not in ("req-02", "req-07", "req-12")]),
        "overdue unfinished": ({"overdue": True, "statuses": unfinished}, longest_overdue_first(queued)),
    }
    assert expected["overdue"][1][:4] == ["req-05", "req-12", "req-01", "req-06"]  # ties on due date, then receipt

    for name, (filters, order) in expected.items():
        pages = await _walk(engine, limit, **filters)
        seen = [request_id for page in pages for request_id in page]
        assert seen == order, name  # each once, none skipped, in the listing's order
        assert [r.request_id for r in await list_requests(engine, limit=100, **filters)] == order, name


async def test_a_page_after_a_request_that_has_since_finished_goes_on_where_that_request_stood(
    engine: AsyncEngine,
) -> None:
    queued = await desk_queue(engine)
    first = [r.request_id for r in await list_requests(engine, overdue=True, limit=3)]
    async with engine.begin() as conn:  # the page's last request is answered before the next page is read
        await conn.execute(update(erasure_requests).where(erasure_requests.c.request_id == first[-1])
                           .values(status="completed", user_id=None))
    rest = [r.request_id for r in await list_requests(engine, overdue=True, after=first[-1], limit=100)]
    assert first + rest == longest_overdue_first(queued)


async def test_a_page_after_an_unknown_or_malformed_request_id_is_refused_naming_a_near_one(
    engine: AsyncEngine,
) -> None:
    await desk_queue(engine)
    with pytest.raises(ErasureRequestNotFound) as unknown:
        await list_requests(engine, after="req-99")
    assert unknown.value.message == ("the id given as --after names no erasure request (not repeated here: it may "
                                     "be a user's words)")
    assert unknown.value.hint is not None and "last request id a page listed" in unknown.value.hint
    with pytest.raises(ErasureRequestNotFound, match="did you mean 'req-04'"):
        await list_requests(engine, after="REQ-04")
    for malformed, said in (("", "is empty"), ("x" * 129, "is 129 characters long; the limit is 128"),
                            ("req\n04", "holds the control character U\\+000A"),
                            ("req\udcff", "contains the lone surrogate U\\+DCFF")):
        with pytest.raises(InvalidIdentifier, match=f"^--after: request id {said}"):
            await list_requests(engine, after=malformed)


async def test_a_user_id_with_no_request_is_told_of_a_near_twin_among_stored_ids_and_open_requests(
    engine: AsyncEngine,
) -> None:
    await get_or_create_subject(engine, "dave")
    await requests.open_request(engine, "req-q", "Quinn", None, 30)  # nothing stored under it but the request

    assert await list_requests(engine, user_id="Dave") == []
    assert "only in letter case" in (await near_user_match(engine, "Dave") or "")
    said = await near_user_match(engine, "quinn")
    assert said is not None and "only in letter case" in said and "Quinn" not in said
    assert await near_match(engine, "quinn") is None  # the stores alone hold no twin: the request is one
    assert await near_user_match(engine, "erin") is None


async def _held(engine: AsyncEngine, request_id: str, user: str, knobs: ErasureSettings) -> None:
    """A request a legal hold stopped: the user id forgotten, the keyed hash of it kept."""
    await requests.open_request(engine, request_id, user, None, 30,
                                hashes=await requests.user_hashes(engine, knobs, user))
    async with engine.begin() as conn:
        await conn.execute(update(erasure_requests).where(erasure_requests.c.request_id == request_id).values(
            status=RequestStatus.RETAINED_UNDER_HOLD, user_id=None, subject_key="5" * 32))


async def test_a_user_id_with_no_request_is_told_in_words_of_a_held_request_filed_for_a_near_twin(
    engine: AsyncEngine,
) -> None:
    """A held request keeps a keyed hash of its user's id, which no look-up of near-identical ids reached: the
    desk asking for ``dave`` was told nothing of the request held for ``Dave``."""
    keyed = ErasureSettings(hash_key=SecretStr("k" * 32))
    await _held(engine, "req-801", "Dave", keyed)
    await _held(engine, "req-802", "eve", ErasureSettings())  # under the database's id, filed before a key was set

    assert await list_requests(engine, user_id="dave") == []  # listed by the exact id alone
    for given, kind in (("dave", "letter case"), ("DAVE", "letter case"), (" eve", "surrounding spaces"),
                        ("EVE", "letter case")):
        said = await near_user_match(engine, given, keyed)
        assert said == (f"a held request was filed for a user id that differs from this one only in {kind}: give "
                        "--user exactly as that request was filed (its ticket says)"), (given, said)
    assert await near_user_match(engine, "dave", ErasureSettings()) is None  # a hash under a key not given
    assert await near_user_match(engine, "Dave", keyed) is None  # the id itself is no near twin
    # Hashes match exactly: a spelling not tried is not found. Those of Dave are dave, DAVE, Dave ..., never dAvE.
    await _held(engine, "req-803", "dAvE", keyed)
    assert await near_user_match(engine, "Dave", keyed) is None
    assert "letter case" in (await near_user_match(engine, "DAVE", keyed) or "")  # Dave's twin, as before


def _twin(request: str, failed: bool = False) -> str:
    return (f"{request} {'were' if ' and ' in request else 'was'} filed for a user id that differs from this one only "
            f"in letter case: give --user exactly as "
            f"{'those requests were filed (their tickets say)' if ' and ' in request else 'that request was filed (its ticket says)'}")


async def test_a_near_twin_held_request_is_named_for_what_it_is_and_only_when_the_listings_filters_keep_it(
    engine: AsyncEngine,
) -> None:
    """A held request whose rerun failed (still without the id, still keeping its hash) was called held; and
    ``--status open`` or ``--overdue`` told of a held request that neither would list under its own id."""
    knobs = ErasureSettings()
    for request_id, user in (("req-811", "Fay"), ("req-812", "Gus"), ("req-813", "hal"), ("req-814", "HAL")):
        await _held(engine, request_id, user, knobs)
    async with engine.begin() as conn:  # their reruns failed, past their due date
        await conn.execute(update(erasure_requests).where(erasure_requests.c.request_id.in_(["req-812", "req-814"]))
                           .values(status=RequestStatus.FAILED, due_at=datetime.now(UTC) - DAY))
    await requests.open_request(engine, "req-815", "Ida", None, 30)

    held, failed = "a held request", "a held request whose rerun failed"
    assert await near_user_match(engine, "fay", knobs) == _twin(held)
    assert await near_user_match(engine, "gus", knobs) == _twin(failed)
    assert await near_user_match(engine, "Hal", knobs) == _twin(f"{held} and {failed}")
    twin_of_ida = ("a stored user id differs from this one only in letter case: check the id exactly as the service "
                   "stores it (ids match exactly)")  # an open request's: nothing is stored under Ida but it
    for filters, fay, gus, ida in (
            ({"statuses": [RequestStatus.OPEN]}, None, None, twin_of_ida),
            ({"statuses": [RequestStatus.RETAINED_UNDER_HOLD]}, _twin(held), None, None),
            ({"statuses": [RequestStatus.FAILED]}, None, _twin(failed), None),
            ({"overdue": True}, None, _twin(failed), None)):  # a held request is never overdue; its failed rerun is
        assert await near_user_match(engine, "fay", knobs, **filters) == fay, filters
        assert await near_user_match(engine, "gus", knobs, **filters) == gus, filters
        assert await near_user_match(engine, "ida", knobs, **filters) == ida, filters
    overdue = await list_requests(engine, overdue=True, user_id="Gus", user_hashes=await requests.user_hashes(
        engine, knobs, "Gus"))
    assert [r.request_id for r in overdue] == ["req-812"]  # as the twin's id would list it


async def test_a_rerun_records_who_asked_when_the_first_attempt_did_not(engine: AsyncEngine) -> None:
    await requests.open_request(engine, "req-late-asker", "lu", None, 30)
    row = await requests.open_request(engine, "req-late-asker", "lu", None, 30, requested_by="ticket 9")
    assert row.requested_by == "ticket 9"
    async with engine.connect() as conn:
        stored = await conn.scalar(select(erasure_requests.c.requested_by)
                                   .where(erasure_requests.c.request_id == "req-late-asker"))
    assert stored == "ticket 9"
    async with engine.begin() as conn:  # a time in the past, to see the listing judge it
        await conn.execute(update(erasure_requests).where(erasure_requests.c.request_id == "req-late-asker")
                           .values(due_at=datetime.now(UTC) - DAY))
    assert [r.overdue for r in await list_requests(engine)] == [True]


async def test_a_rerun_records_the_reason_when_the_first_attempt_gave_none_and_keeps_the_first_one_given(
    engine: AsyncEngine,
) -> None:
    await requests.open_request(engine, "req-why", "lu", None, 30)
    assert (await requests.open_request(engine, "req-why", "lu", "GDPR art. 17", 30)).reason == "GDPR art. 17"
    assert (await requests.open_request(engine, "req-why", "lu", "other", 30)).reason == "GDPR art. 17"
    async with engine.connect() as conn:
        stored = await conn.scalar(select(erasure_requests.c.reason).where(erasure_requests.c.request_id == "req-why"))
    assert stored == "GDPR art. 17"


async def test_a_new_request_id_that_is_blank_or_has_spaces_around_it_is_refused_before_anything_is_written(
    engine: AsyncEngine, folder: LocalTranscriptStore
) -> None:
    await get_or_create_subject(engine, "ivy")
    for bad in ("   ", " REQ-7", "REQ-7 ", "REQ\x7f7", "\ufeffREQ-7", "REQ-7\u200b"):  # a second request beside REQ-7
        for dry_run in (False, True):
            with pytest.raises(InvalidIdentifier, match="request id"):
                await coordinator(engine, folder).run("ivy", request_id=bad, dry_run=dry_run)
        with pytest.raises(InvalidIdentifier, match="request id"):
            await requests.open_request(engine, bad, "ivy", None, 30)
    assert await list_requests(engine) == [] and await find_subject(engine, "ivy") is not None

    # A request an earlier release stored under such an id is still reached, to resume or report it.
    async with engine.begin() as conn:
        await conn.execute(erasure_requests.insert().values(
            request_id=" REQ-8", user_id="ivy", status="open", received_at=datetime.now(UTC),
            due_at=datetime.now(UTC) + 30 * DAY, updated_at=datetime.now(UTC)))
    assert (await coordinator(engine, folder).run("ivy", request_id=" REQ-8")).status is RequestStatus.COMPLETED
    assert (await coordinator(engine, folder).status(" REQ-8")).status is RequestStatus.COMPLETED


@pytest.mark.parametrize("field, value", [("request_id", 4711), ("request_id", b"REQ-7"), ("reason", 17)])
async def test_a_request_id_or_reason_given_as_no_string_through_the_api_is_refused_by_its_type(
    engine: AsyncEngine, folder: LocalTranscriptStore, field: str, value: Any
) -> None:
    await get_or_create_subject(engine, "ivy")
    given = {"request_id": "REQ-7", field: value}
    with pytest.raises(InvalidIdentifier, match=f"is a string, not {type(value).__name__}"):
        await coordinator(engine, folder).run("ivy", **given)
    assert await list_requests(engine) == [] and await find_subject(engine, "ivy") is not None


async def test_text_kept_with_a_request_that_names_its_user_is_refused_before_anything_is_written(
    engine: AsyncEngine, folder: LocalTranscriptStore
) -> None:
    """Why and who asked outlive the user's erasure on the receipt: the user's own id, in any letter case or
    Unicode form, may not be in them. An id shorter than three characters is not looked for."""
    user = "jo.kim@example.com"
    await get_or_create_subject(engine, user)
    for naming in ({"reason": "Jo.Kim@Example.com asked by mail"}, {"requested_by": f"data subject {user}"},
                   {"requested_by": f"{user.upper()}'s lawyer"}):
        for dry_run in (False, True):
            with pytest.raises(InvalidIdentifier, match="holds the id of the user it is about") as refused:
                await coordinator(engine, folder).run(user, dry_run=dry_run, **naming)
            assert "kim" not in str(refused.value).lower()  # stderr may be a job's log
    assert await list_requests(engine) == [] and await find_subject(engine, user) is not None

    await requests.open_request(engine, "req-named", user, "GDPR art. 17", 30, "data subject, ticket 881")
    with pytest.raises(InvalidIdentifier, match="holds the id"):
        await extend_request(engine, "req-named", "1m", f"{user} has 40 sessions", operator="ana")
    assert (await coordinator(engine, folder).status("req-named")).extension is None
    done = await coordinator(engine, folder).run(user, request_id="req-named")
    assert done.status is RequestStatus.COMPLETED and done.reason == "GDPR art. 17"

    await get_or_create_subject(engine, "17")
    short = await coordinator(engine, folder).run("17", reason="GDPR art. 17", requested_by="user 17")
    assert short.status is RequestStatus.COMPLETED and short.requested_by == "user 17"


async def test_a_new_request_id_that_names_its_user_is_refused_and_one_stored_before_still_resumes(
    engine: AsyncEngine, folder: LocalTranscriptStore
) -> None:
    """The request id is kept with the receipt and listed by `erase list` after the user's erasure, as the reason
    is: a new request may not take one naming its user. One an earlier release stored is still reached."""
    user = "jo.kim@example.com"
    await get_or_create_subject(engine, user)
    for named in (f"erase {user}", "Jo.Kim@Example.com-881"):
        for dry_run in (False, True):
            with pytest.raises(InvalidIdentifier, match="--request-id holds the id of the user it is about") as refused:
                await coordinator(engine, folder).run(user, request_id=named, dry_run=dry_run)
            assert "kim" not in str(refused.value).lower() and "ticket number alone" in (refused.value.hint or "")
        with pytest.raises(InvalidIdentifier, match="holds the id"):
            await requests.open_request(engine, named, user, None, 30)
    assert await list_requests(engine) == [] and await find_subject(engine, user) is not None

    async with engine.begin() as conn:  # opened by a release that did not look
        await conn.execute(erasure_requests.insert().values(
            request_id=f"erase {user}", user_id=user, status="open", received_at=datetime.now(UTC),
            due_at=datetime.now(UTC) + 30 * DAY, updated_at=datetime.now(UTC)))
    assert (await coordinator(engine, folder).run(user, request_id=f"erase {user}", dry_run=True)).matched
    done = await coordinator(engine, folder).run(user, request_id=f"erase {user}")
    assert done.status is RequestStatus.COMPLETED and done.request_id == f"erase {user}"
    assert await coordinator(engine, folder).run(user, request_id=f"erase {user}") == done  # reported again
    other = await coordinator(engine, folder).run("someone else", request_id=f"ticket of {user}")  # not about them
    assert other.status is RequestStatus.NO_MATCH


async def test_status_says_a_request_is_overdue_as_the_listing_does_judged_each_time_it_is_read(
    engine: AsyncEngine, registry: Registry, folder: LocalTranscriptStore
) -> None:
    platform = audited_platform(engine, registry, folder)
    with pytest.raises(ErasureInProgress):  # the session's save at its end meets the fence
        async with platform.session("uma", "s1", team="support_triage") as session:
            await session.run("my router keeps dropping")
            failed = await coordinator(engine, folder, session_wait_seconds=0).run("uma", request_id="req-failed")
    assert failed.status is RequestStatus.FAILED and not failed.overdue
    await requests.open_request(engine, "req-open", "vic", None, 30)
    await coordinator(engine, folder).run("nobody", request_id="req-none")
    async with engine.begin() as conn:  # every one of them past its due date
        await conn.execute(update(erasure_requests).values(due_at=datetime.now(UTC) - DAY))

    shown = {rid: await coordinator(engine, folder).status(rid) for rid in ("req-failed", "req-open", "req-none")}

    assert {rid: r.overdue for rid, r in shown.items()} == {"req-failed": True, "req-open": True, "req-none": False}
    assert {r.request_id: r.overdue for r in await list_requests(engine)} == {rid: r.overdue for rid, r in shown.items()}
    async with engine.connect() as conn:  # a stored receipt does not keep it: it would go stale
        stored = await conn.scalar(select(erasure_requests.c.receipt).where(erasure_requests.c.request_id == "req-failed"))
    assert "overdue" not in stored
    async with engine.begin() as conn:  # extended (as `erase extend` records it): the extended date is in force
        await conn.execute(update(erasure_requests).where(erasure_requests.c.request_id == "req-failed").values(
            extended_due_at=datetime.now(UTC) + DAY, extended_by="30d", extension_reason="complex",
            extended_at=datetime.now(UTC) - 2 * DAY, extension_operator="ana"))
    assert not (await coordinator(engine, folder).status("req-failed")).overdue
    assert [r.request_id for r in await list_requests(engine, overdue=True)] == ["req-open"]


async def test_a_new_request_id_differing_from_a_stored_one_only_in_letter_case_or_spaces_is_refused_naming_it(
    engine: AsyncEngine, folder: LocalTranscriptStore
) -> None:
    await get_or_create_subject(engine, "ivy")
    await get_or_create_subject(engine, "jo")
    await requests.open_request(engine, "REQ-7", "ivy", None, 30)
    async with engine.begin() as conn:  # stored by an earlier release, with a space the rule now refuses
        await conn.execute(erasure_requests.insert().values(
            request_id="REQ-8 ", user_id="kim", status="open", received_at=datetime.now(UTC),
            due_at=datetime.now(UTC) + 30 * DAY, updated_at=datetime.now(UTC)))
    for twin, stored in (("req-7", "REQ-7"), ("Req-7", "REQ-7"), ("req-8", "REQ-8 ")):
        for dry_run in (False, True):
            with pytest.raises(ErasureConflict, match="only in letter case or surrounding spaces") as refused:
                await coordinator(engine, folder).run("jo", request_id=twin, dry_run=dry_run)
            hint = refused.value.hint or ""
            assert repr(stored) in hint and f"teamstore erase status {shlex.quote(stored)}" in hint
            assert stored.strip().lower() not in refused.value.message.lower()  # named where it is typed again only
        with pytest.raises(ErasureConflict, match=repr(stored)):
            await requests.open_request(engine, twin, "jo", None, 30)
    assert sorted(r.request_id for r in await list_requests(engine)) == ["REQ-7", "REQ-8 "]

    # The exact id still resumes its own request, and an id differing in more than case is a new one.
    assert (await coordinator(engine, folder).run("ivy", request_id="REQ-7")).status is RequestStatus.COMPLETED
    assert (await coordinator(engine, folder).run("jo", request_id="REQ-7b")).status is RequestStatus.COMPLETED


async def test_a_user_id_no_session_can_have_is_erased_only_while_something_is_stored_under_it(
    engine: AsyncEngine, folder: LocalTranscriptStore
) -> None:
    await get_or_create_subject(engine, "dave")
    for typed, why in (("   ", "is blank"), ("\u200b", "is blank"), (" dave", "U\\+0020, a space or an invisible "
                       "character, at its start"), ("dave\u00a0", "at its end"), ("da\x01ve", "control character")):
        for dry_run in (False, True):
            with pytest.raises(InvalidIdentifier, match=why) as refused:
                await coordinator(engine, folder).run(typed, dry_run=dry_run)
            assert "nothing is stored under it" in refused.value.message
        with pytest.raises(InvalidIdentifier, match=why):
            await requests.open_request(engine, "req-typed", typed, None, 30)
    assert await list_requests(engine) == []

    async with engine.begin() as conn:  # as an earlier release stored them, when sessions could have such ids
        for legacy in ("   ", "dave "):
            await conn.execute(insert(subjects).values(user_id=legacy, subject_key=new_subject_key(),
                                                       session_secret=new_session_secret(), created_at=datetime.now(UTC)))
    for legacy in ("   ", "dave "):
        assert (await coordinator(engine, folder).run(legacy, dry_run=True)).matched
        done = await coordinator(engine, folder).run(legacy)
        assert done.status is RequestStatus.COMPLETED and done.stores["subject"].status is StepStatus.ERASED
        assert await find_subject(engine, legacy) is None
    assert await find_subject(engine, "dave") is not None  # exact ids: the real dave is untouched
