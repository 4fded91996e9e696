"""What in a definition reads as a credential: a name that means one, or a value that holds one whatever
its field is called, so that :mod:`config_registry.secrets` can refuse it.

    from config_registry.credentials import command_line_credential, url_credential, value_credential

    url_credential("https://app:pw@db.internal/app")        # "a password in its user part"
    value_credential("Bearer 9f8e7d6c5b4a39281706")         # "an HTTP authorization value"
    command_line_credential("tool --api-key 1a2b3c4d serve")  # "the value of the flag '--api-key', inside a command line"

A credential is recognised by its name (a field, header, variable or flag that means a credential,
:func:`~config_registry.names.is_secret_field`), by its shape (:func:`~config_registry.shapes.known_shape`: detect-secrets' detectors and a few of our own),
in a URL (:func:`url_credential`), in a connection string or a variable set as a shell sets it
(:func:`value_credential`), or in a command line (:func:`flag_credential`, :func:`command_line_credential`,
and one kept in an environment variable: :func:`environment_value_credential`).
Each answers with what it found, for the error message, or ``None``; nothing here refuses or walks a definition.
"""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import parse_qsl, urlsplit

from config_registry.connections import connection_pairs, oracle_password, split_url
from config_registry.errors import ScriptUnreadable
from config_registry.names import (
    holds_command_line,
    holds_secret_command,
    is_secret_field,
    name_words,
    names_key_or_token,
)
from config_registry.placeholders import (
    is_dummy_key,
    is_relative_file_path,
    left_out,
    variable_left_out,
)
from config_registry.programs import program_passwords
from config_registry.shapes import known_shape
from config_registry.shell import command_word, decoded_script, encoded_script_at, scripts, simple_commands
from config_registry.shell import words as shell_words
from config_registry.stores import names_secrets_id, names_stored_secret

