"""What an erasure request is given, checked before anything is written: its id (any stored one, or a new
request's) and its reason; and the ids teamstore makes itself, which an error may name.

    from teamstore.erasure import request_checks

    rid = request_checks.check_new_request_id("REQ-2026-0042", "alice")   # or request_checks.new_request_id()
    request_checks.check_reason("GDPR art. 17")

Pure: nothing here reads or writes a store (:mod:`teamstore.erasure.requests` does, on top of these). Every
function raises ``teamstore.errors`` types only.
"""

from __future__ import annotations

import re
import uuid

from teamstore.erasure.schema import REQUEST_ID
from teamstore.errors import InvalidIdentifier
from teamstore.ids import lone_surrogate, refusal
from teamstore.people import check_not_naming

MAX_REASON_CHARS = 1000
"""The longest reason an erasure or an extension records, in characters."""


def check_request_id(request_id: str) -> str:
    """Refuse request ids that cannot be stored exactly. The message says what is wrong, never the id: one
    refused may hold anything pasted.

    Raises:
        InvalidIdentifier: Not a string, empty, longer than 128 characters, holding control characters, or not
            UTF-8.
    """
    if not isinstance(request_id, str):
        raise InvalidIdentifier(f"a request id is a string, not {type(request_id).__name__}",
                                hint="give the request id as text, as `teamstore erase` prints it")
    said = _unstorable(request_id)
    if said is not None:
        raise InvalidIdentifier(
            said,
            hint=f"a request id is 1..{REQUEST_ID} printable UTF-8 characters, as `teamstore erase` prints it "
            "(a new request without --request-id gets a fresh one)",
        )
    return request_id


def _unstorable(request_id: str) -> str | None:
    """Why no request can be stored under ``request_id``, said as :func:`teamstore.ids.check_id` says it."""
    if not request_id:
        return "request id is empty"
    if len(request_id) > REQUEST_ID:
        return f"request id is {len(request_id)} characters long; the limit is {REQUEST_ID}"
    bad = next((c for c in request_id if ord(c) < 32), None)  # DEL is refused in new ids only: see below
    if bad is not None:
        return f"request id holds the control character U+{ord(bad):04X}"
    surrogate = lone_surrogate(request_id)
    if surrogate is not None:
        return f"request id contains the lone surrogate U+{ord(surrogate):04X}, which is not text"
    return None


def check_new_request_id(request_id: str, user_id: str) -> str:
    """Refuse an id a new request for ``user_id`` may not take: :func:`check_request_id`'s, a blank one, one
    with spaces or invisible characters around it (:func:`teamstore.ids.invisible`: U+FEFF, U+200B) or a DEL,
    and one naming the user (:func:`teamstore.people.check_not_naming`: the id is kept, and printed by ``erase
    list``, after the user's erasure). A pasted ``"REQ-7 "`` would open a second request beside ``REQ-7``, and
    a blank one lists as nothing. A request already stored under such an id (by an earlier release) is still
    reached, to resume or report it. The message says what is wrong (:func:`teamstore.ids.refusal`), never
    the id.

    Raises:
        InvalidIdentifier: The id breaks a rule.
    """
    check_request_id(request_id)
    refused = refusal("request id", request_id)
    if refused is not None:
        raise refused
    check_not_naming("request_id", request_id, user_id)
    return request_id


def check_reason(reason: str | None) -> str | None:
    """Refuse a reason the receipt cannot hold as given, before anything is written, on every backend alike:
    blank (an unset ``"$REASON"``: leave it out instead), longer than :data:`MAX_REASON_CHARS` (the receipt is
    printed and filed with every status), or one no database can store exactly (Postgres holds no NUL in
    text; no driver sends a lone surrogate).

    Raises:
        InvalidIdentifier: The reason is not a string, is blank, too long, or holds NUL or undecodable bytes (a
            lone surrogate).
    """
    if reason is None:
        return None
    if not isinstance(reason, str):
        raise InvalidIdentifier(f"the reason is a string, not {type(reason).__name__}",
                                hint="give the reason as a line of text, or leave it out")
    if not reason.strip() or len(reason) > MAX_REASON_CHARS:
        raise InvalidIdentifier(
            "the reason is blank" if not reason.strip() else
            f"the reason is {len(reason)} characters long; the limit is {MAX_REASON_CHARS}",
            hint=f"give --reason as a line of at most {MAX_REASON_CHARS} characters (the ticket holds the rest), "
            "or leave it out",
        )
    if "\x00" in reason or lone_surrogate(reason) is not None:
        raise InvalidIdentifier(
            f"the reason of length {len(reason)} cannot be stored: it holds NUL or bytes that are not UTF-8 text",
            hint="pass the reason as plain text (a ticket number, say), in a UTF-8 locale",
        )
    return reason


_MADE_BY_TEAMSTORE = re.compile(r"er-[0-9a-f]{24}")


def new_request_id() -> str:
    """A fresh request id (``er-`` and 24 hex characters)."""
    return f"er-{uuid.uuid4().hex[:24]}"


def made_by_teamstore(request_id: str) -> str | None:
    """``request_id`` when it is of the shape :func:`new_request_id` gives (``er-`` and 24 hex characters), which
    holds no one's words: an error may name it, unlike an id the operator gave (a ticket, perhaps a user's)."""
    return request_id if _MADE_BY_TEAMSTORE.fullmatch(request_id) else None
