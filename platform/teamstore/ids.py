"""The one rule for the user and session ids callers hand us, and its one length limit.

    from teamstore.ids import check_id

    check_id("user_id", "alice")          # returns "alice"
    check_id("user_id", "a\\tb")           # raises InvalidIdentifier: a control character

**An id is 1 to 256 characters of text**: no control character (U+0000-U+001F, U+007F), no lone
surrogate, not blank (only spaces or invisible characters), and no space or invisible character at its
start or end (:func:`invisible`: a pasted ``"alice "`` would be a second user beside ``alice``, looking
the same). Sessions, their stores, the audit's subjects and the command line all check ids by this
rule; the tables' id columns are sized by :data:`MAX_ID_CHARS`. Ids are stored exactly as given: ``/``,
``..`` and unicode are fine because an id is only ever a bound parameter or hashed, never a path. No
case folding and no unicode normalisation: two ids that differ in either are two different users.

Erasure and export accept a little more (:func:`check_erasable_id`): every id an earlier release could
have stored. No release ever admitted a control character in a session's ids, but the audit's own check
used to admit every one but NUL, so a subject (and the transcripts and ledger rows keyed by it) may exist
for such a user id; and sessions were opened under blank ids and ids with spaces around them until this
rule refused them. What is stored under such an id must stay erasable; :func:`refusal` tells the caller
that the id is one of these, so that it can refuse the id when nothing is stored under it.

A request's id is the operator's to choose and may hold anything; :func:`log_name` is how a log line names it.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import unicodedata

from teamstore.errors import InvalidIdentifier

MAX_ID_CHARS = 256
"""The longest user or session id, in characters; every table's id columns are this wide."""

# The ids teamstore makes itself: an erasure request's (teamstore.erasure.request_checks.new_request_id) and an
# export's (teamstore.export.requests.new_export_id). Random hex: they hold nothing anyone gave.
_MADE_BY_TEAMSTORE = re.compile(r"e[rx]-[0-9a-f]{24}")


def check_id(kind: str, value: object) -> str:
    """Return ``value`` if it is a usable identifier.

    Args:
        kind: What the id is, for the message (``user_id``, ``session_id``).
        value: The candidate.

    Returns:
        The same string, unchanged.

    Raises:
        InvalidIdentifier: Not a string, empty, longer than 256 characters, holding NUL, another control
            character or a lone surrogate, blank, or with a space or an invisible character at its start or end.
    """
    text = _checked_text(kind, value)
    refused = refusal(kind, text)
    if refused is not None:
        raise refused
    return text


def refusal(kind: str, text: str) -> InvalidIdentifier | None:
    """Why :func:`check_id` refuses ``text``, a string :func:`check_erasable_id` admits, if it does: a control
    character, a blank id, or a space or an invisible character at its start or end. ``None`` for an id a
    session can have. Its message says what is wrong (``user_id is blank ...``), never the id.
    """
    bad = control_character(text)
    if bad is not None:
        return InvalidIdentifier(f"{kind} holds the control character U+{ord(bad):04X}",
                                 hint="strip NUL and control characters from ids")
    if all(invisible(c) for c in text):
        return InvalidIdentifier(
            f"{kind} is blank: it holds only spaces or invisible characters",
            hint=f"pass the {kind} itself (a variable that is unset, or padded, gives a blank one)",
        )
    edge = next(((c, where) for c, where in ((text[0], "start"), (text[-1], "end")) if invisible(c)), None)
    if edge is not None:
        return InvalidIdentifier(
            f"{kind} has U+{ord(edge[0]):04X}, a space or an invisible character, at its {edge[1]}",
            hint=f"strip spaces and invisible characters from around the {kind}: a {kind} and the same one "
            "with a space after it would be two different ones",
        )
    return None


