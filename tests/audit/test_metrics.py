"""OTLP metrics and the protocols: real receivers over http/protobuf and gRPC, GenAI client metrics with
their required attributes, the runtime's own metrics, database gauges, and an unknown protocol refused."""

from __future__ import annotations

import asyncio
import logging
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from sqlalchemy import insert, update

from config_registry import Registry
from teamstore import examples
from teamstore.app import open_platform
from teamstore.audit.metrics import call_attributes
from teamstore.audit.otlp import EXPORT_TIMEOUT_S, check_endpoint, export_timeout, protocol
from teamstore.audit.schema import outbox
from teamstore.erasure.desk import list_requests
from teamstore.erasure.schema import erasure_requests
from teamstore.errors import ConfigurationError, SessionBusy, StoreUnavailable
from teamstore.events import ModelCall
from teamstore.settings import Settings
from teamstore.state.schema import sessions
from tests.otlp_receiver import GrpcOtlpReceiver, OtlpReceiver, Point
from tests.services import free_port
from tests.services.session import Services

pytestmark = pytest.mark.otlp
USER = "alice.raw-user-id@example.com"
Receiver = OtlpReceiver | GrpcOtlpReceiver


@pytest.fixture
def registry(tmp_path: Path) -> Registry:
    registry = Registry(tmp_path / "registry", create=True)
    registry.add("support_triage", examples.support_triage().dump_component(),
                 examples.example_manifest("support_triage"), "v1", label="production")
    return registry


def _settings(tmp_path: Path, registry: Registry, database_url: str | None = None) -> Settings:
    return Settings(home=tmp_path / "home", registry_path=registry.path, auto_migrate=True, database_url=database_url)


async def _one_run(tmp_path: Path, registry: Registry, task: str = "My router keeps dropping",
                   database_url: str | None = None) -> None:
    platform = open_platform(_settings(tmp_path, registry, database_url))
    async with platform, platform.session(USER, "sess-1", team="support_triage") as s:
        await s.run(task)
    # closing the platform flushes its spans and collects and exports its metrics once more


def _named(points: list[Point], name: str) -> list[Point]:
    return [p for p in points if p["name"] == name]


def _totals(points: list[Point], name: str, attribute: str) -> dict[str | None, int]:
    """A counter's values or a histogram's counts, summed over every provider that sent them, by ``attribute``."""
    totals: dict[str | None, int] = {}
    for point in _named(points, name):
        key = point["attributes"].get(attribute)
        totals[key] = totals.get(key, 0) + point.get("count", point.get("value", 0))
    return totals


def test_grpc_named_by_the_standard_variable_sends_spans_over_grpc(
    tmp_path: Path, registry: Registry, monkeypatch: pytest.MonkeyPatch, services: Services
) -> None:
    with services.otlp(GrpcOtlpReceiver) as receiver:
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.endpoint)
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")
        asyncio.run(_one_run(tmp_path, registry))
        spans = receiver.wait_for(lambda spans: any(s["name"].startswith("invoke_agent") for s in spans))
    assert any(s["name"].startswith("chat ") for s in spans)


async def test_each_model_call_gives_genai_client_metrics_with_the_required_attributes(
    otlp_protocol_env: Receiver, tmp_path: Path, registry: Registry
) -> None:
    await _one_run(tmp_path, registry)
    points = otlp_protocol_env.wait_for_metrics(lambda p: bool(_named(p, "gen_ai.client.token.usage")))
    durations = _named(points, "gen_ai.client.operation.duration")
    tokens = _named(points, "gen_ai.client.token.usage")
    assert durations and durations[0]["kind"] == "histogram" and durations[0]["unit"] == "s"
    assert durations[0]["bounds"][:3] == [0.01, 0.02, 0.04]
    assert {p["attributes"]["gen_ai.token.type"] for p in tokens} == {"input", "output"}
    for point in durations + tokens:
        attributes = point["attributes"]
        assert attributes["gen_ai.operation.name"] == "chat"
        assert attributes["gen_ai.provider.name"] == "offline"
        assert attributes["gen_ai.request.model"] == "offline-small"
        assert attributes["teamstore.team"] == "support_triage"
        assert point["resource"]["service.name"] == "teamstore"
    spans = otlp_protocol_env.wait_for(lambda s: any(x["name"].startswith("chat ") for x in s))
    for span in (s for s in spans if s["name"].startswith("chat ")):
        assert span["attributes"]["gen_ai.provider.name"] == "offline"
        assert span["attributes"]["gen_ai.response.finish_reasons"] == ["stop"]
    calls = sum(p["count"] for p in durations)
    assert calls == len([s for s in spans if s["name"].startswith("chat ")])
    assert sum(p["sum"] for p in tokens if p["attributes"]["gen_ai.token.type"] == "input") == sum(
        s["attributes"]["gen_ai.usage.input_tokens"] for s in spans if s["name"].startswith("chat "))


