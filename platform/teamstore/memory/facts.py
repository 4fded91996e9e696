"""What a user's memory is made of, with no I/O: typed facts, the stored memory, the writer's update.

    from teamstore.memory.facts import check_value, parse_update

    check_value("ticket_id", "str", "55102")                    # "55102"
    check_value("visits", "int", "two")                         # FactInvalid: not a whole number
    update = parse_update('{"summary": "...", "facts": {"ticket_id": "55102"}}', declaration)

A fact's value is one of its declared type (``str``, ``int``, ``float``, ``bool``, or ``date``: an ISO
date) and is stored as JSON text. A summary's size is counted in tokens the way :func:`estimate_tokens`
does, about four characters a token, the same for every model, so a budget means the same wherever it runs.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from datetime import date, datetime
from itertools import takewhile
from typing import Any

from config_registry.manifest import FACT_NAME, NAME_PATTERN, FactType, MemoryDeclaration, name_problem
from teamstore.errors import InvalidIdentifier, MemoryWriteRefused
from teamstore.ids import control_character

MAX_FACT_CHARS = 500
"""The longest text value a fact keeps: a fact is an id or a name, not a paragraph."""
INT_FACT_RANGE = range(-(2**63), 2**63)
"""The whole numbers an ``int`` fact keeps: 64 bits, as a state holds them; a number of thousands of digits is
no count or id, and would reach every session's model as it is."""
CHARS_PER_TOKEN = 4


class FactInvalid(ValueError):
    """A fact value that is not of its declared type; the message names the fact and the type, never the value."""


def estimate_tokens(text: str) -> int:
    """The summary's size as its budget counts it: one token per four characters, rounded up."""
    return math.ceil(len(text) / CHARS_PER_TOKEN)


def cut_to_budget(text: str, budget: int) -> str:
    """``text`` cut to ``budget`` tokens: its sentences that fit, else its words that fit, else its characters,
    then an ellipsis (counted within the budget); ``text`` itself when it fits.

    Args:
        text: A summary (stripped).
        budget: Its budget in tokens (at least 1).
    """
    if estimate_tokens(text) <= budget:
        return text
    room = budget * CHARS_PER_TOKEN - 1  # the ellipsis takes one character
    for boundary in (_SENTENCE_END, _WORD_END):
        if ends := list(takewhile(room.__ge__, (m.end() for m in boundary.finditer(text)))):
            return text[:ends[-1]].rstrip() + "\u2026"
    return text[:room].rstrip() + "\u2026"


_SENTENCE_END = re.compile(r"[.!?](?=\s|$)|[\u3002\uff01\uff1f]")  # a full-width stop needs no space after
_WORD_END = re.compile(r"\S(?=\s)")


def check_value(name: str, kind: str, value: Any) -> Any:
    """``value`` as a fact of type ``kind``, or :class:`FactInvalid` naming ``name`` and the type.

    Args:
        name: The fact, for the message.
        kind: Its declared type.
        value: What the writer returned (a JSON value) or the store read back.

    Returns:
        The value: a ``str`` (at most :data:`MAX_FACT_CHARS`), ``int`` (within :data:`INT_FACT_RANGE`), ``float``,
        ``bool``, or a ``date``.
    """
    if kind == "str" and isinstance(value, str) and _text_fact(value):
        return value
    if kind == "int" and type(value) is int and value in INT_FACT_RANGE:
        return value
    if kind == "float" and type(value) in (int, float) and _finite(value):
        return float(value)
    if kind == "bool" and type(value) is bool:
        return value
    if kind == "date":
        if isinstance(value, date) and not isinstance(value, datetime):
            return value
        if isinstance(value, str) and len(value) == 10:
            try:
                day = date.fromisoformat(value)
            except ValueError:
                day = None
            if day is not None and day.isoformat() == value:  # YYYY-MM-DD, not an ISO week date (2026-W39-4)
                return day
    raise FactInvalid(f"fact {name!r} is not a valid {_described(kind)}")


def _finite(value: float) -> bool:
    """Whether ``value`` is a finite float, or an int one can be (JSON's ``1e999`` written out in digits is not)."""
    try:
        return math.isfinite(value)
    except OverflowError:
        return False


def _text_fact(value: str) -> bool:
    """One line of Unicode text: the memory message lists a fact per line, and a value holding a line break
    would give the model lines of facts no team declared."""
    return (0 < len(value) <= MAX_FACT_CHARS and unicode(value) and control_character(value) is None
            and value.splitlines() == [value])  # nor U+2028, U+0085 and the other breaks text may take


