"""How database connection strings are written, read into their named parts, so that
:mod:`config_registry.credentials` can ask of each name whether it means a credential.

    from config_registry.connections import connection_pairs, split_url

    connection_pairs("host=db user=app password='s3 cret'")   # [("host", "db"), ("user", "app"), ("password", "s3 cret")]
    split_url("jdbc:sqlserver://db:1433;user=sa;password=pw")  # ("sqlserver://db:1433", [("user", "sa"), ("password", "pw")])

Three forms are read: ``;``-separated pairs (ADO.NET, ODBC: ``Server=db;Password=pw;``), libpq's
whitespace-separated keyword/value pairs (``host=db password=pw``), and a URL, with a JDBC driver's
``jdbc:`` prefix and SQL Server's ``;``-separated properties after the host. Nothing here decides what
a secret is.
"""

from __future__ import annotations

import re

# One ';'-separated part: a name of up to four words (ODBC and ADO.NET allow spaces: "User Id", "Persist
# Security Info"; a sentence's words run longer, or end in a full stop), '=', and a value that may be quoted
# ("..." and '...' with the quote doubled, ODBC's {...} with '}' doubled) and then hold ';'.
_WORD = r"[A-Za-z0-9_-]+(?:\.[A-Za-z0-9_-]+)*"
_VALUE_END = r"(?=\s*(?:;|\Z))"
_SEMICOLON_PAIR = re.compile(
    rf"[\s;]*((?=[A-Za-z]){_WORD}(?: +{_WORD}){{0,3}})\s*=\s*"
    rf"(\"(?:[^\"]|\"\")*\"{_VALUE_END}|'(?:[^']|'')*'{_VALUE_END}|\{{(?:[^}}]|\}}\}})*\}}{_VALUE_END}|[^;]*)[\s;]*"
)
# One libpq keyword/value pair: spaces may stand around '='; a value with spaces is single-quoted, and a
# backslash escapes the next character (https://www.postgresql.org/docs/current/libpq-connect.html).
_SPACE_PAIR = re.compile(r"""\s*([A-Za-z_][A-Za-z0-9_]*)\s*=\s*('(?:[^'\\]|\\.)*'|(?:[^\s'\\]|\\.)+)(?:\s+|\Z)""")
# libpq's form needs two pairs: "key=value" or "token=abc" alone, in a prompt or a commit message, is prose.
_SPACE_PAIRS_AT_LEAST = 2
# A URL whose scheme may carry prefixes of its own (JDBC's "jdbc:postgresql://", "jdbc:sqlserver://"): the
# last scheme is the one whose "//" starts the authority.
_URL = re.compile(r"(?:[a-zA-Z][a-zA-Z0-9+.-]*:)*([a-zA-Z][a-zA-Z0-9+.-]*://\S+)\Z")
# Oracle's thin driver writes the user and password before the host: "jdbc:oracle:thin:app/pw@db:1521:orcl".
_ORACLE = re.compile(r"jdbc:oracle:[a-z]+:([^/@\s]+)/([^@\s]+)@\S+\Z", re.IGNORECASE)


def connection_pairs(value: str) -> list[tuple[str, str]] | None:
    """The ``(name, value)`` pairs of a connection string that is pairs and nothing else, quotes taken
    off its values: ``;``-separated (``Server=db;Password=pw;``, found only when a ``;`` is there) or
    libpq's whitespace-separated form (``host=db password=pw``, two pairs or more); ``None`` for any other
    string, such as a prompt that mentions ``password=`` in a sentence."""
    if "=" not in value:
        return None
    if ";" in value:
        pairs = _parse(_SEMICOLON_PAIR, value)
        if pairs is not None:
            return pairs
    pairs = _parse(_SPACE_PAIR, value)
    return pairs if pairs is not None and len(pairs) >= _SPACE_PAIRS_AT_LEAST else None


def split_url(value: str) -> tuple[str, list[tuple[str, str]]] | None:
    """A URL without its JDBC prefix, and the ``;``-separated properties SQL Server's JDBC driver reads after
    its host (``jdbc:sqlserver://db:1433;user=sa;password=pw``); ``None`` when ``value`` is not one URL.
    Only a JDBC URL has such properties: elsewhere a ``;`` starts a path parameter
    (``https://host/v1;jsessionid=...?api_key=...``), and the URL, its query and fragment included, stays whole."""
    match = _URL.match(value)
    if match is None:
        return None
    url = match.group(1)
    head, semicolon, tail = url.partition(";")
    properties = _parse(_SEMICOLON_PAIR, tail) if semicolon and value[:5].lower() == "jdbc:" else None
    return (head, properties) if properties is not None else (url, [])


def oracle_password(value: str) -> bool:
    """True for an Oracle JDBC URL with a password before its host (``jdbc:oracle:thin:app/pw@db:1521:orcl``)."""
    return _ORACLE.match(value) is not None


def _parse(pattern: re.Pattern[str], text: str) -> list[tuple[str, str]] | None:
    """Every pair ``pattern`` reads from the whole of ``text``, or ``None`` if anything else is in it."""
    pairs: list[tuple[str, str]] = []
    position, end = 0, len(text.rstrip())
    while position < end:
        match = pattern.match(text, position)
        if match is None or match.end() == position:
            return None
        pairs.append((match.group(1).strip(), _unquote(match.group(2).strip())))
        position = match.end()
    return pairs or None


def _unquote(value: str) -> str:
    """A value without the quotes around it (an empty quoted value is an empty value, not a secret)."""
    if len(value) >= 2 and (value[0], value[-1]) in {('"', '"'), ("'", "'"), ("{", "}")}:
        return value[1:-1]
    return value
