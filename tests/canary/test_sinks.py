"""The suite's own check: a canary put straight into each sink is found there, in each form, and the policy
tells what a sink may hold from what it may not. A scan that cannot find anything would pass everything."""

from __future__ import annotations

import gzip
import json
import logging
import subprocess
from pathlib import Path

import pytest
from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor

from config_registry import Registry
from tests.canary.canaries import Canary, CanaryBook, Kind
from tests.canary.deployment import Deployment
from tests.canary.policy import Hit, judge, layers, scan
from tests.canary.sinks import DATABASE, EXPORTS, FILES, GIT, METRICS, S3, SERVER_LOG, SPANS

pytestmark = pytest.mark.otlp


def _plant_in_database(deployment: Deployment, text: str, packed: str) -> None:
    """A table of its own (the scan must find tables it was never told of), text and a gzip'd blob."""
    blob = gzip.compress(packed.encode())
    if deployment.database_url:
        import psycopg

        with psycopg.connect(deployment.database_url, autocommit=True) as conn:
            conn.execute("CREATE TABLE added_later (note text, body bytea)")
            conn.execute("INSERT INTO added_later VALUES (%s, %s)", (text, blob))
            conn.execute("CREATE VIEW added_view AS SELECT note FROM added_later")
    else:
        import sqlite3

        deployment.home.mkdir(parents=True, exist_ok=True)
        with sqlite3.connect(deployment.home / "teamstore.db") as conn:
            conn.execute("CREATE TABLE added_later (note text, body blob)")
            conn.execute("INSERT INTO added_later VALUES (?, ?)", (text, blob))
        conn.close()


def _plant_in_server_log(deployment: Deployment, text: str) -> None:
    """A failing statement whose text carries the canary: the server logs the statement with the error."""
    import psycopg

    assert deployment.database_url is not None
    with psycopg.connect(deployment.database_url, autocommit=True) as conn, pytest.raises(psycopg.Error):
        conn.execute(f"SELECT 1 / 0 WHERE '{text}' <> ''")


def _plant_in_s3(deployment: Deployment, body: str, key: str) -> None:
    client = deployment.s3_client()
    bucket = deployment.buckets[0]
    client.put_object(Bucket=bucket, Key="audit/kept.jsonl.gz", Body=gzip.compress(body.encode()))
    client.put_object(Bucket=bucket, Key=f"audit/{key}", Body=b"x")
    client.delete_object(Bucket=bucket, Key=f"audit/{key}")  # a delete marker and an old version, by key


def _plant_in_git(repo: Path, text: str, dangling: str) -> None:
    Registry(repo, create=True)  # a registry, as the CLI made it (another git repository is refused as one)
    (repo / "team.json").write_text(json.dumps({"note": text}))
    subprocess.run(["git", "-C", str(repo), "add", "-A"], check=True)
    subprocess.run(["git", "-C", str(repo), "commit", "-qm", "one"], check=True)
    (repo / "team.json").write_text("{}")
    subprocess.run(["git", "-C", str(repo), "commit", "-qam", "two"], check=True)
    subprocess.run(["git", "-C", str(repo), "hash-object", "-w", "--stdin"], input=dangling.encode(), check=True)


def _register_by_hand(repo: Path, name: str) -> None:
    """A team directory committed by hand: the registry lists its name (and the git sink holds it too)."""
    (repo / "teams" / name).mkdir(parents=True)
    (repo / "teams" / name / "manifest.json").write_text("{}")
    subprocess.run(["git", "-C", str(repo), "add", "-A"], check=True)
    subprocess.run(["git", "-C", str(repo), "commit", "-qm", "by hand"], check=True)


def _export_span(deployment: Deployment, text: str) -> None:
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(OTLPSpanExporter(endpoint=f"{deployment.receiver.endpoint}/v1/traces")))
    with provider.get_tracer("probe").start_as_current_span("probe") as span:
        span.set_attribute("probe", text)
    provider.shutdown()


def _export_metric(deployment: Deployment, text: str) -> None:
    exporter = OTLPMetricExporter(endpoint=f"{deployment.receiver.endpoint}/v1/metrics")
    provider = MeterProvider(metric_readers=[PeriodicExportingMetricReader(exporter, export_interval_millis=60_000)])
    provider.get_meter("probe").create_counter("probe").add(1, {"probe": text})
    provider.shutdown()  # a last collection, exported


