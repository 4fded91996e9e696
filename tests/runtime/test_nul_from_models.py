"""NUL (U+0000) in what a model or a tool returns during a run, on SQLite and a real Postgres with both kinds of
lease: kept exactly by every store the run writes (the resume state, each turn's checkpoint, the transcript, the
ledger, the user's memory), read back by a new platform, exported as it was said, and erased with the user.

A task holding NUL is refused before anything runs (tests/runtime/test_tasks.py); what a model or a tool says is
not the user's to fix, and Postgres keeps no NUL in a text column. None needs to: a state, a checkpoint and a
memory are sealed bytes in base64, a transcript is sealed gzip, and unsealed they are JSON, which writes NUL as
its escape ``\\u0000``; the ledger keeps no text a model wrote.
"""

from __future__ import annotations

import json
import zipfile
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from autogen_agentchat.agents import AssistantAgent
from autogen_agentchat.conditions import MaxMessageTermination, TextMentionTermination
from autogen_agentchat.teams import RoundRobinGroupChat
from autogen_ext.models.replay import ReplayChatCompletionClient
from sqlalchemy import select

from config_registry import Manifest, Registry
from teamstore.app import App
from teamstore.audit.schema import usage
from teamstore.audit.stop_reasons import OTHER
from teamstore.context import BoundedChatCompletionContext
from teamstore.db.engine import create_engine
from teamstore.erasure import RequestStatus
from teamstore.runtime.platform import Platform
from teamstore.settings import Settings
from teamstore.state.base import SessionKey
from teamstore.state.factory import store_for
from tests.conftest import prepare
from tests.runtime.nul_team import REPLY, RESULT, TEAM, register

USER, SESSION = "alice", "s1"
STOP = "STOP\x00"
"""A team's end word holding NUL."""


@pytest.fixture
async def settings(backend: tuple[str, str], tmp_path: Path) -> AsyncIterator[Settings]:
    """Settings of a whole deployment on the backend: the state database, the transcripts in a local folder, users'
    keys in a key file, the registry holding the team."""
    url, lease = backend
    await prepare(url, lease)
    home = tmp_path / "home"
    yield Settings(home=home, database_url=url, registry_path=home / "registry", session_lease=lease,
                   registry_refresh_seconds=0, lease_timeout_seconds=2)


def _said(messages: list[Any]) -> list[str]:
    """The text of a model context's messages and of each function call and result in them."""
    found = []
    for message in messages:
        content = message.content if hasattr(message, "content") else message["content"]
        for part in content if isinstance(content, list) else [content]:
            if isinstance(part, str):
                found.append(part)
            else:
                fields = part if isinstance(part, dict) else vars(part)  # a FunctionCall (dataclass) or a result
                found.append(fields.get("content", fields.get("arguments")))
    return found


