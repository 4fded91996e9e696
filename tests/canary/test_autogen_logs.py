"""AutoGen's loggers in a host's process that logs at DEBUG: every record of every one of AutoGen's loggers that
quotes a user's words (a failure's message, a tool's query) reaches the host's log by the failure's type only,
or not at all.

A team's run whose provider refuses it quoting the user's words is run for real. The records of AutoGen's modules this
environment cannot load are logged here exactly as those modules log them (autogen-ext 0.7.5), each while handling
a failure that quotes a canary: MCP's actor, the ChromaDB and mem0 memories, Azure AI Search (each needs an extra
teamstore does not install), and OpenAIAssistantAgent's clean-up (the application calls it, never a run). Their
loggers are made after the platform opened, as a team that loads such a component makes them.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import pytest
from autogen_agentchat.conditions import MaxMessageTermination
from autogen_agentchat.teams import RoundRobinGroupChat

from config_registry import Manifest, Registry
from teamstore.app import open_platform
from tests.canary.canaries import CanaryBook, Kind
from tests.canary.conftest import MakeDeployment
from tests.canary.flows import User, gateway_env, register_teams
from tests.canary.model_server import ModelServer
from tests.canary.policy import judge, report, scan
from tests.canary.teams import gateway_desk, gateway_secrets

pytestmark = pytest.mark.otlp

Replay = Callable[[logging.Logger, Exception], None]
REPLAYED: dict[str, tuple[str, int, Replay]] = {
    # logger, the level the record is logged at, and the call the module makes (e: the failure it handles)
    "mcp actor's failure": ("autogen_ext.tools.mcp._actor", logging.ERROR,
                            lambda log, e: log.exception("Exception in MCP actor task")),
    "chromadb memory's failure": ("autogen_ext.memory.chromadb._chromadb", logging.ERROR,
                                  lambda log, e: log.error(f"Failed to add content to ChromaDB: {e}")),
    "mem0 memory's failure": ("autogen_ext.memory.mem0._mem0", logging.ERROR,
                              lambda log, e: log.error(f"Error querying mem0 memory: {e!s}")),
    "azure ai search's document failure": ("autogen_ext.tools.azure._ai_search", logging.WARNING,
                                           lambda log, e: log.warning(f"Error processing search document: {e}")),
    "azure ai search's query": ("autogen_ext.tools.azure._ai_search", logging.DEBUG,
                                lambda log, e: log.debug(f"Using cached results for query: {e.args[0]}")),
    "openai assistant's clean-up failure": ("autogen_agentchat.events", logging.ERROR,
                                            lambda log, e: log.error(f"Failed to delete file file-1: {e!s}")),
}


@pytest.mark.parametrize("path", list(REPLAYED))
async def test_a_record_autogen_logs_quoting_the_users_words_reaches_a_host_at_debug_by_its_type_only(
    make_deployment: MakeDeployment, book: CanaryBook, model_server: ModelServer, monkeypatch: pytest.MonkeyPatch,
    path: str,
) -> None:
    deployment = make_deployment("sqlite+local")
    register_teams(deployment.registry, model_server.base_url)
    words = book.plant(Kind.MESSAGE, f"bob's words in the {path}", owner="bob",
                       shape="My router {} drops every evening, says Zoë")
    name, level, replay = REPLAYED[path]
    deployment.apply(monkeypatch)
    with deployment.recording_logs():
        async with open_platform():
            try:
                raise RuntimeError(f"the server refused: {words}")
            except RuntimeError as failure:
                replay(logging.getLogger(name), failure)
    leaks = judge(scan(deployment.sinks(), book))
    assert not leaks, report(leaks)
    logged = [text for where, text in deployment.log_records.read() if where.startswith(f"logger {name} ")]
    if level >= logging.WARNING:  # still logged, as the failure it is
        assert any(b"RuntimeError; its message" in text for text in logged), logged
    else:  # AutoGen's loggers are held at WARNING
        assert not logged, logged


async def test_a_teams_run_whose_provider_quotes_the_users_words_leaves_only_the_failures_type_in_a_hosts_logs(
    make_deployment: MakeDeployment, book: CanaryBook, model_server: ModelServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    deployment = make_deployment("sqlite+local")
    bob = User.plant(book, "bob")
    register_teams(deployment.registry, model_server.base_url)
    team = RoundRobinGroupChat([gateway_desk(base_url=model_server.base_url)],
                               termination_condition=MaxMessageTermination(2))
    manifest = Manifest(name="gateway_team", persist=["desk"], context_bound=20, secrets={
        f"participants.0.config.{path}": f"env:{variable}" for path, variable in gateway_secrets().items()})
    Registry(deployment.registry).add("gateway_team", team.dump_component(), manifest, "gateway team",
                                      label="production")
    deployment.cli("db", "upgrade", level="INFO")
    deployment.apply(monkeypatch, **gateway_env(book))
    model_server.rejecting = True  # "provider rejected request: <the user's words>"
    with deployment.recording_logs(), pytest.raises(Exception, match="BadRequestError"):
        async with open_platform() as platform, platform.session(bob.user_id, bob.sessions[0],
                                                                 team="gateway_team") as s:
            await s.run(bob.tasks[0])
    leaks = judge(scan(deployment.sinks(), book))
    assert not leaks, report(leaks)
    logged = [text for where, text in deployment.log_records.read() if where.startswith("logger autogen_core ")]
    assert any(b"BadRequestError; its message and traceback are left out" in text for text in logged), logged
