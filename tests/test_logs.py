"""The AWS SDK's loggers are held at INFO wherever teamstore makes a boto3 client, unless the application set
their level itself (tests/canary/test_key_logs.py follows a user's data key through every log at DEBUG);
SQLAlchemy at DEBUG logs teamstore's rows without their values, and aiosqlite its statements; no Python warning quotes a tool call's
arguments, nor AutoGen's warning a message part; httpx's and urllib3's request lines hide their query's values;
and teamstore's own log lines quote no user's words."""

from __future__ import annotations

import ast
import asyncio
import logging
import socket
import warnings
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from autogen_agentchat.agents import AssistantAgent
from autogen_agentchat.conditions import MaxMessageTermination
from autogen_agentchat.messages import TextMessage, ToolCallExecutionEvent
from autogen_agentchat.teams import RoundRobinGroupChat
from autogen_core.tools import FunctionTool
from autogen_ext.models.openai import OpenAIChatCompletionClient
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from sqlalchemy import select, text
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import create_async_engine

from config_registry import Manifest, Registry
from teamstore import examples
from teamstore.app import open_platform
from teamstore.audit.otlp import span_exporter
from teamstore.audit.schema import subjects
from teamstore.audit.transcripts.s3_client import make_client as s3_client
from teamstore.db.engine import create_engine
from teamstore.errors import TeamstoreError
from teamstore.events import RunContext, notify_observers
from teamstore.keys.kms import make_client as kms_client
from teamstore.keys.schema import data_keys
from teamstore.logs import (
    AWS_SDK_LOGGERS,
    hide_query_values,
    keep_content_out_of_logs,
    keep_query_values_out_of_logs,
)
from teamstore.runtime.platform import Platform
from teamstore.settings import Settings
from tests.canary.model_server import ModelServer

WORDS = "CANARY-my-landlord-Jane-Doe"


@pytest.fixture
def unset_sdk_loggers() -> Iterator[None]:
    """The SDK's loggers as a fresh process has them (no level of their own), and as they were afterwards."""
    before = {name: logging.getLogger(name).level for name in AWS_SDK_LOGGERS}
    for name in AWS_SDK_LOGGERS:
        logging.getLogger(name).setLevel(logging.NOTSET)
    yield
    for name, level in before.items():
        logging.getLogger(name).setLevel(level)


def test_a_record_made_empty_by_make_log_record_is_made_and_an_autogen_one_rebuilt_is_left_out_of() -> None:
    # logging.makeLogRecord({}) makes a record of no logger (name None); a socket receiver's holds a traceback
    # as text, sent by another process that may not leave content out.
    keep_content_out_of_logs()
    assert logging.makeLogRecord({}).name is None
    record = logging.makeLogRecord({"name": "autogen_core", "msg": "handler failed", "levelno": logging.ERROR,
                                    "exc_text": "Traceback ...\nValueError: about CANARY-Jane-Doe"})
    shown = logging.Formatter("%(message)s").format(record)
    assert shown.startswith("handler failed (its traceback is left out") and "CANARY" not in shown, shown