@pytest.mark.parametrize("variables", [
    {"OTEL_RESOURCE_ATTRIBUTES": "service.name=support-api,deployment.environment.name=prod"},
    {"OTEL_RESOURCE_ATTRIBUTES": "service.name=old-name,deployment.environment.name=prod",
     "OTEL_SERVICE_NAME": "support-api"},
])
async def test_spans_and_metrics_carry_the_resource_the_standard_variables_name(
    otlp_env: OtlpReceiver, tmp_path: Path, registry: Registry, monkeypatch: pytest.MonkeyPatch,
    variables: dict[str, str],
) -> None:
    for name, value in variables.items():
        monkeypatch.setenv(name, value)
    await _one_run(tmp_path, registry)
    points = otlp_env.wait_for_metrics(lambda p: bool(_named(p, "gen_ai.client.token.usage")))
    spans = otlp_env.wait_for(lambda s: any(x["name"].startswith("invoke_agent") for x in s))
    for resource in [p["resource"] for p in points] + [s["resource"] for s in spans]:
        assert resource["service.name"] == "support-api"
        assert resource["deployment.environment.name"] == "prod"


async def test_sessions_report_resume_outcomes_quarantines_lease_waits_and_state_sizes(
    otlp_protocol_env: Receiver, tmp_path: Path, registry: Registry, database_url: str
) -> None:
    await _one_run(tmp_path, registry, database_url=database_url)
    await _one_run(tmp_path, registry, "And again", database_url=database_url)
    async with open_platform(_settings(tmp_path, registry, database_url)) as platform:
        async with platform.engine.begin() as conn:  # the stored state no longer reads: set aside at the next open
            await conn.execute(update(sessions).values(state='{"envelope": 1, "codec": "json", "data": []}'))
        async with platform.session(USER, "sess-1", team="support_triage") as held:
            assert held.resume is not None and held.resume.quarantined
            with pytest.raises(SessionBusy):  # another request for the held session gives up at once
                async with platform.session(USER, "sess-1", team="support_triage", lease_timeout=0):
                    pass
    # each platform is a process of its own here: its provider exported its totals when it closed
    points = otlp_protocol_env.wait_for_metrics(lambda p: bool(_named(p, "teamstore.session.quarantined")))
    (quarantined,) = _named(points, "teamstore.session.quarantined")
    reason = quarantined["attributes"]["teamstore.quarantine.reason"]
    assert quarantined["value"] == 1 and quarantined["kind"] == "sum"
    assert _totals(points, "teamstore.session.resumes", "teamstore.resume.outcome") == {"new": 1, "resumed": 1,
                                                                                        reason: 1}
    assert _totals(points, "teamstore.session.lease.wait", "error.type") == {None: 3, "SessionBusy": 1}
    sizes = _named(points, "teamstore.session.state.size")
    assert sum(p["count"] for p in sizes) == 2 and all(p["sum"] > 0 and p["unit"] == "By" for p in sizes)


