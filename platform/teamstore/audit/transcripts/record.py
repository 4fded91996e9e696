"""Transcript records: one gzip-compressed JSON-lines object per run, built in memory.

    from teamstore.audit.transcripts.record import item_record, run_record, encode, decode

    items = [item_record(seq, message) for seq, message in enumerate(stream)]
    body = encode(run_record(ctx, outcome, keys, len(items)), items)   # gzip bytes, one PUT
    lines = [item_line(seq, message, now) for seq, message in enumerate(stream)]   # or line by line as streamed
    body = encode_lines(run_record(ctx, outcome, keys, len(lines)), lines)      # the same bytes
    header, items = decode(body)

What a store holds is that body sealed under the user's data key for :func:`sealed_context` (the transcript
observer seals it before it leaves the process); objects written before sealing are plain gzip and still read.

The first line is the run record (``"kind": "run"``), then one line per streamed message or event
(``"kind": "item"``) in stream order. A value that is not JSON (an image, bytes, an arbitrary object) is
replaced by a marked placeholder ``{"$unserializable": <type>, ...}``; the rest of the message is kept.
"""

from __future__ import annotations

import dataclasses
import gzip
import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import date, datetime
from typing import Any

import orjson
from pydantic import BaseModel

from teamstore.errors import AuditError
from teamstore.events import RunContext, RunOutcome, StreamItem

FORMAT = 1
PLACEHOLDER = "$unserializable"
_MAX_DEPTH = 32


@dataclass(frozen=True)
class RunKeys:
    """The pseudonymous keys a run is filed under: never the raw user or session id."""

    subject_key: str
    session_key: str


def _placeholder(value: object, why: str) -> dict[str, Any]:
    mark: dict[str, Any] = {PLACEHOLDER: type(value).__name__, "reason": why}
    if isinstance(value, bytes | bytearray | memoryview):
        mark["bytes"] = len(value)
    return mark


_SURROGATE = re.compile("[\ud800-\udfff]")


def _text(value: str) -> str:
    """``value`` with any lone surrogate (what a JSON body's "\\ud800" decodes to, and UTF-8 cannot
    hold) replaced by U+FFFD, so the rest of the message is kept."""
    return value if value.isascii() else _SURROGATE.sub("\ufffd", value)


