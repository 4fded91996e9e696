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


_INT_MIN, _INT_MAX = -(2**63), 2**64 - 1  # the integers orjson reads and writes
_PLAIN = {str: "str", int: "int", float: "float", dict: "dict", list: "list", tuple: "list"}


def check_json(value: Any, path: str) -> None:
    """Raise :class:`StateNotSerializable` naming the first path whose value is not plain JSON.

    Plain means exactly what the codec writes and reads back as itself: ``None``, ``bool``, ``str``,
    ``int`` within 64 bits, finite ``float``, ``list``/``tuple`` and ``dict`` with ``str`` keys. A
    subclass (a ``StrEnum``, an ``OrderedDict``, a named tuple) is refused: it would read back as
    something else.

    Args:
        value: The structure to check.
        path: Where it starts, e.g. ``researcher``.
    """
    kind = type(value)
    if value is None or kind is bool or kind is str:
        return
    if kind is int:
        if not _INT_MIN <= value <= _INT_MAX:
            raise StateNotSerializable(f"{path} is an integer beyond 64 bits, which the state codec cannot hold",
                                       hint="store it as a string")
        return
    if kind is float:
        if not math.isfinite(value):
            raise StateNotSerializable(f"{path} is {value}, which JSON cannot hold")
        return
    if kind is list or kind is tuple:
        for i, item in enumerate(value):
            check_json(item, f"{path}[{i}]")
        return
    if kind is dict:
        for key, item in value.items():
            if type(key) is not str:
                raise StateNotSerializable(f"{path} has a non-string key {key!r}")
            check_json(item, f"{path}.{key}")
        return
    base = next((name for plain, name in _PLAIN.items() if isinstance(value, plain)), None)
    if base is not None:
        raise StateNotSerializable(
            f"{path} holds a {kind.__name__}, a {base} subclass, which would not read back as itself",
            hint=f"store its plain value ({base}(x)) in the state",
        )
    raise StateNotSerializable(
        f"{path} holds a {kind.__name__}, which is not JSON",
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
    if type(doc.get("envelope")) is not int or doc.get("envelope") != ENVELOPE_VERSION or doc.get("codec") != CODEC:
        raise StateRejected(
            "schema_mismatch", f"envelope {doc.get('envelope')}/{doc.get('codec')} is not readable by this version"
        )
    data = doc["data"]
    if not isinstance(data, dict):
        raise StateRejected("corrupt", "envelope data is not an object")
    return data
