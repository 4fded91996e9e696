"""The memory store's conformance suite, run in full on SQLite and a real Postgres: written and read back,
confirmed, concurrent writers refused rather than lost, failures recorded beside good memory, forgotten per
fact and in full, swept by retention, fenced during an erasure, damaged rows reported, erased with the user."""

from __future__ import annotations

import asyncio
from datetime import UTC, date, datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import event, insert, select, text, update
from sqlalchemy.exc import OperationalError
from sqlalchemy.ext.asyncio import AsyncEngine

from teamstore.erasure.receipt import StepStatus
from teamstore.erasure.requests import open_request
from teamstore.erasure.steps import StepContext
from teamstore.erasure.steps.database import memory_step
from teamstore.errors import (
    ErasureInProgress,
    InvalidIdentifier,
    MemoryNotFound,
    StaleMemory,
    StoreUnavailable,
)
from teamstore.keys.schema import data_keys
from teamstore.memory.facts import MemoryUpdate
from teamstore.memory.schema import facts, memories
from teamstore.memory.store import Forgotten, MemoryStore

TYPES = {"ticket_id": "str", "visits": "int", "speed": "float", "replaced": "bool", "visited_on": "date"}
T0 = datetime.now(UTC).replace(hour=9, minute=30, second=0, microsecond=0) - timedelta(days=1)
"""Writes happen at T0 (yesterday, 09:30 UTC): what they keep for two days or more is not yet past its expiry."""


async def put(store: MemoryStore, summary: str = "line fault", facts_: dict[str, Any] | None = None, *,
              user: str = "alice", scope: str = "helpdesk", expected: int = 0, run: str = "run-1",
              retention: float = 180, now: datetime = T0) -> int:
    return await store.write(user, scope, MemoryUpdate(summary, facts_ or {}), types=TYPES, expected_version=expected,
                             run_id=run, team="helpdesk", team_version="v1", retention_days=retention, now=now)


async def test_memory_written_reads_back_with_each_facts_value_source_run_and_confirmation(store: MemoryStore) -> None:
    written = {"ticket_id": "55102", "visits": 2, "speed": 0.5, "replaced": True, "visited_on": date(2026, 9, 24)}
    assert await put(store, "line fault ticket 55102, technician visited 24 Sep", written) == 1
    kept = await store.load("alice", "helpdesk")
    assert kept is not None and kept.written and kept.version == 1 and not kept.damaged
    assert kept.summary == "line fault ticket 55102, technician visited 24 Sep"
    assert {n: f.value for n, f in kept.facts.items()} == written
    assert {f.type for f in kept.facts.values()} == set(TYPES.values())
    fact = kept.facts["ticket_id"]
    assert (fact.source_run_id, fact.created_at, fact.confirmed_at) == ("run-1", T0, T0)
    assert kept.updated_at == T0 and kept.expires_at == T0 + timedelta(days=180)
    assert await store.load("alice", "another_team") is None and await store.load("bob", "helpdesk") is None


async def test_a_fact_written_again_with_its_value_is_confirmed_and_keeps_the_run_it_came_from(
    store: MemoryStore,
) -> None:
    await put(store, facts_={"ticket_id": "55102", "visits": 1})
    later = T0 + timedelta(days=3)
    await put(store, "again", {"ticket_id": "55102", "visits": 2}, expected=1, run="run-2", now=later)
    kept = await store.load("alice", "helpdesk")
    assert kept is not None
    ticket, visits = kept.facts["ticket_id"], kept.facts["visits"]
    assert (ticket.source_run_id, ticket.created_at, ticket.confirmed_at) == ("run-1", T0, later)  # confirmed
    assert (visits.value, visits.source_run_id, visits.created_at) == (2, "run-2", later)  # changed


async def test_facts_a_write_does_not_name_are_kept(store: MemoryStore) -> None:
    await put(store, facts_={"ticket_id": "55102", "replaced": False})
    await put(store, "the router was replaced", {"replaced": True}, expected=1, run="run-2")
    kept = await store.load("alice", "helpdesk")
    assert kept is not None and kept.summary == "the router was replaced"
    assert {n: f.value for n, f in kept.facts.items()} == {"ticket_id": "55102", "replaced": True}