def log_name(given: str, key: str) -> str:
    """How teamstore's log lines name an erasure request or an export: an id teamstore made (``er-`` or ``ex-``
    and 24 hex characters) as it is, any other (one an operator gave as ``--request-id``: a ticket, and perhaps a
    user's name or email) as ``request#`` and the first 10 hex characters of its HMAC-SHA256 under ``key``.
    Logs are shipped off the host and kept past the user's erasure, so nothing given goes there; ``teamstore
    erase status`` and ``erase list`` print the same name (``logged_as``), to find the request from a log line.

        log_name("er-4f0c9a1b2c3d4e5f60718293", key)    # "er-4f0c9a1b2c3d4e5f60718293"
        log_name("gdpr-dave@example.com", key)           # "request#" and 10 hex characters

    Args:
        given: The request's (or export's) id, as stored.
        key: The database's secret for it (:func:`teamstore.db.identity.log_name_key`). Keyed, because an id
            such as ``gdpr-<email>`` is guessable and an unkeyed hash of it would confirm a guess to anyone
            reading the logs; by a key of its own, never printed: the database's id is printed and published (a
            transcript folder's marker, KMS keys' tags), and ``TEAMSTORE_ERASURE_HASH_KEY`` is rotated, while a
            log line must keep naming its request (a restore keeps the key: it is in the database).

    Returns:
        The name, which holds nothing given.
    """
    if _MADE_BY_TEAMSTORE.fullmatch(given):
        return given
    # surrogatepass: an id an earlier release stored may hold anything a shell passed; it still gets a name
    digest = hmac.new(key.encode(), given.encode("utf-8", "surrogatepass"), hashlib.sha256).hexdigest()
    return f"request#{digest[:10]}"


def check_ids(*, user_id: str | None = None, session_id: str | None = None) -> None:
    """Check each id given by :func:`check_id` (a lookup refuses an id no session can have by name,
    rather than answering "nothing stored" for it).

    Raises:
        InvalidIdentifier: The first id that breaks the rule.
    """
    if user_id is not None:
        check_id("user_id", user_id)
    if session_id is not None:
        check_id("session_id", session_id)


def check_erasable_id(value: object) -> str:
    """Return ``value`` if an erasure or an export may look for it: any id :func:`check_id` admits, and any
    id it refuses only for what :func:`refusal` names (a control character other than NUL, blank, spaces
    around it), which earlier releases could store. No session can have one now: the caller asks
    :func:`refusal`, to say so, and to refuse the id when nothing is stored under it.

    Raises:
        InvalidIdentifier: Not a string, empty, longer than 256 characters, holding NUL or a lone
            surrogate: no release could store it anywhere.
    """
    text = _checked_text("user_id", value)
    if "\x00" in text:
        raise InvalidIdentifier("user_id contains NUL, which no store holds", hint="strip NUL from the id")
    return text


def _checked_text(kind: str, value: object) -> str:
    if not isinstance(value, str):
        raise InvalidIdentifier(f"{kind} must be a string, got {type(value).__name__}",
                                hint=f"pass {kind} as a str (a numeric id as its digits: str(id))")
    if not value:
        raise InvalidIdentifier(f"{kind} is empty", hint=f"pass a non-empty {kind}")
    if len(value) > MAX_ID_CHARS:
        raise InvalidIdentifier(
            f"{kind} is {len(value)} characters long; the limit is {MAX_ID_CHARS}",
            hint=f"hash long {kind}s before passing them",
        )
    surrogate = lone_surrogate(value)
    if surrogate is not None:
        raise InvalidIdentifier(
            f"{kind} contains the lone surrogate U+{ord(surrogate):04X}, which is not text",
            hint="pass ids as valid Unicode (check how the client encodes them)",
        )
    return value


def invisible(character: str) -> bool:
    """Whether ``character`` shows as nothing: whitespace (U+0020, U+00A0, U+3000, ...) or a formatting
    character (category Cf: U+200B zero width space, U+FEFF byte order mark, U+202E right-to-left override)."""
    return character.isspace() or unicodedata.category(character) == "Cf"


def control_character(value: str) -> str | None:
    """The first control character in ``value`` (U+0000-U+001F or U+007F), if any."""
    return next((c for c in value if ord(c) < 32 or ord(c) == 127), None)


def lone_surrogate(value: str) -> str | None:
    """The first lone surrogate in ``value``, if any: what a JSON body's ``"\\ud800"`` or a shell's
    undecodable bytes become. It is not text: no database driver can send it, no key can hold it."""
    return next((c for c in value if 0xD800 <= ord(c) <= 0xDFFF), None)
