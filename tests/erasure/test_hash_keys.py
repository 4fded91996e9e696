"""The erasure hash keys: ``TEAMSTORE_ERASURE_HASH_KEY_PREVIOUS`` is only kept beside ``TEAMSTORE_ERASURE_HASH_KEY``.

Given alone, every new request's hash of its user id went on under the key being retired, and nothing said so. Now
whatever hashes an id for a request refuses it; the settings still load, and the retention sweep, which hashes no
id, forgets quiet users as before. An empty key counts as unset, the current one and the previous one alike; a key of spaces is a key.
"""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from pydantic import SecretStr
from sqlalchemy import func, select, update
from sqlalchemy.ext.asyncio import AsyncEngine
from typer.testing import CliRunner

from teamstore.audit.schema import subjects
from teamstore.audit.subjects import find_subject, get_or_create_subject
from teamstore.audit.transcripts.local import LocalTranscriptStore
from teamstore.cli import app
from teamstore.db.engine import create_engine
from teamstore.db.fence import user_holds
from teamstore.db.migrate import upgrade
from teamstore.erasure import RequestStatus, desk, requests
from teamstore.erasure.receipt import user_hash
from teamstore.erasure.schema import erasure_requests
from teamstore.erasure.settings import ErasureSettings
from teamstore.errors import ConfigurationError
from teamstore.settings import Settings
from tests.erasure.conftest import KNOBS, coordinator

USER = "erin@example.com"
OLD = "the erasure hash key of last year"
NEW = "this year's erasure hash key"
REFUSED = "TEAMSTORE_ERASURE_HASH_KEY_PREVIOUS is set without TEAMSTORE_ERASURE_HASH_KEY"
runner = CliRunner()

PREVIOUS_ALONE = {
    "only the previous key": {"hash_key_previous": SecretStr(OLD)},
    "an empty current key": {"hash_key": SecretStr(""), "hash_key_previous": SecretStr(OLD)},
}


def _knobs(**keys: SecretStr) -> ErasureSettings:
    return KNOBS.model_copy(update=keys)


async def _stored(engine: AsyncEngine) -> tuple[int, int]:
    """How many erasure requests and holds (fences) the database keeps."""
    async with engine.connect() as conn:
        return (await conn.scalar(select(func.count()).select_from(erasure_requests)) or 0,
                await conn.scalar(select(func.count()).select_from(user_holds)) or 0)


def _refusal_without_a_key(refused: ConfigurationError) -> str:
    said = f"{refused.message} {refused.hint}"
    assert OLD not in said and "last year" not in said
    return said


@pytest.mark.parametrize("keys", list(PREVIOUS_ALONE))
async def test_an_erasure_with_the_previous_hash_key_and_no_current_one_is_refused_and_stores_nothing(
    engine: AsyncEngine, tmp_path: Path, keys: str
) -> None:
    await get_or_create_subject(engine, USER)
    erasure = coordinator(engine, LocalTranscriptStore(tmp_path / "t"), **PREVIOUS_ALONE[keys])
    for dry_run in (False, True):
        with pytest.raises(ConfigurationError, match=REFUSED) as refused:
            await erasure.run(USER, request_id="req-1", dry_run=dry_run)
        said = _refusal_without_a_key(refused.value)
        assert "set TEAMSTORE_ERASURE_HASH_KEY to the current key" in said
        assert "give it as TEAMSTORE_ERASURE_HASH_KEY and unset TEAMSTORE_ERASURE_HASH_KEY_PREVIOUS" in said
    assert await _stored(engine) == (0, 0)  # no request row, no fence
    assert await find_subject(engine, USER) is not None


@pytest.mark.parametrize("keys", list(PREVIOUS_ALONE))
async def test_matching_held_requests_and_near_twins_with_the_previous_hash_key_alone_is_refused(
    engine: AsyncEngine, keys: str
) -> None:
    knobs = _knobs(**PREVIOUS_ALONE[keys])
    with pytest.raises(ConfigurationError, match=REFUSED):
        await requests.user_hashes(engine, knobs, USER)
    with pytest.raises(ConfigurationError, match=REFUSED):
        await desk.near_user_match(engine, USER, knobs)


@pytest.mark.parametrize("keys", [{"hash_key_previous": SecretStr("")}, {"hash_key": SecretStr("")},
                                  {"hash_key": SecretStr(""), "hash_key_previous": SecretStr("")}],
                         ids=["an empty previous key", "an empty current key", "both empty"])
async def test_an_empty_hash_key_is_as_if_unset(
    engine: AsyncEngine, tmp_path: Path, keys: dict[str, SecretStr]
) -> None:
    empty = _knobs(**keys)
    assert await requests.user_hashes(engine, empty, USER) == await requests.user_hashes(engine, KNOBS, USER)
    assert requests.keyed_by_database(empty)
    await get_or_create_subject(engine, USER)
    receipt = await coordinator(engine, LocalTranscriptStore(tmp_path / "t"), **keys).run(USER, request_id="req-1")
    assert receipt.status is RequestStatus.COMPLETED, receipt


