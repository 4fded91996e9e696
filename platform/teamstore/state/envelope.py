"""The versioned envelope around a session's stored state, and the JSON checks on the way in.

    from teamstore.state.envelope import encode, decode

    text = encode({"kind": "team", "participants": {"researcher": {...}}})
    payload = decode(text)   # raises StateRejected("corrupt", ...) on garbage

The envelope names its codec so an encrypting codec can wrap the payload later while old rows still read:
``{"envelope": 1, "codec": "json", "data": {...}}``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import orjson

from teamstore.errors import StateNotSerializable, StateRejected

ENVELOPE_VERSION = 1
CODEC = "json"


def check_json(value: Any, path: str) -> None:
    """Raise :class:`StateNotSerializable` naming the first path whose value is not plain JSON.

    Args:
        value: The structure to check.
        path: Where it starts, e.g. ``researcher``.
    """
    if value is None or isinstance(value, bool | int | str):
        return
    if isinstance(value, float):
        if not math.isfinite(value):
            raise StateNotSerializable(f"{path} is {value}, which JSON cannot hold")
        return
    if isinstance(value, list | tuple):
        for i, item in enumerate(value):
            check_json(item, f"{path}[{i}]")
        return
    if isinstance(value, Mapping):
        for key, item in value.items():
            if not isinstance(key, str):
                raise StateNotSerializable(f"{path} has a non-string key {key!r}")
            check_json(item, f"{path}.{key}")
        return
    raise StateNotSerializable(
        f"{path} holds a {type(value).__name__}, which is not JSON",
        hint="keep custom message types and tool results to plain JSON values",
    )


# orjson would turn dates, dataclasses and str/int subclasses into JSON silently (and read back as
# something else); these options make it refuse them instead, like the check above.
_STRICT = orjson.OPT_PASSTHROUGH_DATETIME | orjson.OPT_PASSTHROUGH_DATACLASS | orjson.OPT_PASSTHROUGH_SUBCLASS


def encode(payload: Mapping[str, Any]) -> str:
    """Wrap ``payload`` in the current envelope and serialise it (compact JSON).

    Raises:
        StateNotSerializable: A value is not plain JSON (run :func:`check_json` first for its path).
    """
    try:
        raw = orjson.dumps({"envelope": ENVELOPE_VERSION, "codec": CODEC, "data": payload}, option=_STRICT)
    except TypeError as exc:
        raise StateNotSerializable(f"state is not plain JSON ({exc})") from exc
    return raw.decode()


def decode(text: str) -> dict[str, Any]:
    """Unwrap a stored envelope.

    Raises:
        StateRejected: ``corrupt`` for text that is not a JSON object in a known envelope;
            ``schema_mismatch`` for an envelope or codec this code does not read.
    """
    try:
        doc = orjson.loads(text)
    except (ValueError, RecursionError) as exc:
        raise StateRejected("corrupt", f"stored state is not valid JSON ({exc})") from exc
    if not isinstance(doc, dict) or "envelope" not in doc or "data" not in doc:
        raise StateRejected("corrupt", "stored state is not a teamstore envelope")
    if doc.get("envelope") != ENVELOPE_VERSION or doc.get("codec") != CODEC:
        raise StateRejected(
            "schema_mismatch", f"envelope {doc.get('envelope')}/{doc.get('codec')} is not readable by this version"
        )
    data = doc["data"]
    if not isinstance(data, dict):
        raise StateRejected("corrupt", "envelope data is not an object")
    return data
