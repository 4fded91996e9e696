"""On a Postgres database whose time zone is not UTC (a server built by initdb takes the OS's), an erasure's
receipt and an export tell every time in UTC, as on SQLite, and a request is due 30 x 24 hours after it came."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path

import pytest
from rich.console import Console

from teamstore.audit.subjects import get_or_create_subject
from teamstore.audit.transcripts.local import LocalTranscriptStore
from teamstore.cli._erase_receipt import render
from teamstore.db.clock import utc
from teamstore.db.engine import create_engine
from teamstore.db.migrate import upgrade
from teamstore.erasure import requests
from teamstore.export.base import to_json
from tests.erasure.conftest import coordinator
from tests.erasure.test_export import exporter, loaded, unpack
from tests.test_time_zone import set_database_zone

_TIME = re.compile(r'"(\d{4}-\d\d-\d\dT[\d:.]+([+-]\d\d:\d\d|Z)?)"')


@pytest.mark.postgres
async def test_a_receipt_and_an_export_tell_utc_times_on_a_database_set_to_another_zone(
    postgres_url: str, tmp_path: Path
) -> None:
    set_database_zone(postgres_url, "Asia/Tokyo")
    engine = create_engine(postgres_url)
    await upgrade(engine)
    store = LocalTranscriptStore(tmp_path / "t")
    before = datetime.now(UTC).replace(second=0, microsecond=0)
    await get_or_create_subject(engine, "gil")
    await requests.open_request(engine, "req-1", "gil", "art. 15 and 17", 30)
    done = await exporter(engine, store).run("gil", tmp_path / "gil.zip", operator="dpo")
    files = unpack(done.path)
    for name in ("subject.json", "erasure_requests.json", "manifest.json"):
        times = [m[0] for m in _TIME.findall(files[name].decode())]
        assert times, name
        assert all(t.endswith(("+00:00", "Z")) for t in times), (name, times)
    asked = loaded(files, "erasure_requests.json")["requests"][0]
    due = datetime.fromisoformat(asked["due_at"]) - datetime.fromisoformat(asked["received_at"])
    assert due == timedelta(hours=30 * 24)

    receipt = await coordinator(engine, store).run("gil", "req-1")
    after = datetime.now(UTC)
    assert receipt.received_at.utcoffset() == timedelta(0) and receipt.due_at.utcoffset() == timedelta(0)
    assert receipt.due_at - receipt.received_at == timedelta(hours=30 * 24)
    out = Console(width=200)
    with out.capture() as captured:
        render(receipt, out)
    said = captured.get()
    received = re.search(r"received (\d{4}-\d\d-\d\d \d\d:\d\d)Z", said)
    assert received is not None, said
    assert before <= datetime.strptime(received[1], "%Y-%m-%d %H:%M").replace(tzinfo=UTC) <= after
    started = re.search(r"started (\d{4}-\d\d-\d\d \d\d:\d\d)Z", said)
    assert started is not None, said
    assert before <= datetime.strptime(started[1], "%Y-%m-%d %H:%M").replace(tzinfo=UTC) <= after
    await engine.dispose()


def test_a_time_handed_back_in_another_zone_is_told_in_utc() -> None:
    tokyo = datetime(2026, 12, 6, 19, 30, tzinfo=timezone(timedelta(hours=9)))
    assert utc(tokyo) == tokyo and utc(tokyo).utcoffset() == timedelta(0)  # type: ignore[union-attr]
    assert utc(datetime(2026, 12, 6, 10, 30)) == datetime(2026, 12, 6, 10, 30, tzinfo=UTC)  # noqa: DTZ001
    assert json.loads(to_json({"at": tokyo})) == {"at": "2026-12-06T10:30:00+00:00"}
