"""The one rule for the user and session ids callers hand us, and its one length limit.

    from teamstore.ids import check_id

    check_id("user_id", "alice")          # returns "alice"
    check_id("user_id", "a\\tb")           # raises InvalidIdentifier: a control character

**An id is 1 to 256 characters of text**: no control character (U+0000-U+001F, U+007F) and no lone
surrogate. Sessions, their stores, the audit's subjects and the command line all check ids by this
rule; the tables' id columns are sized by :data:`MAX_ID_CHARS`. Ids are stored exactly as given: ``/``,
``..`` and unicode are fine because an id is only ever a bound parameter or hashed, never a path. No
case folding and no unicode normalisation: two ids that differ in either are two different users.

Erasure accepts a little more (:func:`check_erasable_id`): every id an earlier release could have stored.
No release ever admitted a control character in a session's ids, but the audit's own check used to
admit every one but NUL, so a subject (and the transcripts and ledger rows keyed by it) may exist for
such a user id; it must stay erasable.
"""

from __future__ import annotations

from teamstore.errors import InvalidIdentifier

MAX_ID_CHARS = 256
"""The longest user or session id, in characters; every table's id columns are this wide."""


def check_id(kind: str, value: object) -> str:
    """Return ``value`` if it is a usable identifier.

    Args:
        kind: What the id is, for the message (``user_id``, ``session_id``).
        value: The candidate.

    Returns:
        The same string, unchanged.

    Raises:
        InvalidIdentifier: Not a string, empty, longer than 256 characters, or holding NUL, another
            control character or a lone surrogate.
    """
    text = _checked_text(kind, value)
    bad = control_character(text)
    if bad is not None:
        raise InvalidIdentifier(
            f"{kind} contains the control character U+{ord(bad):04X}",
            hint="strip NUL and control characters from ids",
        )
    return text


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
    """Return ``value`` if an erasure may look for it: any id :func:`check_id` admits, and any id with a
    control character other than NUL, which earlier releases' audit could store as a subject (no session
    can have one: :func:`control_character` tells whether the caller should say so).

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


def control_character(value: str) -> str | None:
    """The first control character in ``value`` (U+0000-U+001F or U+007F), if any."""
    return next((c for c in value if ord(c) < 32 or ord(c) == 127), None)


def lone_surrogate(value: str) -> str | None:
    """The first lone surrogate in ``value``, if any: what a JSON body's ``"\\ud800"`` or a shell's
    undecodable bytes become. It is not text: no database driver can send it, no key can hold it."""
    return next((c for c in value if 0xD800 <= ord(c) <= 0xDFFF), None)
