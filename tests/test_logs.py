"""The AWS SDK's loggers are held at INFO wherever teamstore makes a boto3 client, unless the application set
their level itself (tests/canary/test_key_logs.py follows a user's data key through every log at DEBUG); and
teamstore's own log lines quote no user's words."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from datetime import UTC, datetime

import pytest
from autogen_agentchat.messages import TextMessage

from teamstore.audit.transcripts.s3_client import make_client as s3_client
from teamstore.events import RunContext, notify_observers
from teamstore.keys.kms import make_client as kms_client
from teamstore.logs import AWS_SDK_LOGGERS


@pytest.fixture
def unset_sdk_loggers() -> Iterator[None]:
    """The SDK's loggers as a fresh process has them (no level of their own), and as they were afterwards."""
    before = {name: logging.getLogger(name).level for name in AWS_SDK_LOGGERS}
    for name in AWS_SDK_LOGGERS:
        logging.getLogger(name).setLevel(logging.NOTSET)
    yield
    for name, level in before.items():
        logging.getLogger(name).setLevel(level)


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