def to_json_safe(value: Any, depth: int = 0) -> Any:
    """Return ``value`` with every non-JSON leaf replaced by a marked placeholder.

    Args:
        value: Anything a message may hold (pydantic models, dicts, lists, images, bytes).
        depth: Recursion depth, bounded so a cyclic structure degrades instead of looping.

    Returns:
        A structure ``json.dumps`` accepts.
    """
    if isinstance(value, str):
        return _text(value)
    if value is None or isinstance(value, bool | int):
        return value
    if isinstance(value, float):
        return value if value == value and abs(value) != float("inf") else str(value)
    if depth > _MAX_DEPTH:
        return _placeholder(value, "nested too deep")
    if isinstance(value, datetime | date):
        return value.isoformat()
    if isinstance(value, BaseModel):
        # Field by field rather than model_dump: a field's own serializer (an Image's base64) must not
        # smuggle content past the placeholder rule.
        return {name: to_json_safe(getattr(value, name, None), depth + 1) for name in type(value).model_fields}
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: to_json_safe(getattr(value, f.name), depth + 1) for f in dataclasses.fields(value)}
    if isinstance(value, Mapping):
        return {_text(str(k)): to_json_safe(v, depth + 1) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [to_json_safe(v, depth + 1) for v in value]
    return _placeholder(value, "not JSON")


def item_record(seq: int, item: StreamItem | Any, received_at: datetime) -> dict[str, Any]:
    """One streamed message or event as a transcript line.

    Args:
        seq: Position in the run's stream, from 0.
        item: The message or event as streamed by ``run_stream``.
        received_at: When the observer saw it.

    Returns:
        ``kind``, ``seq``, ``type``, ``source``, ``received_at`` and the whole message under ``message``
        (content, tool calls or results, ``models_usage``, ``created_at``, metadata).
    """
    safe = to_json_safe(item)
    message = safe if isinstance(safe, dict) else {"value": safe}
    return {
        "kind": "item",
        "seq": seq,
        "type": type(item).__name__,
        "source": message.get("source"),
        "received_at": received_at.isoformat(),
        "message": message,
    }


def run_record(ctx: RunContext, outcome: RunOutcome, keys: RunKeys, items: int) -> dict[str, Any]:
    """The run's header line: identity (pseudonymous), how it ended, timing and totals."""
    calls = outcome.model_calls
    return {
        "kind": "run",
        "format": FORMAT,
        "run_id": ctx.run_id,
        "team": ctx.team,
        "team_version": ctx.team_version,
        "subject_key": keys.subject_key,
        "session_key": keys.session_key,
        "resumed": ctx.resumed,
        "interruptions": ctx.interruptions,
        "started_at": ctx.started_at.isoformat(),
        "finished_at": outcome.finished_at.isoformat(),
        "duration_s": (outcome.finished_at - ctx.started_at).total_seconds(),
        "stop_reason": outcome.stop_reason,
        "ended_by_limit": outcome.ended_by_limit,
        "error": type(outcome.error).__name__ if outcome.error is not None else None,
        "items": items,
        "totals": {
            "model_calls": len(calls),
            "input_tokens": outcome.input_tokens,
            "output_tokens": outcome.output_tokens,
        },
        "model_calls": [
            {
                "agent": c.agent,
                "model": c.model,
                "purpose": c.purpose,
                "input_tokens": c.input_tokens,
                "output_tokens": c.output_tokens,
                "started_at": c.started_at.isoformat(),
                "duration_s": c.duration_s,
                "error": c.error,
            }
            for c in calls
        ],
    }


def item_line(seq: int, item: StreamItem | Any, received_at: datetime) -> str:
    """:func:`item_record` as its line of the transcript (JSON text), to be made as the item is streamed."""
    return _line(item_record(seq, item, received_at))


def _line(record: dict[str, Any]) -> str:
    try:
        return orjson.dumps(record).decode()  # compact, UTF-8 as it is: what json.dumps below writes, faster
    except orjson.JSONEncodeError:  # an integer beyond 64 bits, which only json writes
        return json.dumps(record, ensure_ascii=False, separators=(",", ":"))


def encode(header: dict[str, Any], items: Iterable[dict[str, Any]]) -> bytes:
    """Serialise a run as gzip-compressed JSON lines (header first)."""
    return encode_lines(header, [_line(i) for i in items])


def encode_lines(header: dict[str, Any], lines: Iterable[str]) -> bytes:
    """:func:`encode` of items already made into lines (:func:`item_line`)."""
    text = "\n".join([_line(header), *lines]) + "\n"
    return gzip.compress(text.encode("utf-8"), compresslevel=6, mtime=0)


def sealed_context(object_key: str) -> str:
    """The sealed context of the transcript object at ``object_key`` (its store-relative key): a sealed body
    opens only where it was written (or queued for), the outbox's copy included."""
    return f"transcript/{object_key}"


def decode(body: bytes) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Read an object written by :func:`encode`.

    Args:
        body: The gzip bytes.

    Returns:
        The run record and the item records, in stream order.

    Raises:
        AuditError: The bytes are not a transcript (corrupt, truncated or another format).
    """
    try:
        # Lines end at "\n" alone: JSON escapes it inside strings, not U+2028, U+2029 or U+0085, which
        # str.splitlines would also break at (a message pasted from a PDF or a web page holds them).
        lines = [json.loads(line) for line in gzip.decompress(body).decode("utf-8").split("\n") if line]
    except (OSError, EOFError, ValueError) as exc:
        raise AuditError(
            f"the transcript object is not readable: {type(exc).__name__}: {exc}",
            hint="the object may be truncated or written by another tool; fetch it again or check the key",
        ) from exc
    if not lines or lines[0].get("kind") != "run":
        raise AuditError(
            "the transcript object has no run record", hint="check that the key names a transcript"
        )
    return lines[0], lines[1:]