async def test_both_hash_keys_given_hash_under_the_current_one_first_then_the_previous_one(
    engine: AsyncEngine, tmp_path: Path
) -> None:
    both = {"hash_key": SecretStr(NEW), "hash_key_previous": SecretStr(OLD)}
    current, previous, unkeyed = await requests.user_hashes(engine, _knobs(**both), USER)
    assert current == (await requests.user_hashes(engine, _knobs(hash_key=SecretStr(NEW)), USER))[0]
    assert previous not in (current, unkeyed) and not requests.keyed_by_database(_knobs(**both))
    assert await desk.near_user_match(engine, USER, _knobs(**both)) is None
    await get_or_create_subject(engine, USER)
    receipt = await coordinator(engine, LocalTranscriptStore(tmp_path / "t"), **both).run(USER, request_id="req-1")
    assert receipt.status is RequestStatus.COMPLETED, receipt


def _seeded(*users: str) -> None:
    """The embedded default's database, migrated, with a subject mapping (and nothing else) for each of ``users``,
    made two hours ago: quiet, past the hour a first session's new subject is left alone."""
    async def go() -> None:
        engine = create_engine(Settings().resolved_database_url)
        await upgrade(engine)
        for user in users:
            await get_or_create_subject(engine, user)
        async with engine.begin() as conn:
            await conn.execute(update(subjects).values(created_at=datetime.now(UTC) - timedelta(hours=2)))
        await engine.dispose()

    asyncio.run(go())


def _forgotten(user: str) -> bool:
    async def go() -> bool:
        engine = create_engine(Settings().resolved_database_url)
        try:
            return await find_subject(engine, user) is None
        finally:
            await engine.dispose()

    return asyncio.run(go())


@pytest.mark.parametrize("empty_current", [False, True], ids=["unset", "empty"])
def test_the_command_line_refuses_the_previous_hash_key_alone_where_it_hashes_an_id(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, empty_current: bool
) -> None:
    """Read from the environment: the settings load, and erase, `erase list --user` and export refuse, saying how
    to fix it and repeating no key."""
    _seeded(USER)
    monkeypatch.setenv("TEAMSTORE_ERASURE_HASH_KEY_PREVIOUS", OLD)
    if empty_current:
        monkeypatch.setenv("TEAMSTORE_ERASURE_HASH_KEY", "")
    assert ErasureSettings().hash_key_previous is not None  # loads: only its use is refused
    for args in (["erase", "--user", USER, "--request-id", "req-1", "--yes"], ["erase", "list", "--user", USER],
                 ["export", "--user", USER, "--output", str(tmp_path / "erin.zip")]):
        refused = runner.invoke(app, args, env={"COLUMNS": "300"})
        said = " ".join(refused.stderr.split())
        assert refused.exit_code == 1, (args, refused.output)
        assert REFUSED in said and "unset TEAMSTORE_ERASURE_HASH_KEY_PREVIOUS" in said, (args, said)
        assert OLD not in refused.output and "last year" not in refused.output
    assert not (tmp_path / "erin.zip").exists()
    assert not _forgotten(USER)


def test_the_retention_sweep_forgets_quiet_users_with_the_previous_hash_key_alone(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """It reads the erasure settings for the fence grace only and hashes no id: the half-done rotation is not its
    business (refused at settings load, the sweep stopped forgetting anyone)."""
    _seeded("quiet-user")
    monkeypatch.setenv("TEAMSTORE_ERASURE_FENCE_GRACE_SECONDS", "0")
    monkeypatch.setenv("TEAMSTORE_ERASURE_HASH_KEY_PREVIOUS", OLD)
    swept = runner.invoke(app, ["retention", "sweep", "--json"])
    assert swept.exit_code == 0, swept.output
    report = json.loads(swept.stdout)
    assert (report["forgotten_users"], report["failed_steps"]) == (1, {}), report
    assert _forgotten("quiet-user")


async def test_a_key_of_spaces_is_a_key_and_requests_held_under_it_stay_matched(engine: AsyncEngine) -> None:
    """Spaces are a key's value as any other: a request held under such a key is matched by it, beside a previous
    key as alone, and the previous key beside it is not refused."""
    spaces = _knobs(hash_key=SecretStr("  "), hash_key_previous=SecretStr(OLD))
    hashes = await requests.user_hashes(engine, spaces, USER)
    assert hashes[:2] == (user_hash(USER, "  "), user_hash(USER, OLD))
    assert not requests.keyed_by_database(spaces)