async def test_the_outbox_and_erasure_requests_are_gauges_read_from_the_database(
    otlp_protocol_env: Receiver, tmp_path: Path, registry: Registry, database_url: str
) -> None:
    async with open_platform(_settings(tmp_path, registry, database_url)) as platform:
        now = datetime.now(UTC)
        async with platform.engine.begin() as conn:
            await conn.execute(insert(outbox), [
                {"run_id": f"run-{i}", "object_key": f"k{i}", "subject_key": "s", "body": b"x",
                 "created_at": now - timedelta(minutes=10 * i), "attempts": 1} for i in (1, 2)])
            await conn.execute(insert(erasure_requests), [
                {"request_id": "late", "status": "open", "received_at": now - timedelta(days=40),
                 "due_at": now - timedelta(days=10), "updated_at": now},
                {"request_id": "done", "status": "completed", "received_at": now - timedelta(days=40),
                 "due_at": now - timedelta(days=10), "updated_at": now},
                {"request_id": "fresh", "status": "open", "received_at": now, "due_at": now + timedelta(days=30),
                 "updated_at": now},
                # Past their original due date, none of them overdue: answered (nothing held for the id), held
                # under a legal hold, and extended to a date still ahead (`erase list --overdue` agrees).
                {"request_id": "answered", "status": "no_match", "received_at": now - timedelta(days=40),
                 "due_at": now - timedelta(days=10), "updated_at": now},
                {"request_id": "held", "status": "retained_under_hold", "received_at": now - timedelta(days=40),
                 "due_at": now - timedelta(days=10), "updated_at": now},
            ])
            await conn.execute(insert(erasure_requests).values(  # given its own keys: an executemany takes the first row's
                request_id="extended", status="failed", received_at=now - timedelta(days=40),
                due_at=now - timedelta(days=10), extended_due_at=now + timedelta(days=50), updated_at=now))
            await conn.execute(insert(erasure_requests).values(
                request_id="just-done", status="no_match", received_at=now - timedelta(days=1),
                due_at=now + timedelta(days=29), completed_at=now - timedelta(hours=1), updated_at=now))
        listed = [r.request_id for r in await list_requests(platform.engine, overdue=True)]
    points = otlp_protocol_env.wait_for_metrics(lambda p: bool(_named(p, "teamstore.outbox.depth")))
    (depth,) = _named(points, "teamstore.outbox.depth")
    (age,) = _named(points, "teamstore.outbox.oldest_age")
    assert depth["value"] == 2 and depth["kind"] == "gauge"
    assert 20 * 60 <= age["value"] < 25 * 60
    by_status = {p["attributes"]["teamstore.erasure.status"]: p["value"]
                 for p in _named(points, "teamstore.erasure.requests")}
    assert by_status == {"open": 2, "failed": 1, "retained_under_hold": 1}
    assert [p["value"] for p in _named(points, "teamstore.erasure.requests.overdue")] == [1]  # "late" only
    assert [p["value"] for p in _named(points, "teamstore.erasure.requests.completed")] == [1]  # "just-done"
    assert listed == ["late"]  # the one definition of overdue


async def test_a_database_that_does_not_answer_is_one_warning_per_collection_not_one_per_gauge(
    otlp_env: OtlpReceiver, tmp_path: Path, registry: Registry, caplog: pytest.LogCaptureFixture
) -> None:
    # A worker (or `teamstore run`) started against a database nothing answers for closed with a last
    # collection: five warnings, one per gauge, each after a connection attempt of its own, then the real error.
    platform = open_platform(_settings(tmp_path, registry, f"postgresql://x@127.0.0.1:{free_port()}/x"))
    with caplog.at_level(logging.WARNING, logger="teamstore.audit.metrics"), pytest.raises(StoreUnavailable):
        async with platform:
            pass
    said = [r.getMessage() for r in caplog.records if r.name == "teamstore.audit.metrics"]
    assert len(said) == 1 and "OperationalError" in said[0], said
    # A platform on a database that answers still reports every gauge.
    async with open_platform(_settings(tmp_path, registry)):
        pass
    points = otlp_env.wait_for_metrics(lambda p: bool(_named(p, "teamstore.erasure.requests.completed")))
    assert _named(points, "teamstore.outbox.depth")


