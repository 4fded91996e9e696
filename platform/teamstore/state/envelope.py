"""The versioned envelope around a session's stored state, and the JSON checks on the way in.

    from teamstore.state.envelope import encode, decode

    text = encode({"kind": "team", "participants": {"researcher": {...}}})
    payload = decode(text)   # raises StateRejected("corrupt", ...) on garbage

The envelope names its codec, so a sealed state and one written before sealing both read:
``{"envelope": 1, "codec": "json", "data": {...}}`` is what a session encodes, and what the store writes is
that text sealed under the user's data key, in the same envelope with the codec ``aes256gcm`` and the sealed
bytes in base64 (:func:`seal_text`, :mod:`teamstore.state.sealed`). Rows saved before sealing are ``json``
rows, read as they are and sealed at their next save.
"""

from __future__ import annotations

import binascii
import math
import re
from collections.abc import Mapping
from typing import Any

import orjson

from teamstore.errors import StateNotSerializable, StateRejected

ENVELOPE_VERSION = 1
CODEC = "json"
SEALED_CODEC = "aes256gcm"
SEALED_PREFIX = f'{{"envelope":{ENVELOPE_VERSION},"codec":"{SEALED_CODEC}","data":"'
"""How every sealed state begins: a store can tell sealed rows from older ones in SQL."""


_INT_MIN, _INT_MAX = -(2**63), 2**64 - 1  # the integers orjson reads and writes
_PLAIN = {str: "str", int: "int", float: "float", dict: "dict", list: "list", tuple: "list"}
# A key the path of a refused value names: a field's name, as AutoGen's states and pydantic models have them.
# Any other key is data (an agent of a team's own may key what it keeps by the user's words): named by position.
_NAMED_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,63}")


def check_json(value: Any, path: str) -> None:
    """Raise :class:`StateNotSerializable` naming the first path whose value is not plain JSON.

    Plain means exactly what the codec writes and reads back as itself: ``None``, ``bool``, ``str``,
    ``int`` within 64 bits, finite ``float``, ``list``/``tuple`` and ``dict`` with ``str`` keys. A
    subclass (a ``StrEnum``, an ``OrderedDict``, a named tuple) is refused: it would read back as
    something else.

    The path names a dict's key only when it is a field's name (ASCII letters, digits and ``_``); any other
    key by its place in the dict (``notes{key 3}``): the message is shown and logged, and a key may be a
    user's words.

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
        for place, (key, item) in enumerate(value.items(), 1):
            if type(key) is not str:
                raise StateNotSerializable(f"{path}{{key {place}}} is a key of type {type(key).__name__}, not a "
                                           "string", hint="key the state's objects by strings")
            check_json(item, f"{path}.{key}" if _NAMED_KEY.fullmatch(key) else f"{path}{{key {place}}}")
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


_DATA, _END = len(SEALED_PREFIX), '"}'


def seal_text(sealed: bytes) -> str:
    """A sealed state (:mod:`teamstore.keys.sealed` bytes) in the envelope, as the state column holds it."""
    return f'{SEALED_PREFIX}{binascii.b2a_base64(sealed, newline=False).decode("ascii")}{_END}'


def is_sealed_text(text: object) -> bool:
    """Whether a stored state is a sealed envelope (by its first characters; its data is not checked)."""
    return isinstance(text, str) and text.startswith(SEALED_PREFIX)


def sealed_bytes(text: str) -> bytes | None:
    """The sealed bytes a stored state holds, or ``None`` for a state written before sealing (or not text).

    Raises:
        StateRejected: ``corrupt`` for a sealed envelope whose data is not base64.
    """
    if not is_sealed_text(text):
        return None
    try:
        # Not validated character by character: a changed character fails the seal's tag, which checks all.
        return binascii.a2b_base64(text[_DATA : -len(_END)] if text.endswith(_END) else text[_DATA:])
    except (ValueError, binascii.Error) as exc:
        raise StateRejected("corrupt", "the sealed state is not base64") from exc