# Query parameter names that carry a credential in signed and keyed URLs: Azure SAS ``sig``, Azure
# Functions ``code``, S3's ``X-Amz-Signature``, Google's ``key``.
_SECRET_QUERY = re.compile(r"key|code|sig|(.*[_-])?signature", re.IGNORECASE)
# A value that is a credential whatever the field is called: an HTTP authorization value (and a known shape:
# :mod:`config_registry.shapes`).
_AUTHORIZATION_VALUE = re.compile(r"(bearer|basic|token)\s+\S{8,}", re.IGNORECASE)
# A bearer token quoted inside other text (a prompt telling a tool which header to send, a commit message):
# 16+ token characters with a digit in them ("the Bearer of bad news" is prose).
_BEARER_IN_TEXT = re.compile(r"(?<![A-Za-z])bearer\s+([A-Za-z0-9._~+/-]{16,}=*)(?![A-Za-z0-9._~+/=-])", re.IGNORECASE)
# A command-line flag in an argument list (an MCP stdio server's ``args``): ``--api-key=VALUE`` or
# ``--token`` followed by the value.
# A flag, with the value given in the same word: after "=", or (PowerShell's "-Password:VALUE") after ":".
_FLAG = re.compile(r"-{1,2}([A-Za-z][A-Za-z0-9_-]*)(?:[=:](.*))?", re.DOTALL)
# An argument that sets a variable (docker's ``-e API_KEY=VALUE``, ``env API_KEY=VALUE server``) or writes a
# header (mcp-remote's ``--header "Authorization: Bearer VALUE"``) ...
_ASSIGNMENT = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)=(.*)", re.DOTALL)
_HEADER_LINE = re.compile(r"([A-Za-z][A-Za-z0-9-]*):\s*(.*)", re.DOTALL)
# A header's name, its words of letters ("X-Api-Key", "X-Hub-Signature-256"), which a random token is not.
_HEADER_NAME = re.compile(r"[A-Za-z]+(?:-[A-Za-z0-9]+)*")
# A name that names a credential with "file" after it gives the path of a file that holds the credential
# (Docker secrets' "POSTGRES_PASSWORD_FILE=/run/secrets/pg", "--password-file /run/secrets/pw"), and so does
# one with "credentials" after it (Google's GOOGLE_APPLICATION_CREDENTIALS): a reference only when given a
# path, since a secret put there by mistake is as easy to make as it is with the others: a path from the
# root, the home directory, a variable, "./" or "../" under either; a bare relative path under a "file" name
# only when it reads as a file's (:func:`~config_registry.placeholders.is_relative_file_path`), since a user
# and password pair ("scott/tiger") reads as one; Google's credentials take a bare relative ".json" path too.
_PATH = re.compile(r"(?:/|\./|\.\./|~/|[A-Za-z]:[\\/]|\$\{?[A-Za-z_][A-Za-z0-9_]*\}?/)[^\s;&|<>]*")
_GOOGLE_CREDENTIALS = ["google", "application", "credentials"]
# A variable set as a shell sets it, before a command or alone ("PGPASSWORD=pw psql -h db", "env -i
# MYSQL_PWD=pw mysql", "export PGPASSWORD=pw", Windows' "set PGPASSWORD=pw", PowerShell's
# "$env:PGPASSWORD='pw'"), also after another command ("cd /srv && PGPASSWORD=pw psql"): the names are an
# environment's, in upper case, as "token=abc" in a sentence is not ...
_SETS_VARIABLE = re.compile(r"(?:^|[\s;&|\"'(){}])(?:(?i:\$env:)[A-Z_][A-Z0-9_]*\s*|[A-Z_][A-Z0-9_]*)=")
_SHELL_ASSIGNMENT = re.compile(r"(?i:\$env:)?([A-Z_][A-Z0-9_]*=.*)", re.DOTALL)
_SETTERS = frozenset({"export", "set"})
# ... and the working directories a shell keeps, which only look like a password's "PWD".
_NOT_SECRET_VARIABLES = frozenset({"PWD", "OLDPWD"})
_INSIDE = ", inside a command line"
# The programs that print their arguments, which a command that gives a secret may print it with.
_PRINTS = re.compile(r"(?:.*[/\\])?(?:echo|printf)(?:\.exe)?", re.IGNORECASE | re.DOTALL)
# A redirection's operator ("> /dev/null", "2>&1"), whose target is no argument.
_REDIRECTION = re.compile(r"\d*[<>]+&?\d*")
# A URL's path and query without its scheme and host (an HttpTool's ``path``: ``/v1/search?api_key=...``).
_URL_PATH = re.compile(r"/\S*[?#]\S*\Z")


def url_credential(value: str) -> str | None:
    """What makes a URL hold a credential: a user part (``https://u:pw@host``, ``redis://:pw@host``, or a
    token alone as in ``https://ghp_...@github.com``) or a query or fragment parameter with a secret-looking
    name (``?api_key=``, ``?sig=``, ``?password=``, ``#access_token=``), also in a path given without its host
    (``/v1/search?key=...``), in a JDBC URL (``jdbc:postgresql://db/app?password=...``, SQL Server's
    ``jdbc:sqlserver://db;password=...``, Oracle's ``jdbc:oracle:thin:app/pw@db``); ``None`` for any other
    string, and for a value that is not one URL and nothing else (a tool's source code quoting one).

    A ``base_url`` or ``endpoint`` is not a secret-looking field, but a proxy URL with a password in it is
    a secret all the same.
    """
    value = value.strip()
    if oracle_password(value):
        return "a password in its user part"
    split = split_url(value)
    if split is None and not _URL_PATH.match(value):
        return None
    url, properties = split or (value, [])
    found = next((name for name, text in properties if text and is_secret_field(name)), None)
    if found is not None:
        return f"the connection property {found!r}"
    try:
        parts = urlsplit(url)
        password, username = parts.password, parts.username
    except ValueError:  # not a URL after all (an invalid port, say)
        return None
    if password:
        return "a password in its user part"
    if username and parts.scheme.lower() in {"http", "https", "ws", "wss"}:  # ssh://git@host is no secret
        return "a user part, where URLs carry tokens"
    for name, _value in parse_qsl(parts.query, keep_blank_values=False) + parse_qsl(parts.fragment):
        if _SECRET_QUERY.fullmatch(name) or is_secret_field(name):
            return f"the query parameter {name!r}"
    return None


