"""A host that logs everything: its root logger at DEBUG, the libraries under teamstore's runs at DEBUG too (the
database drivers, SQLAlchemy, the HTTP clients), and OpenTelemetry's logging handler sending every record to its
own collector. Neither its log records, over OTLP or as text, nor its spans may hold an id or a user's words.

A run that fails hands the application its exception whole: its message may quote the user's words (a
provider's refusal quotes the request), and a host span around the run records it there. The documented
remedy is the host's: its span exporter wrapped in teamstore's scrubber, which keeps that the run failed and
the exception's type.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterator
from contextlib import contextmanager

import openai
import pytest
from opentelemetry import trace
from opentelemetry.trace import StatusCode

from teamstore.app import open_platform
from tests.canary.canaries import CanaryBook, Kind
from tests.canary.conftest import MakeDeployment
from tests.canary.deployment import Deployment
from tests.canary.flows import TRIAGE, User, gateway_env, register_teams
from tests.canary.host_service import host_telemetry
from tests.canary.model_server import ModelServer
from tests.canary.policy import judge, report, scan
from tests.canary.receiver import CanaryReceiver
from tests.canary.sinks import HOST_LOGS
from tests.conftest import upgrade_database

pytestmark = pytest.mark.otlp

EVERYTHING_AT_DEBUG = ("aiosqlite", "psycopg", "sqlalchemy", "httpx", "httpcore", "openai")
"""Loggers a host sets to DEBUG itself, beside its root logger: the drivers and clients under a run."""


@contextmanager
def _at_debug(names: tuple[str, ...]) -> Iterator[None]:
    before = {name: logging.getLogger(name).level for name in names}
    for name in names:
        logging.getLogger(name).setLevel(logging.DEBUG)
    try:
        yield
    finally:
        for name, level in before.items():
            logging.getLogger(name).setLevel(level)


@pytest.mark.parametrize("deployment", [
    pytest.param("sqlite+local", id="sqlite+local"),
    pytest.param("postgres+s3", marks=[pytest.mark.postgres, pytest.mark.s3], id="postgres+s3"),
], indirect=True)
async def test_a_host_logging_every_library_at_debug_through_its_own_logger_provider_logs_no_ids_or_words(
    deployment: Deployment, book: CanaryBook, model_server: ModelServer, host_receiver: CanaryReceiver,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    alice = User.plant(book, "alice")
    register_teams(deployment.registry, model_server.base_url)
    deployment.apply(monkeypatch, **gateway_env(book))
    if deployment.database_url:
        await upgrade_database(deployment.database_url)
    with deployment.recording_logs(), host_telemetry(deployment, host_receiver), _at_debug(EVERYTHING_AT_DEBUG):
        async with open_platform() as platform:
            for session, text, team in [(alice.sessions[0], alice.tasks[0], TRIAGE),
                                        (alice.sessions[0], alice.tasks[1], TRIAGE),
                                        (alice.sessions[1], alice.tasks[2], "gateway_desk")]:
                async with platform.session(alice.user_id, session, team=team) as s:
                    await s.run(text)
        leaks = judge(scan(deployment.sinks(), book))
        logged = [text for where, text in deployment.log_records.read()]
        sent = [body for sink in deployment.extra_sinks if sink.name == HOST_LOGS for _, body in sink.read()]
    assert not leaks, report(leaks)
    driver = "aiosqlite" if deployment.database_url is None else "sqlalchemy.engine.Engine.teamstore"
    assert any(text.startswith(f"DEBUG {driver}: ".encode()) for text in logged), "the drivers did log at DEBUG"
    assert sent and any(driver.encode() in body for body in sent), "the host's collector got the records"


async def test_a_failed_runs_exception_reaches_a_hosts_scrubbed_span_by_its_type_and_the_application_whole(
    make_deployment: MakeDeployment, book: CanaryBook, model_server: ModelServer, host_receiver: CanaryReceiver,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    deployment = make_deployment("sqlite+local")
    alice = User.plant(book, "alice")
    register_teams(deployment.registry, model_server.base_url)
    deployment.apply(monkeypatch, **gateway_env(book))
    model_server.rejecting = True  # "provider rejected request: <the user's words>"
    with deployment.recording_logs(), host_telemetry(deployment, host_receiver, scrubbed=True) as host_spans:
        requests = trace.get_tracer("host.http")
        async with open_platform() as platform:
            with pytest.raises(openai.BadRequestError) as raised, requests.start_as_current_span("POST /chat"):
                async with platform.session(alice.user_id, alice.sessions[0], team="gateway_desk") as s:
                    await s.run(alice.tasks[0])
        leaks = judge(scan(deployment.sinks(), book))
    assert not leaks, report(leaks)
    assert alice.tasks[0] in str(raised.value), "the application has the provider's refusal as it came"
    (span,) = [s for s in host_spans.get_finished_spans() if s.name == "POST /chat"]
    assert span.status.status_code is StatusCode.ERROR
    (event,) = span.events
    assert event.attributes is not None and event.attributes["exception.type"] == "openai.BadRequestError"
    assert not {"exception.message", "exception.stacktrace"} & set(event.attributes)


async def test_autogens_failure_records_reach_a_hosts_logger_provider_by_type_without_a_warning_of_its_own(
    make_deployment: MakeDeployment, book: CanaryBook, model_server: ModelServer, host_receiver: CanaryReceiver,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    deployment = make_deployment("sqlite+local")
    words = book.plant(Kind.MESSAGE, "bob's words in a handler's failure", owner="bob", shape="my router {} drops")
    register_teams(deployment.registry, model_server.base_url)
    deployment.apply(monkeypatch)
    with deployment.recording_logs(), host_telemetry(deployment, host_receiver):
        async with open_platform():
            for failure in (RuntimeError(f"the tool said: {words}"), asyncio.CancelledError(words)):
                try:
                    raise failure
                except BaseException:
                    logging.getLogger("autogen_core").exception("Error processing publish message for desk")
        leaks = judge(scan(deployment.sinks(), book))
        logged = [text for _, text in deployment.log_records.read()]
        sent = b"".join(body for sink in deployment.extra_sinks if sink.name == HOST_LOGS for _, body in sink.read())
    assert not leaks, report(leaks)
    assert b"RuntimeError; its message and traceback are left out" in sent, "the failure reached the collector"
    assert b"CancelledError" not in sent, "a cancellation is no error"
    assert not [text for text in logged if text.startswith(b"WARNING opentelemetry.attributes")], logged


@pytest.mark.parametrize("sdk", ["openai", "anthropic"])
async def test_a_model_sdks_debug_record_of_a_request_reaches_a_host_without_the_messages_sent(
    make_deployment: MakeDeployment, book: CanaryBook, model_server: ModelServer, host_receiver: CanaryReceiver,
    monkeypatch: pytest.MonkeyPatch, sdk: str,
) -> None:
    """openai 1.x and 2.x (autogen-ext's ``openai`` extra allows them; this environment has openai 3, which logs
    no body) and the anthropic SDK log each request at DEBUG as ``Request options: %s`` with the options dumped:
    the record is logged here exactly so."""
    deployment = make_deployment("sqlite+local")
    words = book.plant(Kind.MESSAGE, f"bob's words in {sdk}'s request", owner="bob", shape="my router {} drops")
    register_teams(deployment.registry, model_server.base_url)
    deployment.apply(monkeypatch)
    options = {"method": "post", "url": "/chat/completions", "headers": {"Idempotency-Key": "stainless-1"},
               "json_data": {"messages": [{"role": "user", "content": words}], "model": "gpt-4o-mini"}}
    with deployment.recording_logs(), host_telemetry(deployment, host_receiver):
        async with open_platform():
            logging.getLogger(f"{sdk}._base_client").debug("Request options: %s", options)
        leaks = judge(scan(deployment.sinks(), book))
        logged = [text for where, text in deployment.log_records.read() if where.startswith(f"logger {sdk}.")]
    assert not leaks, report(leaks)
    assert logged == [f"DEBUG {sdk}._base_client: Request options: post /chat/completions (the rest is left out: "
                      "it holds the messages sent)".encode()]