async def test_a_write_from_a_version_another_write_moved_on_is_refused_and_writes_nothing(store: MemoryStore) -> None:
    await put(store, "first", {"ticket_id": "1"})
    with pytest.raises(StaleMemory):  # a second first write: the row is there already
        await put(store, "second first", {"ticket_id": "2"})
    await put(store, "update", {"visits": 1}, expected=1, run="run-2")
    with pytest.raises(StaleMemory):  # written from version 1, which another write moved to 2
        await put(store, "lost?", {"ticket_id": "3", "visits": 9}, expected=1, run="run-3")
    kept = await store.load("alice", "helpdesk")
    assert kept is not None and (kept.version, kept.summary) == (2, "update")
    assert {n: f.value for n, f in kept.facts.items()} == {"ticket_id": "1", "visits": 1}


async def test_a_writers_failure_is_recorded_beside_the_memory_and_changes_none_of_it(store: MemoryStore) -> None:
    assert await store.record_failure("alice", "helpdesk", "the writer returned prose", team="helpdesk",
                                      team_version="v1", retention_days=180)
    first = await store.load("alice", "helpdesk")
    assert first is not None and not first.written and first.failure is not None and first.failure.count == 1
    await put(store, "good", {"ticket_id": "55102"}, expected=first.version)  # a first write over the failure
    await store.record_failure("alice", "helpdesk", "the writer's model call failed (TimeoutError)",
                               team="helpdesk", team_version="v2", retention_days=180)
    kept = await store.load("alice", "helpdesk")
    assert kept is not None and (kept.version, kept.summary, kept.team_version) == (1, "good", "v1")
    assert kept.facts["ticket_id"].value == "55102"
    assert kept.failure is not None and kept.failure.count == 2 and "TimeoutError" in kept.failure.reason
    assert kept.to_dict()["failure"]["count"] == 2


async def test_forgetting_a_fact_keeps_the_summary_and_moves_the_version_on(store: MemoryStore) -> None:
    await put(store, "ticket 55102", {"ticket_id": "55102", "visits": 1})
    gone = await store.forget("alice", fact="ticket_id")
    assert (gone.memories, gone.facts) == (0, 1)
    kept = await store.load("alice", "helpdesk")
    assert kept is not None and kept.summary == "ticket 55102" and set(kept.facts) == {"visits"}
    assert kept.version == 2  # a writer that read version 1 cannot write the fact back from what it read
    with pytest.raises(StaleMemory):
        await put(store, "ticket 55102", {"ticket_id": "55102"}, expected=1)


async def test_forgetting_a_fact_not_kept_names_the_facts_that_are(store: MemoryStore) -> None:
    await put(store, facts_={"ticket_id": "55102", "visits": 1})
    with pytest.raises(MemoryNotFound) as raised:
        await store.forget("alice", fact="router_model")
    kept, _, recorded = (raised.value.hint or "").partition("; ")
    assert kept == "the facts kept are: ticket_id, visits"
    assert recorded.startswith("the forget was recorded all the same")  # the user's open sessions write nothing
    with pytest.raises(MemoryNotFound, match="nothing is kept"):
        await store.forget("bob", fact="ticket_id")


async def test_forgetting_a_fact_of_a_user_with_no_facts_says_what_is_kept_instead(store: MemoryStore) -> None:
    await put(store, "line fault")  # a summary, no fact
    await store.record_failure("bob", "helpdesk", "the writer returned prose", team="helpdesk", team_version="v1",
                               retention_days=180)
    await put(store, "old", user="carol", retention=0.5)  # past its expiry (at T0 + 12h): shown as nothing
    hints, unrecorded = {}, []
    for user in ("alice", "bob", "carol", "dave"):
        with pytest.raises(MemoryNotFound) as raised:
            await store.forget(user, fact="ticket_id")
        hints[user], _, note = (raised.value.hint or "").partition("; ")
        unrecorded += [user] if note.startswith("nothing was recorded of the forget: the user is erased") else []
    assert unrecorded == ["bob", "dave"]  # no data key: no session opened, none whose writer the record could stop
    assert hints == {
        "alice": "no fact is kept about this user, only a summary: forgetting everything (--all) drops it",
        "bob": "nothing is kept about this user but the memory writer's last failure",
        "carol": "nothing is kept about this user", "dave": "nothing is kept about this user"}
    with pytest.raises(MemoryNotFound) as raised:
        await store.forget("alice", scope="billing", fact="ticket_id")
    assert (raised.value.hint or "").partition("; ")[0] == "nothing is kept about this user under the scope given"  # its summary is elsewhere
    assert await store.forget("alice") == Forgotten(memories=1, facts=0)  # the summary the hint named


