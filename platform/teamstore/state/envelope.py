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
import dataclasses
import math
import re
import sys
from collections.abc import Collection, Iterable, Iterator, Mapping
from typing import Any

import orjson
from pydantic import BaseModel

from teamstore.errors import StateNotSerializable, StateRejected

ENVELOPE_VERSION = 1
CODEC = "json"
SEALED_CODEC = "aes256gcm"
SEALED_PREFIX = f'{{"envelope":{ENVELOPE_VERSION},"codec":"{SEALED_CODEC}","data":"'
"""How every sealed state begins: a store can tell sealed rows from older ones in SQL."""


_INT_MIN, _INT_MAX = -(2**63), 2**64 - 1  # the integers orjson reads and writes
_PLAIN = {str: "str", int: "int", float: "float", dict: "dict", list: "list", tuple: "list"}
_NAMED_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,63}")
# Where a state's models are defined: their fields' names are the keys a refused value's path names.
_SCHEMA_PACKAGES = frozenset({"autogen_core", "autogen_agentchat", "autogen_ext", "teamstore", "config_registry"})
# Keys AutoGen saves with no model declaring them: GraphFlow's manager state (tests/runtime/test_team_kinds.py
# finds every key of every kind of team's state among the names).
_UNDECLARED = frozenset({"remaining", "enqueued_any", "ready"})

Step = int | tuple[str, int]
"""One step of a path: a list's index, or a dict's key with its place in the dict (1 for the first)."""


def check_json(value: Any, path: str, names: Collection[str] = ()) -> None:
    """Raise :class:`StateNotSerializable` naming the first path whose value is not plain JSON.

    Plain means exactly what the codec writes and reads back as itself: ``None``, ``bool``, ``str``,
    ``int`` within 64 bits, finite ``float``, ``list``/``tuple`` and ``dict`` with ``str`` keys. A
    subclass (a ``StrEnum``, an ``OrderedDict``, a named tuple) is refused: it would read back as
    something else.

    The message is shown and logged, and an agent of a team's own may key what it keeps by a user's words (a
    first name, a topic), so the path names a dict's key only when it was a word before any user said
    anything: a field's name of AutoGen's and teamstore's models, or of any AutoGen state (``BaseState``) a
    team's own agent declares (:func:`field_names`), or one of ``names``. Any other key is named by its place
    in its dict (``notes{key 3}``).

    Args:
        value: The structure to check.
        path: Where it starts, e.g. ``researcher``.
        names: More keys that may be named: the team's participants' names, which key a team's states.
    """
    found = _refused(value)
    if found is None:
        return
    steps, said, hint = found
    named = field_names() | set(names)
    where = path + "".join(_shown(step, named) for step in reversed(steps))
    raise StateNotSerializable(f"{where}{said}", hint=hint)


def _shown(step: Step, named: set[str]) -> str:
    if isinstance(step, int):
        return f"[{step}]"
    key, place = step
    return f".{key}" if key in named and _NAMED_KEY.fullmatch(key) else f"{{key {place}}}"


def _refused(value: Any) -> tuple[list[Step], str, str | None] | None:
    """The first value under ``value`` that is not plain JSON: its path's steps (innermost first), what is wrong
    and the fix; ``None`` when everything is."""
    kind = type(value)
    if value is None or kind is bool or kind is str:
        return None
    if kind is int:
        return None if _INT_MIN <= value <= _INT_MAX else (
            [], " is an integer beyond 64 bits, which the state codec cannot hold", "store it as a string")
    if kind is float:
        return None if math.isfinite(value) else ([], f" is {value}, which JSON cannot hold", None)
    if kind is list or kind is tuple:
        return _first_refused((i, item) for i, item in enumerate(value))
    if kind is dict:
        for place, key in enumerate(value, 1):
            if type(key) is not str:
                return ([("", place)], f" is a key of type {type(key).__name__}, not a string",
                        "key the state's objects by strings")
        return _first_refused(((key, place), item) for place, (key, item) in enumerate(value.items(), 1))
    base = next((name for plain, name in _PLAIN.items() if isinstance(value, plain)), None)
    if base is not None:
        return ([], f" holds a {kind.__name__}, a {base} subclass, which would not read back as itself",
                f"store its plain value ({base}(x)) in the state")
    return [], f" holds a {kind.__name__}, which is not JSON", "keep custom message types and tool results to plain JSON values"


def _first_refused(items: Iterable[tuple[Step, Any]]) -> tuple[list[Step], str, str | None] | None:
    for step, item in items:
        found = _refused(item)
        if found is not None:
            found[0].append(step)
            return found
    return None


def field_names() -> set[str]:
    """The names (and aliases) of the fields of every pydantic model and dataclass that AutoGen's and teamstore's
    loaded modules define or import, and of every AutoGen state (``BaseState``) loaded, wherever it is defined
    (and the few keys GraphFlow saves with no model): the keys of what AutoGen's agents, teams, model contexts
    and messages save."""
    # What AutoGen's states hold (a built team has them loaded; imported here so the names never depend on it).
    import autogen_agentchat.messages  # noqa: F401
    import autogen_core.model_context
    import autogen_core.models  # noqa: F401
    from autogen_agentchat.state import BaseState

    classes: list[type] = [BaseState]
    for name, module in list(sys.modules.items()):
        if name.partition(".")[0] in _SCHEMA_PACKAGES and module is not None:
            classes += [found for found in vars(module).values() if isinstance(found, type)]
    found_names = set(_UNDECLARED)
    for cls in (*classes, *_subclasses(BaseState)):
        if issubclass(cls, BaseModel):
            found_names.update(cls.model_fields)
            found_names.update(field.alias for field in cls.model_fields.values() if field.alias)
        elif dataclasses.is_dataclass(cls):
            found_names.update(field.name for field in dataclasses.fields(cls))
    return found_names


def _subclasses(cls: type) -> Iterator[type]:
    sub: type
    for sub in cls.__subclasses__():
        yield sub
        yield from _subclasses(sub)


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