def value_credential(value: str) -> str | None:
    """What makes a string a credential whatever its field is called: an authorization value
    (``Bearer ...``, also a bearer token quoted in other text), a known credential shape anywhere in it
    (detect-secrets' detectors: AWS, GitHub, GitLab, Slack, Stripe, JWTs, private-key blocks ...; and
    ``sk-...``, ``AIza...``, ``hf_...``), a secret part of a connection string (``...;Password=...;``,
    libpq's ``host=db password=...``), or a secret variable the value sets as the shell does
    (``PGPASSWORD=...``, alone or before a command); ``None`` for any other string."""
    return shape_credential(value) or _connection_credential(value) or _environment_credential(value)


def shape_credential(value: str) -> str | None:
    """What in ``value`` is a credential by its shape alone, wherever it stands in the text: an authorization
    value (``Bearer ...``, also a bearer token quoted in other text) or a :func:`~config_registry.shapes.known_shape`; ``None``
    otherwise."""
    authorization = _AUTHORIZATION_VALUE.fullmatch(value.strip())
    if authorization and _looks_random(value.split()[-1]):
        return "an HTTP authorization value"
    if any(any(c.isdigit() for c in token) for token in _BEARER_IN_TEXT.findall(value)):
        return "a bearer token"
    shape = known_shape(value)
    if shape is not None:
        return f"what looks like {'an' if shape[0] in 'AEIOU' else 'a'} {shape}"
    return None


def _environment_credential(value: str) -> str | None:
    """A secret variable that ``value`` sets as a shell does, in any of its commands: before the program
    (``PGPASSWORD=... psql -h db``, ``env -i MYSQL_PWD=... mysql``, ``cd /srv && PGPASSWORD=... psql``), with
    ``export`` or Windows' ``set``, in PowerShell's ``$env:PGPASSWORD=...``, or alone (``PGPASSWORD=...``).
    Only upper-case names count: ``token=abc`` in a sentence is prose, and ``set PGPASSWORD in your env``
    sets nothing."""
    for assignment in _shell_assignments(value):
        found = _argument_credential(assignment)
        if found is not None:
            return found
    return None


def _shell_assignments(value: str) -> list[str]:
    """The ``NAME=value`` words that set a variable in any command of ``value`` (its subshells' included):
    before the program or its wrapper's (``env``, ``sudo``), or after ``export`` or ``set``, PowerShell's
    ``$env:`` left off."""
    if not _SETS_VARIABLE.search(value):
        return []
    found = []
    for words in simple_commands(value):
        assigned = words[1:] if words[0].lower() in _SETTERS else words[: command_word(words)]
        found += [match.group(1) for match in map(_SHELL_ASSIGNMENT.fullmatch, assigned) if match]
    return found


def _connection_credential(value: str) -> str | None:
    """The secret part of a connection string (:func:`~config_registry.connections.connection_pairs`), if any.
    A connection string is name=value pairs and nothing else; a prompt that explains one is prose. A value
    the program expands from its environment (``password=${PGPASSWORD}``) holds no secret."""
    for name, secret in connection_pairs(value) or ():
        if secret and is_secret_field(name) and not left_out(secret) and not holds_no_credential(name, secret):
            return f"a connection string's {name!r}"
    return None


def _looks_random(text: str) -> bool:
    """A token rather than a word: a digit or a base64/url-safe symbol in it, or 24+ characters
    ('Basic information' and 'sk-learn-compatible' are words)."""
    return len(text) >= 24 or (len(text) >= 8 and any(c.isdigit() or c in "+/=_." for c in text))