@pytest.mark.usefixtures("unset_sdk_loggers")
@pytest.mark.parametrize("make_client", [kms_client, s3_client], ids=["kms", "s3"])
def test_a_client_teamstore_makes_holds_the_sdks_loggers_at_info_under_a_root_at_debug(
    make_client: Callable[[], object], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    monkeypatch.setattr(logging.getLogger(), "level", logging.DEBUG)
    make_client()
    assert {name: logging.getLogger(name).getEffectiveLevel() for name in AWS_SDK_LOGGERS} == dict.fromkeys(
        AWS_SDK_LOGGERS, logging.INFO)
    assert not logging.getLogger("botocore.endpoint").isEnabledFor(logging.DEBUG)


@pytest.mark.usefixtures("unset_sdk_loggers")
def test_an_application_that_sets_botocore_to_debug_itself_keeps_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    logging.getLogger("botocore").setLevel(logging.DEBUG)  # the documented way back in
    kms_client()
    assert logging.getLogger("botocore").level == logging.DEBUG
    assert logging.getLogger("boto3").level == logging.INFO


async def test_sqlalchemy_at_debug_logs_the_rows_teamstore_reads_without_their_values(
    database_url: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    registry = Registry(tmp_path / "registry", create=True)
    registry.add("support_triage", examples.support_triage().dump_component(),
                 examples.example_manifest("support_triage"), "v1", label="production")
    settings = Settings(home=tmp_path / "home", registry_path=registry.path, auto_migrate=True,
                        database_url=database_url)
    with caplog.at_level(logging.DEBUG, "sqlalchemy.engine"):
        for _ in range(2):  # the second platform reads the user's subject and wrapped data key back
            platform = open_platform(settings)
            async with platform, platform.session("alice@example.com", "s1", team="support_triage") as s:
                await s.run("My router keeps dropping")
    engine = create_engine(database_url)
    async with engine.connect() as conn:
        subject_key = (await conn.execute(select(subjects.c.subject_key))).scalar_one()
        wrapped = (await conn.execute(select(data_keys.c.wrapped))).scalar_one()
    await engine.dispose()
    rows = {r.getMessage() for r in caplog.records if r.getMessage().startswith("Row")}
    assert rows == {"Row [values hidden: they hold users' ids and keys]"}
    assert subject_key not in caplog.text and repr(bytes(wrapped))[2:-1] not in caplog.text


def _embedded(tmp_path: Path) -> tuple[Registry, Settings]:
    """A registry with the support team, and settings for the embedded default on it."""
    registry = Registry(tmp_path / "registry", create=True)
    registry.add("support_triage", examples.support_triage().dump_component(),
                 examples.example_manifest("support_triage"), "v1", label="production")
    return registry, Settings(home=tmp_path / "home", registry_path=registry.path, auto_migrate=True)


async def test_aiosqlite_at_debug_logs_the_calls_teamstore_makes_without_their_values(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    _, settings = _embedded(tmp_path)
    with caplog.at_level(logging.DEBUG, "aiosqlite"):
        platform = open_platform(settings)
        async with platform, platform.session("alice-CANARY@example.com", "s-CANARY", team="support_triage") as s:
            await s.run("My router keeps dropping")
    calls = [r.getMessage() for r in caplog.records if r.name == "aiosqlite"]
    assert any(c.startswith("executing Connection.execute(...) [arguments hidden") for c in calls), calls
    assert "CANARY" not in caplog.text and "SELECT" not in caplog.text


async def test_a_platform_on_an_engine_the_host_built_logs_and_raises_nothing_of_its_values(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    registry, settings = _embedded(tmp_path)
    engine = create_async_engine(f"sqlite+aiosqlite:///{tmp_path / 'host.db'}")  # the host's own: no options
    with caplog.at_level(logging.DEBUG, "aiosqlite"), caplog.at_level(logging.DEBUG, "sqlalchemy.engine"):
        platform = Platform(engine, registry, settings=settings)
        async with platform, platform.session("alice-CANARY@example.com", "s-CANARY", team="support_triage") as s:
            await s.run("My router keeps dropping")
    assert any(r.name == "aiosqlite" for r in caplog.records) and any(
        r.getMessage().startswith("Row") for r in caplog.records)  # logged, without their values
    assert "CANARY" not in caplog.text
    with pytest.raises(IntegrityError) as failed:  # an error the engine raises quotes no bound value
        async with engine.begin() as conn:
            await conn.execute(text("CREATE TABLE t (a TEXT UNIQUE)"))
            await conn.execute(text("INSERT INTO t VALUES (:a), (:a)"), {"a": "alice-CANARY"})
    assert "CANARY" not in str(failed.value)
    await engine.dispose()


def test_an_otlp_exporter_that_cannot_reach_its_collector_logs_no_value_of_the_urls_query(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    with socket.socket() as free:  # a port no collector listens on
        free.bind(("127.0.0.1", 0))
        port = free.getsockname()[1]
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", f"http://127.0.0.1:{port}/v1/traces?code=COLLECTOR-S3CRET")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_TIMEOUT", "2")
    exporter = span_exporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    with caplog.at_level(logging.DEBUG):
        provider.get_tracer("test").start_span("run").end()
    provider.shutdown()
    failures = [r for r in caplog.records if r.name.startswith("opentelemetry.exporter.otlp")]
    assert failures and any("?code=***" in r.getMessage() for r in failures), [r.getMessage() for r in failures]
    assert "COLLECTOR-S3CRET" not in caplog.text


@pytest.mark.parametrize(("said", "logged"), [
    ("/v1?api-key=abc;def&region=eu", "/v1?api-key=***&region=***"),  # a ";" in a value is the value's
    ("https://gw.example/v1?SECRETTOKEN", "https://gw.example/v1?***"),  # a query of a bare value
    ("https://gw.example/v1?a=1&SECRETTOKEN", "https://gw.example/v1?a=***&***"),
    ("https://user:p@ss@gw.example/v1", "https://user:***@gw.example/v1"),  # an "@" in the password
    ("What? Nothing.", "What? Nothing."),
])
def test_a_url_query_hides_every_value_it_can_carry(said: str, logged: str) -> None:
    assert hide_query_values(said) == logged


async def lookup(query: str) -> str:
    """Look a support ticket up."""
    return "no ticket matches"


def _gateway_team(base_url: str) -> RoundRobinGroupChat:
    client = OpenAIChatCompletionClient(model="gpt-4o-mini", api_key="k", base_url=base_url)
    agent = AssistantAgent("desk", model_client=client, tools=[FunctionTool(lookup, description="Look a ticket up.")])
    return RoundRobinGroupChat([agent], termination_condition=MaxMessageTermination(4))


@pytest.mark.parametrize("host_filter", ["before", "after"], ids=["set-before-the-platform", "set-since"])
async def test_a_gateway_answering_tool_arguments_as_an_object_gives_no_warning_that_quotes_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, host_filter: str
) -> None:
    # The host shows every warning Python would show, having said so before the platform opened or since (its
    # filter, put first, was taken before teamstore's until the next platform opened).
    server = ModelServer()
    server.calling = ("lookup", {"query": WORDS})
    monkeypatch.setenv("GATEWAY_KEY", "k")
    registry = Registry(tmp_path / "registry", create=True)
    registry.add("desk", _gateway_team(server.base_url).dump_component(), Manifest(
        name="desk", allow_source_code_tools=True,
        secrets={"participants.0.config.model_client.config.api_key": "env:GATEWAY_KEY"}), "v1")
    with warnings.catch_warnings(record=True) as shown:
        warnings.simplefilter("always")  # every warning Python would show, on stderr or to logging
        platform = open_platform(Settings(home=tmp_path / "home", registry_path=registry.path, auto_migrate=True))
        try:
            async with platform:
                if host_filter == "after":
                    warnings.simplefilter("always")
                async with platform.session("alice", "s1", team="desk") as s:
                    result = await s.run("Where is my ticket?")
        finally:
            server.stop()
    assert any(isinstance(m, ToolCallExecutionEvent) for m in result.messages)  # AutoGen took the call
    assert not [str(w.message)[:80] for w in shown if WORDS in str(w.message)]


async def test_a_gateway_key_in_the_model_clients_base_url_is_in_no_request_line_httpx_logs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    server = ModelServer()
    base_url = f"{server.base_url}?api-key=GATEWAY-S3CRET"  # as some gateways (and Azure's) take their key
    monkeypatch.setenv("GATEWAY_URL", base_url)
    monkeypatch.setenv("GATEWAY_KEY", "k")
    registry = Registry(tmp_path / "registry", create=True)
    config = "participants.0.config.model_client.config"
    registry.add("desk", _gateway_team(base_url).dump_component(), Manifest(
        name="desk", allow_source_code_tools=True,
        secrets={f"{config}.api_key": "env:GATEWAY_KEY", f"{config}.base_url": "env:GATEWAY_URL"}), "v1")
    platform = open_platform(Settings(home=tmp_path / "home", registry_path=registry.path, auto_migrate=True))
    try:
        with caplog.at_level(logging.DEBUG, "httpx2"), caplog.at_level(logging.DEBUG, "httpx"):
            async with platform, platform.session("alice", "s1", team="desk") as s:
                await s.run("Where is my ticket?")
    finally:
        server.stop()
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("HTTP Request: POST")]
    assert lines and all("?api-key=***" in line for line in lines)
    assert "GATEWAY-S3CRET" not in caplog.text


def test_a_url_logged_by_urllib3_httpx_or_a_model_sdk_keeps_its_query_names_and_hides_their_values(
    caplog: pytest.LogCaptureFixture,
) -> None:
    keep_query_values_out_of_logs()
    with caplog.at_level(logging.DEBUG):  # as urllib3 logs a retry, and each request at DEBUG
        logging.getLogger("urllib3.connectionpool").warning(
            "Retrying (%r) after connection broken by '%r': %s", "Retry(total=1)", "ConnectTimeout()",
            "/v1/traces?code=COLLECTOR-S3CRET&region=eu")
        logging.getLogger("urllib3.connectionpool").debug(
            '%s://%s:%s "%s %s %s" %s %s', "https", "collector", 443, "POST", "/v1/traces?code=COLLECTOR-S3CRET",
            "HTTP/1.1", 200, 2)
        logging.getLogger("openai._base_client").debug(  # as openai 1.x and 2.x log each answer
            'HTTP Response: %s %s "%i %s" %s', "POST", "https://gw.example/v1/chat/completions?api-key=GW-S3CRET", 200,
            "OK", "Headers({'content-type': 'application/json'})")
    retry, request, answer = (r.getMessage() for r in caplog.records)
    assert retry == "Retrying ('Retry(total=1)') after connection broken by ''ConnectTimeout()'': /v1/traces?code=***&region=***"
    assert request == 'https://collector:443 "POST /v1/traces?code=*** HTTP/1.1" 200 2'
    assert answer.startswith('HTTP Response: POST https://gw.example/v1/chat/completions?api-key=*** "200 OK"')


def test_a_failed_requests_exception_logged_by_a_model_sdk_hides_the_urls_query_values(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # openai 1.x/2.x and anthropic log each 4xx/5xx with the httpx error attached, whose message holds the URL.
    import httpx

    keep_query_values_out_of_logs()
    url = "https://gw.example/v1/chat/completions?api-key=GW-S3CRET"
    request = httpx.Request("POST", url)
    try:
        httpx.Response(401, request=request).raise_for_status()
    except httpx.HTTPStatusError:
        with caplog.at_level(logging.DEBUG):
            logging.getLogger("openai._base_client").debug("Encountered httpx.HTTPStatusError", exc_info=True)
    (record,) = caplog.records
    written = logging.Formatter().format(record)
    assert "GW-S3CRET" not in written and "api-key=***" in written and "401 Unauthorized" in written
    assert "Traceback" in written and "HTTPStatusError" in written


async def test_the_openai_clients_warning_of_a_part_it_cannot_count_leaves_the_part_out(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    registry = Registry(tmp_path / "registry", create=True)
    await open_platform(Settings(home=tmp_path / "home", registry_path=registry.path)).aclose()
    with caplog.at_level(logging.WARNING, "autogen_core.trace"):
        part = {"type": "text", "text": WORDS}  # as autogen-ext's OpenAI client words it, counting a message's tokens
        logging.getLogger("autogen_core.trace").warning(f"Could not convert {part} to string, skipping.")
    (record,) = caplog.records
    assert record.getMessage().startswith("Could not convert a message part to string, skipping")
    assert WORDS not in caplog.text


class _Broken:
    async def on_item(self, ctx: RunContext, item: TextMessage) -> None:
        raise ValueError(f"cannot encode {item.content!r}")


async def test_an_observer_failing_with_an_untyped_error_is_logged_by_its_type_never_its_message(
    caplog: pytest.LogCaptureFixture,
) -> None:
    ctx = RunContext("r1", "alice", "s1", "t", "v1", datetime.now(UTC))
    with caplog.at_level(logging.ERROR, "teamstore"):
        await notify_observers([_Broken()], "on_item", ctx, TextMessage(content="my PIN is 4711", source="user"))
    (record,) = caplog.records
    assert "_Broken.on_item failed: ValueError at test_logs.py:" in record.getMessage()
    assert record.exc_info is None and "4711" not in caplog.text


class _Refused:
    async def on_item(self, ctx: RunContext, item: TextMessage) -> None:
        raise TeamstoreError("the store refused it", hint="rerun with --request-id gdpr-canary@example.com")


async def test_an_observer_failing_with_a_typed_error_is_logged_by_its_message_never_its_fix(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A fix may name an id the operator gave (to be typed again), which may hold a user's email."""
    ctx = RunContext("r1", "alice", "s1", "t", "v1", datetime.now(UTC))
    with caplog.at_level(logging.ERROR, "teamstore"):
        await notify_observers([_Refused()], "on_item", ctx, TextMessage(content="hi", source="user"))
    (record,) = caplog.records
    assert record.getMessage().endswith("_Refused.on_item failed: the store refused it")
    assert "canary" not in caplog.text


def test_no_log_line_of_teamstore_formats_a_caught_error_whole_whose_str_holds_its_fix() -> None:
    """``str()`` of a typed error is its message and its fix; a database error's holds its statement and values.
    Each log line takes the message (or :func:`teamstore.db.engine.describe_failure`) instead."""
    levels = {"debug", "info", "warning", "error", "exception", "critical", "log"}
    whole = []
    top = Path(__file__).resolve().parents[1]
    for source in sorted([*(top / "platform" / "teamstore").rglob("*.py"), *(top / "config_registry").rglob("*.py")]):
        for handler in ast.walk(ast.parse(source.read_text(encoding="utf-8"))):
            if not isinstance(handler, ast.ExceptHandler):
                continue
            caught = handler.name or ""  # unnamed: only a traceback (exc_info, .exception) logs it whole
            for call in ast.walk(ast.Module(body=handler.body, type_ignores=[])):
                if (isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute) and call.func.attr in levels
                        and isinstance(call.func.value, ast.Name) and "log" in call.func.value.id.lower()
                        and _logs_whole(call, caught)):
                    whole.append(f"{source}:{call.lineno}")
    assert not whole, whole


# What a log line may take of a caught error: its type's name, or the database error's failure described.
_TAKES_PART = {"type", "describe_failure", "isinstance"}


def _uses_whole(node: ast.AST, name: str) -> bool:
    """Whether ``node`` uses the caught error ``name`` whole: passed as it is, formatted into a string (an f-string,
    ``%``, ``str()``, ``repr()``, ``.format``), rather than by an attribute (``exc.message``) or its type."""
    parents = {child: parent for parent in ast.walk(node) for child in ast.iter_child_nodes(parent)}
    for found in ast.walk(node):
        if not (isinstance(found, ast.Name) and found.id == name):
            continue
        parent = parents.get(found)
        if isinstance(parent, ast.Attribute):
            continue
        if isinstance(parent, ast.Call) and isinstance(parent.func, ast.Name) and parent.func.id in _TAKES_PART:
            continue
        return True
    return False


def _logs_whole(call: ast.Call, caught: str) -> bool:
    """Whether a log call in the handler of ``caught`` logs it whole: in an argument, or by its traceback."""
    assert isinstance(call.func, ast.Attribute)
    traceback = call.func.attr == "exception" or any(
        k.arg == "exc_info" and not (isinstance(k.value, ast.Constant) and not k.value.value) for k in call.keywords)
    return traceback or any(_uses_whole(arg, caught) for arg in [*call.args, *(k.value for k in call.keywords)])


def test_the_scan_for_errors_logged_whole_finds_each_way_of_logging_one() -> None:
    def scanned(line: str) -> bool:
        handler = ast.parse(f"try:\n    pass\nexcept Exception as exc:\n    {line}\n").body[0].handlers[0]  # type: ignore[attr-defined]
        return _logs_whole(handler.body[0].value, "exc")

    for logged_whole in ('log.warning("failed: %s", exc)', 'log.warning(f"failed: {exc}")',
                         'log.warning("failed: %s" % exc)', 'log.warning("failed: %s", str(exc))',
                         'log.warning("failed: {}".format(exc))', 'log.warning("failed", exc_info=True)',
                         'log.warning("failed: %r", repr(exc))', 'log.exception("failed")'):
        assert scanned(logged_whole), logged_whole
    for logged_in_part in ('log.warning("failed: %s", exc.message)', 'log.warning("failed (%s)", type(exc).__name__)',
                           'log.warning(f"failed: {exc.message}")', 'log.warning("failed: %s", describe_failure(exc))'):
        assert not scanned(logged_in_part), logged_in_part


async def test_autogens_records_leave_failures_out_under_a_record_factory_set_since_and_one_that_replaced_it(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    registry = Registry(tmp_path / "registry", create=True)
    settings = Settings(home=tmp_path / "home", registry_path=registry.path)
    await open_platform(settings).aclose()
    before = logging.getLogRecordFactory()

    def applications(*args: Any, **kwargs: Any) -> logging.LogRecord:  # set since, calling the one it replaces
        return before(*args, **kwargs)

    logging.setLogRecordFactory(applications)
    try:
        await open_platform(settings).aclose()  # not wrapped again: the chain still leaves content out
        assert logging.getLogRecordFactory() is applications
        logging.setLogRecordFactory(logging.LogRecord)  # one that replaced it without calling it
        await open_platform(settings).aclose()
        with caplog.at_level(logging.ERROR, "autogen_ext"):
            try:
                raise ValueError(WORDS)
            except ValueError:
                logging.getLogger("autogen_ext.tools.mcp._actor").exception("Exception in MCP actor task")
    finally:
        logging.setLogRecordFactory(before)
    (record,) = [r for r in caplog.records if r.name.startswith("autogen")]  # and teamstore's word of the factory
    assert record.getMessage().startswith("Exception in MCP actor task (ValueError;") and WORDS not in caplog.text


class _Event:
    """An event object as AutoGen logs them: its text is the messages it carries."""

    def __init__(self, said: str) -> None:
        self.said = said

    def __str__(self) -> str:
        return f'{{"type": "LLMCall", "messages": [{{"content": "{self.said}"}}]}}'


def _raised_from_words() -> None:
    try:
        raise RuntimeError(f"the provider refused: {WORDS}")
    except RuntimeError as cause:
        raise ValueError("the tool failed") from cause


def _cancelled_while_handling_words() -> None:
    try:
        raise RuntimeError(f"the provider refused: {WORDS}")
    except RuntimeError:
        raise asyncio.CancelledError()  # noqa: B904 - its context holds the words, as a cancelled handler's does


def _log_while_failing(fail: Callable[[], None], log: Callable[[BaseException], None]) -> None:
    try:
        fail()
    except BaseException as failure:  # a cancellation too, as AutoGen's handlers see one
        log(failure)


def _key_error() -> None:
    raise KeyError(WORDS)


ERROR_LOG = logging.getLogger("autogen_ext.tools.mcp._actor")
QUOTES: dict[str, Callable[[], None]] = {
    # each logs while handling a failure whose words reach the record some other way than its own text
    "its cause, quoted": lambda: _log_while_failing(_raised_from_words,
                                                    lambda e: ERROR_LOG.error(f"Tool failed: {e.__cause__}")),
    "its cause, quoted, with its traceback": lambda: _log_while_failing(
        _raised_from_words, lambda e: ERROR_LOG.exception(f"Tool failed: {e.__cause__}")),
    "an argument of its, quoted": lambda: _log_while_failing(_key_error,
                                                             lambda e: ERROR_LOG.error(f"missing {e.args[0]}")),
    "a cancellation's traceback": lambda: _log_while_failing(
        _cancelled_while_handling_words, lambda e: ERROR_LOG.exception("Exception in MCP actor task")),
    "an event object": lambda: _log_while_failing(_raised_from_words, lambda e: ERROR_LOG.exception(_Event(WORDS))),
}


@pytest.mark.parametrize("quote", list(QUOTES))
async def test_a_failure_reaching_autogens_record_some_other_way_is_left_out_too(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, quote: str
) -> None:
    await open_platform(Settings(home=tmp_path / "home", registry_path=Registry(tmp_path / "r", create=True).path)
                        ).aclose()
    with caplog.at_level(logging.ERROR, "autogen_ext"):
        QUOTES[quote]()
    (record,) = caplog.records
    assert WORDS not in caplog.text and record.exc_info is None, caplog.text
    assert "may quote users' words" in record.getMessage()


async def test_a_hosts_own_factory_that_drops_tracebacks_is_not_taken_for_teamstores(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # A host's factory set before the platform opens, keeping log lines to one line by dropping tracebacks: the
    # platform's check took it for its own (a record came back without its traceback) and installed nothing.
    before = logging.getLogRecordFactory()

    def one_line(*args: Any, **kwargs: Any) -> logging.LogRecord:
        record = before(*args, **kwargs)
        record.exc_info = None
        return record

    logging.setLogRecordFactory(one_line)
    try:
        await open_platform(Settings(home=tmp_path / "home", registry_path=Registry(tmp_path / "r", create=True).path)
                            ).aclose()
        with caplog.at_level(logging.ERROR, "autogen_ext"):
            _log_while_failing(_raised_from_words, lambda e: ERROR_LOG.error(f"Failed to add content: {e.__cause__}"))
    finally:
        logging.setLogRecordFactory(before)
    assert WORDS not in caplog.text, caplog.text


async def test_a_factory_that_replaced_teamstores_while_the_platform_runs_is_replaced_at_the_next_session(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # A host's factory set after the platform opened, not calling the one it replaced: AutoGen's records quoted
    # users' words until the next platform opened. The next session's opening sets teamstore's again, and says so.
    registry = Registry(tmp_path / "registry", create=True)
    registry.add("support_triage", examples.support_triage().dump_component(),
                 examples.example_manifest("support_triage"), "v1", label="production")
    before = logging.getLogRecordFactory()
    def plain(*args: Any, **kwargs: Any) -> logging.LogRecord:  # the host's own, calling none before it
        return logging.LogRecord(*args, **kwargs)

    async with open_platform(Settings(home=tmp_path / "home", registry_path=registry.path, auto_migrate=True)) as p:
        logging.setLogRecordFactory(plain)
        try:
            with caplog.at_level(logging.WARNING):
                async with p.session("alice", "s1", team="support_triage"):
                    pass
                async with p.session("alice", "s2", team="support_triage"):
                    pass
                _log_while_failing(_raised_from_words,
                                   lambda e: ERROR_LOG.error(f"Failed to add content: {e.__cause__}"))
        finally:
            logging.setLogRecordFactory(before)
    assert WORDS not in caplog.text, caplog.text
    said = [r.getMessage() for r in caplog.records if r.name == "teamstore.logs"]
    assert len(said) == 1 and "did not call the one it replaced" in said[0]
