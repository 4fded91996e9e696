"""Who asked for a request and who ran it: the compliance desk's two names, checked once.

    from teamstore.people import check_not_naming, check_person, current_operator

    requested_by = check_person("requested_by", "data subject, ticket 881")
    check_not_naming("requested_by", requested_by, "alice@example.com")   # refused if it held the id
    operator = current_operator(None)    # TEAMSTORE_OPERATOR, else the OS user

Both are free text the operator types: a name, a role, a ticket number. They are stored as given with the
request and printed on its receipt, so they are bounded and hold no control character (an escape sequence
would rewrite the terminal that prints them). Keep the data subject's own identifiers out of them, as out of
an erasure's ``--reason`` and ``--request-id``: the receipt outlives the user's data. The one identifier
teamstore knows, the user id the request is about, is refused there (:func:`check_not_naming`).
"""

from __future__ import annotations

import getpass
import os
import re
import unicodedata

from teamstore.errors import InvalidIdentifier
from teamstore.ids import control_character, lone_surrogate

MAX_PERSON_CHARS = 200
"""The longest ``requested_by`` or operator name, in characters (the columns are this wide)."""
SHORTEST_NAMED_ID = 3
"""User ids shorter than this are not looked for in the text kept with a request: ``17`` is in "GDPR art. 17"."""
OPERATOR_VARIABLE = "TEAMSTORE_OPERATOR"


def check_person(kind: str, value: str | None) -> str | None:
    """Return ``value`` (``None`` stays ``None``) if it can be stored and printed exactly.

    Args:
        kind: What it is, for the message (``requested_by``, ``operator``).
        value: The text given.

    Returns:
        The same text, unchanged.

    Raises:
        InvalidIdentifier: Empty or blank, longer than :data:`MAX_PERSON_CHARS`, holding a control
            character (a newline included) or bytes that are not UTF-8 text.
    """
    if value is None:
        return None
    flag = f"--{kind.replace('_', '-')}"
    if not value.strip():
        raise InvalidIdentifier(f"{kind} is empty", hint=f"give {flag} a name, a role or a ticket number, or leave it out")
    if len(value) > MAX_PERSON_CHARS:
        raise InvalidIdentifier(
            f"{kind} is {len(value)} characters long; the limit is {MAX_PERSON_CHARS}",
            hint=f"shorten {flag} to a name or a ticket number (the ticket holds the rest)",
        )
    bad = control_character(value) or lone_surrogate(value)
    if bad is not None:
        raise InvalidIdentifier(
            f"{kind} holds the character U+{ord(bad):04X}, which cannot be stored and printed as given",
            hint=f"pass {flag} as one line of plain UTF-8 text",
        )
    return value


def check_not_naming(kind: str, value: str | None, user_id: str) -> str | None:
    """Return ``value`` (``None`` stays ``None``) unless it names ``user_id``, the user the request is about.

    What an operator writes with an erasure or an export (why, who asked, a new erasure's request id) is kept
    after the user's erasure, on the receipt and the export's record, where nothing may lead back to the user. The id
    is looked for as a whole word, in any letter case or Unicode form (``Alice@Example.com`` names
    ``alice@example.com``), unless it is shorter than :data:`SHORTEST_NAMED_ID`.

    Args:
        kind: What it is, for the message (``requested_by``, ``reason``, ``request_id``).
        value: The text given.
        user_id: The user the request is about.

    Raises:
        InvalidIdentifier: ``value`` holds the user id (the message repeats neither: stderr may be a job's log).
    """
    if value is None or not _names(value, user_id):
        return value
    flag = f"--{kind.replace('_', '-')}"
    instead = ("the ticket number alone" if kind == "request_id" else
               "a role, a ticket number (the ticket holds the rest)")
    raise InvalidIdentifier(
        f"{flag} holds the id of the user it is about: it is kept as given after the user's erasure, where "
        "nothing may name them",
        hint=f"give {flag} without the user's id: {instead}",
    )


def _names(text: str, user_id: str) -> bool:
    wanted = _folded(user_id.strip())
    if len(wanted) < SHORTEST_NAMED_ID:
        return False
    return re.search(rf"(?<!\w){re.escape(wanted)}(?!\w)", _folded(text)) is not None


def _folded(text: str) -> str:
    return unicodedata.normalize("NFKC", text).casefold()


def current_operator(given: str | None = None) -> str:
    """Who runs this request: ``given``, else ``$TEAMSTORE_OPERATOR``, else the OS user.

    Raises:
        InvalidIdentifier: The name found breaks :func:`check_person`; or none can be found (no variable
            and no OS user name: a container running as a bare uid).
    """
    name = given if given is not None else os.environ.get(OPERATOR_VARIABLE) or _os_user()
    if name is None:
        raise InvalidIdentifier(
            "no operator name: --operator was not given, TEAMSTORE_OPERATOR is not set and the OS user has no name",
            hint="pass --operator NAME (or set TEAMSTORE_OPERATOR) so the receipt says who ran the request",
        )
    checked = check_person("operator", name)
    assert checked is not None
    return checked


def _os_user() -> str | None:
    try:
        return getpass.getuser() or None
    except (KeyError, OSError):  # a uid with no passwd entry and no LOGNAME/USER variable
        return None
