"""Canaries: unique random tokens planted through every input path, so a hit in a sink names its origin.

    book = CanaryBook()
    user = book.plant(Kind.USER_ID, "alice's user id", owner="alice", shape="user-{}-Zoë@example.com")
    words = book.plant(Kind.MESSAGE, "alice's first task", owner="alice")
    hits = book.find(b"...bytes read from a sink...")     # [(canary, form), ...]

Every token carries a random core of 16 hex characters. A token is searched for as UTF-8 bytes, as it
appears JSON-escaped (``ensure_ascii``: ``Zoë`` is ``Zo\\u00eb``), and by its core alone, which survives
truncation (a reply quoting the first 80 characters of a request) and any escaping of the characters
around it.
"""

from __future__ import annotations

import enum
import json
import secrets
from collections.abc import Iterable
from dataclasses import dataclass


class Kind(enum.Enum):
    """Where a canary entered: the kinds the sink policy speaks of."""

    USER_ID = "user id"
    SESSION_ID = "session id"
    SECRET = "secret"
    MESSAGE = "message words"
    TOOL_OUTPUT = "tool output"
    ERASE_REASON = "erasure reason"


# Kinds that are a user's data: once that user is erased, no sink may hold them.
USER_DATA = frozenset({Kind.USER_ID, Kind.SESSION_ID, Kind.MESSAGE, Kind.TOOL_OUTPUT})


@dataclass(frozen=True)
class Canary:
    """One planted token.

    Attributes:
        kind: The input path it went in through.
        origin: Where exactly, in words (``"default_headers['x-functions-key']"``).
        token: The full value planted.
        core: Its random part (16 hex characters), unique to this canary.
        owner: The user whose data it is (``None``: an operator's or a definition's, such as a secret).
    """

    kind: Kind
    origin: str
    token: str
    core: str
    owner: str | None = None

    def forms(self) -> list[tuple[str, bytes]]:
        """The byte strings a sink may hold it as: UTF-8, JSON-escaped, and the bare core."""
        found = [("utf-8", self.token.encode("utf-8"))]
        escaped = json.dumps(self.token)[1:-1].encode("ascii")
        if escaped != found[0][1]:
            found.append(("json-escaped", escaped))
        found.append(("core", self.core.encode("ascii")))
        return found


class CanaryBook:
    """Every canary one scenario planted."""

    def __init__(self) -> None:
        self.canaries: list[Canary] = []

    def plant(self, kind: Kind, origin: str, *, owner: str | None = None, shape: str = "{}") -> str:
        """A new token of ``kind``, ``shape`` with ``{}`` standing for the random part.

        Args:
            kind: The input path.
            origin: Where it is planted, for the report.
            owner: The user whose data it is.
            shape: How the value looks (a user id, a sentence); the default is a bare token.

        Returns:
            The token to plant.
        """
        core = secrets.token_hex(8)
        token = shape.format(f"cny{core}")
        self.canaries.append(Canary(kind, origin, token, core, owner))
        return token

    def of(self, owner: str) -> list[Canary]:
        """The canaries that are ``owner``'s data."""
        return [c for c in self.canaries if c.owner == owner]

    def find(self, data: bytes) -> list[tuple[Canary, str]]:
        """Each canary ``data`` holds, with the first form it was found in."""
        hits = []
        for canary in self.canaries:
            form = next((name for name, needle in canary.forms() if needle in data), None)
            if form is not None:
                hits.append((canary, form))
        return hits


def owners(canaries: Iterable[Canary]) -> set[str]:
    """The users the canaries belong to."""
    return {c.owner for c in canaries if c.owner is not None}