def check_names(scope: str | None = None, fact: str | None = None) -> None:
    """Refuse a scope or a fact name no manifest can declare, rather than answer "nothing kept" for it.

    Raises:
        InvalidIdentifier: ``scope`` is not a team name (1-64 lowercase letters, digits, '_' or '-'), or
            ``fact`` not a fact name (1-64 lowercase letters, digits or '_', starting with a letter); either is not
            a string.
    """
    if scope is not None and not (isinstance(scope, str) and NAME_PATTERN.fullmatch(scope)):
        raise InvalidIdentifier(
            f"scope is no memory scope ({_problem(scope, NAME_PATTERN)}): a scope is a team's name or the one teams "
            "declare they share",
            hint="use 1-64 lowercase letters, digits, '_' or '-' (`teamstore memory show --user ...` lists the scopes)")
    if fact is not None and not (isinstance(fact, str) and FACT_NAME.fullmatch(fact)):
        raise InvalidIdentifier(
            f"fact is no fact name a team can declare ({_problem(fact, FACT_NAME)})",
            hint="use 1-64 lowercase letters, digits or '_', starting with a letter "
            "(`teamstore memory show --user ...` lists the facts kept)")


def _problem(name: object, pattern: re.Pattern[str]) -> str:
    """What is wrong with a refused scope or fact name, never the name: one given may be a user's words."""
    return name_problem(name, pattern) if isinstance(name, str) else f"it is of type {type(name).__name__}"


