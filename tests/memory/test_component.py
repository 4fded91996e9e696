"""TeamstoreMemory is a real AutoGen component: it dumps its declaration (never a user's memory), loads back,
is attached where the manifest says, and adds the memory to a model context once, never a second copy."""

from __future__ import annotations

from datetime import UTC, date, datetime

from autogen_agentchat.agents import AssistantAgent
from autogen_core import ComponentLoader
from autogen_core.memory import Memory, MemoryContent, MemoryMimeType
from autogen_core.model_context import UnboundedChatCompletionContext
from autogen_core.models import SystemMessage, UserMessage

from config_registry import MemoryDeclaration
from teamstore.context import BoundedChatCompletionContext
from teamstore.memory.component import HEADER, PROVIDER, TeamstoreMemory, attach_memory
from teamstore.memory.facts import DamagedFact, Fact, UserMemory, cut_to_budget
from tests.memory.team import helpdesk

NOW = datetime(2026, 11, 2, tzinfo=UTC)


def stored(summary: str = "line fault ticket 55102, router replaced", **values: tuple[str, object]) -> UserMemory:
    facts = {name: Fact(name, kind, value, "run-1", NOW, NOW) for name, (kind, value) in values.items()}
    return UserMemory("alice", "helpdesk", summary, 3, "helpdesk", "v1", "run-1", NOW, NOW, facts=facts)


def memory(**facts: str) -> TeamstoreMemory:
    return TeamstoreMemory("helpdesk", 20, facts or {"ticket_id": "str", "router_model": "str"})


def test_it_dumps_its_declaration_and_loads_back_as_the_same_component() -> None:
    original = memory()
    original.recall(stored(ticket_id=("str", "55102")))
    dumped = original.dump_component()
    assert dumped.provider == PROVIDER and dumped.component_type == "memory"
    assert dumped.config == {"scope": "helpdesk", "summary_tokens": 20,
                             "facts": {"ticket_id": "str", "router_model": "str"}}
    assert "55102" not in dumped.model_dump_json()  # a dumped team never carries a user's memory
    loaded = Memory.load_component(dumped)
    assert isinstance(loaded, TeamstoreMemory) and loaded.dump_component() == dumped
    assert ComponentLoader.load_component(dumped.model_dump(), TeamstoreMemory).scope == "helpdesk"


async def test_it_adds_the_memory_to_a_context_once_and_reports_what_it_added() -> None:
    given = memory()
    given.recall(stored(ticket_id=("str", "55102"), router_model=("str", "ZX-81")))
    context = BoundedChatCompletionContext(max_messages=20, keep_first=1)
    await context.add_message(UserMessage(content="hello", source="user"))
    first = await given.update_context(context)
    assert [c.content for c in first.memories.results] == [
        "line fault ticket 55102, router replaced", 'ticket_id: "55102"', 'router_model: "ZX-81"']
    second = await given.update_context(context)  # the next model call of the same turn, or a later run
    assert second.memories.results == []
    (message,) = [m for m in await context.get_messages() if isinstance(m, SystemMessage)]
    assert message.content.splitlines() == [
        HEADER, "Summary: line fault ticket 55102, router replaced", "Facts:",
        '- ticket_id: "55102" (last confirmed 2026-11-02)', '- router_model: "ZX-81" (last confirmed 2026-11-02)']


async def test_a_held_memory_message_is_rewritten_in_place_only_once_it_gives_what_is_no_longer_kept() -> None:
    given = memory()
    given.recall(stored(ticket_id=("str", "55102"), router_model=("str", "ZX-81")))
    context = BoundedChatCompletionContext(max_messages=20, keep_first=1)
    await context.add_message(UserMessage(content="hello", source="user"))
    await given.update_context(context)
    await context.add_message(UserMessage(content="and then", source="user"))
    before = await context.get_messages()
    # the memory moved on (a new summary, a fact confirmed) but still keeps all it gives: left as it is
    assert not await memory().withdraw_forgotten(
        context, stored("router replaced twice", ticket_id=("str", "55102"), router_model=("str", "ZX-81")))
    assert await context.get_messages() == before
    assert await memory().withdraw_forgotten(context, stored(router_model=("str", "ZX-81")))  # ticket_id forgotten
    after = await context.get_messages()
    assert [type(m).__name__ for m in after] == ["UserMessage", "SystemMessage", "UserMessage"]
    assert "ticket_id" not in str(after[1].content) and '- router_model: "ZX-81"' in str(after[1].content)
    assert await memory().withdraw_forgotten(context, None)  # everything forgotten: the message goes
    assert [type(m).__name__ for m in await context.get_messages()] == ["UserMessage", "UserMessage"]


async def test_a_held_memory_message_giving_a_value_no_longer_kept_is_rewritten_though_its_fact_is_kept() -> None:
    given = memory(home_address="str")
    given.recall(stored(home_address=("str", "12 Secret Lane")))
    context = UnboundedChatCompletionContext()
    await given.update_context(context)
    await context.add_message(UserMessage(content="hi", source="user"))
    # home_address forgotten, then learnt again with another value; confirmed since (a later day): the held
    # message stays only while each value it gives is still kept, whenever it was confirmed
    later = stored(home_address=("str", "12 Secret Lane"))
    confirmed = datetime(2026, 12, 1, tzinfo=UTC)
    later.facts["home_address"] = Fact("home_address", "str", "12 Secret Lane", "run-1", NOW, confirmed)
    assert not await memory(home_address="str").withdraw_forgotten(context, later)
    assert await memory(home_address="str").withdraw_forgotten(context, stored(home_address=("str", "99 New Road")))
    held = [str(m.content) for m in await context.get_messages()]
    assert "12 Secret Lane" not in "\n".join(held) and '- home_address: "99 New Road"' in held[0]
    assert len(held) == 2  # in its place, one copy