def flag_credential(items: list[Any], index: int, *, script: bool = False) -> str | None:
    """Whether item ``index`` of an argument list is a secret flag's value: ``--api-key=VALUE`` itself, or
    the item after a bare ``--token``; or sets a secret variable or header (``API_KEY=VALUE``,
    ``Authorization: Bearer VALUE``); ``None`` otherwise, and for a ``${VAR}`` the server expands.

    With ``script`` the item is the script a POSIX shell is given (``sh -c SCRIPT``:
    :func:`~config_registry.shell.posix_script_at`), which the shell splits into words: a variable set at its
    start (``DB_PASSWORD_FILE=/run/pw psql``) is judged by the word it is given (:func:`variable_credential`).
    Any other item, which no shell splits (``env``'s, docker's ``-e`` value), is the variable's whole value."""
    item = items[index]
    if not isinstance(item, str) or not item:
        return None
    match = _FLAG.fullmatch(item)
    command = _flag_command_credential(match, items[index - 1] if index else None, item)
    if command is not None:
        return command
    if match and match.group(2) and _secret_flag(match.group(1), match.group(2)):
        return f"the value of the flag '--{match.group(1)}'"
    previous = _FLAG.fullmatch(items[index - 1]) if index and isinstance(items[index - 1], str) else None
    if previous and previous.group(2) is None and _secret_flag(previous.group(1), item) and not _FLAG.fullmatch(item):
        return f"the value of the flag '--{previous.group(1)}'"
    raw = script and match is None
    return _argument_credential(match.group(2) if match and match.group(2) is not None else item, raw=raw)


def argument_name(items: list[Any], index: int) -> str | None:
    """The name item ``index`` of an argument list gives its value under: the variable it sets (docker's
    ``-e SECRET_ID=VALUE``, ``--env=SECRET_ID=VALUE``), else the flag it is given to, its own
    (``--secret-id=VALUE``) or a bare flag's before it (``--secret-id VALUE``); ``None`` for any other item."""
    item = items[index]
    match = _FLAG.fullmatch(item) if isinstance(item, str) else None
    value = match.group(2) if match else item
    if isinstance(value, str) and (assigned := _ASSIGNMENT.fullmatch(value)):
        return assigned.group(1)
    if match and match.group(2) is not None:
        return match.group(1)
    previous = _FLAG.fullmatch(items[index - 1]) if index and isinstance(items[index - 1], str) else None
    return previous.group(1) if previous and previous.group(2) is None and not match else None


def refuses_secret_id(text: str) -> bool:
    """Whether a command line in ``text`` (its shells' scripts included) gives a secret's id, ARN or ref a value
    :func:`flag_credential` refuses (``aws ... --secret-id crm-db-password``, ``SECRET_ID=crm-db-password app``),
    which a refusal of the whole line then says how to give as a path or a reference."""
    try:
        commands = simple_commands(text)
    except ScriptUnreadable:  # asked only of a value refused already: a script it cannot read names no flag
        return False
    return any(names_secrets_id(argument_name(words, index) or "") and flag_credential(words, index) is not None
               for words in commands for index in range(len(words)))


def _flag_command_credential(match: re.Match[str] | None, previous: Any, item: str) -> str | None:
    """What a command line given to a flag that says it holds one holds (``--password-command "echo VALUE"``,
    ``--password-command=...``), read as :func:`kept_command_credential` reads it."""
    if match and match.group(2) is not None and holds_command_line(match.group(1)):
        return kept_command_credential(match.group(1), match.group(2))
    flag = _FLAG.fullmatch(previous) if isinstance(previous, str) else None
    if flag and flag.group(2) is None and holds_command_line(flag.group(1)) and not match:
        return kept_command_credential(flag.group(1), item)
    return None


