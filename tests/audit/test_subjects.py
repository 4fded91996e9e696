"""Pseudonymous subjects and session keys, on SQLite and a real Postgres."""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import re
import unicodedata
from dataclasses import replace
from datetime import UTC, datetime

import pytest
from sqlalchemy.ext.asyncio import AsyncEngine

from teamstore.audit.pseudonyms import Pseudonyms
from teamstore.audit.schema import subjects
from teamstore.audit.subjects import (
    ensure_subject,
    find_subject,
    get_or_create_subject,
    lookup_subject,
    session_key,
)
from teamstore.audit.transcripts.record import RunKeys
from teamstore.db.fence import user_holds
from teamstore.errors import ErasureInProgress, InvalidIdentifier
from tests.audit.teams import context

HEX32 = re.compile(r"^[0-9a-f]{32}$")


async def test_a_user_gets_one_random_subject_key_that_is_found_again(engine: AsyncEngine) -> None:
    assert await find_subject(engine, "alice") is None
    key = await get_or_create_subject(engine, "alice")
    assert HEX32.match(key) and "alice" not in key
    assert await get_or_create_subject(engine, "alice") == key
    assert await find_subject(engine, "alice") == key


async def test_ids_differing_by_case_or_unicode_normalisation_are_different_users(
    engine: AsyncEngine,
) -> None:
    nfc = unicodedata.normalize("NFC", "Zoë")
    nfd = unicodedata.normalize("NFD", "Zoë")
    assert nfc != nfd
    keys = {await get_or_create_subject(engine, uid) for uid in ("alice", "Alice", "ALICE", nfc, nfd)}
    assert len(keys) == 5
    assert await find_subject(engine, nfd) != await find_subject(engine, nfc)


async def test_concurrent_first_runs_of_one_user_agree_on_one_subject(engine: AsyncEngine) -> None:
    subjects = await asyncio.gather(*(ensure_subject(engine, "racer") for _ in range(8)))
    assert len(set(subjects)) == 1 and subjects[0] == await lookup_subject(engine, "racer")


async def test_a_run_never_makes_its_users_subject_the_opening_of_its_session_does(engine: AsyncEngine) -> None:
    pseudonyms = Pseudonyms(engine)
    try:
        run = context(user_id="ida")
        with pytest.raises(ErasureInProgress, match="erased while this session was open"):
            await pseudonyms.writable(run)
        assert await find_subject(engine, "ida") is None
        assert run.opening is not None
        opened = await pseudonyms.open_session("ida", run.opening)
        assert (await pseudonyms.writable(replace(run, run_id="next"))).subject_key == opened.key
    finally:
        await pseudonyms.aclose()


async def test_a_subject_looked_up_moments_ago_opens_the_next_session_without_a_statement_and_never_outlives_it(
    engine: AsyncEngine,
) -> None:
    pseudonyms = Pseudonyms(engine, fresh_seconds=0.3)
    lookups: list[str] = []
    looked_up = pseudonyms.writes.subject

    async def counted(user_id: str):  # type: ignore[no-untyped-def]
        lookups.append(user_id)
        return await looked_up(user_id)

    pseudonyms.writes.subject = counted  # type: ignore[method-assign]
    try:
        first = await pseudonyms.open_session("ivo", "opening-1")
        assert await pseudonyms.open_session("ivo", "opening-2") == first and lookups == ["ivo"]
        # The user is erased (the mapping deleted) while this process still holds the subject: an opening in
        # that moment uses it, but its run finds it gone, writes nothing and forgets it.
        async with engine.begin() as conn:
            await conn.execute(subjects.delete().where(subjects.c.user_id == "ivo"))
        stale = context(user_id="ivo", opening="opening-3")
        assert await pseudonyms.open_session("ivo", "opening-3") == first
        with pytest.raises(ErasureInProgress):
            await pseudonyms.writable(stale)
        assert await find_subject(engine, "ivo") is None  # the run made nothing
        before = len(lookups)
        again = await pseudonyms.open_session("ivo", "opening-4")  # looked up: the user is back, a new subject
        assert again.key != first.key and len(lookups) == before + 1
        assert await pseudonyms.open_session("ivo", "opening-5") == again and len(lookups) == before + 1
        await asyncio.sleep(0.35)
        await pseudonyms.open_session("ivo", "opening-6")  # past fresh_seconds: looked up again
        assert len(lookups) == before + 2
    finally:
        await pseudonyms.aclose()