def test_it_gives_each_fact_as_its_json_reads_true_false_numbers_and_quoted_dates_and_text() -> None:
    given = memory(replaced="bool", escalated="bool", visits="int", speed="float", visited_on="date",
                   ticket_id="str")
    given.recall(stored(replaced=("bool", True), escalated=("bool", False), visits=("int", 2), speed=("float", 0.5),
                        visited_on=("date", date(2026, 9, 24)), ticket_id=("str", "55102")))
    assert given.message_text().splitlines()[3:] == [
        "- replaced: true (last confirmed 2026-11-02)", "- escalated: false (last confirmed 2026-11-02)",
        "- visits: 2 (last confirmed 2026-11-02)", "- speed: 0.5 (last confirmed 2026-11-02)",
        '- visited_on: "2026-09-24" (last confirmed 2026-11-02)', '- ticket_id: "55102" (last confirmed 2026-11-02)']
    # the value the writer is sent, and --json shows, is the same JSON value
    assert [(c.metadata or {})["value"] for c in given.contents[1:]] == [True, False, 2, 0.5, "2026-09-24", "55102"]


def test_a_text_fact_reading_like_a_boolean_number_or_null_is_given_quoted_never_as_that_value() -> None:
    given = memory(replaced="bool", said_replaced="str", visits="int", said_visits="str", said_null="str",
                   note="str")
    given.recall(stored(replaced=("bool", True), said_replaced=("str", "true"), visits=("int", 42),
                        said_visits=("str", "42"), said_null=("str", "null"), note=("str", 'the "ZX-81" \\ box')))
    assert given.message_text().splitlines()[3:] == [
        "- replaced: true (last confirmed 2026-11-02)", '- said_replaced: "true" (last confirmed 2026-11-02)',
        "- visits: 42 (last confirmed 2026-11-02)", '- said_visits: "42" (last confirmed 2026-11-02)',
        '- said_null: "null" (last confirmed 2026-11-02)',
        '- note: "the \\"ZX-81\\" \\\\ box" (last confirmed 2026-11-02)']  # escaped as JSON: it reads back whole


async def test_it_gives_nothing_when_nothing_is_kept_and_adds_nothing() -> None:
    context = UnboundedChatCompletionContext()
    result = await memory().update_context(context)
    assert result.memories.results == [] and await context.get_messages() == []


def test_it_leaves_out_what_is_damaged_or_no_longer_declared_as_stored_and_cuts_a_summary_over_budget() -> None:
    kept = stored("x" * 200, ticket_id=("str", "55102"), visits=("int", 2), router_model=("int", 81))
    kept.damaged.append(DamagedFact("speed", "fact 'speed' holds a value that is not JSON"))
    given = memory(ticket_id="str", router_model="str")
    assert sorted(given.recall(kept)) == ["router_model", "speed", "visits"]
    summary = given.contents[0]
    assert [c.content for c in given.contents[1:]] == ['ticket_id: "55102"']
    assert summary.content == cut_to_budget("x" * 200, 20) and (summary.metadata or {})["cut"] is True


async def test_add_query_and_clear_work_on_this_sessions_contents_only() -> None:
    given = memory()
    await given.add(MemoryContent(content="prefers email", mime_type=MemoryMimeType.TEXT))
    assert [c.content for c in (await given.query("anything")).results] == ["prefers email"]
    await given.clear()
    assert (await given.query()).results == []
    await given.close()


def test_the_participants_the_manifest_names_take_it_and_the_team_dumps_and_loads_with_it() -> None:
    declaration = MemoryDeclaration(participants=["researcher"], writer="triage", facts={"ticket_id": "str"},
                                    scope="support")
    team_json = helpdesk().dump_component().model_dump(mode="json")
    attached = attach_memory(team_json, declaration, "helpdesk")
    configs = {p["config"]["name"]: p["config"] for p in attached["config"]["participants"]}
    assert "memory" not in configs["triage"] or not configs["triage"]["memory"]
    (component,) = configs["researcher"]["memory"]
    assert component["provider"] == PROVIDER and component["config"]["scope"] == "support"
    assert "memory" not in team_json["config"]["participants"][1]["config"] or not \
        team_json["config"]["participants"][1]["config"]["memory"]  # the input is left as it was
    team = ComponentLoader.load_component(attached)
    researcher = team._participants[1]
    assert isinstance(researcher, AssistantAgent)
    assert [type(m) for m in researcher._memory or []] == [TeamstoreMemory]
    assert team.dump_component().model_dump(mode="json")["config"]["participants"][1]["config"]["memory"] == [component]


def test_a_team_that_keeps_no_memory_is_left_as_it_is() -> None:
    team_json = helpdesk().dump_component().model_dump(mode="json")
    off = MemoryDeclaration(enabled=False, participants=["triage"], writer="triage")
    assert attach_memory(team_json, None, "helpdesk") is team_json
    assert attach_memory(team_json, off, "helpdesk") is team_json
