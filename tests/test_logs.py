"""The AWS SDK's loggers are held at INFO wherever teamstore makes a boto3 client, unless the application set
their level itself (tests/canary/test_key_logs.py follows a user's data key through every log at DEBUG);
SQLAlchemy at DEBUG logs teamstore's rows without their values; and teamstore's own log lines quote no user's
words."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
from autogen_agentchat.messages import TextMessage
from sqlalchemy import select

from config_registry import Registry
from teamstore import examples
from teamstore.app import open_platform
from teamstore.audit.schema import subjects
from teamstore.audit.transcripts.s3_client import make_client as s3_client
from teamstore.db.engine import create_engine
from teamstore.events import RunContext, notify_observers
from teamstore.keys.kms import make_client as kms_client
from teamstore.keys.schema import data_keys
from teamstore.logs import AWS_SDK_LOGGERS
from teamstore.settings import Settings


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
