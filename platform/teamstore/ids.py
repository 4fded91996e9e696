"""Checks on the identifiers callers hand us: user ids, session ids, request ids.

    from teamstore.ids import check_id

    check_id("user_id", "alice")          # returns "alice"
    check_id("user_id", "")               # raises InvalidIdentifier

Ids are stored exactly as given: ``/``, ``..`` and unicode are fine because an id is only ever a bound
parameter or hashed, never a path. No case folding and no unicode normalisation: two ids that differ in
either are two different users.
"""

from __future__ import annotations

from teamstore.errors import InvalidIdentifier

MAX_ID_CHARS = 256


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
    if not isinstance(value, str):
        raise InvalidIdentifier(f"{kind} must be a string, got {type(value).__name__}")
    if not value:
        raise InvalidIdentifier(f"{kind} is empty", hint=f"pass a non-empty {kind}")
    if len(value) > MAX_ID_CHARS:
        raise InvalidIdentifier(
            f"{kind} is {len(value)} characters long; the limit is {MAX_ID_CHARS}",
            hint=f"hash long {kind}s before passing them",
        )
    bad = next((c for c in value if ord(c) < 32 or ord(c) == 127), None)
    if bad is not None:
        raise InvalidIdentifier(
            f"{kind} contains the control character U+{ord(bad):04X}",
            hint="strip NUL and control characters from ids",
        )
    surrogate = lone_surrogate(value)
    if surrogate is not None:
        raise InvalidIdentifier(
            f"{kind} contains the lone surrogate U+{ord(surrogate):04X}, which is not text",
            hint="pass ids as valid Unicode (check how the client encodes them)",
        )
    return value


def lone_surrogate(value: str) -> str | None:
    """The first lone surrogate in ``value``, if any: what a JSON body's ``"\\ud800"`` or a shell's
    undecodable bytes become. It is not text: no database driver can send it, no key can hold it."""
    return next((c for c in value if 0xD800 <= ord(c) <= 0xDFFF), None)