def unicode(text: str) -> bool:
    """Whether ``text`` is Unicode a store can keep: JSON may escape a lone surrogate (``"\\ud800"``), which
    no UTF-8 encodes."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _described(kind: str) -> str:
    return {
        "str": f"str (one line of Unicode text, 1 to {MAX_FACT_CHARS} characters)", "int": "int (a whole number within 64 bits)",
        "float": "float (a finite number)", "bool": "bool (true or false)", "date": "date (YYYY-MM-DD)",
    }.get(kind, f"{kind!r}, which is no fact type")


def encode_value(value: Any) -> str:
    """A checked value as the JSON text the store keeps (a date as its ISO form)."""
    return json.dumps(value.isoformat() if isinstance(value, date) else value, ensure_ascii=False)


def decode_value(name: str, kind: str, text: Any) -> Any:
    """A stored value back, checked against its type.

    Raises:
        FactInvalid: The text is not JSON, or not a value of ``kind`` (a row damaged by hand).
    """
    try:
        value = json.loads(text) if isinstance(text, str) else None
    except ValueError:
        raise FactInvalid(f"fact {name!r} holds a value that is not JSON") from None
    return check_value(name, kind, value)


def shown(value: Any) -> Any:
    """A checked value as JSON shows it (a date as its ISO form)."""
    return value.isoformat() if isinstance(value, date) else value


def fact_text(value: Any) -> str:
    """A checked (or :func:`shown`) value as its JSON reads: ``true``/``false``, numbers as JSON writes them,
    text and a date (``"2026-09-24"``) quoted and escaped. Quoted, a text fact ``"true"``, ``"42"`` or
    ``"null"`` never reads as the boolean, number or null it spells (a model is given no fact's type). The
    memory table and the message a model is given both print this, so what they say matches ``--json`` and
    what the writer is sent."""
    return json.dumps(shown(value), ensure_ascii=False)


@dataclass(frozen=True)
class Fact:
    """One fact kept about a user: its value, the run it came from, and when a run last confirmed it."""

    name: str
    type: str
    value: Any
    source_run_id: str
    created_at: datetime
    confirmed_at: datetime

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready view."""
        return {"name": self.name, "type": self.type, "value": shown(self.value), "source_run_id": self.source_run_id,
                "created_at": self.created_at.isoformat(), "confirmed_at": self.confirmed_at.isoformat()}


@dataclass(frozen=True)
class DamagedFact:
    """A stored fact that cannot be used (edited by hand, or its declared type changed): never given to a
    model, kept until a write replaces it or the user's memory is forgotten.

    Attributes:
        stored: The value's text as the row holds it (opened), when it opens but is not a value of its type:
            still held about the user, so shown and exported as it is. ``None`` when there is no such text.
    """

    name: str
    reason: str
    stored: str | None = None


@dataclass(frozen=True)
class WriterFailure:
    """The memory writer's last failure on this memory, and how many it has had."""

    reason: str
    at: datetime | None
    count: int


@dataclass(frozen=True)
class UserMemory:
    """What is kept about one user under one scope.

    Attributes:
        version: 0 while nothing was written yet (the row holds only a failure); each write adds 1.
        facts: The usable facts, by name.
        damaged: Facts (or the summary, as ``summary``) that could not be read as stored.
        failure: The writer's last failure, if it ever failed.
        leftover: The facts are kept with no memory written (no row, or one holding only a failure): left over
            from a memory that no longer exists, never given to a session or a writer, and deleted by the next
            write of the scope or the retention sweep. Listed only where everything held is (an export).
        created_at: When its row was made (``None`` for leftover facts): a memory forgotten in full and written
            again since is another row, made later.
    """

    user_id: str
    scope: str
    summary: str
    version: int
    team: str
    team_version: str
    source_run_id: str | None
    updated_at: datetime | None
    expires_at: datetime | None
    facts: dict[str, Fact] = field(default_factory=dict)
    damaged: list[DamagedFact] = field(default_factory=list)
    failure: WriterFailure | None = None
    leftover: bool = False
    created_at: datetime | None = None

    @property
    def written(self) -> bool:
        """Whether a writer ever stored a summary or facts here (a row may hold only a failure); a row whose
        version is damaged (``-1``) still holds what was written."""
        return self.version != 0

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready view (``teamstore memory show --json``)."""
        failure = self.failure
        return {
            "user_id": self.user_id, "scope": self.scope, "summary": self.summary, "version": self.version,
            "team": self.team, "team_version": self.team_version, "source_run_id": self.source_run_id,
            "created_at": _iso(self.created_at), "updated_at": _iso(self.updated_at),
            "expires_at": _iso(self.expires_at), "facts": [f.to_dict() for f in self.facts.values()],
            "damaged": [{"name": d.name, "reason": d.reason, "stored": d.stored} for d in self.damaged],
            "failure": None if failure is None else {"reason": failure.reason, "at": _iso(failure.at),
                                                      "count": failure.count},
            "leftover": self.leftover,
        }


def _iso(moment: datetime | None) -> str | None:
    return moment.isoformat() if moment is not None else None


@dataclass(frozen=True)
class MemoryUpdate:
    """What one write stores: the new summary, and the facts the new messages stated or confirmed (checked
    against their declared types). Facts it does not name are kept as they are."""

    summary: str
    facts: dict[str, Any]


def parse_update(text: object, declaration: MemoryDeclaration) -> MemoryUpdate:
    """The writer's reply as an update, or :class:`MemoryWriteRefused` saying what is wrong with it.

    Args:
        text: The model's reply content: a JSON object ``{"summary": str, "facts": {name: value}}``.
        declaration: The team's memory declaration (facts and their types, the summary's budget).

    Raises:
        MemoryWriteRefused: Not a JSON object of that shape (prose, say); an undeclared fact; a fact that
            fails its type; a summary over its budget or holding a lone surrogate or NUL. The message quotes none of the reply.
    """
    data = _json_object(text)
    summary, found = data.get("summary"), data.get("facts", {})
    if not isinstance(summary, str) or not isinstance(found, dict):
        raise _refused("did not return a 'summary' text and a 'facts' object")
    if not unicode(summary) or "\x00" in summary:  # NUL: a Postgres text column (memory kept unsealed) holds none
        raise _refused("returned a summary that is not Unicode text a store keeps (a lone surrogate or NUL escape)")
    budget = declaration.summary_tokens
    if (size := estimate_tokens(summary.strip())) > budget:
        raise _refused(f"returned a summary of about {size} tokens, over its budget of {budget}")
    checked: dict[str, Any] = {}
    for name, value in found.items():
        kind: FactType | None = declaration.facts.get(name)
        if kind is None:
            # Not quoted: a name the model made up may hold the user's words.
            raise _refused("returned a fact the team does not declare")
        if value is None:
            continue  # not stated by the new messages: the stored value (if any) stays
        try:
            checked[name] = check_value(name, kind, value)
        except FactInvalid as exc:
            raise _refused(str(exc)) from None
    return MemoryUpdate(summary.strip(), checked)


def _json_object(text: object) -> dict[str, Any]:
    if not isinstance(text, str):
        raise _refused("returned no text (a tool call or other content)")
    try:
        data = json.loads(_unfenced(text.strip()))
    except (ValueError, RecursionError):
        data = None
    if not isinstance(data, dict):
        raise _refused("returned prose, not a JSON object")
    return data


def _unfenced(body: str) -> str:
    """The text inside a fenced code block, as chat models like to write one: a fence of backticks, a ``json``
    tag in any case (``JSON``, ``Json``) or none, spaces after it. Any other tag stays in the text, which is then
    no JSON: it is refused as prose, as the text it fences would be."""
    if not body.startswith("```"):
        return body
    inner = body.strip("`").lstrip(" \t")
    if inner[:4].lower() == "json":
        inner = inner[4:]
    return inner.strip()


def _refused(why: str) -> MemoryWriteRefused:
    return MemoryWriteRefused(
        f"the memory writer {why}; the user's previous memory is kept",
        hint="check the writer's model (memory.writer in the team's manifest) and its declared facts; "
        "`teamstore memory show --user ...` shows the failure",
    )