async def test_forgetting_everything_removes_one_scope_or_every_scope_and_no_one_elses(store: MemoryStore) -> None:
    await put(store, facts_={"ticket_id": "1", "visits": 1})
    await put(store, facts_={"ticket_id": "2"}, scope="billing")
    await put(store, facts_={"ticket_id": "3"}, user="bob")
    gone = await store.forget("alice", scope="billing")
    assert (gone.memories, gone.facts) == (1, 1)
    assert [m.scope for m in await store.show("alice")] == ["helpdesk"]
    gone = await store.forget("alice")
    assert (gone.memories, gone.facts) == (1, 2) and await store.show("alice") == []
    assert (await store.forget("alice")) == type(gone)(0, 0)  # nothing left: nothing to do, no error
    assert [m.user_id for m in await store.show("bob")] == ["bob"]


@pytest.mark.parametrize("fact", [None, "ticket_id"])
async def test_forgetting_while_a_write_is_under_way_leaves_nothing_of_what_it_forgets(
    store: MemoryStore, engine: AsyncEngine, fact: str | None
) -> None:
    await put(store, facts_={"ticket_id": "55102"})
    # A write under way: the memory row moved on (and held by its transaction), its facts not yet written.
    async with engine.connect() as writer:
        await writer.begin()
        await writer.execute(update(memories).where(memories.c.user_id == "alice").values(version=2))
        forgetting = asyncio.create_task(store.forget("alice", fact=fact))
        await asyncio.sleep(0.5)  # the forget has started and waits for the write's transaction
        stored = {"user_id": "alice", "scope": "helpdesk", "type": "str", "source_run_id": "run-2",
                  "created_at": T0, "confirmed_at": T0}
        await writer.execute(insert(facts).values(**stored, name="router_model", value='"ZX-81"'))
        if fact is not None:
            await writer.execute(update(facts).where(facts.c.name == fact).values(value='"55103"'))
        await writer.commit()
    await forgetting
    kept = await store.show("alice")
    if fact is None:  # everything: the fact the write added too
        assert kept == []
    else:  # the fact, whatever value the write gave it; the write's other fact stays with its memory row
        (memory,) = kept
        assert set(memory.facts) == {"router_model"} and memory.damaged == [] and memory.version == 3


async def test_a_change_whose_commit_went_unanswered_says_whether_it_landed_is_not_known(
    store: MemoryStore, engine: AsyncEngine
) -> None:
    await put(store, facts_={"ticket_id": "55102"})

    def answer_lost(conn: Any) -> None:  # the commit reaches the database; its answer never comes back
        conn.connection.dbapi_connection.commit()
        raise OperationalError("COMMIT", {}, ConnectionResetError("connection reset by peer"))

    event.listen(engine.sync_engine, "commit", answer_lost)
    try:
        with pytest.raises(StoreUnavailable) as forgetting:
            await store.forget("alice")
        with pytest.raises(StoreUnavailable) as writing:
            await put(store, "after the forget", {"visits": 2}, scope="billing")
    finally:
        event.remove(engine.sync_engine, "commit", answer_lost)
    for raised in (forgetting.value, writing.value):
        assert "whether the write left unanswered landed is not known" in raised.message
        assert "no memory was changed" not in (raised.hint or "") and "teamstore memory show" in (raised.hint or "")
    assert [kept.scope for kept in await store.show("alice")] == ["billing"]  # both had landed