def kept_command_credential(name: str, value: str) -> str | None:
    """What a command line kept under a name that says it holds one holds (``INIT_COMMAND``,
    ``--password-command``), read as one (:func:`command_line_credential`); under a credential's name
    (``DB_PASSWORD_CMD``: :func:`~config_registry.names.holds_secret_command`) the command prints the secret,
    so one that prints a literal (``echo VALUE``, ``printf %s VALUE``) holds it."""
    found = command_line_credential(value)
    if found is None and holds_secret_command(name) and _prints_literal(value):
        return "a literal that a command kept under a secret's name prints, which is the secret itself"
    return found


def _prints_literal(text: str) -> bool:
    """Whether a command in ``text`` is ``echo`` or ``printf`` given a literal (``printf`` past its format when
    it has more), not a ``$VAR`` or ``$(command)`` (:func:`~config_registry.placeholders.left_out`)
    or a redirection's target."""
    for words in simple_commands(text):
        at = command_word(words)
        if at is None or not _PRINTS.fullmatch(words[at]):
            continue
        given = [word for index, word in enumerate(words[at + 1:], at + 1)
                 if not word.startswith("-") and not _REDIRECTION.match(word)
                 and not _REDIRECTION.fullmatch(words[index - 1])]
        given = given[1:] if words[at].lower().endswith("printf") and len(given) > 1 else given
        if any(not left_out(word) for word in given):
            return True
    return False


def _secret_flag(flag: str, value: str) -> bool:
    """Whether the flag ``flag`` given ``value`` gives a secret: a flag named for one, given neither a value
    that leaves it out nor a path to a ``file`` flag (``--password-file /run/secrets/pw``)."""
    return is_secret_field(flag) and not left_out(value) and not holds_no_credential(flag, value)


def command_line_credential(text: str) -> str | None:
    """What :func:`flag_credential` finds in any word of one argument that holds a whole command line
    (``sh -c "tool --api-key VALUE serve"``), split as a POSIX shell splits it, or a password given to a
    program in any of its commands (:func:`~config_registry.programs.program_passwords`), those of the scripts its shells run included
    (``bash -lc '...'``); ``None`` otherwise."""
    # One word is no command line; a subshell's "(tool --token VALUE)" is one word until its commands are read.
    if max(map(len, simple_commands(text)), default=0) < 2:
        return None
    # A word may be a whole connection string or URL (psql 'host=db password=...', a JDBC URL), read with
    # the '&' and ';' a shell would split it at when it is not quoted.
    words = [word for script in scripts(text) for word in shell_words(script)]
    found = next(filter(None, (url_credential(word) or _connection_credential(word) for word in words)), None)
    flags = (flag_credential(command, index) for command in simple_commands(text) for index in range(len(command)))
    found = found or next(filter(None, flags), None)
    found = found or inner_script_credential(text)
    # A variable that holds a command line in turn ("PASSWORD_CMD='tool --token VALUE'") said it already.
    inside = found if found is None or found.endswith(_INSIDE) else f"{found}{_INSIDE}"
    return program_password(text) or inside


def inner_script_credential(text: str) -> str | None:
    """A secret variable set as a shell sets it in a script a shell in ``text`` runs, read in that script's
    own text: one PowerShell is given encoded (``pwsh -enc BASE64``) shows nowhere in the outer text that
    :func:`value_credential` reads; ``None`` otherwise."""
    return next(filter(None, map(_environment_credential, scripts(text)[1:])), None)


def program_password(text: str) -> str | None:
    """A password given on the command line in any command of the shell string ``text``, those of the
    scripts its shells run included (:func:`~config_registry.programs.program_passwords`), said as :func:`command_line_credential` says
    it; ``None`` otherwise."""
    found = next((what for words in simple_commands(text) for what in program_passwords(words).values()), None)
    return f"{found}{_INSIDE}" if found else None


