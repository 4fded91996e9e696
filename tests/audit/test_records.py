"""Transcript records: JSON-safe degradation, encoding, and keys that carry no raw ids."""

from __future__ import annotations

import gzip
import random
import string
import threading
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from autogen_agentchat.messages import MultiModalMessage, TextMessage, ToolCallRequestEvent
from autogen_core import FunctionCall, Image
from PIL import Image as PILImage
from sqlalchemy.ext.asyncio import AsyncEngine

from teamstore.audit import observer as observer_module
from teamstore.audit.observer import TranscriptObserver
from teamstore.audit.pseudonyms import Pseudonyms
from teamstore.audit.transcripts.base import check_key, run_key, safe_segment
from teamstore.audit.transcripts.local import LocalTranscriptStore
from teamstore.audit.transcripts.record import PLACEHOLDER, RunKeys, decode, encode, item_record, to_json_safe
from teamstore.errors import AuditError, InvalidIdentifier
from teamstore.events import RunOutcome
from tests.audit.teams import context, open_session

KEYS = RunKeys("0123456789abcdef0123456789abcdef", "fedcba9876543210fedcba9876543210")
NOW = datetime(2026, 1, 2, tzinfo=UTC)


def test_bytes_and_objects_become_marked_placeholders_and_the_rest_is_kept() -> None:
    safe = to_json_safe({"text": "kept", "blob": b"\x00\x01\x02", "obj": object(), "n": [1, 2.5, None]})
    assert safe["text"] == "kept"
    assert safe["n"] == [1, 2.5, None]
    assert safe["blob"] == {PLACEHOLDER: "bytes", "reason": "not JSON", "bytes": 3}
    assert safe["obj"][PLACEHOLDER] == "object"


def test_an_image_in_a_multimodal_message_degrades_to_a_placeholder_and_the_text_survives() -> None:
    image = Image(PILImage.new("RGB", (4, 4), "red"))
    line = item_record(0, MultiModalMessage(source="user", content=["look at this", image]), NOW)
    content = line["message"]["content"]
    assert content[0] == "look at this"
    assert content[1][PLACEHOLDER] == "Image"
    assert line["source"] == "user"
    assert line["type"] == "MultiModalMessage"


def test_tool_calls_and_usage_are_recorded() -> None:
    event = ToolCallRequestEvent(
        source="researcher", content=[FunctionCall(id="c1", name="lookup", arguments='{"q": 1}')]
    )
    line = item_record(3, event, NOW)
    assert line["seq"] == 3
    assert line["message"]["content"][0]["name"] == "lookup"
    assert "models_usage" in line["message"]


def test_encode_decode_round_trip_is_gzip_json_lines() -> None:
    header = {"kind": "run", "run_id": "r1"}
    items = [item_record(0, TextMessage(source="user", content="héllo ✓"), NOW)]
    body = encode(header, items)
    assert gzip.decompress(body).decode().count("\n") == 2
    assert decode(body) == (header, [{**items[0]}])


@pytest.mark.parametrize("separator", ["\u2028", "\u2029", "\x85"])
def test_a_message_holding_a_character_text_may_break_lines_at_reads_back_whole(separator: str) -> None:
    # Pasted from a PDF or a web page: JSON leaves these unescaped inside a string, and the line must not end there.
    items = [item_record(0, TextMessage(source="user", content=f"copied{separator}from a page"), NOW)]
    _, (line,) = decode(encode({"kind": "run", "run_id": "r1"}, items))
    assert line["message"]["content"] == f"copied{separator}from a page"


def test_a_lone_surrogate_is_replaced_and_the_rest_of_the_message_kept() -> None:
    # What a JSON request body holding "\ud800" decodes to: UTF-8 cannot hold it, and it must not cost the transcript.
    items = [item_record(0, TextMessage(source="user", content="hello \ud800 SURROGATE-CANARY é"), NOW)]
    _, (line,) = decode(encode({"kind": "run", "run_id": "r1"}, items))
    assert line["message"]["content"] == "hello \ufffd SURROGATE-CANARY é"
    assert to_json_safe({"key\udc00": "ok"}) == {"key\ufffd": "ok"}


def test_a_corrupt_object_raises_a_typed_error() -> None:
    with pytest.raises(AuditError):
        decode(b"not gzip")
    with pytest.raises(AuditError):
        decode(gzip.compress(b'{"kind": "item"}\n'))


@pytest.mark.parametrize("run_id", ["../../etc/passwd", "a/b", "ünï", "..", "x" * 300, "run\n", "lone\ud800"])
def test_run_ids_that_are_not_plain_segments_are_hashed_never_used_as_paths(run_id: str) -> None:
    key = run_key(KEYS, run_id)
    assert run_id not in key
    assert key.startswith(f"subjects/{KEYS.subject_key}/sessions/{KEYS.session_key}/runs/h-")
    assert safe_segment(run_id) == safe_segment(run_id)


def test_unsafe_keys_are_refused_without_repeating_them() -> None:
    for key in ("../alice.jsonl.gz", "/alice.jsonl.gz", "alice//b.jsonl.gz", "alice/./b"):
        with pytest.raises(InvalidIdentifier) as refused:
            check_key(key)
        assert "alice" not in refused.value.message
    with pytest.raises(InvalidIdentifier) as refused:  # a raw user id where a pseudonymous key belongs
        run_key(RunKeys("alice@example.com", "y"), "r")
    assert "alice" not in refused.value.message and "is not a pseudonymous key" in refused.value.message


@pytest.mark.usefixtures("nothing_left_running")
async def test_a_huge_transcript_is_encoded_off_the_event_loop_so_the_workers_other_sessions_go_on(
    sqlite_engine: AsyncEngine, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Encoding (JSON, gzip) and sealing are a second or more of CPU for tens of MB: on the event loop, every other
    # session of the worker (their streams, lease renewals) stood still for that long. Judged by the thread the
    # encoding runs in, not by the time the loop stood still (which a loaded machine stretches either way).
    words = ["".join(random.choices(string.ascii_lowercase, k=random.randint(2, 9))) for _ in range(5000)]
    text = " ".join(random.choices(words, k=15000))
    encoded_in: list[int] = []
    sealed = observer_module._sealed

    def watched(*args: Any) -> bytes:
        encoded_in.append(threading.get_ident())
        return sealed(*args)

    monkeypatch.setattr(observer_module, "_sealed", watched)
    observer = TranscriptObserver(LocalTranscriptStore(tmp_path / "t"), sqlite_engine, Pseudonyms(sqlite_engine),
                                  upload_deadline_s=60)
    ctx = context()
    await open_session([observer], ctx)
    await observer.run_started(ctx)
    for _ in range(30):  # about 2.7 MB of messages
        await observer.on_item(ctx, TextMessage(source="user", content=text))
    await observer.run_finished(ctx, RunOutcome(datetime.now(UTC)))
    assert encoded_in and threading.get_ident() not in encoded_in
    (key,) = await observer.store.list_keys("")
    assert len(await observer.store.get(key)) > 0
    await observer.drain()  # the outbox flush the run started holds a connection of the engine disposed next