async def test_no_subject_is_made_for_a_user_an_erasure_holds(engine: AsyncEngine) -> None:
    async with engine.begin() as conn:
        await conn.execute(user_holds.insert().values(user_id="hana", reason="erasure", created_at=datetime.now(UTC)))
    pseudonyms = Pseudonyms(engine)
    try:
        with pytest.raises(ErasureInProgress, match="no session may start"):
            await pseudonyms.open_session("hana", "opening-1")
    finally:
        await pseudonyms.aclose()
    with pytest.raises(ErasureInProgress, match="erasure request holds"):
        await ensure_subject(engine, "hana")
    assert await find_subject(engine, "hana") is None


async def test_a_session_key_cannot_be_confirmed_from_the_published_subject_key_and_a_guessed_id(
    engine: AsyncEngine,
) -> None:
    # The subject key is published beside the session key (ledger, object keys, spans): anyone holding both
    # who guesses a ticket-style session id must not be able to check the guess.
    subject, secret = await ensure_subject(engine, "alice")
    published = session_key(secret, "ticket-182025-a")
    assert HEX32.match(secret) and secret != subject
    assert hmac.new(subject.encode(), b"ticket-182025-a", hashlib.sha256).hexdigest()[:32] != published
    assert session_key(subject, "ticket-182025-a") != published
    assert secret not in repr(await lookup_subject(engine, "alice"))  # nor in a log line naming the subject


@pytest.mark.parametrize("user_id", ["a/b", "../../etc", "ü🙂 名前", "x" * 256])
async def test_awkward_user_ids_are_stored_exactly_and_never_appear_in_keys(
    engine: AsyncEngine, user_id: str
) -> None:
    key, secret = await ensure_subject(engine, user_id)
    assert HEX32.match(key)
    assert await find_subject(engine, user_id) == key
    assert HEX32.match(session_key(secret, "../s/ü"))


async def test_empty_oversized_or_undecodable_user_ids_are_refused(engine: AsyncEngine) -> None:
    for bad in ("", "x" * 257, "a\x00b", "\udcffbob"):  # the last: a shell's undecodable byte
        with pytest.raises(InvalidIdentifier):
            await get_or_create_subject(engine, bad)


def test_session_keys_are_stable_per_subject_and_unlinkable_across_subjects() -> None:
    a, b = "a" * 32, "b" * 32
    assert session_key(a, "s1") == session_key(a, "s1")
    assert session_key(a, "s1") != session_key(a, "s2")
    assert session_key(a, "s1") != session_key(b, "s1")
    assert session_key(a, "S1") != session_key(a, "s1")


async def test_a_run_whose_key_lookup_leaves_the_cache_while_awaited_still_gets_its_keys(
    sqlite_engine: AsyncEngine,
) -> None:
    # Under load more runs end than the resolver caches while one run's lookup is still in flight. That
    # run's observers must get its keys: a cancelled lookup would surface as CancelledError in the user's
    # session, which would then neither save its state nor give its lease back.
    pseudonyms = Pseudonyms(sqlite_engine, cache_size=1)
    first, other = context(user_id="fay"), context(user_id="gus")
    for ctx in (first, other):  # each user's session opened
        await pseudonyms.open_session(ctx.user_id, ctx.run_id)
    waiting = asyncio.ensure_future(pseudonyms.writable(first))
    await asyncio.sleep(0)  # the first run's observers now await its lookup
    pseudonyms.prefetch(other)  # another run ends meanwhile
    keys = await waiting
    subject, secret = await ensure_subject(sqlite_engine, "fay")
    assert keys == RunKeys(subject, session_key(secret, first.session_id))