async def test_no_metric_carries_a_user_id_a_session_id_or_the_users_words(
    otlp_protocol_env: Receiver, tmp_path: Path, registry: Registry
) -> None:
    await _one_run(tmp_path, registry, "CANARY-metrics-words")
    otlp_protocol_env.wait_for_metrics(lambda p: bool(_named(p, "gen_ai.client.token.usage")))
    wire = b"".join(otlp_protocol_env.metric_bodies)
    for secret in (USER.encode(), b"sess-1", b"CANARY-metrics-words"):
        assert secret not in wire


@pytest.mark.parametrize("variable", ["OTEL_EXPORTER_OTLP_PROTOCOL", "OTEL_EXPORTER_OTLP_METRICS_PROTOCOL",
                                      "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"])
@pytest.mark.parametrize("value", ["grcp", "http/json"])
def test_a_protocol_teamstore_cannot_export_over_stops_the_platform_at_start(
    tmp_path: Path, registry: Registry, monkeypatch: pytest.MonkeyPatch, variable: str, value: str
) -> None:
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4318")
    monkeypatch.setenv(variable, value)
    with pytest.raises(ConfigurationError) as raised:
        open_platform(_settings(tmp_path, registry))
    assert variable in raised.value.message and value in raised.value.message
    assert "grpc" in (raised.value.hint or "") and "http/protobuf" in (raised.value.hint or "")


@pytest.mark.parametrize("variables", [
    {"OTEL_BSP_MAX_QUEUE_SIZE": "0"},
    {"OTEL_BSP_MAX_EXPORT_BATCH_SIZE": "4096"},  # over the default queue of 2048
    {"OTEL_METRIC_EXPORT_INTERVAL": "0"},
])
def test_batch_and_interval_settings_the_sdk_refuses_stop_the_platform_at_start_naming_the_variable(
    tmp_path: Path, registry: Registry, monkeypatch: pytest.MonkeyPatch, variables: dict[str, str]
) -> None:
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4318")
    for name, value in variables.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(ConfigurationError) as raised:
        open_platform(_settings(tmp_path, registry))
    ((name, value),) = variables.items()
    assert f"{name}={value!r}" in raised.value.message and name in (raised.value.hint or "")
    if name == "OTEL_METRIC_EXPORT_INTERVAL":  # one variable: "it", not "them"
        assert (raised.value.hint or "").endswith(", or unset it"), raised.value.hint


@pytest.mark.parametrize("chosen", ["http/protobuf", "grpc"])
@pytest.mark.parametrize("variable", ["OTEL_EXPORTER_OTLP_TIMEOUT", "OTEL_EXPORTER_OTLP_TRACES_TIMEOUT",
                                      "OTEL_EXPORTER_OTLP_METRICS_TIMEOUT", "OTEL_METRIC_EXPORT_TIMEOUT",
                                      "OTEL_BSP_MAX_QUEUE_SIZE", "OTEL_BSP_MAX_EXPORT_BATCH_SIZE"])
@pytest.mark.parametrize("value", ["10s", "-5"])
def test_a_timeout_or_size_that_is_no_number_above_0_stops_the_platform_at_start_naming_the_variable(
    tmp_path: Path, registry: Registry, monkeypatch: pytest.MonkeyPatch, chosen: str, variable: str, value: str
) -> None:
    # The SDK would take its own default (10 s, 30 s for a metric export) over teamstore's 2 s, with a warning.
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4318")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", chosen)
    monkeypatch.setenv(variable, value)
    with pytest.raises(ConfigurationError) as raised:
        open_platform(_settings(tmp_path, registry))
    assert f"{variable}={value!r}" in raised.value.message and variable in (raised.value.hint or "")


@pytest.mark.parametrize("variable", ["OTEL_EXPORTER_OTLP_TRACES_TIMEOUT", "OTEL_EXPORTER_OTLP_METRICS_TIMEOUT"])
def test_a_signals_timeout_set_to_nothing_stops_a_platform_exporting_over_grpc_naming_the_variable(
    tmp_path: Path, registry: Registry, monkeypatch: pytest.MonkeyPatch, variable: str
) -> None:
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4317")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")
    monkeypatch.setenv(variable, "")  # the gRPC exporter would fail with a bare ValueError
    with pytest.raises(ConfigurationError) as raised:
        open_platform(_settings(tmp_path, registry))
    assert variable in raised.value.message and variable in (raised.value.hint or "")