def _write_parquet(deployment: Deployment, text: str) -> None:
    """A Parquet file whose raw bytes hide the text (gzip'd pages, no min/max statistics in the footer), so
    only a sink that decodes Parquet can find it."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = deployment.home / "warehouse" / "day=2026-11-30" / "part-00000.parquet"
    path.parent.mkdir(parents=True)
    pq.write_table(pa.table({"note": [text] * 50}), path, compression="gzip", write_statistics=False)
    assert text.encode() not in path.read_bytes()


@pytest.mark.parametrize("deployment", [
    pytest.param("sqlite+local", id="sqlite+local"),
    pytest.param("postgres+s3", marks=[pytest.mark.postgres, pytest.mark.s3], id="postgres+s3"),
], indirect=True)
def test_a_canary_put_straight_into_each_sink_is_found_there(
    deployment: Deployment, book: CanaryBook
) -> None:
    def plant(where: str) -> str:
        return book.plant(Kind.MESSAGE, where, owner="probe", shape="probe {} Zoë")

    expected = {plant("a table added later"): DATABASE, plant("a gzip'd blob in that table"): DATABASE,
                plant("a temporary file"): FILES, plant("a gzip'd file"): FILES, plant("a git commit since "
                "overwritten"): GIT, plant("a dangling git object"): GIT, plant("a span"): SPANS,
                book.plant(Kind.MESSAGE, "a CLI's stderr", owner="probe", shape="probe_{}"): "cli stderr",
                plant("a log record"): "python logging",
                plant("a metric's attribute"): METRICS, plant("a Parquet file"): EXPORTS}
    tokens = list(expected)
    _plant_in_database(deployment, tokens[0], tokens[1])
    (deployment.home / "transcripts").mkdir(parents=True, exist_ok=True)
    (deployment.home / "transcripts" / ".tmp-probe").write_text(json.dumps(tokens[2]))  # JSON-escaped: Zo\u00eb
    (deployment.home / "stray.gz").write_bytes(gzip.compress(tokens[3].encode()))
    _plant_in_git(deployment.registry, tokens[4], tokens[5])
    _export_span(deployment, tokens[6])
    # The error never repeats the name it looked for, but its fix names the registry's own teams.
    _register_by_hand(deployment.registry, tokens[7])
    deployment.cli("registry", "show", "no-such-team", ok=(1,), level="INFO")
    with deployment.recording_logs():
        logging.getLogger("canary.probe").debug("seen %s", tokens[8])
    _export_metric(deployment, tokens[9])
    _write_parquet(deployment, tokens[10])
    if deployment.database_url:
        expected[plant("a failing statement")] = SERVER_LOG
        _plant_in_server_log(deployment, list(expected)[-1])
    if deployment.s3_endpoint:
        expected[plant("an S3 object's body")] = S3
        expected[plant("a deleted S3 key")] = S3
        _plant_in_s3(deployment, *list(expected)[-2:])

    found = {(h.canary.token, h.sink) for h in scan(deployment.sinks(), book)}
    assert {(token, sink) for token, sink in expected.items()} <= found
    forms = {h.form for h in scan(deployment.sinks(), book) if h.canary.token == tokens[2]}
    assert forms == {"json-escaped"}


def test_every_form_of_a_canary_is_found_and_layers_are_unpacked() -> None:
    book = CanaryBook()
    token = book.plant(Kind.USER_ID, "probe", owner="probe", shape="{}.Zoë@example.com")
    (canary,) = book.canaries
    assert book.find(token.encode()) == [(canary, "utf-8")]
    assert book.find(json.dumps(token).encode()) == [(canary, "json-escaped")]
    assert book.find(f"...{token[:12]}...".encode()) == []  # a prefix shorter than the core is not a hit
    assert book.find(canary.core.encode()) == [(canary, "core")]  # a cut-off token is still found
    packed = gzip.compress(gzip.compress(token.encode()))
    assert [how for how, data in layers(packed) if token.encode() in data] == [" (gunzipped (gunzipped))"]


def _hit(sink: str, location: str, kind: Kind, owner: str | None = "alice") -> Hit:
    return Hit(sink, location, Canary(kind, "probe", "t", "c", owner), "utf-8")


def test_the_policy_allows_only_the_declared_sinks_and_nothing_of_an_erased_user_or_any_secret() -> None:
    allowed = [_hit(DATABASE, "table ts_subjects, column user_id, row 0", Kind.USER_ID),
               _hit(DATABASE, "table public.ts_sessions, column session_id, row 3", Kind.SESSION_ID),
               _hit(DATABASE, "table ts_data_keys, column user_id, row 0", Kind.USER_ID),
               _hit(FILES, "teamstore.db-wal", Kind.SESSION_ID),
               _hit(DATABASE, "table ts_erasure_requests, column reason, row 0", Kind.ERASE_REASON, None)]
    assert judge(allowed) == []
    assert judge(allowed, erased={"alice"}) and len(judge(allowed, erased={"alice"})) == 4
    refused = [_hit(SPANS, "otlp /v1/traces", Kind.MESSAGE), _hit(SERVER_LOG, "server log", Kind.USER_ID),
               _hit(S3, "s3://b keys", Kind.SESSION_ID), _hit(DATABASE, "table ts_usage, column stop_reason", Kind.MESSAGE),
               _hit(DATABASE, "table ts_subjects, column user_id", Kind.SECRET, None)]
    assert [leak.sink for leak in judge(refused)] == [SPANS, SERVER_LOG, S3, DATABASE, DATABASE]
    words_at_rest = [_hit(DATABASE, "table public.ts_sessions, column state, row 3", Kind.MESSAGE),
                     _hit(DATABASE, "table ts_transcript_outbox, column body, row 0 (gunzipped)", Kind.MESSAGE),
                     _hit(FILES, "transcripts/subjects/k/sessions/s/runs/r.jsonl.gz", Kind.MESSAGE),
                     _hit(S3, "s3://b/audit/subjects/k/runs/r.jsonl.gz version 1 (gunzipped)", Kind.TOOL_OUTPUT)]
    assert len(judge(words_at_rest)) == 4, "a user's words in the clear, anywhere, is a leak: stores hold them sealed"