def _strings(value: Any) -> Iterator[str]:
    """Every string in a JSON value."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict | list):
        for item in value.values() if isinstance(value, dict) else value:
            yield from _strings(item)


async def test_nul_from_a_model_and_a_tool_is_kept_exactly_by_every_store_and_erased_with_the_user(
    settings: Settings, tmp_path: Path,
) -> None:
    register(Registry(settings.registry_path, create=True))
    run_ids = []
    for n in range(2):  # each a new platform, as a new process builds one: the second resumes the first's state
        async with App(settings).platform() as platform, platform.session(USER, SESSION, team=TEAM) as s:
            assert s.resume is not None and s.resume.outcome == ("new" if n == 0 else "resumed")
            if n:
                context = s.team._participants[0]._model_context
                assert _said(await context.get_messages()) == ["first", '{"ticket": "T\\u00001"}', RESULT, REPLY]
            result = await s.run(["first", "second"][n])
            assert s.last_run_id is not None
            run_ids.append(s.last_run_id)
            await platform.drain_memory()
        assert [m.to_text() for m in result.messages][-1] == REPLY
        assert result.messages[-2].content[0].content == RESULT

    app = App(settings)
    try:
        async with app.engine.connect() as conn:  # the ledger counts each run's calls, and keeps no text
            rows = (await conn.execute(select(usage.c.run_id, usage.c.calls))).all()
        assert sorted((r.run_id, r.calls) for r in rows if r.run_id in run_ids) == sorted(
            [(run_id, calls) for run_id in run_ids for calls in (2, 1)])  # the turn's two calls; the writer's
        memory = await app.memory_store.load(USER, TEAM)
        assert memory is not None and memory.failure is None and memory.facts["ticket_id"].value == "T-1"

        exported = await app.exporter().run(USER, tmp_path / "alice.zip", requested_by="ticket 881")
        assert exported.path is not None
        with zipfile.ZipFile(exported.path) as archive:
            state = json.loads(archive.read("resume_state.json"))["resume_state"][0]["state"]
            transcripts = [archive.read(name).decode() for name in archive.namelist()
                           if name.startswith("transcripts/") and name.endswith(".jsonl")]
        kept = state["participants"]["assistant"]["agent_state"]["llm_context"]["messages"]
        assert _said(kept) == [said for text in ("first", "second")
                               for said in (text, '{"ticket": "T\\u00001"}', RESULT, REPLY)]
        assert len(transcripts) == 2
        for body in transcripts:
            assert "\x00" not in body  # each line is JSON: NUL is written as its escape, and read back as NUL
            strings = set(_strings([json.loads(line) for line in body.splitlines()]))
            assert {REPLY, RESULT} <= strings

        receipt = await app.erasure().run(USER, reason="art. 17")
        assert receipt.ok and receipt.status is RequestStatus.COMPLETED, receipt.model_dump_json(indent=1)
        assert receipt.stores["resume_state"].counts.rows == 1 and receipt.stores["transcripts"].counts.objects == 2
        assert await app.state_store.get(SessionKey(USER, SESSION)) is None
    finally:
        await app.aclose()


async def test_a_run_stopped_after_a_turn_holding_nul_continues_from_its_checkpoint_in_a_new_platform(
    settings: Settings,
) -> None:
    register(Registry(settings.registry_path, create=True), turns=2)
    async with App(settings).platform() as platform, platform.session(USER, SESSION, team=TEAM) as s:
        with pytest.raises(RuntimeError, match="No more mock responses"):
            await s.run("first")  # the second turn's call finds no reply
        assert s.interrupted is not None and s.interrupted.last_turn == 1

    async with App(settings).platform() as platform, platform.session(USER, SESSION, team=TEAM) as s:
        assert s.resume is not None and s.resume.outcome == "interrupted"
        result = await s.continue_run()  # the model, built anew, answers the second turn as it did the first
    said = [m.content[0].content if m.type == "ToolCallExecutionEvent" else m.to_text()
            for m in result.messages if m.type in ("TextMessage", "ToolCallExecutionEvent")]
    assert said == ["first", RESULT, REPLY, RESULT, REPLY]  # the first turn as its checkpoint kept it


async def test_a_stop_reason_holding_nul_is_recorded_in_the_ledger_as_other_and_kept_by_the_transcript(
    settings: Settings, tmp_path: Path,
) -> None:
    # The end word holds NUL, so the stop reason does ("Text 'STOP\x00' mentioned"): Postgres refused the run's
    # whole ledger row, its calls then billed nowhere.
    agent = AssistantAgent("assistant", model_client=ReplayChatCompletionClient([f"done, {STOP}"]),
                           model_context=BoundedChatCompletionContext(max_messages=20))
    team = RoundRobinGroupChat([agent], termination_condition=TextMentionTermination(STOP) | MaxMessageTermination(3))
    Registry(settings.registry_path, create=True).add(
        TEAM, team.dump_component(), Manifest(name=TEAM, persist=["assistant"], context_bound=20), "v1",
        label="production")
    async with App(settings).platform() as platform, platform.session(USER, SESSION, team=TEAM) as s:
        result = await s.run("first")
        run_id = s.last_run_id
    assert result.stop_reason == f"Text '{STOP}' mentioned"

    app = App(settings)
    try:
        async with app.engine.connect() as conn:
            rows = (await conn.execute(select(usage.c.calls, usage.c.stop_reason, usage.c.ended_by_limit)
                                       .where(usage.c.run_id == run_id))).all()
        assert [tuple(row) for row in rows] == [(1, OTHER, False)]
        exported = await app.exporter().run(USER, tmp_path / "alice.zip")
        assert exported.path is not None
        with zipfile.ZipFile(exported.path) as archive:
            (name,) = [n for n in archive.namelist() if n.startswith("transcripts/") and n.endswith(".jsonl")]
            header = json.loads(archive.read(name).decode().splitlines()[0])
        assert header["stop_reason"] == result.stop_reason  # the transcript keeps it as said
    finally:
        await app.aclose()


async def test_an_unsealed_state_keeps_nul_as_its_json_escape(settings: Settings) -> None:
    register(Registry(settings.registry_path, create=True), checkpoints="off", memory=False)
    assert settings.database_url is not None
    engine = create_engine(settings.database_url)
    store = store_for(engine, lease=settings.session_lease)  # no users' keys: the state is written as its JSON
    registry = Registry(settings.registry_path)
    try:
        for n in range(2):
            async with Platform(engine, registry, settings=settings, store=store) as platform, \
                    platform.session(USER, SESSION, team=TEAM) as s:
                await s.run(["first", "second"][n])
        row = await store.get(SessionKey(USER, SESSION))
        assert row is not None and isinstance(row.state, str)
        assert "\x00" not in row.state and "at\\u0000 night" in row.state
        kept = json.loads(row.state)["data"]["participants"]["assistant"]["agent_state"]["llm_context"]["messages"]
        assert _said(kept)[2:4] == [RESULT, REPLY]
    finally:
        await store.aclose()
        await engine.dispose()