def environment_value_credential(name: str, value: str) -> str | None:
    """What the value of the environment variable ``name`` holds as a command line: any value is read for a
    password given to a program on its command line (:func:`~config_registry.programs.program_passwords`: ``"INIT": "mysql -uroot
    -pVALUE crm"``, ``"SYNC": "sshpass -p VALUE rsync ..."``), which names its program; a value
    whose name says it holds a command (``CMD``, ``PRE_START_COMMAND``, ``SETUP_SCRIPT``) is read whole, as
    one of an MCP server's ``args`` holding a shell string is (:func:`command_line_credential`), and so is one
    that begins by setting a variable (:func:`assignment_command_credential`). Other values are settings or
    prose, where ``-p3306`` is a port and ``password=...`` may be a sentence's."""
    if holds_command_line(name):
        return kept_command_credential(name, value)
    return assignment_command_credential(value) or program_password(value)


def assignment_command_credential(text: str) -> str | None:
    """What a string in which a command sets a variable (``OPENAI_API_KEY=EMPTY tool --api-key VALUE``, also
    after another command, in a subshell, after ``export``, ``set``, ``env``, ``sudo`` or PowerShell's
    ``$env:``) holds as a command line (:func:`command_line_credential`), which setting a variable shows it to
    be wherever it stands (an environment variable's value, a string in a tool's source); ``None`` for any
    other string, where a flag may be prose's."""
    return command_line_credential(text) if _shell_assignments(text) else None


def encoded_script_credential(words: list[str]) -> str | None:
    """What the script PowerShell is given encoded as a word of its own holds (``["pwsh", "-enc",
    "BASE64"]``), read once decoded as any value and as a command line; ``None`` otherwise.

    Raises:
        ScriptUnreadable: The encoded word does not decode (no field named: the caller knows it).
    """
    at = encoded_script_at(words)
    script = decoded_script(words[at]) if at is not None else None
    found = (value_credential(script) or command_line_credential(script)) if script is not None else None
    return f"{found}, in PowerShell's -EncodedCommand" if found else None


def holds_no_credential(name: str, value: str) -> bool:
    """Whether a value given to a credential's name holds none: one that says where the credential is
    (:func:`is_reference_setting`) or, under a key's or a token's name but an application's own
    (:func:`~config_registry.names.names_key_or_token`), a dummy key a local model server asks for
    (:func:`~config_registry.placeholders.is_dummy_key`: ``api_key="EMPTY"``, ``OPENAI_API_KEY=ollama``)."""
    return is_reference_setting(name, value) or (names_key_or_token(name) and is_dummy_key(value))


def is_reference_setting(name: str, value: str) -> bool:
    """Whether a credential's name says where the credential is rather than holding it, as its value shows:
    one whose last word is ``file`` (``POSTGRES_PASSWORD_FILE``, ``--password-file``) given a path, absolute
    or relative (:func:`_is_file_path`), as Docker secrets' convention has it; one whose last word is
    ``credentials`` given an absolute path or one from "./" or "../" (:data:`_PATH`), or for Google's
    ``GOOGLE_APPLICATION_CREDENTIALS`` a bare relative ``.json`` one too; one whose last word is ``header`` (``API_KEY_HEADER``) given a header's name
    (``X-Api-Key``), or a header line whose value is no secret's (:func:`_header_left_out`), rather than the
    credential itself."""
    words, value = name_words(name), value.strip()
    if names_secrets_id(name):
        return names_stored_secret(value)
    if words[-1:] in (["header"], ["headers"]):
        return _header_left_out(value)
    if words[-1:] == ["file"]:
        return _is_file_path(value)
    if words[-1:] != ["credentials"]:
        return False
    google = words == _GOOGLE_CREDENTIALS and value.lower().endswith(".json")
    return bool(_PATH.fullmatch(value)) or (google and _is_file_path(value))


def _is_file_path(value: str) -> bool:
    """An absolute path, one from the home directory, a variable, "./" or "../" (:data:`_PATH`: ``./run/pw``),
    or a bare relative one (``secrets/gcp.json``, ``pw.txt``:
    :func:`~config_registry.placeholders.is_relative_file_path`) that holds no known key shape."""
    return bool(_PATH.fullmatch(value)) or (is_relative_file_path(value) and known_shape(value) is None)