def test_an_exporters_timeout_is_its_signals_variable_else_the_general_one_else_2_seconds(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert export_timeout("traces") == EXPORT_TIMEOUT_S == 2.0
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TIMEOUT", "7")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_TIMEOUT", "0.5")
    assert (export_timeout("traces"), export_timeout("metrics")) == (0.5, 7.0)


@pytest.mark.parametrize("variable", ["OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
                                      "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT"])
@pytest.mark.parametrize("value", ["otel-collector:4318", "ftp://u:S3cretPW@collector", "http://u:S3cretPW@[::1",
                                   "http://collector:notaport", "http://", "http://u:S3cretPW@bad host:4318",
                                   "http://collector\t:4318/v1", "http://coll<ector>:4318"])
def test_an_http_endpoint_that_is_no_url_stops_the_platform_at_start(
    tmp_path: Path, registry: Registry, monkeypatch: pytest.MonkeyPatch, variable: str, value: str
) -> None:
    monkeypatch.setenv(variable, value)
    with pytest.raises(ConfigurationError) as raised:
        open_platform(_settings(tmp_path, registry))
    assert variable in raised.value.message and "S3cretPW" not in str(raised.value)
    assert "http://" in (raised.value.hint or "")


def test_a_grpc_endpoint_may_be_host_and_port(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "otel-collector:4317")
    check_endpoint("traces", "grpc")  # gRPC's exporter takes it as it is
    with pytest.raises(ConfigurationError):
        check_endpoint("traces", "http/protobuf")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "otel collector:4317")
    with pytest.raises(ConfigurationError, match="a space or a control character"):
        check_endpoint("traces", "grpc")


@pytest.mark.parametrize("value", ["http://otel_collector:4318", "https://[::1]:4318/v1/traces", "http://10.0.0.7",
                                   "https://u:p%40ss@collector.example.com/otlp?code=x"])
def test_an_http_endpoint_of_any_host_a_url_may_name_is_taken(monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", value)
    check_endpoint("traces", "http/protobuf")


def test_a_signals_own_protocol_variable_overrides_the_general_one(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_METRICS_PROTOCOL", "http/protobuf")
    assert (protocol("traces"), protocol("metrics")) == ("grpc", "http/protobuf")
    monkeypatch.delenv("OTEL_EXPORTER_OTLP_PROTOCOL")
    assert protocol("traces") == "http/protobuf"


@pytest.mark.parametrize(("variable", "off"), [("OTEL_METRICS_EXPORTER", "metrics"), ("OTEL_TRACES_EXPORTER", "traces"),
                                               ("OTEL_SDK_DISABLED", "both")])
async def test_none_as_the_exporter_turns_that_signal_off(
    otlp_env: OtlpReceiver, tmp_path: Path, registry: Registry, monkeypatch: pytest.MonkeyPatch, variable: str,
    off: str,
) -> None:
    monkeypatch.setenv(variable, "true" if variable == "OTEL_SDK_DISABLED" else "none")
    await _one_run(tmp_path, registry)  # closed: whatever was to be exported has been
    if off == "metrics":
        otlp_env.wait_for(bool)
    elif off == "traces":
        otlp_env.wait_for_metrics(bool)
    assert (otlp_env.metrics == []) == (off in ("metrics", "both"))
    assert (otlp_env.spans == []) == (off in ("traces", "both"))


def test_a_model_calls_metric_attributes_are_a_fixed_vocabulary_that_holds_no_id_or_words() -> None:
    call = ModelCall("triage", "gpt-4o", 1, 2, datetime.now(UTC), 0.1, provider="openai",
                     response_model="gpt-4o-2024-08-06", error="APIError")
    assert set(call_attributes(call, "support_triage")) == {
        "gen_ai.operation.name", "gen_ai.provider.name", "gen_ai.request.model", "gen_ai.response.model",
        "error.type", "teamstore.team"}
