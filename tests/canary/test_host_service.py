"""teamstore embedded in a host service that installed its own global OpenTelemetry providers: the host's
spans and metrics (a real OTLP receiver and in-memory) are sinks like any other, and may hold no raw id,
no user's words and no tool output."""

from __future__ import annotations

import pytest
from opentelemetry import trace

from teamstore.app import open_platform
from tests.canary.canaries import CanaryBook, Kind
from tests.canary.deployment import Deployment
from tests.canary.flows import TRIAGE, User, register_teams
from tests.canary.host_service import host_telemetry
from tests.canary.model_server import ModelServer
from tests.canary.policy import judge, report, scan
from tests.canary.receiver import CanaryReceiver
from tests.conftest import upgrade_database

pytestmark = pytest.mark.otlp


@pytest.mark.parametrize("deployment", [
    pytest.param("sqlite+local", id="sqlite+local"),
    pytest.param("postgres+s3", marks=[pytest.mark.postgres, pytest.mark.s3], id="postgres+s3"),
], indirect=True)
async def test_a_host_with_its_own_global_tracer_provider_exports_no_ids_words_or_tool_output(
    deployment: Deployment, book: CanaryBook, model_server: ModelServer, host_receiver: CanaryReceiver,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    alice = User.plant(book, "alice")
    register_teams(deployment.registry, model_server.base_url)
    status = book.plant(Kind.TOOL_OUTPUT, "the order tool's answer for alice", owner="alice", shape="order {} in Tromsø")
    deployment.apply(monkeypatch, CANARY_ORDER_STATUS=status)
    if deployment.database_url:
        await upgrade_database(deployment.database_url)
    with deployment.recording_logs(), host_telemetry(deployment, host_receiver) as host_spans:
        requests = trace.get_tracer("host.http")
        async with open_platform() as platform:
            for session, text, team in [(alice.sessions[0], alice.tasks[0], TRIAGE),
                                        (alice.sessions[0], alice.tasks[1], TRIAGE),
                                        (alice.sessions[1], "Where is my order?", "order_desk")]:
                # The host's own request span, as its web framework's instrumentation makes one.
                with requests.start_as_current_span("POST /support/chat", attributes={"http.route": "/support/chat"}):
                    async with platform.session(alice.user_id, session, team=team) as s:
                        await s.run(text)
        assert host_spans.get_finished_spans(), "the host's provider exported spans: the sink is live"
        leaks = judge(scan(deployment.sinks(), book))
    assert not leaks, report(leaks)