def _header_left_out(value: str) -> bool:
    """Whether a header setting holds no secret: a header's name alone (``X-Api-Key``), or a header line
    (``X-Webhook-Secret: ${SECRET}``) whose name is no credential's or whose value holds none
    (:func:`_header_value_left_out`)."""
    if _HEADER_NAME.fullmatch(value):
        return True
    line = _HEADER_LINE.fullmatch(value)
    return line is not None and (not is_secret_field(line.group(1)) or _header_value_left_out(*line.groups()))


def _header_value_left_out(name: str, value: str) -> bool:
    """Whether the value a header line gives a credential's header holds none: a ``${VAR}``
    (:func:`~config_registry.placeholders.left_out`), or a dummy key under a key's name
    (:func:`holds_no_credential`: ``X-Api-Key: EMPTY``), as in a ``headers`` mapping."""
    value = value.strip()
    return left_out(value) or holds_no_credential(name, value)


def _argument_credential(text: str, *, raw: bool = False) -> str | None:
    """Whether an argument (or a flag's ``=`` value: ``--env=API_KEY=VALUE``) sets a variable or writes a
    header whose name means a credential, to a value that is not a ``${VAR}`` for the program to expand;
    ``raw``: the argument is a command line as given (:func:`flag_credential`)."""
    variable = _ASSIGNMENT.fullmatch(text)
    found = variable_credential(variable.group(1), variable.group(2), command_may_follow=True,
                                raw_command_line=raw) if variable else None
    header = _HEADER_LINE.fullmatch(text)
    if found is None and header and header.group(2).strip() and is_secret_field(header.group(1)):
        found = None if _header_value_left_out(*header.groups()) else f"the value of the header {header.group(1)!r}"
    return found


def variable_credential(name: str, value: str, *, command_may_follow: bool = False,
                        raw_command_line: bool = False) -> str | None:
    """Whether setting the variable ``name`` to ``value`` sets a secret: a name that means a credential (not
    the shell's ``PWD`` or ``OLDPWD``) given a value that does not leave it out (:func:`~config_registry.placeholders.left_out`), nor a
    path given to a ``_FILE`` variable or a dummy key to a key's (:func:`holds_no_credential`). With ``command_may_follow`` the value is
    the rest of a command line, and a value that leaves the secret out may be followed by the command it is
    set for (``PGPASSWORD=${DB_PASSWORD:?} psql``): :func:`~config_registry.placeholders.variable_left_out`.
    With ``raw_command_line`` too the value is the rest of an unquoted command line as given, and a path or a
    dummy key is judged by its first word (:func:`_given_before_command`); a word a shell split, or an
    argument no shell splits, is judged whole. A variable whose name says it holds a command line (``PASSWORD_COMMAND``)
    is read as one (:func:`command_line_credential`)."""
    value = value.strip()
    if holds_command_line(name):  # "DB_PASSWORD_COMMAND=pass show db"
        return kept_command_credential(name, value)
    leaves_out = variable_left_out if command_may_follow else left_out
    if name in _NOT_SECRET_VARIABLES or not value or not is_secret_field(name) or leaves_out(value):
        return None
    given = _given_before_command(value) if raw_command_line else value
    return None if holds_no_credential(name, given) else f"the value of the variable {name!r}"


def _given_before_command(value: str) -> str:
    """What a variable set before a command is given (``/run/secrets/pg`` in ``PGPASSWORD_FILE=/run/secrets/pg
    psql``, ``EMPTY`` in ``OPENAI_API_KEY=EMPTY client``): the value's first word when a space ends it, else
    the whole value (a quoted word, or one glued to more, is judged whole)."""
    first = shell_words(value)[:1]
    rest = value[len(first[0]):] if first and value.startswith(first[0]) else None
    return first[0] if rest is not None and (not rest or rest[0].isspace()) else value