async def test_a_change_the_database_refused_says_no_memory_was_changed(store: MemoryStore, engine: AsyncEngine) -> None:
    await put(store, facts_={"ticket_id": "55102"})

    class Canceled(Exception):
        sqlstate = "57014"  # the statement was cancelled (a statement_timeout): the database is there

    def refuse(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        if statement.lstrip().upper().startswith("DELETE FROM TS_USER_MEMORY_FACTS"):
            raise OperationalError(statement, {}, Canceled())

    event.listen(engine.sync_engine, "before_cursor_execute", refuse)
    try:
        with pytest.raises(StoreUnavailable) as raised:
            await store.forget("alice")
    finally:
        event.remove(engine.sync_engine, "before_cursor_execute", refuse)
    assert "no memory was changed" in (raised.value.hint or "") and "not known" not in raised.value.message
    assert len(await store.show("alice")) == 1  # rolled back: the summary is still kept

async def test_retention_sweeps_memory_past_its_expiry_with_its_facts(store: MemoryStore) -> None:
    await put(store, facts_={"ticket_id": "1"}, retention=1)
    await put(store, facts_={"ticket_id": "2"}, scope="billing", retention=30)
    await put(store, facts_={"ticket_id": "3", "visits": 2}, user="bob", retention=1)
    swept = await store.sweep(now=T0 + timedelta(days=2), batch_size=1)  # batches of one: every batch runs
    assert (swept.memories, swept.facts) == (2, 3)
    assert [(m.user_id, m.scope) for m in await store.show("alice") + await store.show("bob")] == [("alice", "billing")]
    assert (await store.sweep(now=T0 + timedelta(days=2))).memories == 0


async def test_memory_past_its_expiry_reads_as_gone_and_a_write_starts_afresh_without_its_facts(
    store: MemoryStore, engine: AsyncEngine
) -> None:
    await put(store, "line fault", {"ticket_id": "1", "visits": 2}, retention=0.5)  # expired last night
    await put(store, "other", {"ticket_id": "9"}, user="bob", retention=0.5)
    assert await store.show("alice") == []  # not listed, though not swept yet
    assert [m.summary for m in await store.show("alice", held=True)] == ["line fault"]  # what an export holds
    assert await store.load("alice", "helpdesk") is None  # not given to a session or a writer: and deleted
    async with engine.connect() as conn:
        left = (await conn.execute(select(memories.c.user_id).union_all(select(facts.c.user_id)))).scalars().all()
    assert sorted(left) == ["bob", "bob"]  # bob's is left to the sweep (nobody read it)
    assert await put(store, "new ticket", {"ticket_id": "2"}, now=datetime.now(UTC)) == 1
    kept = await store.load("alice", "helpdesk")
    assert kept is not None and kept.summary == "new ticket" and {n: f.value for n, f in kept.facts.items()} == {
        "ticket_id": "2"}  # the expired visits are not back


async def test_a_write_read_before_the_memory_expired_does_not_renew_it(store: MemoryStore) -> None:
    await put(store, "line fault", {"ticket_id": "1", "visits": 2}, retention=0.5)  # read, then it expired
    with pytest.raises(StaleMemory):  # its writer's model call outlasted the memory: nothing renewed
        await put(store, "still here?", {"visits": 3}, expected=1, now=datetime.now(UTC))
    assert await store.load("alice", "helpdesk") is None  # read again: gone, and deleted
    assert await put(store, "afresh", {"visits": 3}, now=datetime.now(UTC)) == 1
    kept = await store.load("alice", "helpdesk")
    assert kept is not None and {n: f.value for n, f in kept.facts.items()} == {"visits": 3}


async def test_an_erasure_fence_stops_every_memory_write_for_its_user(store: MemoryStore, engine: AsyncEngine) -> None:
    await put(store, "before", {"ticket_id": "1"})
    await open_request(engine, "er-fence", "alice", "test", 30)
    with pytest.raises(ErasureInProgress):
        await put(store, "after", {"ticket_id": "2"}, expected=1, run="run-2")
    with pytest.raises(ErasureInProgress):
        await put(store, "first", {"ticket_id": "2"}, scope="billing")
    assert not await store.record_failure("alice", "helpdesk", "x", team="helpdesk", team_version="v1",
                                          retention_days=1)
    kept = await store.show("alice")
    assert [(m.scope, m.summary, m.failure) for m in kept] == [("helpdesk", "before", None)]
    assert await put(store, "bob is not fenced", user="bob") == 1


async def test_a_row_damaged_by_hand_is_reported_and_never_raised(store: MemoryStore, engine: AsyncEngine) -> None:
    await put(store, "ok", {"ticket_id": "55102", "visits": 2, "replaced": True})
    async with engine.begin() as conn:
        await conn.execute(update(facts).where(facts.c.name == "ticket_id").values(value="{55102"))
        await conn.execute(update(facts).where(facts.c.name == "visits").values(value='"two"'))
        await conn.execute(update(facts).where(facts.c.name == "replaced").values(type="list"))
        await conn.execute(update(memories).values(version=-4))
        if engine.dialect.name == "sqlite":  # SQLite keeps whatever is written, a time that is no time included
            await conn.execute(text("UPDATE ts_user_memory SET updated_at = 'yesterday'"))
    kept = await store.load("alice", "helpdesk")
    assert kept is not None and kept.facts == {} and kept.version == -1
    reasons = {d.name: d.reason for d in kept.damaged}
    assert reasons["ticket_id"] == "fact 'ticket_id' holds a value that is not JSON"
    assert "'visits' is not a valid int" in reasons["visits"] and "no fact type" in reasons["replaced"]
    assert "version" in reasons and ("updated_at" in reasons) == (engine.dialect.name == "sqlite")
    # What a damaged value holds is still the user's: shown, and so exported, as the row holds it.
    held = {d["name"]: d["stored"] for d in kept.to_dict()["damaged"]}
    assert (held["ticket_id"], held["visits"], held["replaced"], held["version"]) == ("{55102", '"two"', "true", None)
    assert (await store.forget("alice")).facts == 3  # what is damaged can still be forgotten


async def leave_facts(engine: AsyncEngine, user: str = "alice") -> None:
    """Delete the user's memory rows and leave their facts, as a hand's delete (or an older release's forget or
    erasure racing a write) did."""
    async with engine.begin() as conn:
        await conn.execute(memories.delete().where(memories.c.user_id == user))


async def stored_facts(engine: AsyncEngine) -> list[tuple[str, str, str]]:
    async with engine.connect() as conn:
        found = await conn.execute(select(facts.c.user_id, facts.c.scope, facts.c.name).order_by(
            facts.c.user_id, facts.c.scope, facts.c.name))
        return [(str(u), str(s), str(n)) for u, s, n in found.all()]


async def test_facts_left_without_their_memory_row_are_never_loaded_nor_shown_but_exported_until_swept(
    store: MemoryStore, engine: AsyncEngine
) -> None:
    await put(store, facts_={"ticket_id": "55102", "visits": 2})
    await put(store, "bob's", {"ticket_id": "9"}, user="bob")
    await leave_facts(engine)
    assert await store.load("alice", "helpdesk") is None  # no session is given them, nor a writer
    assert await store.show("alice") == [] and await store.show("alice", "helpdesk") == []
    (left,) = await store.show("alice", held=True)  # still held about alice: what an export lists
    assert left.leftover and not left.written and (left.scope, left.summary, left.team) == ("helpdesk", "", "")
    assert {n: f.value for n, f in left.facts.items()} == {"ticket_id": "55102", "visits": 2}
    assert left.to_dict()["leftover"] is True and (await store.show("bob"))[0].to_dict()["leftover"] is False
    assert await stored_facts(engine) == [("alice", "helpdesk", "ticket_id"), ("alice", "helpdesk", "visits"),
                                          ("bob", "helpdesk", "ticket_id")]  # reading deleted nothing


async def test_retention_sweeps_facts_left_without_their_memory_and_counts_them_apart(
    store: MemoryStore, engine: AsyncEngine
) -> None:
    await put(store, facts_={"ticket_id": "1", "visits": 2})
    await put(store, facts_={"ticket_id": "2"}, scope="billing")
    await put(store, facts_={"ticket_id": "3"}, user="bob", retention=1)  # expired by the sweep's time
    await put(store, "carol's", {"ticket_id": "4"}, user="carol")
    await leave_facts(engine)
    swept = await store.sweep(now=T0 + timedelta(days=2), batch_size=1)  # batches of one: every batch runs
    assert (swept.memories, swept.facts, swept.leftover_facts) == (1, 1, 3)
    assert await stored_facts(engine) == [("carol", "helpdesk", "ticket_id")]  # written memory stays
    assert await store.show("alice", held=True) == []
    assert (await store.sweep(now=T0 + timedelta(days=2))).leftover_facts == 0


@pytest.mark.parametrize("left_over", ["every third", "all", "none"])
async def test_the_leftover_sweep_looks_at_each_fact_once_however_many_are_left_over(
    store: MemoryStore, engine: AsyncEngine, left_over: str
) -> None:
    scopes = [f"team_{i:02d}" for i in range(26)]
    left = {"every third": scopes[::3], "all": scopes, "none": []}[left_over]
    async with engine.begin() as conn:
        await conn.execute(insert(facts), [
            {"user_id": "alice", "scope": scope, "name": "ticket_id", "type": "str", "value": '"1"',
             "source_run_id": "run-0", "created_at": T0, "confirmed_at": T0} for scope in scopes])
        written = [scope for scope in scopes if scope not in left]
        if written:
            await conn.execute(insert(memories), [
                {"user_id": "alice", "scope": scope, "summary": "", "version": 1, "team": "helpdesk",
                 "team_version": "v1", "source_run_id": "run-0", "created_at": T0, "updated_at": T0,
                 "expires_at": T0 + timedelta(days=180), "failures": 0} for scope in written])
    deletes: list[str] = []

    def note(_conn: Any, _cursor: Any, statement: str, *_: Any) -> None:
        if statement.lstrip().upper().startswith(f"DELETE FROM {facts.name.upper()}"):
            deletes.append(statement)

    event.listen(engine.sync_engine, "before_cursor_execute", note)
    try:
        swept = await store.sweep(now=T0, batch_size=4)
    finally:
        event.remove(engine.sync_engine, "before_cursor_execute", note)
    # Batches of 4 walk the 26 facts once (the 7th takes the last 2), wherever the leftovers are: none is
    # looked at again by a later batch, and a table with none left over costs the same one pass.
    assert (swept.leftover_facts, len(deletes)) == (len(left), 7)
    assert await stored_facts(engine) == [("alice", scope, "ticket_id") for scope in written]


async def test_the_first_write_after_facts_were_left_over_starts_clean(
    store: MemoryStore, engine: AsyncEngine
) -> None:
    await put(store, "line fault", {"ticket_id": "55102", "visits": 2})
    await leave_facts(engine)
    assert await put(store, "new ticket", {"ticket_id": "60001"}, run="run-2") == 1  # not refused
    kept = await store.load("alice", "helpdesk")
    assert kept is not None and not kept.leftover and (kept.version, kept.summary) == (1, "new ticket")
    assert {n: f.value for n, f in kept.facts.items()} == {"ticket_id": "60001"}  # the left visits are gone
    assert kept.facts["ticket_id"].source_run_id == "run-2" and kept.damaged == []
    assert [m.leftover for m in await store.show("alice", held=True)] == [False]


async def test_facts_beside_a_row_holding_only_a_failure_are_left_over_too(
    store: MemoryStore, engine: AsyncEngine
) -> None:
    await put(store, "line fault", {"ticket_id": "55102"})
    await leave_facts(engine)
    # A writer of an older release refused the facts it found with no row, and recorded why: a row of version 0.
    assert await store.record_failure("alice", "helpdesk", "the stored memory row is damaged", team="helpdesk",
                                      team_version="v1", retention_days=180, now=T0)
    kept = await store.load("alice", "helpdesk")
    assert kept is not None and not kept.written and kept.facts == {} and kept.failure is not None
    assert [(m.version, m.leftover, set(m.facts)) for m in await store.show("alice")] == [(0, False, set())]
    assert [(m.leftover, set(m.facts)) for m in await store.show("alice", held=True)] == [
        (False, set()), (True, {"ticket_id"})]
    assert (await store.sweep(now=T0 + timedelta(days=2))).leftover_facts == 1
    assert [m.failure is not None for m in await store.show("alice", held=True)] == [True]  # the row stays


async def test_facts_left_without_their_memory_row_can_be_forgotten(store: MemoryStore, engine: AsyncEngine) -> None:
    await put(store, facts_={"ticket_id": "55102", "visits": 2})
    await put(store, facts_={"ticket_id": "7"}, scope="billing")
    await leave_facts(engine)
    assert (await store.forget("alice", fact="visits")) == Forgotten(memories=0, facts=1)
    assert (await store.forget("alice", scope="helpdesk")).facts == 1
    assert (await store.forget("alice")).facts == 1
    assert await store.show("alice", held=True) == [] and await stored_facts(engine) == []


async def test_forgetting_a_fact_not_kept_names_only_the_facts_show_lists(
    store: MemoryStore, engine: AsyncEngine
) -> None:
    await put(store, facts_={"ticket_id": "55102", "visits": 2})
    await leave_facts(engine)  # left over: no memory shows them
    await put(store, facts_={"speed": 0.5}, scope="billing", retention=0.5)  # past its expiry (at T0 + 12h)
    await put(store, facts_={"replaced": True}, scope="returns")
    assert {n for m in await store.show("alice") for n in m.facts} == {"replaced"}
    with pytest.raises(MemoryNotFound) as raised:
        await store.forget("alice", fact="router_model")
    assert (raised.value.hint or "").partition("; ")[0] == "the facts kept are: replaced"
    with pytest.raises(MemoryNotFound, match="under the scope given") as raised:
        await store.forget("alice", scope="helpdesk", fact="router_model")
    assert "helpdesk" not in raised.value.message and "router_model" not in raised.value.message
    assert (raised.value.hint or "").partition("; ")[0] == "nothing is kept about this user under the scope given"
    assert (await store.forget("alice", fact="visits")) == Forgotten(memories=0, facts=1)  # still forgotten


async def test_ids_are_checked_before_anything_is_read(store: MemoryStore) -> None:
    for bad in ("", "a\tb", "x" * 257, "   ", "alice "):
        with pytest.raises(InvalidIdentifier):
            await store.show(bad)
        with pytest.raises(InvalidIdentifier):
            await store.forget(bad)
        with pytest.raises(InvalidIdentifier):
            await store.load(bad, "helpdesk")


async def test_memory_kept_under_an_id_no_session_can_have_now_is_still_what_an_export_reads(
    store: MemoryStore, engine: AsyncEngine
) -> None:
    await put(store, facts_={"ticket_id": "55102"})
    async with engine.begin() as conn:  # as an earlier release kept it, for a session opened under a pasted id
        for table in (memories, facts, data_keys):
            await conn.execute(update(table).where(table.c.user_id == "alice").values(user_id="alice "))
    with pytest.raises(InvalidIdentifier, match="at its end"):
        await store.show("alice ")
    (kept,) = await store.show("alice ", held=True)
    assert kept.summary == "line fault" and kept.facts["ticket_id"].value == "55102"


@pytest.mark.parametrize("scope", ["", "Helpdesk", "help desk", "x" * 65, "helpdesk\n"])
async def test_a_scope_no_team_can_declare_is_refused_not_answered_with_nothing(store: MemoryStore, scope: str) -> None:
    await put(store, facts_={"ticket_id": "55102"})
    with pytest.raises(InvalidIdentifier, match="no memory scope"):
        await store.show("alice", scope)
    with pytest.raises(InvalidIdentifier, match="no memory scope"):
        await store.forget("alice", scope=scope)
    with pytest.raises(InvalidIdentifier, match="no fact name"):
        await store.forget("alice", fact=scope or "")
    assert [m.scope for m in await store.show("alice")] == ["helpdesk"]  # nothing was forgotten


@pytest.mark.parametrize("name", [3, b"helpdesk", ["helpdesk"]])
async def test_a_scope_or_fact_name_that_is_no_string_is_an_invalid_identifier(store: MemoryStore, name: object) -> None:
    await put(store, facts_={"ticket_id": "55102"})
    with pytest.raises(InvalidIdentifier, match=rf"scope is no memory scope \(it is of type {type(name).__name__}\)"):
        await store.show("alice", name)  # type: ignore[arg-type]
    with pytest.raises(InvalidIdentifier, match="no memory scope"):
        await store.forget("alice", scope=name)  # type: ignore[arg-type]
    with pytest.raises(InvalidIdentifier, match=rf"fact is no fact name a team can declare \(it is of type {type(name).__name__}\)"):
        await store.forget("alice", fact=name)  # type: ignore[arg-type]
    assert [m.scope for m in await store.show("alice")] == ["helpdesk"]  # nothing was forgotten


async def test_the_erasure_step_counts_and_removes_a_users_memory_and_no_one_elses(
    store: MemoryStore, engine: AsyncEngine
) -> None:
    await put(store, "alice's summary", {"ticket_id": "1", "visits": 2})
    await put(store, "bob's", {"ticket_id": "2"}, user="bob")
    step, ctx = memory_step(), StepContext(engine, None, "er-1", "alice", None)  # type: ignore[arg-type]
    found = await step.enumerate(ctx)
    async with engine.connect() as conn:  # the bytes as stored (sealed), as a state's are counted
        summaries = (await conn.execute(select(memories.c.summary).where(memories.c.user_id == "alice"))).scalars()
        values = (await conn.execute(select(facts.c.value).where(facts.c.user_id == "alice"))).scalars()
        stored = sum(len(v) for v in [*summaries, *values])
    assert found.rows == 3 and found.bytes == stored
    await open_request(engine, "er-1", "alice", "test", 30)
    result = await step.erase(ctx, prior=None)
    assert result.status is StepStatus.DELETED and result.counts.rows == 3
    assert (await step.remaining(ctx)).rows == 0
    async with engine.connect() as conn:
        assert (await conn.execute(select(memories.c.user_id))).scalars().all() == ["bob"]


async def test_the_erasure_step_counts_and_removes_facts_left_without_their_memory(
    store: MemoryStore, engine: AsyncEngine
) -> None:
    await put(store, "alice's summary", {"ticket_id": "1", "visits": 2})
    await put(store, "billing", {"ticket_id": "2"}, scope="billing")
    await leave_facts(engine)
    await put(store, "afresh", {"ticket_id": "3"}, scope="billing")  # one scope written again since
    step, ctx = memory_step(), StepContext(engine, None, "er-1", "alice", None)  # type: ignore[arg-type]
    assert (await step.enumerate(ctx)).rows == 4  # two left over, the new memory row and its fact
    await open_request(engine, "er-1", "alice", "test", 30)
    result = await step.erase(ctx, prior=None)
    assert result.status is StepStatus.DELETED and result.counts.rows == 4
    assert (await step.remaining(ctx)).rows == 0 and await stored_facts(engine) == []


async def test_the_erasure_step_run_while_a_write_is_under_way_leaves_nothing_behind(
    store: MemoryStore, engine: AsyncEngine
) -> None:
    await put(store, "alice's summary", {"ticket_id": "1"})
    step, ctx = memory_step(), StepContext(engine, None, "er-1", "alice", None)  # type: ignore[arg-type]
    await open_request(engine, "er-1", "alice", "test", 30)
    # A write whose memory row moved on just before the fence went up: its facts are not written yet.
    async with engine.connect() as writer:
        await writer.begin()
        await writer.execute(update(memories).where(memories.c.user_id == "alice").values(version=2))
        erasing = asyncio.create_task(step.erase(ctx, prior=None))
        await asyncio.sleep(0.5)  # the step has started and waits for the write's transaction
        await writer.execute(insert(facts).values(
            user_id="alice", scope="helpdesk", name="visits", type="int", value="2", source_run_id="run-2",
            created_at=T0, confirmed_at=T0))
        await writer.commit()
    assert (await erasing).status is StepStatus.DELETED
    assert (await step.remaining(ctx)).rows == 0
